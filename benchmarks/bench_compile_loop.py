"""Training steps of the reference solvers, eager against ``compile_loop=True`` (the loop body through
`torch.compile`), at the zoo's sizes: AKOrN N = 4, AKOrN N = 32 with the oscillator norm, ItrSA (64 channels,
4 heads), batch 64, 20 loops, one CPU thread.

Each round times ``--steps`` optimizer steps (forward, backward, AdamW) of each variant, alternating which runs first
so that load from other processes falls on both alike; the first compile is timed once and left out of the rounds.
Medians over rounds of the per-step seconds; the speed-up is eager / compiled.

Usage (from the repository root)::

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/bench_compile_loop.py --rounds 3

Prints a markdown table and writes benchmarks/out/compile_loop.json. Nothing is asserted: this script measures.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent


def _models():
    from jacobiscope.models import AKOrNConfig, AKOrNForSudoku, ItrSAConfig, ItrSAForSudoku

    return {
        "akorn N=4": lambda: AKOrNForSudoku(AKOrNConfig(hidden_size=64, num_heads=4, oscillator_dim=4, loops=16,
                                                        unit_embeddings=True)),
        "akorn N=32, oscillator norm": lambda: AKOrNForSudoku(AKOrNConfig(
            hidden_size=64, num_heads=4, oscillator_dim=32, loops=16, unit_embeddings=True, oscillator_norm=True)),
        "itrsa 64 ch, 4 heads": lambda: ItrSAForSudoku(ItrSAConfig(hidden_size=64, num_heads=4, loops=16,
                                                                   initializer_range=0.1)),
    }


def _batch(batch: int):
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 10, (batch, 81), generator=generator)
    labels = torch.randint(1, 10, (batch, 81), generator=generator)
    return ids, torch.where(ids > 0, ids, labels)


def _stepper(model, ids, labels, loops):
    optimizer = torch.optim.AdamW(model.parameters(), 1e-3)

    def step():
        out = model(ids, labels=labels, loops=loops)
        out.loss.backward()
        optimizer.step()
        optimizer.zero_grad()

    return step


def _seconds_per_step(step, steps: int) -> float:
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - start) / steps


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--loops", type=int, default=20)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    ids, labels = _batch(args.batch)
    results = {}
    for name, build in _models().items():
        torch.manual_seed(0)
        eager, compiled = build().train(), build().train()
        compiled.compile_loop = True
        steppers = {"eager": _stepper(eager, ids, labels, args.loops),
                    "compiled": _stepper(compiled, ids, labels, args.loops)}
        steppers["eager"]()   # warm-up
        start = time.perf_counter()
        steppers["compiled"]()  # the first compile
        first = time.perf_counter() - start
        times = {"eager": [], "compiled": []}
        for index in range(args.rounds):
            order = ("eager", "compiled") if index % 2 == 0 else ("compiled", "eager")
            for variant in order:
                times[variant].append(_seconds_per_step(steppers[variant], args.steps))
        eager_s, compiled_s = statistics.median(times["eager"]), statistics.median(times["compiled"])
        results[name] = {"eager_s": eager_s, "compiled_s": compiled_s, "speedup": eager_s / compiled_s,
                         "first_compile_s": first, "rounds": times}
        print(f"{name}: eager {eager_s:.3f} s, compiled {compiled_s:.3f} s a step ({eager_s / compiled_s:.2f}x); "
              f"first compile {first:.0f} s", flush=True)
    load = os.getloadavg()
    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "torch": torch.__version__,
            "machine": platform.machine(), "threads": torch.get_num_threads(), "load_1_5_15": load,
            "batch": args.batch, "loops": args.loops, "rounds": args.rounds, "steps_per_round": args.steps}
    print(f"\n{meta['date']}, torch {meta['torch']}, {meta['threads']} thread, load {load[0]:.1f}, batch "
          f"{args.batch}, {args.loops} loops, {args.rounds} rounds x {args.steps} steps (median)\n")
    print("| model | eager s / step | compiled s / step | speed-up | first compile |\n|---|---|---|---|---|")
    for name, r in results.items():
        print(f"| {name} | {r['eager_s']:.3f} | {r['compiled_s']:.3f} | {r['speedup']:.2f}x | "
              f"{r['first_compile_s']:.0f} s |")
    out = HERE / "out" / "compile_loop.json"
    out.parent.mkdir(exist_ok=True)
    temporary = out.with_suffix(".tmp")
    temporary.write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    temporary.replace(out)
    return results


if __name__ == "__main__":
    main()
