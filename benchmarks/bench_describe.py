"""How close `describe`'s estimate comes to the `analyze` run it plans, before and after a change (issue 34).

Cases (as benchmarks/bench_analyze_cost.py builds them): ``minilm`` (the real all-MiniLM-L6-v2, layers 0-1, 128
random tokens, 32 loops, default diagnostics), ``hrm-text`` / ``dory`` (the shipped trained looped LMs through their
own loop, 32 loops), ``itrsa`` (the shipped Sudoku solver ``itrsa-sudoku`` on one SATNet test puzzle, 32 loops).

Each round runs every variant in a fresh subprocess (alternating order, so load from other processes hits both
alike). In a subprocess: torch warms up on an unrelated map, then `describe` runs (timed), then the `analyze` it
plans (timed; per diagnostic from ``row.timings``). The ratio estimate / measured is what a user planning a run
gets: 1.0 is exact, 2.0 means the run took half the estimate. ``--before REF`` exports that commit's package as
bench_analyze_cost.py does.

Usage (from the repository root)::

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/bench_describe.py --before f85277b

Prints a markdown table and writes benchmarks/out/describe.json. Nothing is asserted: this script measures.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_analyze_cost import (  # noqa: E402
    MARK, _export, _minilm, _native, _warm_up_torch, run_script_child,
)

CASES = ("minilm", "hrm-text", "dory", "itrsa")


def _itrsa():
    import torch

    from jacobiscope.data import sudoku
    from jacobiscope.hub import load_pretrained

    model = load_pretrained("itrsa-sudoku").eval()
    _, test = sudoku.satnet_splits()
    return model, [test[0]["puzzle"]] if isinstance(test[0]["puzzle"], str) else torch.tensor([test[0]["input_ids"]])


def child(case: str) -> dict:
    import torch

    import jacobiscope

    warnings.simplefilter("ignore")
    _warm_up_torch()
    options = {"loops": 32}
    if case == "minilm":
        (model, inputs), options["layers"] = _minilm(), [0, 1]
    elif case == "itrsa":
        model, inputs = _itrsa()
    else:
        model, inputs, _ = _native({"hrm-text": "hrm-text-addition", "dory": "dory-addition"}[case])
    start = time.perf_counter()
    plans = jacobiscope.describe(model, inputs, **options)
    describe_seconds = time.perf_counter() - start
    start = time.perf_counter()
    report = jacobiscope.analyze(model, inputs, progress=False, **options)
    measured = time.perf_counter() - start
    estimated_per, measured_per = {}, {}
    for plan in plans:
        for name, seconds in (plan.per_diagnostic_seconds or {}).items():
            estimated_per[name] = estimated_per.get(name, 0.0) + seconds
    for row in report.rows:
        for name, seconds in (row.timings or {}).items():
            measured_per[name] = measured_per.get(name, 0.0) + seconds
    return {"case": case, "threads": torch.get_num_threads(), "describe_seconds": describe_seconds,
            "estimated_seconds": plans.total_seconds, "analyze_seconds": measured,
            "estimated_per": estimated_per, "measured_per": measured_per,
            "paths": sorted({getattr(plan, "product_path", "eager") for plan in plans})}


def _run_child(case: str, path: Path) -> dict:
    return run_script_child(__file__, [case], path, case)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--child")
    parser.add_argument("--before", default=None, help="git commit of the 'before' column")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES)
    args = parser.parse_args()
    if args.child:
        print(MARK + json.dumps(child(args.child)), flush=True)
        return
    variants = {"before": _export(args.before), "after": HERE.parent} if args.before else {"after": HERE.parent}
    load_start, runs = os.getloadavg(), []
    for round_index in range(args.rounds):
        order = list(variants) if round_index % 2 == 0 else list(variants)[::-1]
        for case in args.cases:
            for variant in order:
                record = _run_child(case, variants[variant])
                record.update(variant=variant, round=round_index)
                runs.append(record)
                print(f"round {round_index} {variant:6s} {case}: estimate {record['estimated_seconds']:.2f} s, "
                      f"analyze {record['analyze_seconds']:.2f} s, describe {record['describe_seconds']:.2f} s",
                      flush=True)
    record = {"benchmark": "describe", "before": args.before, "rounds": args.rounds, "runs": runs,
              "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count(),
                          "loadavg_start": load_start, "loadavg_end": os.getloadavg(),
                          "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS")}}
    (HERE / "out").mkdir(exist_ok=True)
    (HERE / "out" / "describe.json").write_text(json.dumps(record, indent=2))
    print("| case | " + " | ".join(f"{v}: estimate / analyze (ratio), describe's own time" for v in variants) + " |")
    print("|---|" + "---|" * len(variants))
    for case in args.cases:
        cells = []
        for variant in variants:
            mine = [r for r in runs if r["case"] == case and r["variant"] == variant]
            estimate = statistics.median(r["estimated_seconds"] for r in mine)
            measured = statistics.median(r["analyze_seconds"] for r in mine)
            ratio = statistics.median(r["estimated_seconds"] / r["analyze_seconds"] for r in mine)
            own = statistics.median(r["describe_seconds"] for r in mine)
            cells.append(f"{estimate:.2f} s / {measured:.2f} s ({ratio:.2f}), {own:.2f} s")
        print(f"| {case} | " + " | ".join(cells) + " |")
    print("\nper diagnostic, median ratio estimate / measured:")
    for case in args.cases:
        for variant in variants:
            mine = [r for r in runs if r["case"] == case and r["variant"] == variant]
            names = sorted(set(mine[0]["estimated_per"]) & set(mine[0]["measured_per"]))
            ratios = {n: statistics.median(r["estimated_per"][n] / max(r["measured_per"][n], 1e-9) for r in mine)
                      for n in names if mine[0]["measured_per"][n] > 1e-3}
            print(f"  {case} {variant}: " + ", ".join(f"{n} {v:.2f}" for n, v in ratios.items()))


if __name__ == "__main__":
    main()
