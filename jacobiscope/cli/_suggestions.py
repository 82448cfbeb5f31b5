"""The command line's "did you mean": the option of the chosen command a mistyped word was meant to be.

Example::

    >>> from jacobiscope.cli import build_parser
    >>> from jacobiscope.cli._suggestions import flag_hint
    >>> flag_hint(build_parser(), ["--dtype", "float64"]), flag_hint(build_parser(), ["--zzzz"])
    ('--float64', None)
"""
from __future__ import annotations

import argparse
import difflib

#: Words other tools use for an option we spell differently (difflib would offer '--text' for '--dtype').
SYNONYMS = {
    "--dtype": ("--float64",), "--double": ("--float64",), "--fp64": ("--float64",), "--precision": ("--float64",),
    "--iterations": ("--loops", "--steps"), "--n-loops": ("--loops",), "--loops": ("--steps",),
    "--output": ("--out",), "-o": ("--out",), "--gpu": ("--device",), "--cuda": ("--device",),
    "--input": ("--text", "--puzzle"), "--prompt": ("--text",), "--layer": ("--layers",),
}
_NEVER_SUGGESTED = {"--help", "--version", "--debug"}


def flag_hint(parser: argparse.ArgumentParser, words) -> str | None:
    """The first option of ``parser`` (its subcommands included) a leftover word was meant to be: a synonym
    other tools use, else the closest spelling; None when no word is close to any."""
    flags = all_flags(parser) - _NEVER_SUGGESTED
    for word in words:
        if not word.startswith("-"):
            continue
        name = word.split("=")[0]
        close = [flag for flag in SYNONYMS.get(name, ()) if flag in flags]
        close = close or difflib.get_close_matches(name, sorted(flags), n=1, cutoff=0.6)
        if close and close[0] != name:
            return close[0]
    return None


def chosen_parser(parser: argparse.ArgumentParser, parsed: argparse.Namespace) -> argparse.ArgumentParser:
    """The (sub)command parser the parsed words chose, at any depth: the one whose options the words must match."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            sub = action.choices.get(getattr(parsed, action.dest, None) or "")
            if sub is not None:
                return chosen_parser(sub, parsed)
    return parser


def all_flags(parser: argparse.ArgumentParser) -> set:
    """Every option string of ``parser`` and of its subcommands, at any depth."""
    flags = set()
    for action in parser._actions:
        flags.update(action.option_strings)
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                flags |= all_flags(sub)
    return flags
