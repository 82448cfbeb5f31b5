"""Benchmark: training and evaluation throughput of the reference Sudoku solvers (ItrSA, AKOrN).

    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/bench_sudoku.py [--steps 20] [--hidden 128]

Training: puzzles/s of a full optimizer step (forward over T=16 loops, backward, Adam, gradient clipping) at batch
64 on real SATNet training puzzles. Evaluation: puzzles/s of `model.solve` at 16/32/64/128 loops (batch 500), and
with K=16 energy votes for AKOrN. Random weights: throughput does not depend on them. Writes
benchmarks/out/sudoku.json and prints a markdown table.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import torch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--eval-puzzles", type=int, default=500)
    args = parser.parse_args()

    from jacobiscope.data import sudoku as data
    from jacobiscope.recipes.sudoku import SudokuRecipe, build_model

    train, test = data.satnet_splits()
    inputs = train.with_format("torch")[:512]
    puzzles = data.to_tensor(list(test.select(range(args.eval_puzzles))["puzzle"]))
    record = {"hidden_size": args.hidden, "batch_size": 64, "loops_train": 16, "results": {},
              "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count(),
                          "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
                          "loadavg_start": os.getloadavg()}}
    for arch in ("itrsa", "akorn"):
        torch.manual_seed(0)
        model = build_model(SudokuRecipe(arch=arch, hidden_size=args.hidden, num_heads=8, loops=16))
        optimizer = torch.optim.Adam(model.parameters(), 1e-3)
        model.train()

        def train_step(start):
            batch_ids = inputs["input_ids"][start : start + 64]
            batch_labels = inputs["labels"][start : start + 64]
            loss = model(batch_ids, labels=batch_labels).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad()

        train_step(0)  # warm-up
        started = time.perf_counter()
        for step in range(args.steps):
            train_step((step * 64) % 448)
        seconds = time.perf_counter() - started
        result = {"parameters": sum(p.numel() for p in model.parameters()),
                  "train_puzzles_per_second": args.steps * 64 / seconds,
                  "train_seconds_per_step": seconds / args.steps, "eval": {}}
        model.eval()
        for loops in (16, 32, 64, 128):
            started = time.perf_counter()
            model.solve(puzzles, loops=loops)
            result["eval"][str(loops)] = len(puzzles) / (time.perf_counter() - started)
        if arch == "akorn":
            subset = puzzles[:100]
            started = time.perf_counter()
            model.solve(subset, loops=16, votes=16, batch_size=800)
            result["eval"]["16 (K=16 votes)"] = len(subset) / (time.perf_counter() - started)
        record["results"][arch] = result
        print(arch, json.dumps(result), flush=True)
    record["machine"]["loadavg_end"] = os.getloadavg()
    out = Path(__file__).parent / "out"
    out.mkdir(exist_ok=True)
    (out / "sudoku.json").write_text(json.dumps(record, indent=2))
    print("| model | params | train puzzles/s (batch 64, T=16) | eval puzzles/s T=16 / 32 / 64 / 128 | K=16 votes, T=16 |")
    print("|---|---|---|---|---|")
    for arch, result in record["results"].items():
        evals = " / ".join(f"{result['eval'][str(t)]:.0f}" for t in (16, 32, 64, 128))
        votes = f"{result['eval'].get('16 (K=16 votes)', float('nan')):.1f}" if arch == "akorn" else "-"
        print(f"| {arch} | {result['parameters']:,} | {result['train_puzzles_per_second']:.0f} | {evals} | {votes} |")


if __name__ == "__main__":
    main()
