"""The regime verdict's calibration table: every system at several loop counts, with the numbers behind it.

    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_regime.py [--loops 32 64 256 1024]

Each system is measured the way a user gets a verdict (`jacobiscope.measure` with the Lyapunov exponent, k=1; the
regime diagnostic reads the trajectory too) from the map's own ``x0``. Printed as a RESULTS.md table (verdict,
late-half exponent and its 95% half-width per loop count) and written to ``benchmarks/out/regime.json``. The same
systems are tests (tests/test_dynamics_regime.py::test_calibration_table) at the loop counts named there.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from test_dynamics_regime import CALIBRATION  # noqa: E402 - the one table, shared with the tests

import jacobiscope  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loops", type=int, nargs="+", default=[32, 64, 256, 1024])
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    torch.manual_seed(0)
    results = {}
    print("| system | expected | " + " | ".join(f"T={t}" for t in args.loops) + " |")
    print("|---|---|" + "---|" * len(args.loops))
    for name, (make, expected, period, _, _) in CALIBRATION.items():
        cells, results[name] = [], {}
        for loops in args.loops:
            started = time.perf_counter()
            row = jacobiscope.measure(make(), loops=loops, k=1, diagnostics=["lyapunov"])
            evidence = row.evidence
            late, width = evidence.get("lambda_late", math.nan), evidence.get("lambda_half_width", math.nan)
            verdict = row.regime + (f" p={evidence['period']}" if evidence.get("period") else "")
            cells.append(f"{verdict} ({late:+.3f} +/- {width:.2g})")
            results[name][loops] = {"regime": row.regime, "period": evidence.get("period", 0), "lambda_late": late,
                                    "half_width": width, "drift": evidence.get("lambda_drift"),
                                    "seconds": time.perf_counter() - started, "reason": evidence["reason"]}
        wanted = expected + (f" p={period}" if period else "")
        print(f"| {name} | {wanted} | " + " | ".join(cells) + " |", flush=True)
    out = Path(__file__).resolve().parent / "out"
    out.mkdir(exist_ok=True)
    (out / "regime.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
