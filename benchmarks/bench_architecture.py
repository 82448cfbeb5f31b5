"""Issue 29: what the one-protocol architecture costs and what it removed.

Measures, on this machine (threads and load printed):
  * reports: JSON size, `Report.from_json` and render (`summary`, `to_dataframe`) times for the same rows written in
    format 1 (the fixture written by that release, replicated to N rows) and in format 2 (as written now);
    interleaved rounds, medians;
  * `import jacobiscope` and `import jacobiscope.diagnostics` wall time in fresh interpreters (median of rounds);
  * `analyze` on a tiny GPT-2, against the release before issue 29 when its worktree is given (``--old-tree``);
  * the package's shape: modules, largest module and function (code lines, docstrings aside), upward imports,
    Python lines under hub_configs/, exception classes outside jacobiscope/errors.py.

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_architecture.py [--rows 200] [--rounds 7] [--old-tree DIR]
"""
from __future__ import annotations

import argparse
import ast
import copy
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))


def _replicated_format1(rows: int) -> str:
    document = json.loads((ROOT / "tests/fixtures/reports/format1.json").read_text(encoding="utf-8"))
    base = document["rows"]
    document["rows"] = [dict(copy.deepcopy(base[i % len(base)]), input_index=i) for i in range(rows)]
    nonfinite = {}
    for pointer, kind in document["nonfinite"].items():
        parts = pointer.split("/")
        if parts[1] == "rows":
            for i in range(int(parts[2]), rows, len(base)):
                nonfinite["/".join(parts[:2] + [str(i)] + parts[3:])] = kind
        else:
            nonfinite[pointer] = kind
    document["nonfinite"] = nonfinite
    return json.dumps(document, indent=2)


def _timed(function, rounds: int) -> float:
    return statistics.median([_once(function) for _ in range(rounds)])


def _once(function) -> float:
    started = time.perf_counter()
    function()
    return time.perf_counter() - started


def bench_reports(rows: int, rounds: int) -> dict:
    from test_report_formats import FinalNorm

    import jacobiscope
    from jacobiscope.report import Report

    jacobiscope.register_diagnostic(FinalNorm())
    old_text = _replicated_format1(rows)
    new_text = Report.from_json(old_text).to_json()
    assert Report.from_json(new_text) == Report.from_json(old_text)
    times = {"format 1": [], "format 2": []}
    for _ in range(rounds):  # interleaved: the two formats see the same machine state
        for name, text in (("format 1", old_text), ("format 2", new_text)):
            times[name].append(_once(lambda: Report.from_json(text)))
    report = Report.from_json(new_text)
    return {
        "rows": rows,
        "bytes": {"format 1": len(old_text.encode()), "format 2": len(new_text.encode())},
        "from_json_ms": {name: 1000 * statistics.median(values) for name, values in times.items()},
        "summary_ms": 1000 * _timed(report.summary, rounds),
        "to_dataframe_ms": 1000 * _timed(report.to_dataframe, rounds),
    }


def bench_imports(rounds: int) -> dict:
    out = {}
    for module in ("torch", "jacobiscope", "jacobiscope.diagnostics"):
        code = f"import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"
        values = [float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                       check=True).stdout) for _ in range(rounds)]
        out[module] = 1000 * statistics.median(values)
    return out


_ANALYZE = """
import statistics, sys, time, torch, transformers, jacobiscope
torch.manual_seed(0)
model = transformers.GPT2Model(transformers.GPT2Config(n_embd=32, n_layer=4, n_head=2, vocab_size=100)).eval()
ids = torch.randint(0, 100, (2, 12))
jacobiscope.analyze(model, ids, loops=4, progress=False)  # warm-up
times = []
for _ in range(int(sys.argv[1])):
    t = time.perf_counter(); jacobiscope.analyze(model, ids, loops=8, progress=False); times.append(time.perf_counter() - t)
print(statistics.median(times))
"""


def bench_analyze(old_tree: str | None, rounds: int) -> dict:
    """`analyze` on a 4-block GPT-2 (2 inputs x 4 layers, loops=8, default diagnostics): this tree against the
    release before issue 29 (a git worktree at ``old_tree``), alternating processes, median of medians."""
    trees = {"now": str(ROOT)} | ({"before issue 29": old_tree} if old_tree else {})
    samples = {name: [] for name in trees}
    for _ in range(rounds):
        for name, tree in trees.items():
            env = dict(os.environ, PYTHONPATH=tree)
            done = subprocess.run([sys.executable, "-c", _ANALYZE, "3"], capture_output=True, text=True, env=env,
                                  cwd=tree, check=True)
            samples[name].append(float(done.stdout.split()[-1]))
    return {name: 1000 * statistics.median(values) for name, values in samples.items()}


def shape() -> dict:
    from test_architecture import _code_lines, _imported, _layer, _module_name, _sources

    modules, biggest, longest, upward, errors_elsewhere = 0, (0, ""), (0, ""), 0, []
    for path in _sources():
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
        modules += 1
        exempt = "models" in path.parts
        if not exempt:
            biggest = max(biggest, (len(text.splitlines()), str(path.relative_to(ROOT))))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not exempt:
                longest = max(longest, (_code_lines(node), f"{path.relative_to(ROOT)}:{node.name}"))
            if isinstance(node, ast.ClassDef) and path.name != "errors.py" and not exempt and any(
                    getattr(base, "id", getattr(base, "attr", "")).endswith(("Error", "Warning")) for base in node.bases):
                errors_elsewhere.append(f"{path.relative_to(ROOT)}:{node.name}")
        module = _module_name(path)
        own = _layer(module)
        upward += sum(1 for target, _ in _imported(path, module)
                      if own is not None and _layer(target) is not None and _layer(target) > own)
    hub_python = sum(len(p.read_text().splitlines()) for p in (ROOT / "hub_configs").rglob("*.py"))
    return {"modules": modules, "largest_module": biggest, "longest_function": longest, "upward_imports": upward,
            "hub_configs_python_lines": hub_python, "exception_classes_outside_errors": errors_elsewhere}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--old-tree", default=None, help="a worktree of the release before issue 29 "
                        "(git worktree add /tmp/before 3fec199) to time analyze against")
    args = parser.parse_args()
    import torch

    print(f"# threads: torch {torch.get_num_threads()}, OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}"
          f"; load average {os.getloadavg()}")
    result = {"reports": bench_reports(args.rows, args.rounds), "imports_ms": bench_imports(args.rounds),
              "analyze_ms": bench_analyze(args.old_tree, max(3, args.rounds // 2)), "shape": shape()}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
