"""Count the bad-input catalogue: cases per surface (test file) and per failure class they guard against.

    .venv/bin/python benchmarks/count_catalogue.py            # markdown table on stdout
    .venv/bin/python benchmarks/count_catalogue.py --json     # the same counts as JSON

A case is one collected test item of ``tests/test_bad_inputs_*.py`` (and the hostile-value property tests). Its
class comes from its ``@pytest.mark.guards(kind)`` marker: ``lost`` (data lost), ``silent`` (a silently wrong or
empty result), ``hang``, ``internal`` (an internal traceback or a misleading message). Cases of the first catalogue
(issue 16) carry no marker and are counted as ``unclassified``. Collection only: nothing is run.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
KINDS = ("lost", "silent", "hang", "internal")
FILES = ("test_bad_inputs_*.py", "test_properties_hostile.py", "test_training_kill_anywhere.py")


class _Collector:
    """A pytest plugin that records (file, guards kind) of every collected item."""

    def __init__(self):
        self.items: list[tuple[str, str]] = []

    def pytest_collection_modifyitems(self, items):
        for item in items:
            marks = [mark.args[0] for mark in item.iter_markers("guards") if mark.args]
            kind = marks[0] if marks else "unclassified"
            if kind not in KINDS and kind != "unclassified":
                raise SystemExit(f"{item.nodeid}: unknown guards kind {kind!r} — use one of {', '.join(KINDS)}")
            self.items.append((Path(item.fspath).name, kind))


def count() -> dict[str, Counter]:
    paths = sorted({str(path) for pattern in FILES for path in (ROOT / "tests").glob(pattern)})
    collector = _Collector()
    status = pytest.main(["--collect-only", "-q", "-p", "no:randomly", *paths], plugins=[collector])
    if status not in (0, pytest.ExitCode.NO_TESTS_COLLECTED):
        raise SystemExit(f"collection failed (pytest exit {status})")
    table: dict[str, Counter] = defaultdict(Counter)
    for name, kind in collector.items:
        table[name][kind] += 1
    return table


def markdown(table: dict[str, Counter]) -> str:
    columns = (*KINDS, "unclassified")
    lines = ["| surface (file) | " + " | ".join(columns) + " | cases |", "|---|" + "---|" * (len(columns) + 1)]
    totals = Counter()
    for name in sorted(table):
        row = table[name]
        totals.update(row)
        lines.append(f"| `{name}` | " + " | ".join(str(row[c]) for c in columns) + f" | {sum(row.values())} |")
    lines.append("| **total** | " + " | ".join(str(totals[c]) for c in columns) + f" | {sum(totals.values())} |")
    classified = sum(totals[c] for c in KINDS)
    lines.append(f"\nClassified (this catalogue's cases): {classified}; first catalogue: {totals['unclassified']}.")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON instead of a markdown table")
    args = parser.parse_args(argv)
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):
        table = count()
    print(json.dumps({name: dict(row) for name, row in sorted(table.items())}, indent=1) if args.json
          else markdown(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
