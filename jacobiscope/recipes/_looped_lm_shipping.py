"""Ship a trained looped LM as a checkpoint folder under ``hub_configs/``: its weights, config and tokenizer, the
accuracy per loop count from 1 to 4x the trained depth on in-range and harder-than-trained instances (the records
`jacobiscope tasks eval` writes, which a test re-checks), the loop where accuracy peaks and where it collapses, and
the dynamics at the trained depth; a model card says all of it.

Example::

    >>> from jacobiscope.recipes._looped_lm_shipping import curve_summary
    >>> curve_summary({1: 0.0, 2: 0.5, 3: 1.0, 4: 0.9, 6: 0.2}, configured=3)["collapse_loop"]
    6

How a folder was made is in ``examples/ship_looped_lms.py``.
"""
from __future__ import annotations

import json
import logging
import shutil
import statistics
from pathlib import Path

import torch

from .._io import atomic_write_text
from .._proportions import wilson_interval

logger = logging.getLogger(__name__)

__all__ = ["curve_summary", "measure_looped_lm", "ship_looped_lm", "SHIP_SEED", "CARD_INSTANCES"]

#: The seed of the card's instances (in-range: SHIP_SEED, harder: + 1, dynamics: + 2): neither the training
#: streams (the recipe's seed) nor the validation set that chose the best checkpoint (its ``validation_seed``,
#: refused if equal), so the card measures instances the model was neither trained nor selected on.
SHIP_SEED = 5_000_003
#: Instances per split on the card (a 95% Wilson interval of +/- 4.4 points at worst).
CARD_INSTANCES = 500
#: Inputs of the dynamics measurement at the trained depth.
DYNAMICS_INSTANCES = 8
#: Copied from a run's checkpoint folder; everything else on the card is measured here.
_FILES = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
          "special_tokens_map.json")


def curve_summary(accuracy: dict, configured: int | None) -> dict:
    """Where an accuracy-per-loop curve peaks, where it collapses (the first loop after the peak below half of it),
    and how it stands past the trained depth (the last loop against the trained depth)."""
    curve = {int(loop): float(value) for loop, value in accuracy.items()}
    loops = sorted(curve)
    peak = max(curve.values())
    peak_loop = next(loop for loop in loops if curve[loop] == peak)
    collapse = next((loop for loop in loops if loop > peak_loop and curve[loop] < peak / 2), None)
    at_depth = curve.get(int(configured)) if configured is not None else None
    last = loops[-1]
    return {"peak_loop": peak_loop, "peak": peak, "collapse_loop": collapse, "at_configured": at_depth,
            "last_loop": last, "at_last": curve[last],
            "past_depth": None if at_depth is None else _past_depth(at_depth, curve[last], collapse)}


def _past_depth(at_depth: float, at_last: float, collapse) -> str:
    if collapse is not None:
        return "collapses"
    if at_last >= at_depth + 0.01:
        return "keeps improving"
    return "holds" if at_last >= at_depth - 0.05 else "degrades"


def _split(evaluation, configured) -> dict:
    n = evaluation.n
    accuracy = {int(k): float(v) for k, v in evaluation.accuracy.items()}
    intervals = {k: wilson_interval(round(v * n), n) for k, v in accuracy.items()}
    return {"levels": list(evaluation.levels), "n": n, "seed": evaluation.seed, "accuracy": accuracy,
            "interval95": intervals, "per_level": {int(k): {int(lv): float(a) for lv, a in v.items()}
                                                   for k, v in evaluation.per_level.items()},
            "summary": curve_summary(accuracy, configured), "seconds": evaluation.seconds}


def _dynamics(model, task, tokenizer, configured: int, recurrence: str, seed: int, instances: int) -> dict:
    """Verdict, late-half lambda_max and ||J||_2 at the trained depth on a few in-range instances (teacher-forced
    text, as scored), through the model's own loop run to 4x the trained depth."""
    import jacobiscope

    from ..data.tasks import encode

    examples = task.generate(instances, seed=seed)
    batch = encode(examples, tokenizer)
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    loops = max(4 * configured, 16)
    report = jacobiscope.analyze(model, inputs, loops=loops, recurrence=recurrence, progress=False,
                                 diagnostics=["spectral_norm", "lyapunov"])
    frame = report.to_dataframe()
    lens = jacobiscope.loop_lens(model, inputs, loops=loops, recurrence=recurrence, jacobian_every=configured,
                                 spectral_radius=False)
    at_depth = [float(norm) for norm in lens.spectral_norm[:, configured]]
    lambdas = [float(v) for v in frame["lambda_max_late"] if v == v]
    return {"instances": len(examples), "loops": loops, "recurrence": recurrence,
            "verdicts": {str(k): int(v) for k, v in frame["regime"].value_counts().items()},
            "lambda_max_late_median": statistics.median(lambdas) if lambdas else None,
            "lambda_max_late": lambdas,
            "spectral_norm_at_depth_median": statistics.median(at_depth), "spectral_norm_at_depth": at_depth,
            "max_spectral_norm_median": float(frame["max_spectral_norm"].median()),
            "answer_flip_loop": [lens.answer_flip_loop(i) for i in range(len(examples))],
            "expansive_loop": [lens.expansive_loop(i) for i in range(len(examples))]}


def measure_looped_lm(model, task, *, tokenizer=None, n: int = CARD_INSTANCES, seed: int = SHIP_SEED,
                      loops=None, dynamics_instances: int = DYNAMICS_INSTANCES) -> tuple[dict, dict]:
    """The card's measurements: accuracy per loop count 1..4x the trained depth on ``n`` fresh in-range and ``n``
    harder instances, and the dynamics at the trained depth. Returns (results, {split: TaskEvaluation})."""
    from ._looped_lm_eval import evaluate_task
    from ._looped_lm_eval_checks import loop_plan, resolve_task, resolve_tokenizer

    task, tokenizer = resolve_task(task), resolve_tokenizer(model, tokenizer)
    plan = loop_plan(model)
    configured = int(getattr(model.config, plan.attribute))
    loops = list(loops) if loops is not None else list(range(1, 4 * configured + 1))
    evaluations = {split: evaluate_task(model, task, loops=loops, n=n, levels=split, tokenizer=tokenizer,
                                        seed=seed + offset)
                   for offset, split in enumerate(("train", "harder"))}
    with torch.no_grad():
        parameters = sum(p.numel() for p in model.parameters())
    results = {"task": task.name, "family": model.config.model_type, "loop_knob": plan.attribute,
               "configured": configured, "parameters": parameters, "loops": loops,
               **{split: _split(evaluation, configured) for split, evaluation in evaluations.items()},
               "dynamics": _dynamics(model, task, tokenizer, configured, plan.recurrence, seed + 2,
                                         dynamics_instances)}
    return results, evaluations


def ship_looped_lm(source, name: str, *, description: str, limitations: list[str], destination=None,
                   n: int = CARD_INSTANCES, training: dict | None = None,
                   dynamics_instances: int = DYNAMICS_INSTANCES) -> Path:
    """Copy a trained run's ``best`` folder into ``hub_configs/<name>`` (or ``destination``), measure it, and write
    results.json, the two eval records (eval-train.json, eval-harder.json) and the model card; the folder appears
    whole or not at all (built as ``<name>.staging``, renamed)."""
    from ..hub import load_pretrained
    from ._looped_lm_card import write_looped_lm_card
    from .shipping import publish, staging_folder

    source = Path(source)
    recipe_path = source.parent / "recipe.json"
    recipe = json.loads(recipe_path.read_text()) if recipe_path.is_file() else {}
    if recipe.get("validation_seed") in (SHIP_SEED, SHIP_SEED + 1, SHIP_SEED + 2):
        raise ValueError(f"the run chose its best checkpoint on seed {recipe['validation_seed']}, which the card "
                         "would measure on — train with another validation_seed")
    folder, staging = staging_folder(name, destination)
    for file in _FILES:
        if (source / file).is_file():
            shutil.copy2(source / file, staging / file)
    model = load_pretrained(staging).eval()
    task = recipe.get("task") or (training or {}).get("task")
    results, evaluations = measure_looped_lm(model, task, n=n, dynamics_instances=dynamics_instances)
    for split, evaluation in evaluations.items():
        evaluation.model = name
        evaluation.to_json(staging / f"eval-{split}.json")
    atomic_write_text(staging / "results.json", json.dumps(results, indent=1))
    write_looped_lm_card(staging, name=name, recipe=recipe, results=results, training=training or {},
                         description=description, limitations=limitations)
    publish(staging, folder)
    logger.info("shipped %s: %.1f%% at its trained depth %d", name,
                100 * results["train"]["accuracy"][results["configured"]], results["configured"])
    return folder
