"""The ``jacobiscope`` command line.

``jacobiscope demo`` runs the engine on a random looped self-attention map; ``jacobiscope analyze MODEL`` measures
a model's blocks (or a looped solver's own loop); ``jacobiscope sudoku train|eval`` and ``jacobiscope hub
list|prepare|push`` handle the reference solvers. A mistake on the command line or in its inputs prints one line,
``jacobiscope: error: <what> — <how to fix>``, and exits with status 2 (``--debug`` shows the traceback instead).
"""
from __future__ import annotations

import re
import sys

from ..errors import JacobiscopeError
from ._parser import UsageError, build_parser

__all__ = ["main", "build_parser", "UsageError"]

EXIT_USER_ERROR = 2
EXIT_INTERNAL_ERROR = 1
EXIT_INTERRUPTED = 130


# Exceptions that mean the user asked for something impossible, not that jacobiscope is broken.
_USER_ERRORS = (UsageError, JacobiscopeError, FileNotFoundError, PermissionError, IsADirectoryError,
                NotADirectoryError)


# A message written as sentences, "<problem>. Pass ...", names its fix in an imperative sentence: the line puts it
# after the dash like every other one instead of appending a generic pointer to --help.
_FIX_SENTENCE = re.compile(r"\.\s+(?=(?:Pass|Check|Use|Give|Choose|Rerun|Remove|Fix|Raise|Lower|Set|Drop|Keep|Write|"
                           r"Convert|Reshape|Rename|Delete|Move|Save|Train|Install|Run)\b)")


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    if " — " in text:
        return text
    parts = _FIX_SENTENCE.split(text, maxsplit=1)
    if len(parts) == 2 and parts[0] and parts[1]:
        fix = parts[1].rstrip(".")
        return f"{parts[0]} — {fix[0].lower()}{fix[1:]}"
    return f"{text} — see 'jacobiscope --help'"


def main(argv: list[str] | None = None) -> int:
    """Run the command line on ``argv`` (default ``sys.argv[1:]``); return the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    try:
        args = build_parser().parse_args(argv)
        args.argv = argv  # the command that continues an interrupted run repeats it
        if args.handler.startswith("tasks_"):
            from ._task_commands import TASK_HANDLERS as HANDLERS
        else:
            from ._commands import HANDLERS

        return HANDLERS[args.handler](args)
    except SystemExit as done:  # --help and --version
        return done.code if isinstance(done.code, int) else 0
    except KeyboardInterrupt:
        print("jacobiscope: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except _USER_ERRORS as error:
        if debug:
            raise
        print(f"jacobiscope: error: {_one_line(error)}", file=sys.stderr)
        return EXIT_USER_ERROR
    except Exception as error:  # noqa: BLE001 - a bug: still one line, the traceback with --debug
        if debug:
            raise
        print(f"jacobiscope: error: internal error ({type(error).__name__}: {' '.join(str(error).split())[:300]}) — "
              "rerun with --debug for the traceback and report it", file=sys.stderr)
        return EXIT_INTERNAL_ERROR


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
