"""How fast the command line answers: --help, --version, a user error, and the main job's analysis.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/bench_cli.py [--repeats 7]

Each case runs the installed ``jacobiscope`` entry point in a fresh process (what a user waits for, interpreter
start included) ``--repeats`` times; the median and the range are printed as RESULTS.md rows and written to
``benchmarks/out/cli.json``. The machine's load average is recorded before and after.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

CASES = [
    ("jacobiscope --help", ["--help"], 0, 1.0),
    ("jacobiscope --version", ["--version"], 0, 1.0),
    ("jacobiscope analyze --help", ["analyze", "--help"], 0, 1.0),
    ("bad number: analyze itrsa-sudoku --loops 0", ["analyze", "itrsa-sudoku", "--loops", "0"], 2, 1.0),
    ("unknown name: analyze no-such-model (offline refusal)", ["analyze", "no-such-model"], 2, None),
    ("main job analysis: analyze itrsa-sudoku --loops 32 --out report.html",
     ["analyze", "itrsa-sudoku", "--loops", "32", "--out", "{tmp}/report.html", "--quiet"], 0, None),
]


def _entry_point() -> list[str]:
    script = Path(sys.executable).with_name("jacobiscope")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "jacobiscope"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    out_dir = Path(__file__).resolve().parent / "out"
    out_dir.mkdir(exist_ok=True)
    tmp = out_dir / "cli-tmp"
    tmp.mkdir(exist_ok=True)
    environment = dict(os.environ, HF_HUB_OFFLINE="1", OPENBLAS_NUM_THREADS="1")
    record = {"machine": {"cpu_count": os.cpu_count(), "python": platform.python_version(),
                          "load_before": os.getloadavg()}, "cases": []}
    for name, argv, expected, target in CASES:
        argv = [item.replace("{tmp}", str(tmp)) for item in argv]
        repeats = args.repeats if target is not None else max(1, args.repeats // 3)
        seconds = []
        for _ in range(repeats):
            started = time.perf_counter()
            result = subprocess.run(_entry_point() + argv, capture_output=True, text=True, env=environment)
            seconds.append(time.perf_counter() - started)
            if result.returncode != expected:
                raise SystemExit(f"{name}: exit {result.returncode}, expected {expected}\n{result.stderr}")
        median = statistics.median(seconds)
        verdict = "" if target is None else ("PASS" if median < target else "MISS")
        record["cases"].append({"case": name, "median_s": median, "min_s": min(seconds), "max_s": max(seconds),
                                "repeats": repeats, "target_s": target, "verdict": verdict})
        bound = f"< {target:g} s" if target is not None else ""
        print(f"| {name} | {median:.3f} s (min {min(seconds):.3f}, max {max(seconds):.3f}, n={repeats}) | {bound} "
              f"| {verdict} |", flush=True)
    record["machine"]["load_after"] = os.getloadavg()
    shutil.rmtree(tmp, ignore_errors=True)
    (out_dir / "cli.json").write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
