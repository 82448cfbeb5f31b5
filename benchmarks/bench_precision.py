"""Benchmark: Sudoku training throughput in fp32 against bf16 autocast on this CPU (AVX-512 + AMX).

    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/bench_precision.py [--steps 8] [--rounds 3]

One full optimizer step (forward over T=16 loops, backward, Adam, clipping) on real SATNet training puzzles, for
ItrSA and AKOrN at 128 and 512 channels, batch 64, in fp32 and under ``torch.autocast("cpu", dtype=torch.bfloat16)``
(weights and optimizer in fp32, as `SudokuRecipe(bf16=True)` trains). Rounds interleave the two precisions so that
drifting load hits both alike; the median ms/step is reported with the speed-up, plus the relative difference of
the first step's loss (what bf16 changes numerically). Also a plain 512x512 matmul in both precisions. Writes
benchmarks/out/precision.json and prints markdown rows.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch


def _matmul_ms(dtype, size=512, repeats=200) -> float:
    a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    for _ in range(10):
        a @ b
    started = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 1e3 * (time.perf_counter() - started) / repeats


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sizes", default="128,512")
    args = parser.parse_args()

    from jacobiscope.data import sudoku as data
    from jacobiscope.recipes.sudoku import SudokuRecipe, build_model

    train, _ = data.satnet_splits()
    inputs = train.with_format("torch")[:512]
    record = {"machine": {"platform": platform.platform(), "cpu_count": os.cpu_count(),
                          "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
                          "loadavg_start": os.getloadavg()},
              "matmul_512_ms": {"fp32": _matmul_ms(torch.float32), "bf16": _matmul_ms(torch.bfloat16)}, "cases": []}
    print(f"| 512x512 matmul | fp32 {record['matmul_512_ms']['fp32']:.3f} ms | bf16 "
          f"{record['matmul_512_ms']['bf16']:.3f} ms | x{record['matmul_512_ms']['fp32'] / record['matmul_512_ms']['bf16']:.2f} |")
    for hidden in (int(s) for s in args.sizes.split(",")):
        for arch in ("itrsa", "akorn"):
            times = {"fp32": [], "bf16": []}
            first_loss = {}
            for round_index in range(args.rounds):
                for precision in ("fp32", "bf16"):
                    torch.manual_seed(0)
                    model = build_model(SudokuRecipe(arch=arch, hidden_size=hidden, num_heads=8, loops=16))
                    optimizer = torch.optim.Adam(model.parameters(), 1e-3)
                    model.train()
                    autocast = (torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16"
                                else contextlib.nullcontext())

                    def step(start):
                        with autocast:
                            loss = model(inputs["input_ids"][start : start + 64], labels=inputs["labels"][start : start + 64]).loss
                        loss.backward()
                        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                        optimizer.step()
                        optimizer.zero_grad()
                        return float(loss.detach())

                    first_loss[precision] = step(0)  # warm-up, and the loss at identical weights
                    started = time.perf_counter()
                    for index in range(args.steps):
                        step((index * 64) % 448)
                    times[precision].append(1e3 * (time.perf_counter() - started) / args.steps)
            fp32, bf16 = statistics.median(times["fp32"]), statistics.median(times["bf16"])
            case = {"arch": arch, "hidden_size": hidden, "batch_size": 64, "loops": 16, "fp32_ms_per_step": fp32,
                    "bf16_ms_per_step": bf16, "speedup": fp32 / bf16, "rounds": times,
                    "first_loss_relative_difference": abs(first_loss["bf16"] - first_loss["fp32"]) / first_loss["fp32"]}
            record["cases"].append(case)
            print(f"| {arch} | {hidden} | {fp32:.0f} ({64e3 / fp32:.0f} puzzles/s) | {bf16:.0f} ({64e3 / bf16:.0f} puzzles/s) "
                  f"| x{fp32 / bf16:.2f} | {case['first_loss_relative_difference']:.1e} |", flush=True)
    record["machine"]["loadavg_end"] = os.getloadavg()
    out = Path(__file__).parent / "out"
    out.mkdir(exist_ok=True)
    (out / "precision.json").write_text(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
