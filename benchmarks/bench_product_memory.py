"""Peak memory and time of a dense Jacobian whose block is far larger inside than its state, with the batched rows
cut to what fits (`jacobiscope.linalg._product_memory`) and uncut (all rows in one vmap call, as before).

The block: x (96 numbers) -> W2 tanh(W1 x) with a hidden layer of 2,000,000 (float64): each product's intermediates
are ~16 MB saved, ~45 MB working, so 96 rows at once need ~4 GiB. The machine is told it has 2 GiB free (so the cut
shows without filling this one; the real guard reads /proc/meminfo and the cgroup): the cut batches what fits in
half of that. Each measurement runs in a fresh process (peak RSS is per process), alternating cut and uncut; medians
over rounds. The Jacobians of both are compared (max abs difference).

Usage (from the repository root)::

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/bench_product_memory.py --rounds 3

Prints a markdown table and writes benchmarks/out/product_memory.json. Nothing is asserted: this script measures.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SIZE, WIDTH, FREE = 96, 2_000_000, 2 << 30

CHILD = r"""
import json, resource, sys, time
import torch
import jacobiscope
from jacobiscope.linalg import _product_memory as memory

size, width, free, cut = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "cut"
torch.set_num_threads(1)
generator = torch.Generator().manual_seed(0)
up = torch.randn(width, size, generator=generator, dtype=torch.float64) / size ** 0.5
down = torch.randn(size, width, generator=generator, dtype=torch.float64) / width ** 0.5
x = torch.randn(size, generator=generator, dtype=torch.float64)
memory.free_bytes = lambda device: free
if not cut:
    memory.products_at_once = lambda looped_map, x, wanted: int(wanted)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
J = jacobiscope.jacobian(lambda h: down @ torch.tanh(up @ h), x)
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"seconds": seconds, "peak_mib": peak / 1024, "above_start_mib": (peak - base) / 1024,
                  "checksum": float(J.abs().sum()), "corner": J[:3, :3].tolist()}))
"""


def _run(cut: bool) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-c", CHILD, str(SIZE), str(WIDTH), str(FREE), "cut" if cut else "all"],
                          capture_output=True, text=True, env=env, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    runs = {"cut": [], "all at once": []}
    for round_ in range(options.rounds):
        order = ("cut", "all at once") if round_ % 2 == 0 else ("all at once", "cut")
        for name in order:
            runs[name].append(_run(name == "cut"))
    summary = {name: {"seconds": statistics.median(r["seconds"] for r in rows),
                      "peak_mib": statistics.median(r["peak_mib"] for r in rows),
                      "above_start_mib": statistics.median(r["above_start_mib"] for r in rows)}
               for name, rows in runs.items()}
    same = max(abs(a - b) for a, b in zip(runs["cut"][0]["corner"][0], runs["all at once"][0]["corner"][0]))
    record = {"state": SIZE, "hidden": WIDTH, "told_free_bytes": FREE, "rounds": options.rounds, "runs": runs,
              "summary": summary, "max_abs_difference_first_row_corner": same, "threads": 1,
              "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
              "load_average": os.getloadavg()}
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    (out / "product_memory.json").write_text(json.dumps(record, indent=1))
    print(f"dense Jacobian of a {SIZE}-number state through a {WIDTH:,}-wide hidden layer (float64, 1 thread, told "
          f"{FREE >> 30} GiB free), {options.rounds} rounds, load {os.getloadavg()[0]:.1f}")
    print("| rows per vmap call | seconds (median) | peak RSS MiB | above start MiB |")
    print("|---|---|---|---|")
    for name, values in summary.items():
        print(f"| {name} | {values['seconds']:.2f} | {values['peak_mib']:.0f} | {values['above_start_mib']:.0f} |")
    print(f"first-row corner max |difference|: {same:.1e}")


if __name__ == "__main__":
    main()
