"""Depth safety, validated: the loop forecast to be left (from the dynamics up to the trained depth only) against the
loop where accuracy actually collapses, on every trained model we ship; the threshold is set on some models and
tested on the others.

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/depth_safety.py [--inputs 24] [--only NAME]

For each model (trained depth T, horizon 4T) and each of ``--inputs`` inputs (SATNet test puzzles; fresh in-range
task instances for the looped LMs): `jacobiscope.analyze(..., diagnostics=["depth_safety"])` run to 4T, its
forecast displacement curve D_i(m) (read from loops 0..T only), and the input's correctness at every loop 1..4T
(the solver's own solved-or-not from `loop_depth`; the LM's exact match from `evaluate_task` on the same instances).

Measured, per model: accuracy a(t); it collapses at the first loop t > T with a(t) < a(T) / 2 (none: beyond 4T);
models with a(T) < 20% are not testable. Forecast, for a threshold theta: each input leaves at its first loop with
D_i >= theta; the model is forecast to collapse when half its inputs have left (the median, "> 4T" when fewer than
half leave), with the medians at theta/2 and 2 theta as the interval. Error: |log2| of forecast over measured, a loop
beyond the horizon counted as 8T. theta is chosen on the calibration models (the ItrSA zoo, trained here at T=16)
and the table reports the test models (AKOrN, the shipped solvers, the looped LMs) with it.

Each model's raw curves are cached in benchmarks/out/depth_safety/<model>.json (rerunning reuses them). Prints the
RESULTS.md table, writes benchmarks/out/depth_safety/summary.json and benchmarks/figures/depth_safety.png.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import time
from pathlib import Path

import torch

OUT = Path(__file__).resolve().parent / "out" / "depth_safety"
FIGURE = Path(__file__).resolve().parent / "figures" / "depth_safety.png"
SOLVERS = ("itrsa-sudoku", "itrsa-sudoku-general", "akorn-sudoku", "akorn-sudoku-general")
LMS = {"hrm-text-addition": "addition5", "dory-addition": "addition5", "inkling2-loop-addition": "addition5"}
#: the rules' grids: theta (relative RMS displacement of the state) and kappa (mean KL of the output, nats)
GRIDS = {"state": [round(0.05 * 1.25 ** i, 4) for i in range(22)],     # 0.05 .. ~5.4
         "output": [round(0.002 * 1.5 ** i, 5) for i in range(22)]}   # 0.002 .. ~9.9
#: the forecast curves run past these, so any threshold on the grids can be read afterwards
CURVE_OPTIONS = {"depth_safety_threshold": 6.0, "depth_safety_output_threshold": 1e6}


def models() -> list[tuple[str, str]]:
    from jacobiscope.hub import shipped_checkpoints

    shipped = set(shipped_checkpoints())
    names = [(name, "sudoku") for name in SOLVERS if name in shipped]
    names += [(name, "sudoku") for name in sorted(shipped) if name.startswith("zoo/")]
    names += [(name, "lm") for name in LMS if name in shipped]
    return names


def split(name: str) -> str:
    """Calibration: the zoo (ItrSA and AKOrN variants trained here for the paper's claims); test: everything else
    (the shipped solvers, the trained looped LMs and the deliberately collapse-prone runs)."""
    return "calibration" if name.startswith("zoo/") else "test"


def _key(name: str) -> str:
    """A cache file name: the short name, or a run folder's name (``.../looped-lm-x/best`` -> ``looped-lm-x``)."""
    path = Path(name)
    if path.is_dir():
        return (path.parent.name if path.name == "best" else path.name)
    return name.replace("/", "__")


def measure_model(name: str, kind: str, inputs: int) -> dict:
    import jacobiscope

    model = jacobiscope.load_pretrained(name).eval()
    started = time.perf_counter()
    if kind == "sudoku":
        from jacobiscope.data import sudoku

        trained = int(model.config.loops)
        _, test = sudoku.satnet_splits()
        puzzles = sudoku.to_tensor(list(test["puzzle"][:inputs]))
        report = jacobiscope.analyze(model, puzzles, loops=4 * trained, diagnostics=["loop_depth", "depth_safety"],
                                     progress=False, options=CURVE_OPTIONS)
        correct = [[bool(q) for q in row.diagnostic("loop_depth").quality] for row in report.rows]
    else:
        from jacobiscope.data.tasks import encode, get_task
        from jacobiscope.recipes._looped_lm_eval import evaluate_task
        from jacobiscope.recipes._looped_lm_eval_checks import loop_plan
        from transformers import AutoTokenizer

        plan = loop_plan(model)  # the loop knob and the recurrence that runs it (HRM-Text's is "cycle")
        trained = int(getattr(model.config, plan.attribute))
        task = get_task(LMS.get(name, "addition5"))
        examples = task.generate(inputs, seed=7_000_001)
        tokenizer = AutoTokenizer.from_pretrained(jacobiscope.hub.resolve_checkpoint(name))
        batch = encode(examples, tokenizer)
        report = jacobiscope.analyze(model, {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]},
                                     loops=4 * trained, recurrence=plan.recurrence, diagnostics=["depth_safety"],
                                     progress=False, options=CURVE_OPTIONS)
        evaluation = evaluate_task(model, task, loops=list(range(1, 4 * trained + 1)), examples=examples,
                                   tokenizer=tokenizer)
        records = sorted(evaluation.records, key=lambda record: record["index"])
        # loop 0 (the input section alone) is not a loop count the model can run: counted as wrong
        correct = [[False] + [bool(r["correct"][str(t)]) for t in range(1, 4 * trained + 1)] for r in records]
    forecasts = [row.diagnostic("depth_safety") for row in report.rows]
    return {"name": _key(name) if Path(name).is_dir() else name, "kind": kind, "trained": trained, "horizon": 4 * trained, "inputs": len(forecasts),
            "seconds": time.perf_counter() - started,
            "words": [f.word for f in forecasts],
            "curves": {"state": [{"loops": f.displacement_loops, "values": f.displacement} for f in forecasts],
                       "output": [{"loops": list(range(trained + 1, trained + 1 + len(f.output_divergence))),
                                   "values": f.output_divergence} for f in forecasts]},
            "measured": {"state": [f.measured_displacement for f in forecasts],
                         "output": [f.measured_output_divergence for f in forecasts]},
            "rate": [f.rate for f in forecasts], "first_gain": [f.first_gain for f in forecasts],
            "window_rate": [f.window_rate for f in forecasts], "correct": correct}


def cached(name: str, kind: str, inputs: int) -> dict:
    path = OUT / (_key(name) + ".json")
    if path.is_file():
        data = json.loads(path.read_text())
        if data.get("inputs") == inputs:
            return data
    data = measure_model(name, kind, inputs)
    OUT.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(data))
    os.replace(temporary, path)
    return data


# ---------------------------------------------------------------------------------------------- measured vs forecast
def accuracy_curve(data: dict) -> list[float]:
    rows = data["correct"]
    return [sum(row[t] for row in rows) / len(rows) for t in range(len(rows[0]))]


def measured_collapse(data: dict) -> int | None:
    curve, trained = accuracy_curve(data), data["trained"]
    return next((t for t in range(trained + 1, len(curve)) if curve[t] < 0.5 * curve[trained]), None)


def leaves(curve: dict, threshold: float) -> int | None:
    return next((loop for loop, value in zip(curve["loops"], curve["values"]) if value >= threshold), None)


def forecast_collapse(data: dict, threshold: float, rule: str) -> int | None:
    """The loop by which half the inputs are forecast to have left (None: fewer than half leave by 4T)."""
    loops = sorted((leaves(curve, threshold) or math.inf) for curve in data["curves"][rule])
    middle = statistics.median_low(loops) if len(loops) % 2 else statistics.median_high(loops)
    return None if math.isinf(middle) else int(middle)


def error(forecast: int | None, measured: int | None, trained: int) -> float:
    beyond = 8 * trained
    return abs(math.log2((forecast or beyond) / (measured or beyond)))


def testable(data: dict) -> bool:
    return accuracy_curve(data)[data["trained"]] >= 0.2


def choose_threshold(calibration: list[dict], rule: str) -> tuple[float, dict]:
    """The threshold with the smallest mean error on the calibration models (ties: the smallest, the most
    sensitive rule with that error)."""
    scores = {}
    for threshold in GRIDS[rule]:
        errors = [error(forecast_collapse(d, threshold, rule), measured_collapse(d), d["trained"]) for d in calibration]
        scores[threshold] = statistics.mean(errors) if errors else math.inf
    return min(scores, key=lambda t: (scores[t], t)), scores


def row(data: dict, threshold: float, rule: str) -> dict:
    curve = accuracy_curve(data)
    forecast = forecast_collapse(data, threshold, rule)
    low, high = forecast_collapse(data, threshold / 2, rule), forecast_collapse(data, 2 * threshold, rule)
    measured = measured_collapse(data)
    horizon = data["horizon"]

    def inside(value, lower, upper):  # None is "beyond the horizon"
        value = math.inf if value is None else value
        return (lower or math.inf) <= value <= (upper or math.inf)

    ahead = data["horizon"] - data["trained"]
    per_input = ["drifting" if leaves(curve, threshold) is not None else
                 "settling" if rate < 1 and rate ** ahead <= 0.1 else "marginal"
                 for curve, rate in zip(data["curves"][rule], data["rate"])]
    words = {w: per_input.count(w) for w in ("settling", "marginal", "drifting")}
    return {"name": data["name"], "rule": rule, "threshold": threshold, "split": split(data["name"]), "trained": data["trained"], "horizon": horizon,
            "inputs": data["inputs"], "accuracy_at_trained": curve[data["trained"]], "accuracy_at_horizon": curve[-1],
            "measured_collapse": measured, "forecast_collapse": forecast, "interval": [low, high],
            "covered": inside(measured, low, high), "error_log2": error(forecast, measured, data["trained"]),
            "same_side": (forecast is None) == (measured is None), "words_at_default": words,
            "rate_median": statistics.median(data["rate"]), "testable": testable(data)}


def show(value, horizon) -> str:
    return f"> {horizon}" if value is None else str(value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=24)
    parser.add_argument("--only", default=None, help="measure only this model (the summary uses every cached one)")
    parser.add_argument("--extra", action="append", default=[],
                        help="a looped-LM run folder's best/ (addition5) to test on, e.g. a fixed-depth run")
    args = parser.parse_args()
    torch.set_num_threads(1)
    all_models = models() + [(path, "lm") for path in args.extra]
    for name, kind in all_models:
        if args.only and name != args.only:
            continue
        started = time.perf_counter()
        data = cached(name, kind, args.inputs)
        print(f"{name}: T={data['trained']}, {data['inputs']} inputs, {time.perf_counter() - started:.0f} s",
              flush=True)
    loaded = [json.loads(p.read_text()) for p in sorted(OUT.glob("*.json")) if p.name != "summary.json"]
    loaded = [d for d in loaded if d.get("inputs") == args.inputs]
    calibration = [d for d in loaded if split(d["name"]) == "calibration" and testable(d)]
    summary = {}
    for rule in ("output", "state"):
        threshold, scores = choose_threshold(calibration, rule)
        rows = [row(d, threshold, rule) for d in loaded]
        summary[rule] = {"threshold": threshold, "calibration_scores": scores, "rows": rows}
        _print_table(rule, threshold, scores, len(calibration), rows, summary[rule])
        if rule == "output":
            _figure(rows)
    (OUT / "summary.json").write_text(json.dumps(summary, indent=1))


def _print_table(rule: str, threshold: float, scores: dict, count: int, rows: list, summary: dict) -> None:
    unit = "nats of mean KL (output)" if rule == "output" else "relative RMS displacement (state)"
    print(f"\n### rule: {rule}; threshold {threshold} {unit}, mean |log2 error| {scores[threshold]:.2f} on {count} "
          "calibration models\n")
    print("| model | split | T | accuracy at T / 4T | measured collapse | forecast [half, twice the threshold] | "
          "|log2 err| | in interval | inputs settling/marginal/drifting |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in sorted(rows, key=lambda r: (r["split"], r["name"])):
        head = (f"| {r['name']} | {r['split']} | {r['trained']} | {100 * r['accuracy_at_trained']:.0f}% / "
                f"{100 * r['accuracy_at_horizon']:.0f}% |")
        if not r["testable"]:
            print(f"{head} not testable (accuracy at T below 20%) | | | | |")
            continue
        w = r["words_at_default"]
        print(f"{head} {show(r['measured_collapse'], r['horizon'])} | "
              f"{show(r['forecast_collapse'], r['horizon'])} [{show(r['interval'][0], r['horizon'])}, "
              f"{show(r['interval'][1], r['horizon'])}] | {r['error_log2']:.2f} | {'yes' if r['covered'] else 'no'} | "
              f"{w['settling']}/{w['marginal']}/{w['drifting']} |")
    for part in ("calibration", "test"):
        chosen = [r for r in rows if r["split"] == part and r["testable"]]
        if chosen:
            summary[part] = {"models": len(chosen), "mean_error_log2": statistics.mean(r["error_log2"] for r in chosen),
                             "covered": sum(r["covered"] for r in chosen), "same_side": sum(r["same_side"] for r in chosen)}
            print(f"\n{part}: {len(chosen)} testable models, mean |log2 error| {summary[part]['mean_error_log2']:.2f}, "
                  f"measured in the interval {summary[part]['covered']}/{len(chosen)}, collapse-or-not right "
                  f"{summary[part]['same_side']}/{len(chosen)}")


def _figure(rows: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, ax = plt.subplots(figsize=(6.4, 5.0), layout="constrained")
    agreeing = {"calibration": 0, "test": 0}
    for r in rows:
        if not r["testable"]:
            continue
        if r["measured_collapse"] is None and r["forecast_collapse"] is None and r["interval"] == [None, None]:
            agreeing[r["split"]] += 1  # holds and forecast to hold: one shared corner, counted below
            continue
        beyond = 8 * r["trained"]
        x = (r["measured_collapse"] or beyond) / r["trained"]
        y = (r["forecast_collapse"] or beyond) / r["trained"]
        low, high = ((v or beyond) / r["trained"] for v in r["interval"])
        color = "tab:blue" if r["split"] == "calibration" else "tab:red"
        ax.errorbar([x], [y], yerr=[[max(y - low, 0)], [max(high - y, 0)]], fmt="o", color=color, alpha=0.8)
        if r["split"] == "test":
            ax.annotate(r["name"].replace("zoo/", ""), (x, y), fontsize=6, xytext=(3, 3), textcoords="offset points")
    ax.scatter([8, 8], [8, 8], s=[40, 40], color=["tab:blue", "tab:red"], alpha=0.5)
    ax.annotate(f"hold, forecast to hold:\n{agreeing['calibration']} calibration, {agreeing['test']} test",
                (8, 8), xytext=(-110, -28), textcoords="offset points", fontsize=7)
    ax.plot([1, 8], [1, 8], color="0.6", ls=":")
    ax.axvline(4, color="0.8", lw=0.8)
    ax.axhline(4, color="0.8", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("measured collapse loop / trained depth (8: none within 4T)")
    ax.set_ylabel("forecast / trained depth (8: none within 4T)")
    ax.set_title("depth safety: calibration (blue) and test (red) models")
    FIGURE.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(FIGURE, dpi=120)


if __name__ == "__main__":
    main()
