"""The argument parser of the ``jacobiscope`` command: no torch, no transformers, so ``--help`` is instant.

Every option has a help text that shows its default; every value is checked as it is parsed, so a bad number
fails before anything is loaded.
"""
from __future__ import annotations

import argparse
import difflib
import re

from ..errors import UsageError
from ._suggestions import chosen_parser, flag_hint

__all__ = ["UsageError", "build_parser", "CLI_BUDGETS", "cli_budget", "option_pair"]

DEFAULT_TEXT = "Looped transformers apply the same block again and again; their Jacobian tells us why they work."
SATNET_TEST_PUZZLES = 1000
#: Seeds are 32-bit: numpy (which the training and the generators seed) takes nothing larger.
MAX_SEED = 2**32 - 1

#: The budgets of the sizes the command line controls, checked as the value is parsed (before any model is loaded).
#: ``loops`` and ``k`` are the Python API's budgets (`jacobiscope._validation.BUDGETS`, raised with the same
#: ``JACOBISCOPE_MAX_<NAME>`` variables); the others exist on the command line only:
#:
#: - ``demo_state``: tokens x dim of the demo's random state (the Lyapunov frame holds k of them);
#: - ``demo_tokens``: tokens of the demo (attention keeps tokens^2 scores per head);
#: - ``votes``: AKOrN's energy votes (each one a full run of every loop count);
#: - ``fresh_puzzles``: puzzles generated for ``sudoku eval --split fresh`` (about 17 ms each);
#: - ``train_steps``: ``sudoku train --max-steps`` (the recipe's own limit).
CLI_BUDGETS = {"loops": 100_000, "k": 1024, "demo_state": 1_048_576, "demo_tokens": 4096, "votes": 1024,
               "fresh_puzzles": 10_000, "train_steps": 10**9}


def cli_budget(kind: str) -> int:
    """The budget of ``kind``: the Python API's (`jacobiscope._validation.budget`) where it has one, else
    `CLI_BUDGETS`; ``JACOBISCOPE_MAX_<KIND>`` raises either.

    Example::

        >>> from jacobiscope.cli._parser import cli_budget
        >>> cli_budget("loops"), cli_budget("fresh_puzzles")
        (100000, 10000)
    """
    try:
        from .._validation import budget

        return budget(kind)
    except (ImportError, KeyError):
        pass
    import os

    raw = os.environ.get(f"JACOBISCOPE_MAX_{kind.upper()}", "").strip()
    if raw.isdigit() and int(raw) >= 1:
        return int(raw)
    return CLI_BUDGETS[kind]


class _Parser(argparse.ArgumentParser):
    """argparse that raises `UsageError` (one line, with the fix) instead of printing usage and exiting."""

    def __init__(self, *args, **kwargs):
        # No abbreviations: '--loop 3' must not pass as '--loops 3' (nor '--k' as '--keep' one day).
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def parse_args(self, args=None, namespace=None):
        # argparse reports leftover words from the root parser, whose "did you mean" would then offer any
        # subcommand's flag ('demo --loops' suggested --loops, an analyze flag); judge them by the chosen command
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            chosen_parser(self, parsed)._unrecognized(extras)
        return parsed

    def _unrecognized(self, words):
        message = f"unrecognized arguments: {' '.join(words)}"
        hint = flag_hint(self, words)
        if hint:
            raise UsageError(message, f"did you mean {hint}? see '{self.prog} --help' (options are never abbreviated)")
        raise UsageError(message, f"see '{self.prog} --help'")

    def error(self, message: str):
        if " — " in message:
            raise UsageError(message)
        choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if choice:
            options = re.findall(r"'([^']*)'", choice.group(2))
            close = difflib.get_close_matches(choice.group(1), options, n=1, cutoff=0.5)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise UsageError(message, f"{hint}see '{self.prog} --help'")
        unknown = re.match(r"unrecognized arguments: (.*)", message)
        if unknown:
            self._unrecognized(unknown.group(1).split())
        raise UsageError(message, f"see '{self.prog} --help'")


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Shows ``(default: X)`` after every option whose help does not already say its default."""

    def _get_help_string(self, action):
        text = action.help or ""
        if "default" in text or action.default in (None, argparse.SUPPRESS) or isinstance(action.default, bool):
            return text
        return super()._get_help_string(action)


# ---------------------------------------------------------------------------------------- value types
def _number(kind, text: str, *, minimum, inclusive: bool, example: str):
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or value != value or value in (float("inf"), float("-inf")) or (
            value < minimum if inclusive else value <= minimum):
        bound = (f">= {minimum}" if inclusive else f"> {minimum}") + ("" if kind is int else " (finite)")
        noun = "an integer" if kind is int else "a number"
        raise argparse.ArgumentTypeError(f"expected {noun} {bound}, got {text!r} — e.g. {example}")
    return value


def positive_int(text: str, example: str = "32") -> int:
    return _number(int, text, minimum=1, inclusive=True, example=example)


def _within(value: int, kind: str, what: str, example: str) -> int:
    limit = cli_budget(kind)
    if value > limit:
        raise argparse.ArgumentTypeError(
            f"{value} is over the budget of {limit:,} {what} (a run that large takes hours, or never ends) — pass at "
            f"most {limit}, e.g. {example}; if you mean it, raise the budget with JACOBISCOPE_MAX_{kind.upper()}="
            f"{value}")
    return value


def loop_count(text: str) -> int:
    """A loop count within the loops budget."""
    return _within(positive_int(text), "loops", "loops", "32")


def exponent_count(text: str) -> int:
    """A number of Lyapunov exponents within the k budget."""
    return _within(positive_int(text, "4"), "k", "Lyapunov exponents", "4")


def vote_count(text: str) -> int:
    return _within(positive_int(text, "16"), "votes", "votes", "16")


def step_count(text: str) -> int:
    return _within(positive_int(text, "1000"), "train_steps", "optimizer steps", "1000")


def demo_tokens(text: str) -> int:
    return _within(positive_int(text, "16"), "demo_tokens", "tokens", "16")


def demo_dim(text: str) -> int:
    return _within(positive_int(text, "32"), "demo_state", "channels", "32")


def epoch_count(text: str) -> float:
    value = positive_float(text)
    if value > 1e6:
        raise argparse.ArgumentTypeError(f"{text} epochs is over the recipe's budget of 1e6 epochs — pass fewer, "
                                         "e.g. --epochs 10, or --max-steps to bound the run by steps")
    return value


def seed(text: str) -> int:
    value = _number(int, text, minimum=0, inclusive=True, example="0")
    if value > MAX_SEED:
        raise argparse.ArgumentTypeError(f"a seed is a 32-bit integer (0 to {MAX_SEED}), got {text} — pass a "
                                         "smaller seed, e.g. 0")
    return value


def device_name(text: str) -> str:
    """A device this machine has (``cuda`` without CUDA is refused here, before any model loads)."""
    from .._analyze_options import check_device
    from ..errors import ArgumentError

    try:
        check_device(text)
    except ArgumentError as error:
        reason = str(error).split(" — ")[0].replace(f"device={text!r} ", "")
        raise argparse.ArgumentTypeError(f"{text!r} {reason} — pass e.g. --device cpu, or leave it out") from None
    return text


def nonnegative_int(text: str) -> int:
    return _number(int, text, minimum=0, inclusive=True, example="0")


def positive_float(text: str) -> float:
    return _number(float, text, minimum=0.0, inclusive=False, example="0.5")


def _int_list(text: str, *, minimum: int, example: str) -> list[int]:
    items = [item.strip() for item in text.split(",")]
    try:
        values = [int(item) for item in items]
    except ValueError:
        values = None
    if not values or any(v < minimum for v in values):
        raise argparse.ArgumentTypeError(f"expected comma-separated integers >= {minimum}, got {text!r} — e.g. {example}")
    return values


#: No model has more blocks than this, nor a vocabulary larger than MAX_TOKEN_ID + 1: a larger value is a typo, said as
#: it is parsed instead of after the model has loaded.
MAX_LAYER = 9_999
MAX_TOKEN_ID = 2**31 - 1
#: A step size beyond this overflows the state at the first loop (NaN/Inf from the start, nothing to measure).
MAX_ETA = 1e3


def _int_list_below(text: str, *, minimum: int, maximum: int, example: str, noun: str) -> list[int]:
    values = _int_list(text, minimum=minimum, example=example)
    too_large = [value for value in values if value > maximum]
    if too_large:
        raise argparse.ArgumentTypeError(f"{noun} {too_large[0]} is larger than any model has (at most {maximum:,}) "
                                         f"— e.g. {example}")
    return values


def layer_list(text: str) -> list[int]:
    return _int_list_below(text, minimum=0, maximum=MAX_LAYER, example="0,3", noun="layer")


def token_ids(text: str) -> list[int]:
    return _int_list_below(text, minimum=0, maximum=MAX_TOKEN_ID, example="101,2023,102", noun="token id")


def step_size(text: str) -> float:
    value = positive_float(text)
    if value > MAX_ETA:
        raise argparse.ArgumentTypeError(f"a step size of {text} overflows the state at the first loop (at most "
                                         f"{MAX_ETA:g}) — pass e.g. --eta 1.0")
    return value


def loop_list(text: str) -> list[int]:
    values = _int_list(text, minimum=1, example="16,32,64")
    for value in values:
        _within(value, "loops", "loops", "16,32,64")
    return values


def name_list(text: str) -> list[str]:
    names = [item.strip() for item in text.split(",") if item.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"expected comma-separated names, got {text!r} — e.g. spectral_norm,lyapunov")
    return names


def option_pair(text: str) -> tuple:
    """``NAME=VALUE`` of ``--option``: a known option name ("did you mean"), the value as a number, a bool, or a
    comma-separated list of numbers (checked against the option's kind before the model loads)."""
    from ._catalogue import option_names

    name, equals, raw = text.partition("=")
    name, raw = name.strip(), raw.strip()
    known = option_names()
    if not equals or not name or not raw:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r} — e.g. --option eigen_restarts=16")
    if name not in known:
        close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise argparse.ArgumentTypeError(f"unknown option {name!r} — {hint}choose from {', '.join(known)}")
    return name, _option_value(raw)


def _option_value(raw: str):
    import json

    def one(item: str):
        lowered = item.strip().lower()
        if lowered in ("true", "false"):
            return lowered == "true"
        try:
            return json.loads(item)
        except ValueError:
            return item.strip()

    if "," in raw and not raw.lstrip().startswith("["):
        return [one(item) for item in raw.split(",")]
    return one(raw)


def puzzle_count(text: str) -> int:
    value = positive_int(text)
    if value > SATNET_TEST_PUZZLES:
        raise argparse.ArgumentTypeError(f"the SATNet test set has {SATNET_TEST_PUZZLES} puzzles, got {text} — use "
                                         f"at most {SATNET_TEST_PUZZLES}")
    return value


# --------------------------------------------------------------------------------------------- parser
def _add_debug(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show the full traceback of an error (default: one line, no traceback)")


def _subparser(commands, name: str, help_text: str, description: str | None = None, epilog: str | None = None):
    sub = commands.add_parser(name, help=help_text, description=description or help_text, epilog=epilog,
                              formatter_class=_HelpFormatter)
    _add_debug(sub)
    return sub


def build_parser() -> argparse.ArgumentParser:
    """The full ``jacobiscope`` parser (demo, analyze, sudoku train/eval, hub list/prepare/push, tasks list/eval)."""
    from .. import __version__

    parser = _Parser(prog="jacobiscope", formatter_class=_HelpFormatter,
                     description="Jacobian diagnostics for looped transformers: spectral norm, eigenvalues, Lyapunov "
                                 "exponents and a regime verdict for any Hugging Face block or looped model.",
                     epilog="examples:\n  jacobiscope analyze itrsa-sudoku --loops 32 --out report.html\n"
                            "  jacobiscope analyze minilm --text 'a sentence' --layers 0,3\n"
                            "  jacobiscope sudoku eval itrsa-sudoku --loops 16,32 --split id --limit 200")
    parser.add_argument("--version", action="version", version=f"jacobiscope {__version__}")
    _add_debug(parser)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)

    _add_demo(commands)
    _add_analyze(commands)
    _add_sudoku(commands)
    _add_hub(commands)
    from ._task_commands import add_tasks_parser  # light: no torch, no transformers (--help stays instant)

    add_tasks_parser(commands)
    return parser


def _add_demo(commands) -> None:
    """``jacobiscope demo``: the engine on a random looped self-attention map."""
    demo = _subparser(commands, "demo", "run the engine on a random looped self-attention map (no model needed)")
    demo.add_argument("--tokens", type=demo_tokens, default=16, help="tokens of the random state")
    demo.add_argument("--dim", type=demo_dim, default=32, help="channels per token")
    demo.add_argument("--heads", type=positive_int, default=4, help="attention heads (must divide --dim)")
    demo.add_argument("--eta", type=step_size, default=1.0, help="step size of X <- Norm(X + eta MSA(X))")
    demo.add_argument("--steps", type=loop_count, default=200, help="loops averaged for the Lyapunov exponents")
    demo.add_argument("--k", type=exponent_count, default=4, help="number of Lyapunov exponents")
    demo.add_argument("--seed", type=seed, default=0, help="seed of the random weights")
    demo.add_argument("--float64", action="store_true", help="compute in float64 (default: float32)")
    demo.add_argument("--json", action="store_true", help="print a JSON record instead of a table (default: table)")
    demo.set_defaults(handler="demo")


def _add_analyze(commands) -> None:
    """``jacobiscope analyze MODEL``: a model's blocks (or a looped model's loop) as looped maps."""
    from ._catalogue import describe_diagnostics

    analyze = _subparser(commands, "analyze", "analyse a model's blocks (or a looped model's own loop) as looped maps",
                         epilog=describe_diagnostics())
    analyze.add_argument("model", help="'minilm' (bundled all-MiniLM-L6-v2), a shipped checkpoint (itrsa-sudoku, "
                         "akorn-sudoku; see 'jacobiscope hub list'), a local model folder, or a Hub id in the local cache")
    analyze.add_argument("--text", action="append", help="input text for a language model; repeat for several "
                         "(default: one sample sentence)")
    analyze.add_argument("--ids", action="append", type=token_ids,
                         help="comma-separated token ids, e.g. 1,2,3, for a model without a tokenizer; repeat for "
                         "several sequences of one length (default: none; text is tokenized)")
    analyze.add_argument("--puzzle", action="append", help="an 81-digit Sudoku puzzle (0 or . for blanks) for a looped "
                         "solver; repeat for several (default: the first --puzzles SATNet test puzzles)")
    analyze.add_argument("--puzzles", type=puzzle_count, default=4,
                         help="looped solvers without --puzzle: analyse SATNet test rows 9000 onwards, this many")
    analyze.add_argument("--layers", type=layer_list, help="comma-separated block indices, e.g. 0,3 (default: all)")
    analyze.add_argument("--mode", choices=("block", "attention", "loop"), default=None,
                         help="block: the whole layer is the map; attention: Norm(X + eta Attn(X)) with its weights; "
                              "loop: the model's own recurrence (default: loop for looped models such as ALBERT and "
                              "the Sudoku solvers, block otherwise)")
    analyze.add_argument("--recurrence", default=None,
                         help="which of a looped model's recurrences in loop mode (default: its first; e.g. L, H or "
                              "cycle for HRM-Text)")
    analyze.add_argument("--eta", type=step_size, help="attention-mode step size (default: 1.0)")
    analyze.add_argument("--loops", type=loop_count, default=32, help="applications of the map per trajectory")
    analyze.add_argument("--k", type=exponent_count, default=4, help="number of Lyapunov exponents")
    analyze.add_argument("--diagnostics", type=name_list, help="comma-separated names from the list below (default: "
                         "every one marked *)")
    analyze.add_argument("--option", action="append", type=option_pair, metavar="NAME=VALUE",
                         help="set a diagnostic's option or an analyze size, e.g. --option eigen_restarts=16 or "
                         "--option halting_thresholds=1e-2,1e-3; repeatable; names below (default: none)")
    analyze.add_argument("--float64", action="store_true", help="compute in float64 (default: the model's dtype)")
    analyze.add_argument("--device", type=device_name, help="run the diagnostics on this device, e.g. cuda or "
                         "cuda:1 (the block is copied there; default: where the model loads, the CPU)")
    analyze.add_argument("--seed", type=seed, default=0, help="seed of every random start vector")
    analyze.add_argument("--out", help="write a self-contained HTML report to this file (default: none)")
    analyze.add_argument("--json", help="write the report as JSON to this file, updated after every finished row, "
                         "so Ctrl-C keeps the finished rows (default: none)")
    analyze.add_argument("--resume", action="store_true",
                         help="continue the interrupted run whose partial report is at --json (or beside --out): only "
                         "its missing rows are measured; the arguments must be the same (default: start afresh)")
    analyze.add_argument("--quiet", action="store_true", help="no progress bars, ours or transformers' "
                         "(default: bars on stderr for steps over 2 s)")
    analyze.add_argument("--trust-remote-code", action="store_true",
                         help="allow a model folder's own Python code to run (default: never)")
    analyze.add_argument("--download", action="store_true",
                         help="fetch a Hub id that is not in the local cache (default: never touch the network)")
    analyze.set_defaults(handler="analyze")


def _add_sudoku(commands) -> None:
    """``jacobiscope sudoku train|eval``: the reference looped Sudoku solvers."""
    sudoku = _subparser(commands, "sudoku", "train and evaluate the reference looped Sudoku solvers")
    sudoku_commands = sudoku.add_subparsers(dest="sudoku_command", required=True, metavar="COMMAND", parser_class=_Parser)
    _add_sudoku_train(sudoku_commands)
    _add_sudoku_eval(sudoku_commands)


def _add_sudoku_train(sudoku_commands) -> None:
    """``jacobiscope sudoku train``: train ItrSA or AKOrN from a recipe, resuming."""
    train = _subparser(sudoku_commands, "train", "train ItrSA or AKOrN (SATNet rows 0-8999 by default; resumes)")
    train.add_argument("--arch", choices=("itrsa", "akorn"), help="model family (default: the recipe's, itrsa)")
    train.add_argument("--config", help="a recipe JSON of jacobiscope.recipes.sudoku.SudokuRecipe fields "
                       "(default: the built-in recipe)")
    train.add_argument("--out", required=True, help="run folder: checkpoints, logs, best/ (required)")
    train.add_argument("--max-steps", dest="max_steps", type=step_count,
                       help="override the recipe's optimizer steps (default: the recipe's)")
    train.add_argument("--epochs", type=epoch_count, help="override the recipe's epochs (default: the recipe's)")
    train.add_argument("--seed", type=seed, help="override the recipe's seed (default: the recipe's)")
    train.add_argument("--data", help="folder or file with satnet.csv.xz (default: the copy bundled with jacobiscope, "
                       "or $JACOBISCOPE_SUDOKU_DATA)")
    train.add_argument("--no-resume", action="store_true", help="start afresh even if --out has checkpoints "
                       "(default: resume from the newest)")
    train.add_argument("--report-to", dest="report_to", type=name_list, help="send the Trainer's logs (loss, "
                       "validation accuracy, and the dynamics with the recipe's dynamics_every) to these transformers "
                       "integrations, comma-separated: tensorboard (under OUT/runs), wandb, mlflow, ..., or none "
                       "(default: the recipe's report_to, none)")
    train.add_argument("--quiet", action="store_true", help="no progress bars (default: bars on stderr)")
    train.set_defaults(handler="sudoku_train")


def _add_sudoku_eval(sudoku_commands) -> None:
    """``jacobiscope sudoku eval MODEL``: board accuracy per loop count."""
    evaluate = _subparser(sudoku_commands, "eval", "board accuracy per loop count on the ID / OOD test sets")
    evaluate.add_argument("model", help="a checkpoint folder or a shipped name (itrsa-sudoku, akorn-sudoku)")
    evaluate.add_argument("--loops", type=loop_list, default=[16, 32, 64, 128], help="comma-separated loop counts "
                          "(default: 16,32,64,128)")
    evaluate.add_argument("--votes", type=vote_count, default=1, help="energy votes over noise draws (AKOrN only)")
    evaluate.add_argument("--split", type=name_list, default=["id", "ood"], help="id (SATNet test), ood (RRN test), "
                          "fresh (1,000 generated puzzles, 31-42 givens, the model cards' fixed seed), or csv files of "
                          "puzzle,solution rows (or puzzles alone: the exact solver supplies their unique solutions; a "
                          "header naming its columns picks them, e.g. HRM's source,question,answer,rating); "
                          "comma-separated (default: id,ood)")
    evaluate.add_argument("--limit", type=positive_int, help="only the first N puzzles of each split (default: all)")
    evaluate.add_argument("--data", help="folder or file with the benchmark files (default: the bundled copy, or "
                          "$JACOBISCOPE_SUDOKU_DATA)")
    evaluate.add_argument("--json", help="also write the results as JSON to this file (default: none)")
    evaluate.add_argument("--device", type=device_name, help="run the model on this device, e.g. cuda (default: "
                          "the CPU)")
    evaluate.add_argument("--quiet", action="store_true", help="no progress bars (default: bars on stderr)")
    evaluate.set_defaults(handler="sudoku_eval")


def _add_hub(commands) -> None:
    """``jacobiscope hub list|prepare|push``: the published checkpoints."""
    hub = _subparser(commands, "hub", "list, prepare and upload the published checkpoints")
    hub_commands = hub.add_subparsers(dest="hub_command", required=True, metavar="COMMAND", parser_class=_Parser)
    _subparser(hub_commands, "list", "the checkpoints shipped with jacobiscope").set_defaults(handler="hub_list")
    prepare = _subparser(hub_commands, "prepare", "copy a checkpoint with its code and auto_map, ready to upload")
    prepare.add_argument("name", help="a shipped name or a checkpoint folder")
    prepare.add_argument("--out", required=True, help="the folder to write (required; created, or replaced only if it is a copy prepared here earlier)")
    prepare.set_defaults(handler="hub_prepare")
    push = _subparser(hub_commands, "push", "prepare and upload a checkpoint to the Hub (needs network and a token)")
    push.add_argument("name", help="a shipped name or a checkpoint folder")
    push.add_argument("--repo-id", dest="repo_id", required=True, help="owner/name on the Hub (required)")
    push.add_argument("--private", action="store_true", help="create the repository as private (default: public)")
    push.set_defaults(handler="hub_push")
