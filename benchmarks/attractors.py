"""The attractor census of the shipped Sudoku solvers: how many attractors noised starts reach per puzzle, fixed
points or cycles, and whether the solution is the most stable one.

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/attractors.py [--puzzles 12] [--starts 32]

For each solver and each of ``--puzzles`` SATNet test puzzles: `jacobiscope.analyze(..., diagnostics=
["attractors"])` with ``--starts`` noised starts (noise ``--noise`` x rms(x0)) run ``--loops`` loops (default 4x the
trained depth, so the end states have settled), cycles up to period 8. The solver's own quality score (solved or
not) marks the correct attractor. Printed as RESULTS.md rows; written to benchmarks/out/attractors.json.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

SOLVERS = ("itrsa-sudoku", "itrsa-sudoku-general", "akorn-sudoku", "akorn-sudoku-general")


def census(name: str, puzzles, starts: int, noise: float, loops: int | None, settle: float, rtol: float) -> dict:
    import jacobiscope

    model = jacobiscope.load_pretrained(name).eval()
    loops = loops or 4 * int(model.config.loops)
    started = time.perf_counter()
    report = jacobiscope.analyze(model, puzzles, loops=loops, diagnostics=["attractors"], progress=False,
                                 options={"attractor_starts": starts, "attractor_noise": noise,
                                          "attractor_settle_rtol": settle, "attractor_rtol": rtol})
    results = [row.results["attractors"] for row in report.rows]
    return {"name": name, "loops": loops, "starts": starts, "noise": noise, "settle": settle, "rtol": rtol,
            "puzzles": len(results),
            "seconds": time.perf_counter() - started, "census": [r.to_dict() for r in results]}


def summarize(data: dict) -> dict:
    rows = data["census"]
    kinds = {"fixed point": 0, "cycle": 0, "unsettled": 0}
    for r in rows:
        for a in r["attractors"]:
            kinds[a["kind"]] += 1
    counts = [len(r["attractors"]) for r in rows]
    correct = [r["correct_fraction"] for r in rows if r["correct_fraction"] is not None]
    any_correct = [r for r in rows if any(a["correct"] for a in r["attractors"])]
    stable = [r["correct_is_most_stable"] for r in any_correct if r["correct_is_most_stable"]]
    own_correct = sum(1 for r in rows if any(a["own"] and a["correct"] for a in r["attractors"]))
    return {"name": data["name"], "puzzles": len(rows), "loops": data["loops"], "starts": data["starts"],
            "settle": data["settle"], "rtol": data["rtol"],
            "noise": data["noise"], "seconds": data["seconds"],
            "attractors_median": statistics.median(counts), "attractors_range": [min(counts), max(counts)],
            "kinds": kinds, "correct_fraction_mean": statistics.mean(correct) if correct else None,
            "puzzles_with_a_correct_attractor": len(any_correct), "own_run_correct": own_correct,
            "correct_largest_basin": sum(s["largest_basin"] for s in stable),
            "correct_smallest_residual": sum(s["smallest_residual"] for s in stable),
            "correct_smallest_radius": sum(s["smallest_spectral_radius"] for s in stable),
            "with_stability": len(stable),
            "radii": [a["spectral_radius"] for r in rows for a in r["attractors"]
                      if a["kind"] != "unsettled" and a["spectral_radius"] is not None]}


def main() -> None:
    from jacobiscope.data import sudoku
    from jacobiscope.hub import shipped_checkpoints

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--puzzles", type=int, default=12)
    parser.add_argument("--starts", type=int, default=32)
    parser.add_argument("--noise", type=float, default=0.5)
    parser.add_argument("--loops", type=int, default=None)
    parser.add_argument("--settle", type=float, default=1e-4, help="return residual that counts as settled")
    parser.add_argument("--rtol", type=float, default=1e-2, help="distance under which two end states are one")
    args = parser.parse_args()
    torch.set_num_threads(1)
    _, test = sudoku.satnet_splits()
    puzzles = sudoku.to_tensor(list(test["puzzle"][: args.puzzles]))
    out, summaries = [], []
    for name in SOLVERS:
        if name not in shipped_checkpoints():
            continue
        data = census(name, puzzles, args.starts, args.noise, args.loops, args.settle, args.rtol)
        out.append(data)
        summaries.append(summarize(data))
        print(f"{name}: {data['seconds']:.0f} s", flush=True)
    print("\n| solver | puzzles x starts | loops | attractors per puzzle (median, range) | fixed points / cycles / "
          "unsettled | starts on a solution (mean) | own run on a solution | solution first by basin / residual / "
          "Floquet radius |")
    print("|---|---|---|---|---|---|---|---|")
    for s in summaries:
        k = s["kinds"]
        share = "-" if s["correct_fraction_mean"] is None else f"{100 * s['correct_fraction_mean']:.0f}%"
        print(f"| {s['name']} | {s['puzzles']} x {s['starts']} (noise {s['noise']}, settled at {s['settle']:g}) | "
              f"{s['loops']} | "
              f"{s['attractors_median']:g} ({s['attractors_range'][0]}-{s['attractors_range'][1]}) | "
              f"{k['fixed point']} / {k['cycle']} / {k['unsettled']} | {share} | {s['own_run_correct']}/{s['puzzles']} | "
              f"{s['correct_largest_basin']} / {s['correct_smallest_residual']} / {s['correct_smallest_radius']} of "
              f"{s['with_stability']} |")
    folder = Path(__file__).resolve().parent / "out"
    folder.mkdir(exist_ok=True)
    name = f"attractors_settle{args.settle:g}.json"
    (folder / name).write_text(json.dumps({"summaries": summaries, "runs": out}, indent=1))


if __name__ == "__main__":
    main()
