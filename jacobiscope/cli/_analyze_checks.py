"""What ``jacobiscope analyze`` checks before the model loads (output folders writable, layers within the config's
block count, options of the right kind, a resumable checkpoint), and how it keeps the finished rows when the run
stops (Ctrl-C, SIGTERM, a crash): the checkpoint file, and the command that continues it.

Example::

    >>> from jacobiscope.cli._analyze_checks import resume_command
    >>> resume_command(["analyze", "minilm", "--json", "r.json"])
    'jacobiscope analyze minilm --json r.json --resume'
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import shlex
import signal
import sys
import tempfile
from pathlib import Path

from ..errors import UsageError
from ._checks import _suggest

__all__ = ["probe_output_folder", "checkpoint_path", "check_against_config", "locate", "split_options",
           "check_resume",
           "resume_command", "stop_on_sigterm", "say_where_rows_are", "remove_scratch"]

logger = logging.getLogger(__name__)

#: The config keys that count a model's blocks (transformers' families name them differently).
_LAYER_KEYS = ("num_hidden_layers", "n_layer", "n_layers", "num_layers")


def probe_output_folder(path: str | None, option: str) -> None:
    """Create ``path``'s folder now and write a scratch file in it: an output that cannot be written fails before
    the run (a read-only file system, a full disk, permissions that ``os.access`` misreports), not after it."""
    if path is None:
        return
    folder = Path(path).expanduser().absolute().parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".jacobiscope-probe-"):
            logger.debug("%s: %s is writable", option, folder)
    except OSError as error:
        raise UsageError(f"{option} {path!r}: cannot write in {str(folder)!r} ({error.strerror or error})",
                         "choose a folder you can create and write to") from None


def checkpoint_path(args) -> tuple[str | None, bool]:
    """Where the rows are written as they finish: ``--json``, else a scratch file beside ``--out`` (removed when the
    run completes); ``(path, scratch)``."""
    if args.json:
        return args.json, False
    if args.out:
        return f"{args.out}.partial.json", True
    return None, False


def check_against_config(args, location: str) -> None:
    """``--layers``, ``--recurrence`` and ``--ids`` against the model's config (config.json read, no weights loaded):
    a model of 6 blocks refuses ``--layers 9`` before it loads. What the config cannot tell (a model that declares
    its own recurrences in code) is left to the checks after loading."""
    if not (args.layers or args.recurrence or args.ids):
        return
    config = _read_config(location)
    if not config:
        return
    from .._resources import public_name
    from ..adapters.native import list_recurrences

    name = public_name(location)
    recurrences = list_recurrences(str(config.get("model_type", "")))
    if args.recurrence is not None and recurrences and args.recurrence not in recurrences:
        raise UsageError(f"{name} has no recurrence {args.recurrence!r}",
                         f"{_suggest(args.recurrence, recurrences)}choose from {', '.join(recurrences)}")
    vocabulary = config.get("vocab_size")
    too_large = [token for row in args.ids or [] for token in row
                 if isinstance(vocabulary, int) and token >= vocabulary]
    if too_large:
        raise UsageError(f"token id {too_large[0]} is outside {name}'s vocabulary of {vocabulary} (from its config)",
                         f"give ids between 0 and {vocabulary - 1}")
    blocks = next((config[key] for key in _LAYER_KEYS if isinstance(config.get(key), int)), None)
    if not args.layers or args.mode == "loop" or blocks is None or blocks < 1:
        return
    if recurrences and args.mode is None:
        return  # analysed through its own loop by default: --layers is refused later, with that reason
    bad = [layer for layer in args.layers if layer >= blocks]
    if bad:
        raise UsageError(f"layer {bad[0]} is out of range: {name} has {blocks} blocks (0-{blocks - 1}, from its "
                         "config)", f"choose --layers between 0 and {blocks - 1}")


def locate(name: str, download: bool = False) -> str:
    """`jacobiscope.hub.locate_model`, with "did you mean" for a near miss of a known short name."""
    from ..hub import HubError, locate_model, shipped_checkpoints

    try:
        return locate_model(name, download=download)
    except HubError as error:
        hint = _suggest(name, ["minilm", *shipped_checkpoints()]) if "unknown model" in str(error) else ""
        if not hint:
            raise
        what, _, fix = str(error).partition(" — ")
        raise UsageError(what, f"{hint}{fix}") from None


def _read_config(location: str) -> dict:
    path = Path(location) / "config.json"
    try:
        if path.is_file():
            config = json.loads(path.read_text(encoding="utf-8-sig"))
            return config if isinstance(config, dict) else {}
        from transformers import AutoConfig  # a Hub id in the local cache

        return AutoConfig.from_pretrained(location, local_files_only=True).to_dict()
    except Exception:  # noqa: BLE001 - no readable config: the check after loading stands
        return {}


def split_options(pairs, diagnostics) -> tuple[dict, dict]:
    """``--option`` pairs as (analyze's own sizes, the diagnostics' options), each checked against its table before
    the model loads (a name given twice, a value of the wrong kind, an option of a diagnostic not chosen)."""
    from .._analyze_options import ANALYZE_SETTINGS, check_diagnostic_options, resolve_diagnostics
    from .._validation import within_budget
    from ..errors import ArgumentError

    sizes, options, seen = {}, {}, set()
    for name, value in pairs or []:
        if name in seen:
            raise UsageError(f"--option {name} is given twice", f"give each option once, e.g. --option {name}=...")
        seen.add(name)
        (sizes if name in ANALYZE_SETTINGS else options)[name] = value
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < (0 if name == "eigen_restarts" else 1):
            raise UsageError(f"--option {name}={value!r} is not an integer >= "
                             f"{0 if name == 'eigen_restarts' else 1}", f"pass e.g. --option {name}=8")
        try:
            within_budget(value, name, "iterations" if name == "eigen_restarts" else None)
        except ArgumentError as error:
            raise UsageError(f"--option {name}={value}: {str(error).split(' — ')[0]}",
                             f"pass a smaller {name}") from None
    try:
        options = check_diagnostic_options(resolve_diagnostics(diagnostics), options)
    except ArgumentError as error:
        text = str(error).replace("diagnostics=", "--diagnostics").replace("options=", "--option ")
        what, _, fix = text.partition(" — ")
        raise UsageError(f"--option: {what.rstrip('.')}", fix.rstrip(".") or "see 'jacobiscope analyze --help'"
                         ) from None
    return sizes, options


def check_resume(args, path: str | None, known: dict) -> None:
    """Before the model loads: ``--resume`` has a partial report to continue, made with these arguments; without
    ``--resume``, an interrupted run's partial report is not overwritten."""
    from .._analyze_resume import Checkpoint
    from ..errors import ArgumentError

    if args.resume and path is None:
        raise UsageError("--resume needs the interrupted run's report", "pass the same --json (or --out) as that run")
    if path is None:
        return
    try:
        Checkpoint(path, resume=args.resume, arguments=known, cli=True)
    except ArgumentError as error:
        text = str(error).replace("resume=True (command line: --resume)", "--resume").replace(
            "drop resume=True (command line: --resume)", "drop --resume")
        what, _, fix = text.partition(" — ")
        raise UsageError(what, fix) from None


def resume_command(argv) -> str:
    """The command line that continues the run of ``argv``."""
    words = [word for word in argv if word != "--resume"]
    return "jacobiscope " + " ".join(shlex.quote(word) for word in words) + " --resume"


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C raises KeyboardInterrupt (the exit status is then 143, 128 + SIGTERM)."""


@contextlib.contextmanager
def stop_on_sigterm():
    """SIGTERM (a batch scheduler's stop, ``kill``) stops the run like Ctrl-C: the finished rows are kept."""
    def stop(signum, frame):
        raise _Terminated(f"signal {signum}")

    try:
        previous = signal.signal(signal.SIGTERM, stop)
    except ValueError:  # not the main thread: leave the signal alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def say_where_rows_are(path: str | None, argv, interrupted: bool) -> None:
    """After a stop: where the finished rows are, and the command that continues the run (stderr)."""
    from .._analyze_resume import partial_status

    status = partial_status(path) if path else None
    if status is None or status[0] == 0:
        if interrupted:
            print("jacobiscope: interrupted before any row finished; nothing to keep", file=sys.stderr)
        return
    finished, total = status
    what = "interrupted" if interrupted else "stopped by an error"
    print(f"jacobiscope: {what}; {finished} of {total} rows are kept in {path} (a partial report) — continue with: "
          f"{resume_command(argv)}", file=sys.stderr)


def remove_scratch(path: str | None, scratch: bool) -> None:
    if scratch and path:
        with contextlib.suppress(OSError):
            os.remove(path)
