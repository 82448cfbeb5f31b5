"""Finite-time exponent spread over 8 starts and the per-example correlation of lambda_max with solved, on the
shipped Sudoku solvers: 30 SATNet test puzzles (rows 9000-9029) and 30 fresh generated ones (31-42 givens),
T = 16 and 32. Writes JSON to the path given as the first argument."""
import json
import statistics
import sys
import time

import torch

import jacobiscope
from jacobiscope.data import sudoku
from jacobiscope.recipes.shipping import FRESH_SEED

torch.set_num_threads(1)
_, test = sudoku.satnet_splits(limit=None)
SETS = {"satnet": list(test["puzzle"][:30]),
        "fresh": sudoku.generate_many(30, givens=(31, 42), seed=FRESH_SEED)[0]}
out = {}
for name in ("itrsa-sudoku", "akorn-sudoku"):
    model = jacobiscope.load_pretrained(name).eval()
    for loops in (16, 32):
        pooled_rows = []
        for split, puzzles in SETS.items():
            started = time.perf_counter()
            table = jacobiscope.recipes.per_example(model, puzzles, loops=loops, progress=False)
            per_example_seconds = time.perf_counter() - started
            started = time.perf_counter()
            spreads = []
            for puzzle in puzzles:
                looped = model.loop_map(model.loop_inputs([puzzle]))
                ft = jacobiscope.finite_time_exponents(looped, looped.x0, loops=loops, starts=8)
                spreads.append({"mean": float(ft.mean[0, 0]), "std": float(ft.std[0, 0]),
                                "spread": float(ft.spread[0, 0])})
            finite_seconds = time.perf_counter() - started
            stderr = [row.lambda_stderr for row in table.rows]
            key = f"{name} T={loops} {split}"
            out[key] = {"summary": table.summary.__dict__, "rows": [row.__dict__ for row in table.rows],
                        "finite_time": spreads, "per_example_seconds": per_example_seconds,
                        "finite_time_seconds": finite_seconds,
                        "median_std_over_starts": statistics.median(s["std"] for s in spreads),
                        "max_std_over_starts": max(s["std"] for s in spreads),
                        "median_spread": statistics.median(s["spread"] for s in spreads),
                        "median_engine_stderr": statistics.median(stderr),
                        "max_abs_mean_minus_lambda_max": max(abs(s["mean"] - row.lambda_max)
                                                             for s, row in zip(spreads, table.rows))}
            pooled_rows += table.rows
            print(key, table.summary.sentence(), f"median std over starts {out[key]['median_std_over_starts']:.3g}",
                  f"({per_example_seconds:.0f} s + {finite_seconds:.0f} s)", flush=True)
        from jacobiscope._per_example import point_biserial
        pooled = point_biserial([r.lambda_max for r in pooled_rows], [r.solved for r in pooled_rows],
                                statistic="lambda_max")
        out[f"{name} T={loops} pooled"] = {"summary": pooled.__dict__}
        print(f"{name} T={loops} pooled", pooled.sentence(), flush=True)
with open(sys.argv[1], "w") as handle:
    json.dump(out, handle, indent=1, default=str)
