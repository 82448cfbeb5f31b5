"""The model card of a shipped looped LM: what it is, how it was trained, and what was measured — accuracy per loop
count on in-range and harder instances (95% Wilson intervals), where it peaks and collapses, the dynamics at the
trained depth, and the commands that reproduce every number.

Example::

    >>> from jacobiscope.recipes._looped_lm_card import accuracy_rows
    >>> accuracy_rows({"train": {"accuracy": {1: 0.5}, "interval95": {1: (0.4, 0.6)}},
    ...                "harder": {"accuracy": {1: 0.25}, "interval95": {1: (0.2, 0.3)}}}, configured=1)
    ['| **1** (trained) | 50.0% [40.0, 60.0] | 25.0% [20.0, 30.0] |']
"""
from __future__ import annotations

import json
from pathlib import Path

from .._io import atomic_write_text

__all__ = ["write_looped_lm_card", "accuracy_rows"]


def _cell(split: dict, loop: int) -> str:
    low, high = split["interval95"][loop]
    return f"{100 * split['accuracy'][loop]:.1f}% [{100 * low:.1f}, {100 * high:.1f}]"


def accuracy_rows(results: dict, configured: int) -> list[str]:
    """One table row per loop count: in-range and harder exact match with their 95% intervals."""
    rows = []
    for loop in sorted(results["train"]["accuracy"]):
        label = f"**{loop}** (trained)" if loop == configured else str(loop)
        rows.append(f"| {label} | {_cell(results['train'], loop)} | {_cell(results['harder'], loop)} |")
    return rows


def _curve_line(split_name: str, split: dict) -> str:
    summary = split["summary"]
    collapse = (f"collapses below half the peak at loop {summary['collapse_loop']}"
                if summary["collapse_loop"] is not None else "does not collapse up to the last loop measured")
    return (f"- {split_name} (levels {split['levels'][0]}-{split['levels'][1]}, {split['n']} instances, seed "
            f"{split['seed']}): peaks at loop {summary['peak_loop']} ({100 * summary['peak']:.1f}%), "
            f"{100 * summary['at_configured']:.1f}% at the trained depth, {100 * summary['at_last']:.1f}% at loop "
            f"{summary['last_loop']}; {collapse} — past its trained depth it **{summary['past_depth']}**.")


def _dynamics_lines(dynamics: dict, configured: int) -> list[str]:
    verdicts = ", ".join(f"{count} {verdict}" for verdict, count in sorted(dynamics["verdicts"].items()))
    lam = dynamics["lambda_max_late_median"]
    return [f"Measured with `jacobiscope.analyze` and `jacobiscope.loop_lens` through the model's own loop (recurrence "
            f"`{dynamics['recurrence']}`) on {dynamics['instances']} in-range instances (their teacher-forced text, as "
            f"scored), run to {dynamics['loops']} loops:", "",
            f"- verdicts: {verdicts}",
            f"- lambda_max (late half, median over instances): {'-' if lam is None else f'{lam:+.3f}'}",
            f"- ||J||_2 at the trained depth (loop {configured}), median: {dynamics['spectral_norm_at_depth_median']:.3g}"
            f"; the largest along the run, median: {dynamics['max_spectral_norm_median']:.3g}",
            f"- the answer last flips at loops {dynamics['answer_flip_loop']}; expansive from loops "
            f"{dynamics['expansive_loop']} (None: never)"]


def write_looped_lm_card(folder, *, name: str, recipe: dict, results: dict, training: dict, description: str,
                         limitations: list[str]) -> Path:
    """Write ``README.md`` (Hub metadata header + measured results) into ``folder``."""
    folder, configured = Path(folder), results["configured"]
    last, task = max(results["loops"]), results["task"]
    header = ["---", "library_name: transformers", "license: apache-2.0", "tags:", "- jacobiscope",
              "- looped-transformer", f"- {results['family'].replace('_', '-')}", f"- {task}",
              "metrics:", "- exact_match", "pipeline_tag: text-generation", "---", ""]
    body = [f"# {name}", "", description, "",
            f"{results['parameters']:,} parameters. Loads offline with plain transformers (no remote code): "
            "`AutoModelForCausalLM.from_pretrained(folder)` and `AutoTokenizer.from_pretrained(folder)`, or "
            f"`jacobiscope.load_pretrained(\"{name}\")` by short name.", "",
            "## Accuracy per loop count", "",
            f"Exact match (every answer token and `<eos>` right under teacher forcing, which is greedy decoding's "
            f"exact match) on fresh `{task}` instances; loop count = `config.{results['loop_knob']}`, the trained "
            f"depth is {configured}. 95% Wilson intervals in brackets.", "",
            "| loops | in-range | harder than trained |", "|---|---|---|", *accuracy_rows(results, configured), "",
            _curve_line("in-range", results["train"]), _curve_line("harder", results["harder"]), "",
            "## Dynamics at the trained depth", "", *_dynamics_lines(results["dynamics"], configured), "",
            "## Reproduce", "", "```bash",
            *[f"jacobiscope tasks eval {name} --task {task} --loops 1-{last} --levels {split} --n "
              f"{results[split]['n']} --seed {results[split]['seed']} --out eval-{split}.json"
              for split in ("train", "harder")], "```", "",
            "The records of that run are `eval-train.json` and `eval-harder.json` in this folder (one per instance: "
            "prompt, answer, level, correct per loop count); `tests/test_looped_lm_eval.py` re-checks a slice.", "",
            "## Recipe and training", "", "```json", json.dumps(recipe, indent=1), "```", ""]
    if training:
        body += ["```json", json.dumps(training, indent=1), "```", ""]
    body += ["## Limitations", "", *[f"- {line}" for line in limitations], ""]
    path = folder / "README.md"
    atomic_write_text(path, "\n".join(header + body))
    return path
