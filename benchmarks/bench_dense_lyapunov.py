"""Tiny states: jacobiscope's Lyapunov spectrum against a small peer library (lyapynov), issue 34 part 2.

Systems: the Hénon map (a = 1.4, b = 0.3, D = 2, both exponents) and Lorenz-96 (N = 40, F = 8, RK4 with dt = 0.01,
the full spectrum of 40). Variants, interleaved over ``--rounds`` rounds, medians reported:

- ``lyapynov``: `lyapynov.LCE` with NumPy f and analytic Jacobian (DiscreteDS for Hénon; ContinuousDS for
  Lorenz-96, whose tangent step holds the Jacobian of the step's start through its RK4 stages);
- ``dense``: `jacobiscope.lyapunov_spectrum` by default (the dense loop of tiny states);
- ``jvp``: the same with ``compile=False`` (the eager jvp loop: what tiny states ran before).

Also the plain orbit in torch (no tangents), the floor any torch map pays per loop. Exponents of each variant are
printed beside each other (lyapynov's Lorenz-96 tangent differs from the exact derivative of the RK4 map at
O(dt^2), and chaotic orbits computed in different arithmetic decorrelate: agreement is statistical there).

Usage: ``OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/bench_dense_lyapunov.py`` (lyapynov
installed from its sdist: ``pip install lyapynov``; without it only the jacobiscope variants run). Writes
benchmarks/out/dense_lyapunov.json. Nothing is asserted.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np
import torch

import jacobiscope

HERE = Path(__file__).resolve().parent


def lyapynov_system(name, x0):
    import lyapynov

    if name == "henon":
        a, b = 1.4, 0.3
        return lyapynov.DiscreteDS(x0, 0, lambda x, t: np.array([1 - a * x[0] ** 2 + x[1], b * x[0]]),
                                   lambda x, t: np.array([[-2 * a * x[0], 1.0], [b, 0.0]]))
    n, forcing = x0.shape[0], 8.0

    def f(x, t):
        return (np.roll(x, -1) - np.roll(x, 2)) * np.roll(x, 1) - x + forcing

    def jac(x, t):
        J = -np.eye(n)
        for i in range(n):
            J[i, (i + 1) % n] += x[(i - 1) % n]
            J[i, (i - 2) % n] -= x[(i - 1) % n]
            J[i, (i - 1) % n] += x[(i + 1) % n] - x[(i - 2) % n]
        return J

    return lyapynov.ContinuousDS(x0, 0, f, jac, 0.01)


def run(variant, name, steps, transient):
    m = jacobiscope.systems.henon_map() if name == "henon" else jacobiscope.systems.lorenz96_map(40)
    k = 2 if name == "henon" else 40
    start = time.perf_counter()
    if variant == "lyapynov":
        import lyapynov

        exponents = lyapynov.LCE(lyapynov_system(name, m.x0.numpy().copy()), k, transient, steps, False)
        if name != "henon":
            exponents = exponents * 0.01  # per unit time -> per loop of dt = 0.01, as the map's exponents
        exponents = sorted(exponents.tolist(), reverse=True)
    elif variant == "orbit":
        x = m.x0
        with torch.no_grad():
            for _ in range(transient + steps):
                x = m(x)
        exponents = []
    else:
        result = jacobiscope.lyapunov_spectrum(m, steps=steps, k=k, transient=transient,
                                               compile=False if variant == "jvp" else None)
        exponents = result.exponents.tolist()
        assert result.meta["tangent_path"] == ("eager" if variant == "jvp" else "dense")
    return time.perf_counter() - start, exponents


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=5000)
    args = parser.parse_args()
    try:
        import lyapynov  # noqa: F401

        variants = ["lyapynov", "dense", "jvp", "orbit"]
    except ImportError:
        variants = ["dense", "jvp", "orbit"]
    systems = {"henon": (args.steps, 100), "lorenz96": (args.steps // 5, 100)}
    times = {(s, v): [] for s in systems for v in variants}
    exponents = {}
    load = os.getloadavg()
    for round_index in range(args.rounds):
        for name, (steps, transient) in systems.items():
            order = variants if round_index % 2 == 0 else variants[::-1]
            for variant in order:
                seconds, values = run(variant, name, steps, transient)
                times[(name, variant)].append(seconds / (steps + transient))
                exponents[(name, variant)] = values
    print(f"{os.cpu_count()} cores, {torch.get_num_threads()} torch threads, load {load}")
    print("| system | variant | us per loop (median) | largest exponents |")
    print("|---|---|---|---|")
    for (name, variant), values in times.items():
        top = ", ".join(f"{v:.4f}" for v in exponents[(name, variant)][:3])
        print(f"| {name} | {variant} | {1e6 * statistics.median(values):.1f} | {top} |")
    (HERE / "out").mkdir(exist_ok=True)
    (HERE / "out" / "dense_lyapunov.json").write_text(json.dumps({
        "rounds": args.rounds, "steps": args.steps, "platform": platform.platform(), "load": load,
        "us_per_loop": {f"{s}/{v}": 1e6 * statistics.median(t) for (s, v), t in times.items()},
        "exponents": {f"{s}/{v}": e for (s, v), e in exponents.items()}}, indent=2))


if __name__ == "__main__":
    main()
