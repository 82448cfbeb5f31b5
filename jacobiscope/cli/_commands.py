"""What each ``jacobiscope`` command does. Arguments are checked here before any model is loaded; torch and
transformers are imported only once the arguments are known to be usable.

Example::

    >>> from jacobiscope.cli._commands import HANDLERS
    >>> sorted(HANDLERS)
    ['analyze', 'demo', 'hub_list', 'hub_prepare', 'hub_push', 'sudoku_eval', 'sudoku_train']

The Sudoku commands live in ``_sudoku_commands``, the argument checks every command shares in ``_checks``; both are
importable from here as before.
"""
from __future__ import annotations

import json
import math
import platform
import time
import warnings
from pathlib import Path

from ..errors import UsageError
from ._checks import (  # noqa: F401 - the shared checks, importable from here as before the split
    _check_diagnostics, _check_input_file, _check_puzzles, _exists, _is_file, _nan_to_none, _quiet,
    _refuse_inside_inputs, _suggest, check_output_path,
)
from ._analyze_checks import (
    _Terminated, check_against_config, check_resume, checkpoint_path, locate, probe_output_folder, remove_scratch,
    say_where_rows_are, split_options, stop_on_sigterm,
)
from ._parser import DEFAULT_TEXT
from ._sudoku_commands import (  # noqa: F401 - as above
    _check_votes_early, _csv_split_name, _votes_message, sudoku_eval, sudoku_train,
)

__all__ = ["HANDLERS"]


# ------------------------------------------------------------------------------------------- helpers
def _load_model(args, location: str):
    """Load with safetensors only; a model that needs its own code is refused unless --trust-remote-code."""
    from ..hub import HubError, load_pretrained

    trust = getattr(args, "trust_remote_code", False)
    try:
        if Path(location).is_dir():
            return load_pretrained(location, trust_remote_code=trust)
        from transformers import AutoModel  # --download of a Hub id: fetched now, still safetensors only

        from .. import models  # noqa: F401 - registers the reference looped models with AutoModel

        return AutoModel.from_pretrained(location, trust_remote_code=trust, use_safetensors=True)
    except ValueError as error:
        if "trust_remote_code" in str(error) and not trust:
            raise UsageError(f"{args.model!r} needs its own Python code to load (auto_map in its config)",
                             "read that code, then rerun with --trust-remote-code") from None
        raise
    except OSError as error:
        raise HubError(f"could not load {args.model!r} ({str(error).splitlines()[0]}) — check the name, the folder "
                       "and, with --download, the network") from error


# --------------------------------------------------------------------------------------------- demo
def demo(args) -> int:
    if args.dim % args.heads:
        raise UsageError(f"--heads {args.heads} does not divide --dim {args.dim}", "choose --heads that divides --dim")
    from ._parser import cli_budget

    state = args.tokens * args.dim
    if state > cli_budget("demo_state"):
        raise UsageError(f"--tokens {args.tokens} x --dim {args.dim} = {state:,} values per state is over the demo's "
                         f"budget of {cli_budget('demo_state'):,}", "lower --tokens or --dim (e.g. --tokens 16 --dim "
                         "32); to mean it, raise JACOBISCOPE_MAX_DEMO_STATE")
    if args.k > state:
        raise UsageError(f"--k {args.k} is more than the {state} values of the state (--tokens {args.tokens} x --dim "
                         f"{args.dim}), so that many Lyapunov exponents do not exist", f"pass --k {min(4, state)} "
                         f"(at most {state})")
    if args.k * args.steps > cli_budget("loops") * 4:
        raise UsageError(f"--k {args.k} x --steps {args.steps} = {args.k * args.steps:,} tangent products per run is "
                         f"over the budget of {cli_budget('loops') * 4:,}", "lower --k or --steps (e.g. --k 4 "
                         "--steps 200)")
    import torch

    from .. import jacobian_eigenvalues, lyapunov_spectrum, oscillation_measures, spectral_norm, systems
    from ..errors import NonFiniteWarning

    torch.manual_seed(args.seed)
    dtype = torch.float64 if args.float64 else torch.float32
    rows = []
    for norm in ("rmsnorm", "layernorm", "none"):
        looped = systems.self_attention_map(args.tokens, args.dim, args.heads, eta=args.eta, norm=norm,
                                            weight_scale=2.0, seed=args.seed, dtype=dtype)
        start = time.perf_counter()
        # Measure where the orbit actually goes: a short transient first.
        state = looped.trajectory(looped.x0, steps=8, on_nonfinite="ignore")[-1]
        sigma = spectral_norm(looped, state)
        eigen = jacobian_eigenvalues(looped, state, k=min(2 * args.k, state[0].numel()), method="arnoldi")
        oscillation = oscillation_measures(eigen.values)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", NonFiniteWarning)
            lyapunov = lyapunov_spectrum(looped, looped.x0, steps=args.steps, k=min(args.k, state[0].numel()),
                                         transient=8)
        rows.append({
            "norm": norm,
            "state_norm": float(state.norm() / math.sqrt(args.tokens)),
            "spectral_norm": float(sigma.value),
            "spectral_norm_iterations": sigma.iterations,
            "spectral_radius": float(oscillation.spectral_radius),
            "complex_fraction_topk": float(oscillation.complex_fraction),
            "max_rotation_angle": float(oscillation.max_rotation_angle),
            # the one lambda_max of jacobiscope (table, verdicts, figures): the late-half mean of the local
            # exponents +/- its 95% interval; the whole-run average and its s.e. stay in the JSON record
            **_late_lambda(lyapunov),
            "max_lyapunov_whole_run": float(lyapunov.exponents[0]),
            "max_lyapunov_stderr": float(lyapunov.stderr[0]),
            "lyapunov_top": [round(float(v), 4) for v in lyapunov.exponents],
            "nonfinite_step": int(lyapunov.nonfinite_step),
            "seconds": time.perf_counter() - start,
        })
    if args.json:
        print(json.dumps({"rows": rows, "provenance": _provenance(dtype)}, indent=2))
        return 0
    print(f"jacobiscope engine demo: random looped self-attention X <- Norm(X + {args.eta}*MSA(X)), {args.tokens} "
          f"tokens x {args.dim} dims, {args.heads} heads (state size {args.tokens * args.dim}), {dtype}")
    header = (f"{'norm':<10}{'|X| per token':>14}{'||J||_2':>10}{'rho(J) top':>12}{'complex %':>11}{'max angle':>11}"
              f"{'lambda_max':>12}{'+-95%':>8}  note")
    print(header)
    print("-" * len(header))
    for row in rows:
        note = f"NaN/Inf at loop {row['nonfinite_step']}" if row["nonfinite_step"] >= 0 else ""
        if row["norm"] == "none" and not note and row["state_norm"] > 10:
            note = "state norm grows: unnormalized"
        print(f"{row['norm']:<10}{row['state_norm']:>14.3g}{row['spectral_norm']:>10.3f}{row['spectral_radius']:>12.3f}"
              f"{100 * row['complex_fraction_topk']:>10.0f}%{row['max_rotation_angle']:>11.3f}"
              f"{row['max_lyapunov']:>12.4f}{row['max_lyapunov_half_width']:>8.4f}  {note}")
    print("\nNormalization keeps the Jacobian's spectral norm O(1); lambda_max near 0 means near-critical dynamics.\n"
          f"(Lyapunov: top-{args.k} exponents over {args.steps} loops, matrix-free, lambda_max over the last half of "
          f"the loops +/- its 95% interval; eigenvalues: top-{2 * args.k} "
          "by Arnoldi.) Run `jacobiscope demo --json` for the full record.")
    return 0


def _late_lambda(lyapunov) -> dict:
    """The late-half lambda_max and its 95% half-width from the running estimates of the top exponent."""
    from ..dynamics._regime_evidence import exponent_from_history

    history = lyapunov.history[..., 0].reshape(-1).double()
    if history.numel() == 0 or not bool(history.isfinite().all()):
        return {"max_lyapunov": float(lyapunov.exponents[0]), "max_lyapunov_half_width": float("nan")}
    estimate = exponent_from_history(history, 1e-6)
    return {"max_lyapunov": estimate.value, "max_lyapunov_half_width": estimate.half_width,
            "max_lyapunov_loops": f"{estimate.first_loop}-{estimate.last_loop}"}


def _provenance(dtype) -> dict:
    import torch

    from .. import __version__

    return {"jacobiscope": __version__, "torch": torch.__version__, "python": platform.python_version(),
            "dtype": str(dtype), "threads": torch.get_num_threads()}


# ------------------------------------------------------------------------------------------ analyze
def analyze(args) -> int:
    # Everything that needs no model is checked first: a typo costs no model load.
    _check_inputs_given(args)
    for path, option in ((args.out, "--out"), (args.json, "--json")):
        check_output_path(path, option)
        probe_output_folder(path, option)
    if args.out and args.json and Path(args.out).expanduser().resolve() == Path(args.json).expanduser().resolve():
        raise UsageError(f"--out and --json both name {args.out!r}, so the HTML report would overwrite the JSON one",
                         "give them different files, e.g. --out report.html --json report.json")
    _quiet(args.quiet)
    _check_diagnostics(args.diagnostics)
    sizes, options = split_options(args.option, args.diagnostics)
    puzzles = _check_puzzles(args.puzzle) if args.puzzle else None
    location = locate(args.model, args.download)
    model_folder = location if Path(location).is_dir() else None
    _refuse_inside_inputs({"--out": args.out, "--json": args.json}, {"the model folder": model_folder})
    checkpoint, scratch = checkpoint_path(args)
    check_resume(args, checkpoint, _known_arguments(args, sizes, options))
    check_against_config(args, location)
    import torch

    model = _load_model(args, location)
    from .._analyze import analyze as run_analysis

    plan = _how_it_loops(args, model)
    looping = plan.own_loop or (args.mode in (None, "loop") and bool(plan.recurrences))
    if args.recurrence is not None and args.recurrence not in plan.recurrences:
        raise UsageError(f"{args.model!r} has no recurrence {args.recurrence!r}",
                         f"{_suggest(args.recurrence, plan.recurrences)}choose from "
                         f"{', '.join(plan.recurrences) or 'none (use --mode block)'}")
    if args.mode == "loop" and not looping:
        raise UsageError(f"{args.model!r} has no recurrence of its own", "use --mode block or --mode attention")
    inputs, labels, tokenizer, note = _analysis_inputs(args, plan, location, puzzles)
    argv = getattr(args, "argv", None) or ["analyze", args.model]
    try:
        with stop_on_sigterm():
            report = run_analysis(model, inputs, tokenizer=tokenizer, layers=None if looping else args.layers,
                                  mode=args.mode, loops=args.loops, diagnostics=args.diagnostics, k=args.k,
                                  dtype=torch.float64 if args.float64 else None, device=args.device,
                                  eta=args.eta, seed=args.seed,
                                  progress=not args.quiet, input_labels=labels, recurrence=args.recurrence,
                                  options=options, checkpoint=checkpoint, resume=args.resume, **sizes)
    except KeyboardInterrupt as stop:
        say_where_rows_are(checkpoint, argv, interrupted=True)
        return EXIT_TERMINATED if isinstance(stop, _Terminated) else EXIT_INTERRUPTED
    except Exception:
        say_where_rows_are(checkpoint, argv, interrupted=False)
        raise
    if note and note not in report.notes:
        report.notes.insert(0, note)
    print(report.summary())
    if args.json:
        report.to_json(args.json)
        print(f"wrote {args.json}")
    if args.out:
        report.save_html(args.out)
        print(f"wrote {args.out}")
    remove_scratch(checkpoint, scratch)
    return 0


#: The exit status of a run stopped by Ctrl-C or SIGTERM (128 + the signal, the shell's convention).
EXIT_INTERRUPTED, EXIT_TERMINATED = 130, 143


def _check_inputs_given(args) -> None:
    given = [flag for flag, value in (("--text", args.text), ("--ids", args.ids), ("--puzzle", args.puzzle)) if value]
    if len(given) > 1:
        raise UsageError(f"{' and '.join(given)} were both given", "use --text (or --ids, token ids) for a language "
                         "model, --puzzle for a looped Sudoku solver")
    if args.ids and len({len(row) for row in args.ids}) > 1:
        raise UsageError(f"the --ids sequences have different lengths ({', '.join(str(len(r)) for r in args.ids)})",
                         "give sequences of one length (a batch without padding), or analyse them one at a time")
    for index, text in enumerate(args.text or [], start=1):
        if not text.strip():
            raise UsageError(f"--text #{index} is empty", "give a sentence with at least one word, e.g. --text "
                             "'a looped block'")


def _known_arguments(args, sizes: dict, options: dict) -> dict:
    """The analyze arguments the command line fixes before the model loads (compared with a resumed report's)."""
    from .._analyze_options import resolve_diagnostics

    known = {"mode": args.mode, "recurrence": args.recurrence, "loops": args.loops, "k": args.k, "seed": args.seed,
             "diagnostics": list(resolve_diagnostics(args.diagnostics)), "dtype": "float64" if args.float64 else None,
             "eta": args.eta, "options": options, "device": args.device}
    known.update({name: sizes.get(name, default) for name, default in
                  (("eigen_k", 4), ("eigen_restarts", 4), ("spectral_samples", 3))})
    return known


def _how_it_loops(args, model):
    """How the model loops, decided by the one place that decides it (`jacobiscope.adapters.plan_maps`): its own
    loop, its recurrences, and its blocks when they are measured (the CLI words the problems as usage errors)."""
    from ..adapters import plan_maps

    plan = plan_maps(model)
    if plan.found is None and not plan.own_loop and (args.mode in ("block", "attention") or args.layers):
        plan = plan_maps(model, mode="block")  # a looped model measured block by block: its blocks are counted
    return plan


def _analysis_inputs(args, plan, location: str, puzzles):
    """(inputs, labels, tokenizer, note) for a looped solver (puzzles) or a layered model (text)."""
    from .._resources import public_name

    model, native = plan.model, plan.own_loop
    name = public_name(args.model if not Path(location).is_dir() else location)
    if native:
        if args.text or args.ids:
            raise UsageError(f"{name} is a looped Sudoku solver, which takes puzzles, not "
                             f"{'--text' if args.text else '--ids'}", "pass --puzzle (81 digits) or --puzzles N")
        if args.mode not in (None, "loop"):
            raise UsageError(f"--mode {args.mode} does not apply to {name}, which is analysed through its own loop",
                             "drop --mode")
        if args.layers and args.layers != [0]:
            raise UsageError(f"layer {max(args.layers)} is out of range: {name} is one looped block (layer 0)",
                             "drop --layers or use --layers 0")
        if puzzles:
            return puzzles, [f"--puzzle #{i + 1}" for i in range(len(puzzles))], None, None
        from ..data import sudoku

        _, test = sudoku.satnet_splits()
        rows = test.select(range(args.puzzles))
        first = sudoku.SATNET_TRAIN_ROWS
        labels = [f"SATNet test row {first + i}" for i in range(args.puzzles)]
        note = (f"inputs: SATNet test rows {first}-{first + args.puzzles - 1} (the first {args.puzzles} of the 1,000 "
                "in-distribution test puzzles, bundled satnet.csv.xz)")
        return list(rows["puzzle"]), labels, None, note
    if args.puzzle:
        raise UsageError(f"{name} is not a looped Sudoku solver, so --puzzle does not apply",
                         "pass --text for a language model")
    if args.layers:
        blocks = plan.blocks
        bad = [layer for layer in args.layers if layer >= blocks]
        if bad:
            raise UsageError(f"layer {bad[0]} is out of range: {name} has {blocks} blocks (0-{blocks - 1})",
                             f"choose --layers between 0 and {blocks - 1}")
    if args.ids:
        vocabulary = getattr(getattr(model, "config", None), "vocab_size", None)
        too_large = [token for row in args.ids for token in row if vocabulary and token >= vocabulary]
        if too_large:
            raise UsageError(f"token id {too_large[0]} is outside {name}'s vocabulary of {vocabulary}",
                             f"give ids between 0 and {vocabulary - 1}")
        import torch

        return torch.tensor(args.ids), [f"--ids #{i + 1}" for i in range(len(args.ids))], None, None
    tokenizer = None
    if Path(location).is_dir() and not any((Path(location) / name).is_file() for name in _TOKENIZER_FILES):
        # transformers would build an empty tokenizer from config.json alone, which turns every word into [UNK] (or
        # into nothing): an analysis of unknown tokens, silently. A text model without its tokenizer takes --ids.
        if getattr(getattr(model, "config", None), "vocab_size", None):
            raise UsageError(f"{name}'s folder holds no tokenizer files ({', '.join(_TOKENIZER_FILES[:3])}, ...), so the "
                             "empty tokenizer transformers builds for it turned text number 0 into no tokens that mean "
                             "anything", "pass token ids instead, e.g. --ids 1,2,3, or add the tokenizer's files to "
                             "the folder")
        return args.text or [DEFAULT_TEXT], None, None, None
    if Path(location).is_dir() or args.download:
        from transformers import AutoTokenizer

        try:
            # local_files_only: a folder's tokenizer never reaches for the Hub unless --download asked for it
            tokenizer = AutoTokenizer.from_pretrained(location, trust_remote_code=args.trust_remote_code,
                                                      local_files_only=not args.download)
        except Exception:  # noqa: BLE001 - vision models have none; analyze says so if text needs one
            tokenizer = None
    return args.text or [DEFAULT_TEXT], None, tokenizer, None


#: The files a saved tokenizer consists of (any one of them means the folder carries its tokenizer).
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "vocab.json", "merges.txt",
                    "tokenizer.model", "spiece.model", "sentencepiece.bpe.model", "special_tokens_map.json")


# ---------------------------------------------------------------------------------------------- hub
def hub_list(args) -> int:
    from ..hub import shipped_checkpoints

    for name, folder in shipped_checkpoints().items():
        config = json.loads((folder / "config.json").read_text(encoding="utf-8-sig"))
        print(f"{name}\t{config.get('model_type', '?')}\thub_configs/{name}")
    return 0


def hub_prepare(args) -> int:
    from .._resources import public_name
    from ..hub import prepare_for_hub

    if not args.out.strip():
        raise UsageError("--out needs a folder name, got ''", "e.g. --out prepared/itrsa-sudoku")
    source = locate(args.name)
    _refuse_inside_inputs({"--out": args.out}, {"the checkpoint folder": source}, replaced=("--out",))
    print(public_name(prepare_for_hub(args.name, args.out)))
    return 0


def hub_push(args) -> int:
    from ..hub import check_repo_id, push_to_hub

    check_repo_id(args.repo_id)
    locate(args.name)
    print(push_to_hub(args.name, args.repo_id, private=args.private))
    return 0


HANDLERS = {"demo": demo, "analyze": analyze, "sudoku_train": sudoku_train, "sudoku_eval": sudoku_eval,
            "hub_list": hub_list, "hub_prepare": hub_prepare, "hub_push": hub_push}
