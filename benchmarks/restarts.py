"""Restart-and-select for the shipped solvers at matched compute: K starts per puzzle and an answer chosen by the
fixed-point residual (EqR), the pseudo-energy or the largest basin, against one run given the same loops.

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/restarts.py [--puzzles 200] [--restarts 16]

For each solver and set (SATNet test rows 0..; RRN test rows 0..; fresh generated puzzles with 22-34 givens; the
same puzzles for every rule): one call of
`jacobiscope.recipes.restart_select` with ``--restarts`` starts of ``--loops`` loops (+1 to read the residual), and
the selections among the first k starts (k = 1, 2, 4, ..., K) read from its stored residuals and energies. Matched
compute: the single run at k x (loops + 1) loops (`solve`). Board accuracy with 95% Wilson intervals; the paired
difference against the matched single run on the same puzzles, in puzzles, with its 95% bootstrap interval over the
puzzles and an exact McNemar test (two-sided binomial on the discordant puzzles); "oracle": any of the k starts right (the ceiling of a selection rule). Written to
benchmarks/out/restarts.json; printed as RESULTS.md rows.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch

SOLVERS = ("itrsa-sudoku", "itrsa-sudoku-general", "akorn-sudoku", "akorn-sudoku-general")
# Fresh puzzles: generated here with a seed of their own (not the cards' fresh set), RRN-like givens, so no solver
# saw them and the shipped sets' quirks cannot carry a result.
FRESH_GIVENS, FRESH_SEED = (22, 34), 20261203


def main() -> None:
    import jacobiscope
    from jacobiscope._proportions import exact_mcnemar, wilson_interval
    from jacobiscope.data import sudoku
    from jacobiscope.recipes import restart_select
    from jacobiscope.recipes._restarts import select_among
    from reproduction_stats import paired_difference  # beside this script

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--puzzles", type=int, default=200)
    parser.add_argument("--restarts", type=int, default=16)
    parser.add_argument("--loops", type=int, default=32)
    parser.add_argument("--noise", type=float, default=0.5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    _, satnet = sudoku.satnet_splits()
    rrn = sudoku.rrn_test(limit=args.puzzles)
    sets = {"SATNet test": (list(satnet["puzzle"][: args.puzzles]), list(satnet["solution"][: args.puzzles])),
            "RRN test": (list(rrn["puzzle"]), list(rrn["solution"])),
            "fresh": sudoku.generate_many(args.puzzles, givens=FRESH_GIVENS, seed=FRESH_SEED)}
    ks = [k for k in (1, 2, 4, 8, 16, 32, 64) if k <= args.restarts]
    path = Path(__file__).resolve().parent / "out" / f"restarts_{args.puzzles}x{args.restarts}x{args.loops}.json"
    out = json.loads(path.read_text()) if path.is_file() else {}
    print("| solver | set | k starts | compute (loops) | single run at that compute | residual | energy | basin | "
          "oracle | residual - single (McNemar p) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in SOLVERS:
        model = jacobiscope.load_pretrained(name).eval()
        for label, (puzzles, solutions) in sets.items():
            started = time.perf_counter()
            key = f"{name} / {label}"
            if key in out:
                continue  # measured by an earlier (interrupted) run: resumed, not redone
            picks = restart_select(model, puzzles, loops=args.loops, restarts=args.restarts, noise=args.noise)
            truth = sudoku.to_tensor(solutions)
            # the matched single runs, all from one trajectory per puzzle (solve_along reads out along one run)
            singles = model.solve_along(puzzles, loops=[k * (args.loops + 1) for k in ks])
            rows = []
            for k in ks:
                chosen = select_among(picks["all"][:, :k], picks["residuals"][:, :k], picks["energies"][:, :k])
                compute = k * (args.loops + 1)
                single = singles[compute]
                right = {rule: (chosen[rule] == truth).all(1) for rule in ("residual", "energy", "basin")}
                right["single"] = (single == truth).all(1)
                right["oracle"] = (picks["all"][:, :k] == truth.unsqueeze(1)).all(2).any(1)
                n = len(puzzles)
                b = int((right["residual"] & ~right["single"]).sum())
                c = int((~right["residual"] & right["single"]).sum())
                # The paired difference in puzzles of n with its 95% bootstrap interval over the puzzles.
                difference = paired_difference(right["residual"].double().numpy(), right["single"].double().numpy())
                row = {"k": k, "compute": compute, "n": n,
                       **{rule: {"accuracy": float(v.float().mean()), "interval": wilson_interval(int(v.sum()), n),
                                 "right": v.int().tolist()}
                          for rule, v in right.items()},
                       "residual_vs_single": {"better": b, "worse": c, "p": exact_mcnemar(b, c),
                                              "interval_puzzles": [n * difference.low, n * difference.high]}}
                rows.append(row)

                def cell(rule):
                    return f"{100 * row[rule]['accuracy']:.1f}%"

                low, high = row["residual_vs_single"]["interval_puzzles"]
                print(f"| {name} | {label} | {k} | {compute} | {cell('single')} | {cell('residual')} | "
                      f"{cell('energy')} | {cell('basin')} | {cell('oracle')} | {b - c:+d} puzzles "
                      f"[{low:+.0f}, {high:+.0f}] (p = {row['residual_vs_single']['p']:.2g}) |", flush=True)
            out[key] = {"rows": rows, "seconds": time.perf_counter() - started, "loops": args.loops,
                        "noise": args.noise, "puzzles": args.puzzles, "restarts": args.restarts}
            _save(path, out)


def _save(path: Path, out: dict) -> None:
    """After every (solver, set): a kill loses at most the one being measured."""
    path.parent.mkdir(exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(out, indent=1))
    os.replace(temporary, path)


if __name__ == "__main__":
    main()
