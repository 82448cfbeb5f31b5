"""Checkpoints of `jacobiscope.analyze`: the report so far, written after every finished row, so that Ctrl-C, a
crash or a killed job loses nothing; and resuming one (only the missing rows are measured).

Example::

    >>> import pathlib, tempfile, torch, transformers, jacobiscope
    >>> from jacobiscope._analyze_resume import is_partial
    >>> model = transformers.GPT2Model(transformers.GPT2Config(n_embd=16, n_layer=2, n_head=2, vocab_size=50))
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "report.json"
    >>> report = jacobiscope.analyze(model, torch.tensor([[1, 2, 3]]), loops=4, diagnostics=["spectral_norm"],
    ...                              progress=False, checkpoint=path)
    >>> jacobiscope.Report.from_json(path) == report, is_partial(report)
    (True, False)

A partial report is an ordinary report file (`Report.from_json` reads it) whose ``provenance["partial"]`` says how
far the run got: ``finished`` and ``total`` rows, the ``remaining`` ``[input_index, layer]`` pairs, why it
``stopped`` (``"running"`` while the run is alive: a killed job leaves that) and how to continue.
"""
from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

from .errors import ArgumentError, ReportFormatError
from ._io import check_file_path

__all__ = ["Checkpoint", "is_partial", "remaining_rows", "partial_status", "inputs_digest", "call_arguments",
           "open_checkpoint", "CONTINUE_HINT"]

logger = logging.getLogger(__name__)

#: What a partial report says about continuing it (the CLI prints the exact command as well).
CONTINUE_HINT = ("rerun the same call with resume=True (command line: the same command with --resume); only the "
                 "remaining rows are measured")

#: How each argument of `analyze` is given on the command line, for the refusal of a resume with other arguments.
CLI_FLAGS = {"loops": "--loops", "k": "--k", "seed": "--seed", "diagnostics": "--diagnostics", "eta": "--eta",
             "mode": "--mode", "layers": "--layers", "recurrence": "--recurrence", "dtype": "--float64",
             "eigen_k": "--option eigen_k=", "eigen_restarts": "--option eigen_restarts=",
             "spectral_samples": "--option spectral_samples=", "options": "--option NAME=VALUE",
             "inputs": "--text / --ids / --puzzle / --puzzles", "max_length": "(no flag: 512)",
             "device": "(no flag: the model's device)"}


def is_partial(report) -> bool:
    """Whether ``report`` is the partial report of an interrupted (or still running) `analyze` (`Report.partial`)."""
    return report.partial


def remaining_rows(report) -> list[tuple[int, int]]:
    """The ``(input_index, layer)`` rows a partial report still lacks (`Report.remaining`; ``[]`` when complete)."""
    return report.remaining


def partial_status(path) -> tuple[int, int] | None:
    """``(finished, total)`` rows of the partial report at ``path``; None when there is none (or it is complete)."""
    try:
        report = _read(Path(os.fspath(path)).expanduser())
    except (OSError, ReportFormatError, ValueError):
        return None
    if report is None or not is_partial(report):
        return None
    partial = report.provenance["partial"]
    return int(partial.get("finished", len(report.rows))), int(partial.get("total", len(report.rows)))


def inputs_digest(inputs) -> str | None:
    """A short fingerprint of ``inputs`` (texts, token ids, tensors, dicts of them), so that a resume on other inputs
    is refused; None for inputs it cannot fingerprint (then only their count and labels are compared)."""
    digest = hashlib.sha256()
    if not _feed(digest, inputs):
        return None
    return digest.hexdigest()[:16]


def _feed(digest, value) -> bool:
    import torch

    if isinstance(value, str):
        digest.update(b"s" + value.encode("utf-8", "surrogatepass") + b"\0")
    elif isinstance(value, torch.Tensor):
        tensor = value.detach().cpu().contiguous()
        digest.update(f"t{tensor.dtype}{tuple(tensor.shape)}".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    elif hasattr(value, "keys") and hasattr(value, "__getitem__"):  # a dict, a tokenizer's BatchEncoding
        for key in sorted(value.keys(), key=str):
            digest.update(f"k{key}".encode())
            if not _feed(digest, value[key]):
                return False
    elif isinstance(value, (list, tuple)):
        digest.update(f"l{len(value)}".encode())
        return all(_feed(digest, item) for item in value)
    elif isinstance(value, (int, float, bool)) or value is None:
        digest.update(f"n{value!r}".encode())
    elif type(value).__module__ == "numpy":
        digest.update(f"a{getattr(value, 'dtype', '')}{getattr(value, 'shape', '')}".encode() + value.tobytes())
    else:
        return False
    return True


def _read(path: Path):
    from .report import Report

    if not path.exists():
        return None
    return Report.from_json(path)


class Checkpoint:
    """The report file `analyze` keeps up to date as rows finish (``checkpoint=``), and what it resumes from.

    Opened before the model runs: the path is checked, an existing partial report is refused unless ``resume``
    (the finished rows are never overwritten by accident), and with ``resume`` the file's arguments must equal
    this call's (`ArgumentError` naming the first difference and the fix).
    """

    def __init__(self, path, *, resume: bool, arguments: dict, cli: bool = False):
        self.cli = cli  # refusals name command-line flags instead of Python arguments
        self.path = check_file_path(path, "analyze(checkpoint=...)")
        self.shown = os.fspath(path)
        self.arguments = arguments
        try:
            existing = _read(self.path)
        except ReportFormatError as error:
            if not resume:  # not a report: replaced, as any output file is (only a partial report is kept)
                existing = None
            else:
                raise ArgumentError(f"cannot resume {self.shown!r}: it is not a report ({str(error).split(' — ')[0]})"
                                    " — pass the path of the interrupted run's report") from None
        self.previous = existing if resume else None
        if resume and existing is None:
            raise ArgumentError(f"nothing to resume: {self.shown!r} does not exist — drop resume=True (command line: "
                                "--resume) to start the run, or pass the path of the interrupted run's report")
        if not resume and existing is not None and is_partial(existing):
            partial = existing.provenance["partial"]
            finished, total = partial.get("finished"), partial.get("total")
            raise ArgumentError(f"{self.shown!r} holds the partial report of an interrupted run ({finished} of {total} "
                                "rows finished) — pass resume=True (command line: --resume) to continue it, or "
                                "remove the file to start afresh")
        if self.previous is not None:
            self._check_arguments(self.previous.provenance.get("arguments"))

    # ------------------------------------------------------------------ resume
    def _check_arguments(self, before) -> None:
        if not isinstance(before, dict):
            raise ArgumentError(f"cannot resume {self.shown!r}: it records no analyze arguments (written by an older "
                                "jacobiscope, or not by analyze) — remove it and rerun from the start")
        for name, value in self.arguments.items():
            if name in before and before[name] != value:
                self.refuse(name, before[name], value)

    def refuse(self, name: str, before, now) -> None:
        """The one-line refusal of a resume whose ``name`` differs from the partial report's."""
        if name in ("model", "rows", "inputs"):
            same = f"the same {'model' if name == 'model' else 'inputs and layers'} as that run"
        else:
            same = cli_setting(name, before) if self.cli else f"{name}={_short(before)} as before"
        restart = "drop --resume and remove the file" if self.cli else "remove the file (or pass another checkpoint)"
        raise ArgumentError(f"cannot resume {self.shown!r}: it was made with {name}={_short(before)}, this run asks "
                            f"for {name}={_short(now)} — pass {same} to continue it, or {restart} to start afresh")

    def check_plan(self, model: tuple, planned: list, labels: list) -> None:
        """After the inputs are prepared, before any row: the model, the rows and the input labels must be the
        partial report's."""
        if self.previous is None:
            return
        provenance = self.previous.provenance
        before_model = (provenance.get("model"), provenance.get("model_class"))
        if before_model != tuple(model):
            self.refuse("model", "/".join(map(str, before_model)), "/".join(map(str, model)))
        partial = provenance.get("partial") or {}
        before = sorted({(row.input_index, row.layer) for row in self.previous.rows}
                        | {tuple(pair) for pair in partial.get("remaining", [])})
        if before != sorted(planned):
            self.refuse("rows", f"{len(before)} rows (input, layer)", f"{len(planned)} rows")
        for row in self.previous.rows:
            if row.input_index < len(labels) and labels[row.input_index] != row.input_label:
                self.refuse("inputs", f"input {row.input_index} {row.input_label!r}",
                            f"input {row.input_index} {labels[row.input_index]!r}")

    def finished_rows(self) -> dict:
        """The rows already measured, by ``(input_index, layer)``."""
        rows = self.previous.rows if self.previous is not None else []
        return {(row.input_index, row.layer): row for row in rows}

    # ------------------------------------------------------------------ writing
    def write(self, report, planned: list, stopped: str | None = "running") -> None:
        """Write ``report`` atomically (a temp file, then a rename: never half a file); marked partial, with the
        rows still missing, unless ``stopped`` is None (the run is complete)."""
        from .report import Report

        provenance = dict(report.provenance)
        if stopped is not None:
            done = {(row.input_index, row.layer) for row in report.rows}
            remaining = [list(key) for key in planned if key not in done]
            provenance["partial"] = {"finished": len(done), "total": len(planned), "remaining": remaining,
                                     "stopped": stopped, "continue": CONTINUE_HINT}
        Report(rows=list(report.rows), provenance=provenance, notes=list(report.notes)).to_json(self.path)
        logger.debug("checkpoint %s: %d rows%s", self.shown, len(report.rows), "" if stopped is None else " (partial)")


def cli_setting(name: str, value) -> str:
    """How the command line gives ``name=value`` ("--loops 100", "--option eigen_k=8", "no --float64")."""
    flag = CLI_FLAGS.get(name, f"--{name}")
    if name == "dtype":
        return "--float64" if value == "float64" else "no --float64"
    if value is None or value == {}:
        return f"no {flag.split()[0]}"
    if name in ("eigen_k", "eigen_restarts", "spectral_samples"):
        return f"--option {name}={value}"
    if name == "options":
        return " ".join(f"--option {key}={_cli_value(item)}" for key, item in value.items())
    if name in ("diagnostics", "layers"):
        return f"{flag} {','.join(str(item) for item in value if item != 'regime')}"
    return f"{flag} {value}"


def _cli_value(value) -> str:
    return ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value).lower() if isinstance(
        value, bool) else str(value)


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def call_arguments(sizes: dict, layers, mode, recurrence, diagnostics, dtype, device, eta, max_length, options,
                   inputs) -> dict:
    """What an `analyze` call asked for, as plain values: stored in the provenance (``"arguments"``) and compared
    when a checkpoint is resumed (a resume with other arguments would mix two runs' rows)."""
    return {
        "layers": _plain_layers(layers),
        "mode": mode, "recurrence": recurrence, "loops": sizes["loops"], "diagnostics": list(diagnostics),
        "k": sizes["k"], "eigen_k": sizes["eigen_k"], "eigen_restarts": sizes["eigen_restarts"],
        "spectral_samples": sizes["spectral_samples"], "seed": sizes["seed"],
        "dtype": None if dtype is None else str(dtype).replace("torch.", ""),
        "device": None if device is None else str(device), "eta": None if eta is None else float(eta),
        "max_length": max_length, "options": dict(options), "inputs": inputs_digest(inputs),
    }


def _plain_layers(layers):
    """``layers`` as a list of ints (a tensor, numpy ints, one int); anything else as its text (`map_source` names
    what is wrong with it)."""
    if layers is None:
        return None
    if hasattr(layers, "tolist"):
        layers = layers.tolist()
    if not isinstance(layers, (list, tuple)):
        layers = [layers]
    try:
        return [int(layer) for layer in layers]
    except (TypeError, ValueError):
        return repr(layers)[:200]


def open_checkpoint(checkpoint, resume, arguments: dict):
    """The `Checkpoint` of ``analyze(checkpoint=..., resume=...)``, or None; every refusal before the model runs."""
    if not isinstance(resume, bool):
        raise ArgumentError(f"resume must be True or False, got {resume!r} — pass resume=True to continue the "
                            "checkpoint's run")
    if checkpoint is None:
        if resume:
            raise ArgumentError("resume=True needs the report to continue — pass checkpoint='report.json' (the path "
                                "the interrupted run wrote)")
        return None
    return Checkpoint(checkpoint, resume=resume, arguments=arguments)
