"""The loop-depth sweep of the shipped solvers: board accuracy at every loop count from one trajectory per puzzle.

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/bench_loop_depth.py [--puzzles 50] [--loops 128]

For each shipped checkpoint, `jacobiscope.analyze(..., diagnostics=["loop_depth"])` on SATNet test rows 9000.. (the
in-distribution test puzzles): each row's quality curve is solved-or-not at every loop; their mean is the board
accuracy against the loop count. Printed as RESULTS.md rows (accuracy at chosen loop counts, the peak and the first
loop past it below half the peak, the mean KL to the trained depth) and written to benchmarks/out/loop_depth.json.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

import jacobiscope
from jacobiscope.data import sudoku
from jacobiscope.hub import shipped_checkpoints

CHECKPOINTS = ("itrsa-sudoku", "akorn-sudoku")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--puzzles", type=int, default=50)
    parser.add_argument("--loops", type=int, default=128)
    args = parser.parse_args()
    _, test = sudoku.satnet_splits()
    puzzles = sudoku.to_tensor(list(test["puzzle"][: args.puzzles]))
    shown = [t for t in (1, 4, 8, 15, 16, 17, 32, 33, 64, 65, 128) if t <= args.loops]
    print("| checkpoint | " + " | ".join(f"T={t}" for t in shown) + " | peak | collapse | KL to trained depth at T=1 / 2x / max |")
    print("|---|" + "---|" * (len(shown) + 3))
    results = {}
    for name in CHECKPOINTS:
        if name not in shipped_checkpoints():
            continue
        model = jacobiscope.load_pretrained(name).eval()
        started = time.perf_counter()
        report = jacobiscope.analyze(model, puzzles, loops=args.loops, diagnostics=["loop_depth"], progress=False)
        sweeps = [row.diagnostic("loop_depth") for row in report.rows]
        accuracy = torch.tensor([sweep.quality for sweep in sweeps], dtype=torch.float64).mean(0)
        kl = torch.tensor([sweep.kl for sweep in sweeps], dtype=torch.float64).mean(0)
        peak = int(accuracy.argmax())
        collapse = next((t for t in range(peak + 1, len(accuracy)) if accuracy[t] < 0.5 * accuracy[peak]), None)
        trained = sweeps[0].reference_loop
        results[name] = {"accuracy": accuracy.tolist(), "kl": kl.tolist(), "peak_loop": peak,
                         "collapse_loop": collapse, "trained_loops": trained, "puzzles": len(sweeps),
                         "seconds": time.perf_counter() - started,
                         "regimes": [row.regime for row in report.rows]}
        twice = min(2 * trained, args.loops)
        print(f"| {name} (trained T={trained}) | " + " | ".join(f"{100 * accuracy[t]:.0f}%" for t in shown)
              + f" | T={peak}: {100 * accuracy[peak]:.0f}% | {collapse if collapse is not None else '-'} | "
              f"{kl[1]:.2f} / {kl[twice]:.3f} / {kl[-1]:.3f} |", flush=True)
    out = Path(__file__).resolve().parent / "out"
    out.mkdir(exist_ok=True)
    (out / "loop_depth.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
