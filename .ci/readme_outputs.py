"""Regenerate the outputs the README shows from what the code prints now, and check them.

    .venv/bin/python .ci/readme_outputs.py            # run every output's source, rewrite README.md in place
    .venv/bin/python .ci/readme_outputs.py --check    # rewrite nothing; exit 1 naming each output that differs
    .venv/bin/python .ci/readme_outputs.py --fast     # only the outputs not marked slow (with or without --check)

An output is the fenced block right after a marker line; the marker says where its text comes from:

    <!-- output: jacobiscope hub list -->                    a shell command (bash), run in an empty temp folder
    <!-- output slow: jacobiscope analyze ... | grep X -->   the same, left out of the default test suite
    <!-- output: python block above -->                      the stdout of the ```python block just before it
    <!-- output slow: python block above -->

Commands run with this interpreter's folder first on PATH (so `jacobiscope` and `python` are this environment's),
HF_HUB_OFFLINE=1, MPLBACKEND=Agg and one BLAS thread. The part of a command before its first " | " runs once per
call of this script: several outputs that filter one run (the main job's verdicts and its outcome line) share it.
A ```python block is marked slow by a line `<!-- slow -->` right above its fence; tests/test_readme_blocks.py runs
every block (the slow ones under -m slow) and compares each output with what its source prints.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
MARKER = re.compile(r"^<!-- output( slow)?: (.+?) -->$")
FENCE = re.compile(r"^```(\w*)$")
PYTHON_ABOVE = "python block above"
TIMEOUT = 1800


@dataclasses.dataclass
class Block:
    """A fenced block of the README: ``lines[start:end]`` is its body (fences excluded)."""

    kind: str            # "python", "output" or another fence language
    start: int
    end: int
    body: str
    slow: bool = False
    source: str = ""     # for an output: the shell command, or PYTHON_ABOVE
    python: int | None = None   # for PYTHON_ABOVE: the index in `blocks` of the python block it shows

    @property
    def line(self) -> int:
        """The README line number (1-based) of the opening fence."""
        return self.start


def blocks(text: str) -> list[Block]:
    """Every fenced block of ``text``, in order, with the output markers and slow markers applied.

    Example::

        >>> [b.kind for b in blocks("<!-- slow -->\\n```python\\nprint(1)\\n```\\n<!-- output: python block above -->\\n```\\n1\\n```\\n")]
        ['python', 'output']
    """
    lines, found, index = text.split("\n"), [], 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        close = next((j for j in range(index + 1, len(lines)) if lines[j] == "```"), None)
        if close is None:
            raise ValueError(f"README.md line {index + 1}: a ``` block that is never closed — close it")
        above = lines[index - 1] if index else ""
        block = Block(opening.group(1) or "text", index + 1, close, "\n".join(lines[index + 1:close]))
        marker = MARKER.match(above)
        if marker:
            block.kind, block.slow, block.source = "output", bool(marker.group(1)), marker.group(2).strip()
            if block.source == PYTHON_ABOVE:
                block.python = _python_above(found, block.line)
        elif above.strip() == "<!-- slow -->":
            block.slow = True
        found.append(block)
        index = close + 1
    return found


def _python_above(found: list[Block], line: int) -> int:
    if not found or found[-1].kind != "python":
        raise ValueError(f"README.md line {line}: '<!-- output: {PYTHON_ABOVE} -->' follows no ```python block — "
                         "put it right under one")
    return len(found) - 1


def environment() -> dict:
    """The environment every README command and block runs in: offline, headless, this interpreter first."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", MPLBACKEND="Agg", OPENBLAS_NUM_THREADS="1",
               PYTHONDONTWRITEBYTECODE="1")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("JACOBISCOPE_SUDOKU_DATA", None)
    return env


def run_python(code: str, folder: Path, timeout: float = TIMEOUT) -> subprocess.CompletedProcess:
    """Run one README block as a script in ``folder``; returns the finished process (stdout, stderr as text)."""
    script = folder / "readme_block.py"
    script.write_text(code + "\n")
    return subprocess.run([sys.executable, str(script)], cwd=folder, env=environment(), capture_output=True,
                          text=True, timeout=timeout)


def run_command(command: str, folder: Path, cache: dict, timeout: float = TIMEOUT) -> str:
    """The stdout of ``command`` run by bash in ``folder``; its head (before " | ") runs once per ``cache``."""
    head, _, tail = command.partition(" | ")
    if head not in cache:
        done = subprocess.run(["bash", "-c", head], cwd=folder, env=environment(), capture_output=True, text=True,
                              timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"README command {head!r} failed ({done.returncode}):\n{done.stderr[-3000:]}")
        cache[head] = done.stdout
    if not tail:
        return cache[head]
    done = subprocess.run(["bash", "-c", tail], cwd=folder, env=environment(), input=cache[head],
                          capture_output=True, text=True, timeout=60)
    return done.stdout


def produce(found: list[Block], index: int, folder: Path, cache: dict) -> str:
    """What output block ``index`` should show now (no trailing newline)."""
    block = found[index]
    if block.python is not None:
        done = run_python(found[block.python].body, folder)
        if done.returncode != 0:
            raise RuntimeError(f"README block at line {found[block.python].line} failed:\n{done.stderr[-3000:]}")
        return done.stdout.rstrip("\n")
    return run_command(block.source, folder, cache).rstrip("\n")


def regenerate(text: str, *, fast_only: bool = False) -> tuple[str, list[Block]]:
    """``text`` with every output block (only the fast ones with ``fast_only``) replaced; and the blocks changed."""
    found, produced = blocks(text), {}
    with tempfile.TemporaryDirectory(prefix="jacobiscope-readme-") as temp:
        cache: dict = {}
        for index, block in enumerate(found):
            if block.kind == "output" and not (fast_only and block.slow):
                produced[index] = produce(found, index, Path(temp), cache)
    lines, changed = text.split("\n"), []
    for index in sorted(produced, reverse=True):     # from the end, so earlier line numbers stay valid
        block = found[index]
        if produced[index] != block.body:
            changed.append(block)
            lines[block.start:block.end] = produced[index].split("\n") if produced[index] else []
    return "\n".join(lines), changed[::-1]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="rewrite nothing; exit 1 when an output differs")
    parser.add_argument("--fast", action="store_true", help="only the outputs not marked slow")
    parser.add_argument("--readme", type=Path, default=README, help="the file to regenerate (default: README.md)")
    args = parser.parse_args(argv)
    text = args.readme.read_text()
    new, changed = regenerate(text, fast_only=args.fast)
    for block in changed:
        print(f"{args.readme.name} line {block.line}: output of {block.source!r} "
              f"{'differs' if args.check else 'rewritten'}")
    if args.check:
        return 1 if changed else 0
    if new != text:
        temporary = args.readme.with_name(args.readme.name + ".tmp")
        temporary.write_text(new)
        temporary.replace(args.readme)
    print(f"{len(changed)} output(s) {'rewritten' if changed else 'already current'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
