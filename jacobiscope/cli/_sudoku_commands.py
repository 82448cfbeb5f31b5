"""``jacobiscope sudoku train`` and ``jacobiscope sudoku eval``: every argument and input checked before a model is
built or loaded, then `train_sudoku` / `evaluate_sudoku` of `jacobiscope.recipes.sudoku`.

Example::

    >>> from jacobiscope.cli import main
    >>> main(["sudoku", "eval", "itrsa-sudoku", "--split", "nowhere"])    # refused before the model loads
    2
"""
from __future__ import annotations

import json
import logging
import math
import sys
import time
from pathlib import Path

from ..errors import UsageError
from ._checks import (
    _check_input_file, _exists, _is_file, _nan_to_none, _quiet, _refuse_inside_inputs, _suggest, check_output_path,
)

__all__ = ["sudoku_train", "sudoku_eval"]


def sudoku_train(args) -> int:
    if args.config is not None:
        _check_input_file(args.config, "--config", "a recipe JSON file, e.g. --config recipe.json")
    if not args.out.strip():
        raise UsageError("--out needs a folder name, got ''", "e.g. --out runs/itrsa")
    out = Path(args.out).expanduser()
    ancestor = out
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if ancestor.exists() and not ancestor.is_dir():
        raise UsageError(f"--out {args.out!r} cannot be a run folder: {str(ancestor)!r} is a file",
                         "give a folder path (it is created), e.g. --out runs/itrsa")
    _refuse_inside_inputs({"--out": args.out}, {"the recipe --config": args.config, "the data --data": args.data})
    _quiet(args.quiet)
    from ..data import sudoku as data
    from ..recipes.sudoku import SudokuRecipe, train_sudoku

    # The recipe and its overrides first (a typo costs nothing), then the data, then the model.
    try:
        recipe = SudokuRecipe.from_json(args.config) if args.config else SudokuRecipe()
    except (ValueError, TypeError) as error:
        text = " ".join(str(error).split())
        if " — " in text:
            raise UsageError(f"--config {args.config!r}: {text}") from None
        raise UsageError(f"--config {args.config!r} is not a usable recipe: {text}",
                         "fix the JSON (fields of jacobiscope.recipes.sudoku.SudokuRecipe)") from None
    overrides = {key: value for key, value in (("arch", args.arch), ("max_steps", args.max_steps),
                                               ("epochs", args.epochs), ("seed", args.seed),
                                               ("report_to", getattr(args, "report_to", None))) if value is not None}
    for key, value in overrides.items():
        setattr(recipe, key, value)
    if overrides and callable(getattr(recipe, "validate", None)):
        try:
            recipe.validate()
        except (ValueError, TypeError) as error:
            flags = ", ".join(f"--{key.replace('_', '-')} {','.join(value) if isinstance(value, list) else value}"
                              for key, value in overrides.items())
            text = " ".join(str(error).split())
            what, _, fix = text.partition(" — ")
            raise UsageError(f"{flags} does not fit the recipe: {what}", fix or "change that option") from None
    from ..recipes.sudoku import check_report_to

    try:
        check_report_to(recipe.report_to)  # an integration that cannot start is refused before the data is read
    except ValueError as error:
        raise UsageError(" ".join(str(error).split())) from None
    data.satnet_splits(args.data, limit=1)  # the data must be there before a model is built
    if not args.quiet:
        _milestones_to_stderr()
    summary = train_sudoku(recipe, args.out, resume=not args.no_resume, data_path=args.data,
                           progress=not args.quiet)
    if summary.get("already_finished"):
        print(f"{args.out} already finished at step {summary['steps']} (max_steps {recipe.max_steps}); nothing "
              "trained — raise --max-steps to continue, or --no-resume to start over")
    print(json.dumps(summary, indent=1))
    return 0


def _milestones_to_stderr() -> None:
    """Show the library's INFO milestones (each validation, best/ written, resumed) on stderr, unless the user's
    logging setup already shows them somewhere."""
    library = logging.getLogger("jacobiscope")
    if logging.getLogger().handlers or any(not isinstance(h, logging.NullHandler) for h in library.handlers):
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    library.addHandler(handler)
    if library.level == logging.NOTSET or library.level > logging.INFO:
        library.setLevel(logging.INFO)


def _csv_split_name(split: str, seen: dict) -> str:
    """A csv split is named by its file name; a second file of that name (b/test.csv after a/test.csv) is named by
    its path as given, so neither result overwrites the other."""
    name, resolved = Path(split).name, Path(split).resolve()
    if seen.get(name, resolved) != resolved:
        name = split
    seen[name] = resolved
    return name


def sudoku_eval(args) -> int:
    check_output_path(args.json, "--json")
    _check_eval_budgets(args)
    _quiet(args.quiet)
    from ..data import sudoku as data
    from ..hub import locate_model

    splits = _eval_splits(args, data)
    location = locate_model(args.model)
    inputs = {"the model folder": location if Path(location).is_dir() else None}
    inputs.update({f"the split {split!r}": split for split in args.split if _is_file(split)})
    inputs["the data --data"] = args.data
    if {"id", "ood"} & set(splits) and args.data is None:
        try:
            inputs["the benchmark data folder"] = str(data.data_dir())
        except data.SudokuError:
            pass
    _refuse_inside_inputs({"--json": args.json}, inputs)
    _check_votes_early(args, location)
    # Data first: a missing or malformed file fails before the model is loaded.
    loaded = {name: load() for name, load in splits.items()}
    model = _load_solver(args, location)
    from .._resources import public_name

    record = {"model": public_name(location), "votes": args.votes, "loops": args.loops, "results": {}, "puzzles": {},
              "notes": []}
    for name, dataset in loaded.items():
        _score_split(args, model, name, dataset, record)
    _print_scores(args, record)
    if args.json:
        from .._io import atomic_write_text

        # NaN is not JSON: an undefined cell accuracy (no blanks to score) is written as null
        atomic_write_text(args.json, json.dumps(_nan_to_none(record), indent=1, allow_nan=False))
    return 0


def _check_eval_budgets(args) -> None:
    """--limit of fresh puzzles and --votes x --loops within the command line's budgets (raised by the environment)."""
    from ._parser import cli_budget

    fresh = args.limit or 1000
    if "fresh" in args.split and fresh > cli_budget("fresh_puzzles"):
        raise UsageError(f"--limit {args.limit} with --split fresh would generate {fresh:,} puzzles (about 17 ms each), "
                         f"over the budget of {cli_budget('fresh_puzzles'):,}", f"pass --limit "
                         f"{cli_budget('fresh_puzzles')} or less; to mean it, raise JACOBISCOPE_MAX_FRESH_PUZZLES")
    if max(args.loops) * args.votes > cli_budget("loops"):
        raise UsageError(f"--votes {args.votes} x --loops {max(args.loops)} = {max(args.loops) * args.votes:,} loop "
                         f"applications per puzzle is over the budget of {cli_budget('loops'):,}",
                         "lower --votes or the largest --loops")


def _eval_splits(args, data) -> dict:
    """``{name: load}`` for each --split (loaded later, after every check): id, ood, fresh or a csv file."""
    splits, csv_paths = {}, {}
    for split in args.split:
        if split == "id":
            splits["id"] = lambda: data.satnet_splits(args.data)[1]
        elif split == "ood":
            splits["ood"] = lambda: data.rrn_test(args.data)
        elif split == "fresh":
            from ..recipes.shipping import FRESH_GIVENS, FRESH_SEED

            splits["fresh"] = lambda: data.to_dataset(*data.generate_many(args.limit or 1000, givens=FRESH_GIVENS,
                                                                          seed=FRESH_SEED))
        elif _is_file(split):
            splits[_csv_split_name(split, csv_paths)] = lambda split=split: data.load_csv(split)
        else:
            if _exists(split):  # a folder, a FIFO: say what it is, not that it is missing
                _check_input_file(split, "--split", "the path of a puzzle,solution csv file (or id, ood, fresh)")
            hint = "" if any(mark in split for mark in "/.\\") else _suggest(split, ("id", "ood", "fresh"))
            raise UsageError(f"--split {split!r} is neither id, ood, fresh nor an existing csv file",
                             f"{hint}use id, ood, fresh, or the path of a puzzle,solution csv")
    return splits


def _load_solver(args, location: str):
    """The model at ``location``, refused unless it solves Sudoku (and, with --votes above 1, has energy votes)."""
    from ..hub import load_pretrained
    from ..recipes._eval_checks import check_votes

    model = load_pretrained(location)
    if getattr(args, "device", None):
        model = model.to(args.device)
    if not callable(getattr(model, "solve", None)):
        raise UsageError(f"{args.model!r} is not a Sudoku solver (it has no solve method)",
                         "pass itrsa-sudoku, akorn-sudoku or a folder trained with 'jacobiscope sudoku train'")
    try:
        check_votes(model, args.votes)
    except ValueError as error:
        raise UsageError(_votes_message(args, type(model).__name__)) from error
    return model


def _score_split(args, model, name: str, dataset, record: dict) -> None:
    """Score one split into ``record`` (its accuracy per loop count and, with --json, one record per puzzle)."""
    from ..data import sudoku as data
    from ..recipes.sudoku import evaluate_sudoku, predict_along, puzzle_records

    if args.limit and args.limit > len(dataset):  # a clamp is said, never silent
        note = f"{name}: --limit {args.limit} is more than its {len(dataset)} puzzles; all {len(dataset)} were used"
        record["notes"].append(note)
        print(note)
    if args.limit:
        dataset = dataset.select(range(min(args.limit, len(dataset))))
    puzzles = data.to_tensor(list(dataset["puzzle"]))
    solutions = data.to_tensor(list(dataset["solution"]))
    started = time.perf_counter()
    predictions = predict_along(model, puzzles, loops=args.loops, votes=args.votes, progress=not args.quiet,
                                desc=f"sudoku eval {name}")
    scores = evaluate_sudoku(model, puzzles, solutions, loops=args.loops, predictions=predictions)
    for values in scores.values():  # one trajectory served every loop count
        values["seconds"] = time.perf_counter() - started
        values["puzzles_per_second"] = len(puzzles) / max(values["seconds"], 1e-9)
    record["results"][name] = scores
    if args.json:
        record["puzzles"][name] = puzzle_records(puzzles, solutions, predictions)


def _print_scores(args, record: dict) -> None:
    print(f"{'split':<8}{'loops':>7}{'votes':>7}{'board acc':>11}{'cell acc':>10}")
    for name, per_loop in record["results"].items():
        for count, values in per_loop.items():
            cells = values["cell_accuracy"]
            cells = "-" if math.isnan(cells) else f"{100 * cells:.2f}%"
            print(f"{name:<8}{count:>7}{args.votes:>7}{100 * values['board_accuracy']:>10.2f}%{cells:>10}")
    for name, per_loop in record["results"].items():
        values = next(iter(per_loop.values()))
        print(f"{name}: one trajectory per puzzle to T={max(args.loops)}, {values['seconds']:.1f} s "
              f"({values['puzzles_per_second']:.1f} puzzles/s)")
        if math.isnan(values["cell_accuracy"]):
            print(f"{name}: its puzzles have no blank cells, so cell accuracy is undefined (-; null in the JSON)")


def _votes_message(args, model_class: str) -> str:
    return (f"--votes {args.votes}: {args.model} ({model_class}) has no energy votes, it is deterministic — drop "
            "--votes (or use --votes 1); energy voting is AKOrN's (e.g. akorn-sudoku --votes 16)")


def _check_votes_early(args, location: str) -> None:
    """--votes above 1 for a model family without energy votes, read from config.json before anything is loaded."""
    if args.votes == 1 or not Path(location).is_dir():
        return
    try:
        config = json.loads((Path(location) / "config.json").read_text(encoding="utf-8-sig"))
    except (OSError, ValueError):
        return  # load_pretrained names the problem
    model_type = config.get("model_type") if isinstance(config, dict) else None
    if model_type == "itrsa_sudoku":
        raise UsageError(_votes_message(args, "ItrSAForSudoku"))
