"""Which path the default Lyapunov run takes, call after call, when runs of another k are mixed in (issue 34).

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/bench_path_policy.py [--calls 11]

On the 81 x 128 ItrSA-form attention map of bench_cost.py (fp32), after one short run on an unrelated map (torch's
one-off start-up), alternate a short top-1 run (T = 50: its own eager time is below what a trace costs) and a top-16
run (T = 200), both with the default path policy, and print for each call its path (eager / traced) and its time as
a multiple of the plain forward of as many loops. Before issue 34
the policy kept one eager-time counter per process, reset by any trace: the k = 16 runs' traces kept the k = 1 runs
eager (11 of 11 calls). Timings, not assertions.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch

import jacobiscope as js

HERE = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=11)
    parser.add_argument("--loops", type=int, default=200, help="loops of the k = 16 runs and of the forward unit")
    parser.add_argument("--short-loops", type=int, default=50,
                        help="loops of the k = 1 runs: short ones, whose own eager time is below a trace's cost")
    args = parser.parse_args()
    torch.set_num_threads(1)
    warm = js.systems.self_attention_map(tokens=9, dim=16, heads=2, seed=1)
    js.lyapunov_spectrum(warm, warm.x0, steps=8, k=2)   # torch's one-off start-up, on an unrelated map
    m = js.systems.self_attention_map(tokens=81, dim=128, heads=8, eta=1.0, norm="rmsnorm", seed=0)
    x = m.trajectory(m.x0, steps=8)[-1].clone()
    forward = []
    for _ in range(3):
        started = time.perf_counter()
        with torch.no_grad():
            y = x
            for _ in range(args.loops):
                y = m(y)
        forward.append(time.perf_counter() - started)
    unit = sorted(forward)[1]
    rows = []
    for call in range(args.calls):
        for k, loops in ((1, args.short_loops), (16, args.loops)):
            started = time.perf_counter()
            result = js.lyapunov_spectrum(m, x, steps=loops, k=k)
            seconds = time.perf_counter() - started
            ratio = seconds / (unit * loops / args.loops)   # against the forward of as many loops
            rows.append({"call": call + 1, "k": k, "loops": loops, "path": result.meta["tangent_path"],
                         "seconds": seconds, "x_forward": ratio})
            print(f"call {call + 1:2d} k={k:2d} T={loops:3d}: {result.meta['tangent_path']:8s} {seconds:6.2f} s "
                  f"({ratio:5.1f}x the forward)", flush=True)
    # a new map of the same structure (the next layer of a model: other weights): its first call
    twin = js.systems.self_attention_map(tokens=81, dim=128, heads=8, eta=1.0, norm="rmsnorm", seed=1)
    started = time.perf_counter()
    result = js.lyapunov_spectrum(twin, x, steps=args.short_loops, k=1)
    seconds = time.perf_counter() - started
    ratio = seconds / (unit * args.short_loops / args.loops)
    rows.append({"call": "first on a same-structure map", "k": 1, "loops": args.short_loops,
                 "path": result.meta["tangent_path"], "seconds": seconds, "x_forward": ratio})
    print(f"first call on a map of the same structure, k= 1 T={args.short_loops:3d}: {result.meta['tangent_path']:8s} "
          f"{seconds:6.2f} s ({ratio:5.1f}x the forward)", flush=True)
    out = {"loops": args.loops, "forward_seconds": unit, "load": os.getloadavg(), "rows": rows}
    (HERE / "out").mkdir(exist_ok=True)
    (HERE / "out" / "path_policy.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
