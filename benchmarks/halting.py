"""Exit rules at matched compute: accuracy against mean loops spent for every published whole-input exit rule,
replayed offline on stored trajectories of the shipped solvers and the trained looped LMs.

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/halting.py [--inputs 48]

For each model: `jacobiscope.analyze(..., diagnostics=["halting"])` to 2x its trained depth T on ``--inputs`` inputs
(SATNet test puzzles from row 0; fresh in-range `addition5` instances for the LMs), one trajectory each; every rule
(residual, successive-readout KL, entropy, confidence; the exit gate where the model has one) over its threshold
range and the fixed depths 1..2T, scored by the model's quality at the exit: the solvers' own solved-or-not; for the
LMs the exact match of the teacher-forced answer at the exit loop (the same instances scored by `evaluate_task` at
every loop). Printed: the Pareto front and the best rule within each compute budget, and held out: thresholds chosen on the
even-numbered inputs, tested on the odd ones against the fixed depth spending at least as many loops (paired, exact
McNemar); written to
benchmarks/out/halting.json and benchmarks/figures/halting_matched_compute.png.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from types import SimpleNamespace

import torch

SOLVERS = ("itrsa-sudoku", "akorn-sudoku")
LMS = ("hrm-text-addition", "dory-addition", "inkling2-loop-addition")


def solver_results(name: str, inputs: int) -> tuple[list, int]:
    import jacobiscope
    from jacobiscope.data import sudoku

    model = jacobiscope.load_pretrained(name).eval()
    trained = int(model.config.loops)
    _, test = sudoku.satnet_splits()
    puzzles = sudoku.to_tensor(list(test["puzzle"][:inputs]))
    report = jacobiscope.analyze(model, puzzles, loops=2 * trained, diagnostics=["halting"], progress=False)
    return [row.results["halting"] for row in report.rows], trained


def lm_results(name: str, inputs: int) -> tuple[list, int]:
    """The LM's readout has no exact-match score of its own: each rule's exit is scored by the instance's exact
    match at that loop count (evaluate_task on the same instances)."""
    import jacobiscope
    from jacobiscope.data.tasks import encode, get_task
    from jacobiscope.recipes._looped_lm_eval import evaluate_task
    from jacobiscope.recipes._looped_lm_eval_checks import loop_plan
    from transformers import AutoTokenizer

    model = jacobiscope.load_pretrained(name).eval()
    plan = loop_plan(model)
    trained = int(getattr(model.config, plan.attribute))
    task = get_task("addition5")
    examples = task.generate(inputs, seed=8_000_001)
    tokenizer = AutoTokenizer.from_pretrained(jacobiscope.hub.resolve_checkpoint(name))
    batch = encode(examples, tokenizer)
    report = jacobiscope.analyze(model, {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]},
                                 loops=2 * trained, recurrence=plan.recurrence, diagnostics=["halting"],
                                 progress=False)
    evaluation = evaluate_task(model, task, loops=list(range(1, 2 * trained + 1)), examples=examples,
                               tokenizer=tokenizer)
    records = sorted(evaluation.records, key=lambda r: r["index"])
    results = []
    for row, record in zip(report.rows, records):
        result = row.results["halting"]
        quality = [0.0] + [float(record["correct"][str(t)]) for t in range(1, 2 * trained + 1)]
        rules = [dict(entry, quality=quality[entry["exit"]]) for entry in result.sequence_rules]
        results.append(SimpleNamespace(quality=quality, sequence_rules=rules))
    return results, trained


def main() -> None:
    from jacobiscope.diagnostics._exit_rules import best_rule_by_compute, exit_rule_tradeoffs
    from jacobiscope.hub import shipped_checkpoints

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=48)
    args = parser.parse_args()
    torch.set_num_threads(1)
    shipped = shipped_checkpoints()
    out = {}
    for name in (*SOLVERS, *LMS):
        if name not in shipped:
            continue
        started = time.perf_counter()
        results, trained = (solver_results if name in SOLVERS else lm_results)(name, args.inputs)
        tradeoffs = exit_rule_tradeoffs(results)
        budgets = sorted({1, max(1, trained // 4), max(1, trained // 2), trained, 2 * trained})
        best = best_rule_by_compute(tradeoffs, budgets)
        out[name] = {"trained": trained, "inputs": len(results), "seconds": time.perf_counter() - started,
                     "tradeoffs": tradeoffs, "best": best}
        print(f"\n{name} (T = {trained}, {len(results)} inputs, {out[name]['seconds']:.0f} s)")
        print("| budget (mean loops) | best rule | threshold | mean loops | accuracy | fixed depth at that budget |")
        print("|---|---|---|---|---|---|")
        fixed = {r["threshold"]: r["score"] for r in tradeoffs if r["rule"] == "fixed"}
        for b in best:
            print(f"| <= {b['budget']} | {b['rule']} | {b['threshold']:g} | {b['mean_loops']:.2f} | "
                  f"{100 * b['score']:.1f}% | {100 * fixed.get(float(b['budget']), float('nan')):.1f}% |")
        out[name]["held_out"] = _held_out(results, budgets)
        front = [r for r in tradeoffs if r["on_front"]]
        print("front: " + "; ".join(f"{r['rule']}@{r['threshold']:g} ({r['mean_loops']:.2f} loops, "
                                    f"{100 * r['score']:.1f}%)" for r in sorted(front, key=lambda r: r["mean_loops"])))
    folder = Path(__file__).resolve().parent
    (folder / "out").mkdir(exist_ok=True)
    (folder / "out" / "halting.json").write_text(json.dumps(out, indent=1))
    _figure(out, folder / "figures" / "halting_matched_compute.png")


def _held_out(results: list, budgets: list) -> list:
    """Thresholds chosen on the even-numbered inputs, tested on the odd ones against the fixed depth that spends at
    least as many loops on them (ceil of the rule's mean), paired per input with an exact McNemar test."""
    import math

    from jacobiscope._proportions import exact_mcnemar
    from jacobiscope.diagnostics._exit_rules import best_rule_by_compute, exit_rule_tradeoffs

    chosen_on, tested_on = results[0::2], results[1::2]
    rows = []
    print("held out: | budget | rule chosen on even inputs | its mean loops on odd inputs | accuracy | fixed depth "
          "(>= those loops) | accuracy | rule - fixed (McNemar p) |")
    for pick in best_rule_by_compute(exit_rule_tradeoffs(chosen_on), budgets):
        if pick["rule"] == "fixed":
            continue
        exits = [next(e for e in r.sequence_rules if e["rule"] == pick["rule"] and e["threshold"] == pick["threshold"])
                 for r in tested_on]
        loops = sum(e["exit"] for e in exits) / len(exits)
        depth = min(math.ceil(loops - 1e-9), len(tested_on[0].quality) - 1)
        rule_right = [bool(e["quality"]) for e in exits]
        fixed_right = [bool(r.quality[depth]) for r in tested_on]
        better = sum(a and not b for a, b in zip(rule_right, fixed_right))
        worse = sum(b and not a for a, b in zip(rule_right, fixed_right))
        p = exact_mcnemar(better, worse)
        row = {"budget": pick["budget"], "rule": pick["rule"], "threshold": pick["threshold"], "mean_loops": loops,
               "accuracy": sum(rule_right) / len(rule_right), "fixed_depth": depth,
               "fixed_accuracy": sum(fixed_right) / len(fixed_right), "better": better, "worse": worse, "p": p,
               "inputs": len(tested_on)}
        rows.append(row)
        print(f"| <= {row['budget']} | {row['rule']} @ {row['threshold']:g} | {loops:.2f} | "
              f"{100 * row['accuracy']:.1f}% | {depth} | {100 * row['fixed_accuracy']:.1f}% | "
              f"{better - worse:+d} of {len(tested_on)} (p = {p:.2g}) |")
    return rows


def _figure(out: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(out), figsize=(3.6 * len(out), 3.6), layout="constrained", squeeze=False)
    for ax, (name, data) in zip(axes[0], out.items()):
        rules = sorted({r["rule"] for r in data["tradeoffs"]})
        for rule in rules:
            points = sorted((r for r in data["tradeoffs"] if r["rule"] == rule), key=lambda r: r["mean_loops"])
            ax.plot([p["mean_loops"] for p in points], [p["score"] for p in points],
                    "--" if rule == "fixed" else "o-", lw=1, ms=3, label=rule)
        front = [r for r in data["tradeoffs"] if r["on_front"]]
        ax.scatter([r["mean_loops"] for r in front], [r["score"] for r in front], s=50, facecolors="none",
                   edgecolors="k", lw=0.8)
        ax.axvline(data["trained"], color="0.7", ls=":", lw=1)
        ax.set_title(f"{name} (T={data['trained']})", fontsize=9)
        ax.set_xlabel("mean loops spent")
        ax.set_ylabel("accuracy at exit")
    axes[0][0].legend(fontsize=7)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
