"""Reproduce the two qualitative tables of the theory modules, as markdown.

(i) Token dynamics (theory spec A.4): for each of the spec's verified (A, V) pairs, the regime predicted by the exact
statements (`tokens.predict_regime`) against the regime `tokens.classify_regime` finds on the Ott–Antonsen flow,
with the evidence (late |R_2|, its spread, the drift of arg R_2, fixed point, period).

(ii) Learning dynamics (theory spec B.4): online SGD of the attention-indexed model for each parameterization and
link from an uninformative start: does it escape (weak recovery, |cos_c| >= 0.3; signed cos_c for odd links and
softmax), and at what gradient-flow time t = samples * eta / d^2.

Run (about 1.5 minutes on one CPU thread):

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 .venv/bin/python examples/theory_tables.py [--out DIR] [--d 16]

``--out DIR`` also writes the phase portraits and the He2 escape curves as PNGs; ``--quick`` is a seconds-long
smoke run (small d, short horizons: numbers not meaningful).
"""
from __future__ import annotations

import argparse
import math
import statistics
import time
from pathlib import Path

import torch

from jacobiscope.theory import aim, tokens

LINKS = ("he1", "he2", "he3", "softmax")

# What the paper's summary claims, where it says something (theory spec B.4; [claim, unverified]).
CLAIMS = {
    ("direct, S0 = 0", "he2"): "stuck",
    ("direct, S0 = 0", "he3"): "stuck",
    ("tied", "he2"): "escapes, Theta(d^2 log d) samples",
    ("untied", "he1"): "escapes",
    ("untied", "he2"): "severely delayed",
    ("untied", "he3"): "severely delayed",
}


def _complex(z):
    if z is None:
        return "-"
    return f"{z.real:.4f}{z.imag:+.4f}i"


def regime_markdown(rows) -> str:
    lines = [
        "| (A, V) | spec reports | predicted (exact statement) | found (OA, classify_regime) | agree | "
        "Z* predicted / found | period predicted / found | late mean, std of abs(R_2); arg drift |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        period = "-"
        if r["predicted_period"] or r["found_period"]:
            period = f"{r['predicted_period']:.5f} / {r['found_period']:.4f}"
        fixed = "-"
        if r["predicted"] == "interior_fixed_point" or r["found"] == "interior_fixed_point":
            fixed = f"{_complex(r['predicted_fixed_point'])} / {_complex(r['found_fixed_point'])}"
        lines.append(
            f"| {r['label']} | {r['reported']} | {r['predicted']} ({r['rule']}) | {r['found']} | "
            f"{'yes' if r['agree'] else 'NO'} | {fixed} | {period} | "
            f"{r['order_limit']:.4f}, {r['order_std']:.2g}; {r['arg_drift']:.3g} |"
        )
    return "\n".join(lines)


def learning_rows(d: int, t: float, eta: float, runs: int, seed: int, clip: float | None) -> tuple[list, dict]:
    # A PSD teacher: the spec's advice for tied (PSD) students under odd links, where an indefinite teacher makes
    # the student collapse; softmax then needs centred pre-activations (Tr S* = O(d) would saturate it).
    teacher = aim.make_teacher(d, "psd", seed=seed)
    rows, he2_results = [], None
    for link in LINKS:
        start = time.perf_counter()
        results = aim.escape_runs(teacher, link=link, t=t, eta=eta, runs=runs, clip=clip, seed=seed,
                                  centering=(link == "softmax"), records=200)
        seconds = time.perf_counter() - start
        if link == "he2":
            he2_results = results
        for label, run in results.items():
            cos = run.order["cos_c"]
            cos = cos.abs() if link == "he2" else cos
            escape = run.escape_time
            escaped = torch.isfinite(escape)
            # A diverged run has a non-finite S; S = 0 (He2's critical point) has an undefined cos_c, not a divergence.
            diverged = ~torch.isfinite(run.S).all(-1).all(-1)
            rows.append({
                "start": label, "link": link, "escaped": int(escaped.sum()), "runs": escape.numel(),
                "escape_times": [float(e) for e in escape.reshape(-1)],
                "final_cos": [float(c) for c in cos[-1].reshape(-1)],
                "extreme_cos": [float(c) for c in _extreme(cos).reshape(-1)],
                "diverged": [bool(x) for x in diverged.reshape(-1)],
                "stuck_at_zero": bool((run.S == 0).all()),
                "claim": CLAIMS.get((label, link), ""), "seconds": seconds,
            })
    return rows, he2_results


def _extreme(cos):
    """Per run, the recorded cos_c of largest magnitude (sign kept): shows a run that aligned with -S*."""
    finite = torch.nan_to_num(cos, nan=0.0, posinf=0.0, neginf=0.0)
    index = finite.abs().argmax(0, keepdim=True)
    return finite.gather(0, index)[0]


def learning_markdown(rows, d, t, eta) -> str:
    lines = [
        "| start | link | escaped (runs) | time to weak recovery t (more than 4 runs: median (range)) | final cos_c | "
        "largest abs(cos_c) seen | "
        "paper's claim |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        escaped = [x for x in r["escape_times"] if math.isfinite(x)]
        never = len(r["escape_times"]) - len(escaped)
        finite_cos = [c for c, bad in zip(r["final_cos"], r["diverged"]) if not bad]
        if len(r["escape_times"]) <= 4:  # a few runs: every value
            times = ", ".join("never" if math.isinf(x) else f"{x:.3g}" for x in r["escape_times"])
            final = ", ".join("diverged" if bad else f"{c:.2f}" for c, bad in zip(r["final_cos"], r["diverged"]))
            extreme = ", ".join(f"{c:.2f}" for c in r["extreme_cos"])
        else:  # many runs: median (range) and the counts that a median hides
            times = ", ".join(filter(None, [_median_range(escaped, "{:.3g}"), f"{never} never" if never else ""]))
            diverged = sum(r["diverged"])
            final = ", ".join(filter(None, [_median_range(finite_cos, "{:.2f}"),
                                            f"{diverged} diverged" if diverged else ""]))
            extreme = _median_range(r["extreme_cos"], "{:.2f}")
        if r["stuck_at_zero"]:
            final = "S = 0 exactly"
        lines.append(f"| {r['start']} | {r['link']} | {r['escaped']}/{r['runs']} | {times} | {final} | {extreme} | "
                     f"{r['claim']} |")
    lines.append("")
    lines.append(f"d = {d}, eta = {eta}, horizon t = {t} ({int(round(t * d * d / eta))} samples per run), "
                 "PSD Marchenko-Pastur teacher (r*/d = 1/2, rho = 1; softmax with centred pre-activations), "
                 "random starts with sigma_0 = 0.5, no gradient clipping, weak recovery at 0.3 on |cos_c| for "
                 "He2 and on the signed cos_c otherwise.")
    return "\n".join(lines)


def _median_range(values, form: str) -> str:
    """``median (min to max)`` of ``values``; "" when there are none."""
    if not values:
        return ""
    ordered = sorted(values)
    return f"{form.format(statistics.median(ordered))} ({form.format(ordered[0])} to {form.format(ordered[-1])})"


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None, help="also write the figures (PNG) into this folder")
    parser.add_argument("--d", type=int, default=16, help="dimension of the learning-dynamics runs")
    parser.add_argument("--t", type=float, default=2.0, help="gradient-flow horizon of each SGD run")
    parser.add_argument("--eta", type=float, default=0.01, help="0.01 keeps SGD stable without clipping at d = 16")
    parser.add_argument("--clip", type=float, default=None, help="gradient clipping (biases He3's drift)")
    parser.add_argument("--runs", type=int, default=2, help="independent SGD runs per cell")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="seconds-long smoke run (numbers not meaningful)")
    args = parser.parse_args(argv)
    horizon = 400.0
    if args.quick:
        args.d, args.t, args.runs, horizon = 8, 0.2, 1, 40.0

    start = time.perf_counter()
    regimes = tokens.regime_table(horizon=horizon, dt=0.05)
    print(f"## Token dynamics (LSA, d = 2, beta = 1, z0 = 0.3+0.1i, horizon {horizon:g})\n")
    print(regime_markdown(regimes))
    agree = sum(r["agree"] for r in regimes)
    print(f"\nPredicted = found for {agree}/{len(regimes)} examples ({time.perf_counter() - start:.1f} s).\n")

    start = time.perf_counter()
    rows, he2_results = learning_rows(args.d, args.t, args.eta, args.runs, args.seed, clip=args.clip)
    print("## Learning dynamics (AIM online SGD)\n")
    print(learning_markdown(rows, args.d, args.t, args.eta))
    print(f"\n({time.perf_counter() - start:.1f} s)")

    if args.out is not None:
        from jacobiscope.theory.plots import plot_escape_curves, plot_phase_portrait

        args.out.mkdir(parents=True, exist_ok=True)
        plot_phase_portrait(horizon=10.0 if args.quick else 30.0, n=16 if args.quick else 64,
                            path=args.out / "phase_portraits.png")
        plot_escape_curves(he2_results, link="he2", path=args.out / "escape_curves.png")
        print(f"\nFigures: {args.out / 'phase_portraits.png'}, {args.out / 'escape_curves.png'}")
    return {"regimes": regimes, "learning": rows}


if __name__ == "__main__":
    main()
