"""``jacobiscope tasks list`` and ``jacobiscope tasks eval``: the text tasks, and a looped LM's exact-match accuracy
on fresh instances at several loop counts (one trajectory per batch), every argument checked before the model loads.

Example::

    >>> from jacobiscope.cli import main
    >>> main(["tasks", "eval", "some-model", "--task", "additon"])     # refused before any model is looked up
    2
"""
from __future__ import annotations

from pathlib import Path

from ..errors import ArgumentError, UsageError
from ._checks import _quiet, _refuse_inside_inputs, _suggest, check_output_path

__all__ = ["TASK_HANDLERS", "tasks_list", "tasks_eval", "add_tasks_parser", "loop_span_list"]


# ------------------------------------------------------------------------------------------------ parser
def loop_span_list(text: str) -> list[int]:
    """Comma-separated loop counts and inclusive spans, e.g. ``1-16`` or ``1,2,4-6``: sorted, each within budget.

    Example::

        >>> loop_span_list("1,2,4-6")
        [1, 2, 4, 5, 6]
    """
    import argparse

    from ._parser import _within

    values = []
    for item in text.split(","):
        parts = item.strip().split("-")
        if len(parts) > 2 or not all(part.strip().isdigit() and int(part) >= 1 for part in parts):
            raise argparse.ArgumentTypeError(f"expected comma-separated loop counts >= 1 or spans A-B, got "
                                             f"{item.strip()!r} in {text!r} — e.g. 1,2,4,8 or 1-16")
        low, high = int(parts[0]), int(parts[-1])
        if low > high:
            raise argparse.ArgumentTypeError(f"the span {item.strip()!r} runs backwards — e.g. {high}-{low}")
        for value in (low, high):
            _within(value, "loops", "loops", "1-16")
        values.extend(range(low, high + 1))
    return sorted(set(values))


def add_tasks_parser(commands) -> None:
    """``jacobiscope tasks list|eval`` on the command line's parser (called by `build_parser`)."""
    from ._parser import _Parser, _subparser, device_name, positive_int, seed

    tasks = _subparser(commands, "tasks", "the text tasks, and a looped LM's accuracy on them per loop count")
    task_commands = tasks.add_subparsers(dest="tasks_command", required=True, metavar="COMMAND", parser_class=_Parser)
    _subparser(task_commands, "list", "the text tasks, their train and harder levels").set_defaults(
        handler="tasks_list")
    evaluate = _subparser(task_commands, "eval", "exact-match accuracy of a looped LM (HRM-Text, Dory, Inkling-2 "
                          "loop) on fresh task instances per loop count, all read from one trajectory")
    evaluate.add_argument("model", help="a checkpoint folder (with its tokenizer) or a shipped name")
    evaluate.add_argument("--task", default=None, help="the task, e.g. addition (see 'jacobiscope tasks list'; "
                          "default: the task a shipped checkpoint records in its results.json)")
    evaluate.add_argument("--loops", type=loop_span_list, default=[1, 2, 4, 8], help="comma-separated loop counts "
                          "or spans (1-16): the model's own loop knob (H_cycles, n_recurrent_loops, loop_num_passes) "
                          "(default: 1,2,4,8)")
    evaluate.add_argument("--n", type=positive_int, default=500, help="fresh instances to generate")
    evaluate.add_argument("--levels", default="train", help="difficulty levels: A-B, N, train (the task's training "
                          "levels) or harder (beyond them)")
    evaluate.add_argument("--seed", type=seed, default=0, help="seed of the instance generator")
    evaluate.add_argument("--batch-size", dest="batch_size", type=positive_int, default=64,
                          help="instances per trajectory")
    evaluate.add_argument("--out", help="write the accuracy and one record per instance as JSON to this file "
                          "(default: none)")
    evaluate.add_argument("--device", type=device_name, help="run the model on this device, e.g. cuda (default: "
                          "the CPU)")
    evaluate.add_argument("--quiet", action="store_true", help="no progress bars (default: bars on stderr)")
    evaluate.set_defaults(handler="tasks_eval")


# ---------------------------------------------------------------------------------------------- commands
def tasks_list(args) -> int:
    """One line per task: its name, the levels it is trained on and the harder ones, and an example."""
    from ..data.tasks import get_task, list_tasks

    print(f"{'task':<16}{'train levels':>14}{'harder levels':>15}  example")
    for name in list_tasks():
        task = get_task(name)
        example = task.generate(1, seed=0)[0]
        print(f"{name:<16}{_span(task.train_levels):>14}{_span(task.harder_levels):>15}  "
              f"{example.prompt}{example.answer}")
    print("score a looped LM on one: jacobiscope tasks eval MODEL --task NAME --loops 1,2,4,8 --levels harder")
    return 0


def _span(levels) -> str:
    return f"{levels[0]}-{levels[1]}" if levels[0] != levels[1] else str(levels[0])


def _checked_task(args):
    """The task of --task and the level range of --levels, refused with the option named."""
    from ..data.tasks import get_task, list_tasks
    from ..recipes._looped_lm_eval_checks import resolve_levels

    try:  # the data API's own names (a variant it parses, too), not only the listed ones
        task = get_task(args.task)
    except ArgumentError:
        known = list_tasks()
        raise UsageError(f"--task {args.task!r} is not a task", f"{_suggest(args.task, known)}choose from "
                         f"{', '.join(known)} (see 'jacobiscope tasks list')") from None
    try:
        levels = resolve_levels(task, args.levels)
    except ArgumentError:
        low, high = task.supported_levels
        raise UsageError(f"--levels {args.levels!r} does not fit task {task.name!r} (levels {low}-{high})",
                         f"pass A-B inside {low}-{high}, one level, train ({_span(task.train_levels)}) or harder "
                         f"({_span(task.harder_levels)})") from None
    return task, levels


def _recorded_task(model: str) -> str:
    """The task a shipped looped LM was trained and measured on (its results.json), for a --task left out."""
    import json

    from ..hub import locate_model

    path = Path(locate_model(model)) / "results.json"
    try:
        task = json.loads(path.read_text()).get("task") if path.is_file() else None
    except (OSError, ValueError, AttributeError):
        task = None
    if not isinstance(task, str):
        raise UsageError(f"{model!r} records no task (no results.json naming one)",
                         "pass --task NAME (see 'jacobiscope tasks list')")
    return task


def _checked_model(args) -> str:
    """The model's folder: a shipped name or a folder, a looped LM family with its tokenizer beside it (read from
    config.json and the file list; the weights are not loaded)."""
    from ..hub import locate_model
    from ..recipes._looped_lm_eval_checks import check_tokenizer_files, looped_lm_type

    location = locate_model(args.model)
    if not Path(location).is_dir():  # pragma: no cover - locate_model returns a folder unless downloading
        raise UsageError(f"{args.model!r} is not a local model folder", "pass a shipped name or a folder")
    try:
        looped_lm_type(location)
        check_tokenizer_files(location)
    except ArgumentError as error:
        raise UsageError(" ".join(str(error).split())) from None
    return location


def _check_out(out) -> None:
    """--out: a JSON file name (the shared check's examples name an HTML report, so a blank or a folder is said
    here first)."""
    if out is None:
        return
    if not out.strip():
        raise UsageError(f"--out needs a file name, got {out!r}", "e.g. --out eval.json")
    try:
        folder = Path(out).expanduser().is_dir()
    except OSError:  # a name too long to even stat: the shared check says so
        folder = False
    if folder:
        raise UsageError(f"--out {out!r} is a folder", f"give a file name, e.g. --out {Path(out) / 'eval.json'}")
    check_output_path(out, "--out")


def tasks_eval(args) -> int:
    """Score MODEL on --n fresh instances of --task at every --loops count; print the table, write --out."""
    from ..recipes._looped_lm_eval_checks import MAX_INSTANCES

    _check_out(args.out)
    if args.n > MAX_INSTANCES:
        raise UsageError(f"--n {args.n:,} is over the budget of {MAX_INSTANCES:,} instances",
                         f"pass at most {MAX_INSTANCES}, e.g. --n 500")
    if args.task is None:
        args.task = _recorded_task(args.model)
    task, levels = _checked_task(args)
    location = _checked_model(args)
    _refuse_inside_inputs({"--out": args.out}, {"the model folder": location})
    _quiet(args.quiet)
    from transformers import AutoTokenizer

    from ..recipes._looped_lm_eval import evaluate_task
    from ..recipes._looped_lm_eval_checks import load_looped_lm

    model = load_looped_lm(location)
    if args.device:
        model = model.to(args.device)
    tokenizer = AutoTokenizer.from_pretrained(location)
    result = evaluate_task(model, task, loops=args.loops, n=args.n, levels=levels, seed=args.seed,
                           batch_size=args.batch_size, tokenizer=tokenizer, progress=not args.quiet)
    print(result.table())
    if args.out:
        result.to_json(args.out)
        print(f"per-instance records written to {args.out}")
    return 0


TASK_HANDLERS = {"tasks_list": tasks_list, "tasks_eval": tasks_eval}
