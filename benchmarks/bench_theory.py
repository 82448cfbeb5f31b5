"""Benchmark: the theory modules at the spec's d = 100 scale (theory spec A.5, B.4, B.5).

- AIM online SGD at d = 100 (GOE teacher, rho = 1, the spec's B.4 setting; eta = 0.05; no clipping) for the
  starts direct S0 = 0, direct random S0, tied, untied (sigma_0 = 0.5), with the He2 and the row-softmax link:
  escape time (first time with weak recovery, |cos_c| >= 0.3 for He2, cos_c >= 0.3 for softmax) in gradient-flow
  time t = samples * eta / d^2 and in samples, final overlaps, and the cost per SGD step.
- Token dynamics at d = 100, n = 200, beta = 1 (RK4): the high-d order parameters of the spec's A.5 table (top
  eigenvalue lambda_1 of M, participation ratio, polar order, leading-axis speed, cluster counts).
- The two figures: phase portraits of the d = 2 regimes and the d = 100 escape curves (PNG).

Run (about 7 minutes in all on one thread of this 2-core CPU; pin BLAS to one thread, spec section 0), in one go
or in parts of under 4 minutes each (each part writes its own JSON, and every run merges the parts present into
theory.json and prints the combined tables):

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 .venv/bin/python benchmarks/bench_theory.py \
        [--part all|he2|softmax|tokens]

Writes benchmarks/out/theory_<part>.json, benchmarks/out/theory.json and benchmarks/out/theory_*.png and prints
markdown tables. ``--quick`` is a smoke run at small sizes (numbers not meaningful; files with a _quick suffix).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import time
from pathlib import Path

import torch

from jacobiscope.theory import aim, tokens
from jacobiscope.theory.plots import plot_escape_curves, plot_phase_portrait

OUT = Path(__file__).resolve().parent / "out"


def _cpu_busy_seconds() -> float | None:
    """Busy CPU seconds of the whole machine (every process) since boot, from /proc/stat."""
    try:
        with open("/proc/stat") as handle:
            values = [int(v) for v in handle.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    return (sum(values) - values[3] - values[4]) / os.sysconf("SC_CLK_TCK")


def _own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def canary_ms() -> float:
    """Median of a 512 x 512 fp32 matmul (0.83 ms when the machine is quiet): a contention gauge."""
    a = torch.randn(512, 512, generator=torch.Generator().manual_seed(0))
    times = []
    for _ in range(30):
        start = time.perf_counter()
        a @ a
        times.append(time.perf_counter() - start)
    return 1e3 * sorted(times)[len(times) // 2]


def aim_cases(d: int, eta: float, horizons: dict, runs: int, seed: int, records_per_unit: int) -> tuple[list, dict]:
    teacher = aim.make_teacher(d, "goe", seed=seed)
    rows, curves = [], {}
    for link, horizon in horizons.items():
        every = max(int(round(d * d / eta / records_per_unit)), 1)
        results = {}
        for label, kwargs in (
            ("direct, S0 = 0", {"parameterization": "direct", "S0": torch.zeros(d, d, dtype=torch.float64)}),
            ("direct, random S0", {"parameterization": "direct"}),
            ("tied", {"parameterization": "tied"}),
            ("untied", {"parameterization": "untied"}),
        ):
            # He2 at S0 = 0 is an exact critical point (every one-sample gradient is 0): a short run shows it.
            short = link == "he2" and label == "direct, S0 = 0"
            steps = int(round((min(horizon, 0.25) if short else horizon) * d * d / eta))
            start = time.perf_counter()
            run = aim.online_sgd(teacher, link=link, steps=steps, eta=eta, runs=runs, record_every=every,
                                 init_scale=0.5, seed=seed + 1 + len(results), **kwargs)
            seconds = time.perf_counter() - start
            results[label] = run
            cos = run.order["cos_c"].abs() if link == "he2" else run.order["cos_c"]
            escape = [float(x) for x in run.escape_time]
            rows.append({
                "link": link, "start": label, "d": d, "eta": eta, "runs": runs, "steps": steps,
                "horizon_t": steps * eta / d ** 2,
                "escape_t": escape,
                "escape_samples": [None if math.isinf(x) else int(round(x * d * d / eta)) for x in escape],
                "final_cos": [None if math.isnan(c) else c for c in (float(x) for x in cos[-1])],
                "final_Q": [float(x) for x in run.order["Q"][-1]],
                "S_exactly_zero": bool((run.S == 0).all()),
                "finite": bool(torch.isfinite(run.S).all()),
                "seconds": seconds, "us_per_step": 1e6 * seconds / steps,
            })
            print(f"[bench] {link} {label}: escape t {escape}, {seconds:.1f} s", flush=True)
        curves[link] = results
    return rows, curves


def token_cases(d: int, n: int, quick: bool) -> list:
    K = torch.zeros(d, d, dtype=torch.float64)
    for b in range(0, d - 1, 2):  # block rotation, K^2 = -I (s = 1)
        K[b, b + 1], K[b + 1, b] = -1.0, 1.0
    eye = torch.eye(d, dtype=torch.float64)
    lsa_t, usa_t = (24.0, 8.0) if quick else (240.0, 40.0)
    out = []
    start = time.perf_counter()
    # Records every 0.4 (LSA) / 0.25 (USA) time units: the axis-speed estimate needs omega * interval < pi / 4.
    lsa_dt, lsa_every = 0.2, 2
    steps = int(round(lsa_t / lsa_dt))
    sim = tokens.simulate(eye.expand(3, d, d), torch.stack([eye, -eye, eye + K]), n, d, steps, lsa_dt, "linear",
                          1.0, seed=0, record_every=lsa_every)
    lsa_seconds = time.perf_counter() - start
    times = sim.times
    for i, name in enumerate(("LSA, A=V=I", "LSA, A=I, V=-I", "LSA, A=I, V=I+K")):
        lam = sim.order.top_eigenvalue[:, i]
        at = {f"lambda1_t{int(t)}": float(lam[int(round(t / (lsa_dt * lsa_every)))]) for t in (40, 80) if t <= lsa_t}
        late_speed = sim.axis_speed[-5:, i]
        out.append({
            "setting": name, "attention": "linear", "d": d, "n": n, "horizon": lsa_t, "dt": lsa_dt, **at,
            "lambda1_end": float(lam[-1]), "participation_ratio_end": float(sim.order.participation_ratio[-1, i]),
            "polar_order_end": float(sim.order.polar_order[-1, i]),
            "axis_speed_late": float(late_speed.mean()), "clusters_end": int(sim.order.cluster_count[-1, i]),
            "signed_clusters_end": int(sim.order.signed_cluster_count[-1, i]),
            "ms_per_rk4_step": 1e3 * lsa_seconds / (steps * 3), "times_recorded": int(times.numel()),
        })
    start = time.perf_counter()
    usa_dt = 0.05  # dt <= 0.1 / Lambda with Lambda = beta ||A|| e^{beta ||A||} ||V|| = e sqrt 2 for V = I + K
    steps = int(round(usa_t / usa_dt))
    usa = tokens.simulate(eye.expand(2, d, d), torch.stack([eye, eye + K]), n, d, steps, usa_dt, "softmax", 1.0,
                          seed=0, record_every=5)
    usa_seconds = time.perf_counter() - start
    for i, name in enumerate(("USA, A=V=I", "USA, A=I, V=I+K")):
        out.append({
            "setting": name, "attention": "softmax", "d": d, "n": n, "horizon": usa_t, "dt": usa_dt,
            "lambda1_end": float(usa.order.top_eigenvalue[-1, i]),
            "participation_ratio_end": float(usa.order.participation_ratio[-1, i]),
            "polar_order_end": float(usa.order.polar_order[-1, i]),
            "axis_speed_late": float(usa.axis_speed[-5:, i].mean()),
            "clusters_end": int(usa.order.cluster_count[-1, i]),
            "signed_clusters_end": int(usa.order.signed_cluster_count[-1, i]),
            "ms_per_rk4_step": 1e3 * usa_seconds / (steps * 2),
        })
    return out


def _fmt_times(values, digits=3):
    return ", ".join("never" if (v is None or math.isinf(v)) else f"{v:.{digits}g}" for v in values)


def markdown(result: dict) -> str:
    lines = []
    if result.get("aim"):
        lines += ["| link | start | escape time t (runs) | escape samples | final cos_c | final Q | horizon t | "
                  "us/step |", "|---|---|---|---|---|---|---|---|"]
        for r in result["aim"]:
            final = "S = 0 exactly" if r["S_exactly_zero"] else _fmt_times(r["final_cos"], 2)
            if not r["finite"]:
                final += " (diverged)"
            samples = ", ".join("never" if v is None else f"{v:.3g}" for v in r["escape_samples"])
            lines.append(f"| {r['link']} | {r['start']} | {_fmt_times(r['escape_t'])} | {samples} | {final} | "
                         f"{_fmt_times(r['final_Q'], 2)} | {r['horizon_t']:.3g} | {r['us_per_step']:.0f} |")
    if result.get("tokens"):
        first = result["tokens"][0]
        lines += ["", f"| token setting (d = {first['d']}, n = {first['n']}, beta = 1, RK4) | "
                  "lambda_1 at t = 40 / 80 / end | PR end | polar R1 end | late axis speed | axes / signed clusters | ms per RK4 step |",
                  "|---|---|---|---|---|---|---|"]
        for r in result["tokens"]:
            lam = " / ".join(f"{r[k]:.4f}" for k in ("lambda1_t40", "lambda1_t80") if k in r)
            lam = (lam + " / " if lam else "") + f"{r['lambda1_end']:.4f} (t = {r['horizon']:g})"
            lines.append(f"| {r['setting']} | {lam} | {r['participation_ratio_end']:.2f} | "
                         f"{r['polar_order_end']:.3f} | {r['axis_speed_late']:.4f} | {r['clusters_end']} / "
                         f"{r['signed_clusters_end']} | {r['ms_per_rk4_step']:.1f} |")
    return "\n".join(lines)


PARTS = ("he2", "softmax", "tokens")


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description="theory modules at d = 100")
    parser.add_argument("--part", choices=("all",) + PARTS, default="all",
                        help="run one part (each under 4 minutes here) or all of them")
    parser.add_argument("--quick", action="store_true", help="smoke run at small sizes")
    parser.add_argument("--runs", type=int, default=2, help="independent SGD runs per case (batched)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    d, n = (20, 40) if args.quick else (100, 200)
    horizons = {"he2": 0.3, "softmax": 0.3} if args.quick else {"he2": 1.6, "softmax": 1.2}
    eta = 0.05
    OUT.mkdir(parents=True, exist_ok=True)
    suffix = "_quick" if args.quick else ""
    parts = PARTS if args.part == "all" else (args.part,)

    for part in parts:
        busy0, own0, wall0 = _cpu_busy_seconds(), _own_cpu_seconds(), time.perf_counter()
        canary_start, load_start = canary_ms(), list(os.getloadavg())
        result = {"part": part}
        if part == "tokens":
            result["tokens"] = token_cases(d, n, args.quick)
            plot_phase_portrait(path=OUT / f"theory_phase_portraits{suffix}.png")
        else:
            rows, curves = aim_cases(d, eta, {part: horizons[part]}, args.runs, args.seed, records_per_unit=200)
            result["aim"] = rows
            plot_escape_curves(curves[part], link=part, path=OUT / f"theory_escape_curves_{part}{suffix}.png")
        wall = time.perf_counter() - wall0
        busy1, own1 = _cpu_busy_seconds(), _own_cpu_seconds()
        result.update({
            "command": "OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 .venv/bin/python "
                       f"benchmarks/bench_theory.py --part {part}" + (" --quick" if args.quick else ""),
            "machine": {"platform": platform.platform(), "processor": platform.processor(), "cpus": os.cpu_count(),
                        "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
                        "python": platform.python_version(),
                        "env": {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                                              "MKL_NUM_THREADS")}},
            "setup": {"d": d, "n_tokens": n, "eta": eta, "horizons_t": horizons, "runs": args.runs,
                      "teacher": "GOE, rho = 1", "init_scale": 0.5, "clip": None, "recovery_threshold": 0.3},
            "wall_seconds": wall, "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
            "loadavg_start": load_start, "loadavg_end": list(os.getloadavg()),
            "canary_ms_start": canary_start, "canary_ms_end": canary_ms(),
        })
        if busy0 is not None and busy1 is not None:
            result["foreign_cpu_share"] = max((busy1 - busy0) - (own1 - own0), 0.0) / (wall * (os.cpu_count() or 1))
        (OUT / f"theory_{part}{suffix}.json").write_text(json.dumps(result, indent=2))
        print(f"[bench] part {part}: {wall:.0f} s, other processes "
              f"{100 * result.get('foreign_cpu_share', float('nan')):.0f}% of the CPUs, canary "
              f"{canary_start:.2f} -> {result['canary_ms_end']:.2f} ms", flush=True)

    merged = {"parts": {}, "aim": [], "tokens": []}
    for part in PARTS:
        path = OUT / f"theory_{part}{suffix}.json"
        if path.exists():
            data = json.loads(path.read_text())
            merged["parts"][part] = {k: v for k, v in data.items() if k not in ("aim", "tokens")}
            merged["aim"] += data.get("aim", [])
            merged["tokens"] += data.get("tokens", [])
    (OUT / f"theory{suffix}.json").write_text(json.dumps(merged, indent=2))
    print(markdown(merged))
    return merged


if __name__ == "__main__":
    main()
