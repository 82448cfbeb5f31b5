"""Publish the trained looped LMs as checkpoint folders under hub_configs/ — how the shipped folders were made.

    python examples/ship_looped_lms.py                     # every run below whose best/ exists
    python examples/ship_looped_lms.py --only dory-addition --runs /work/runs32

Each run's ``best`` folder (weights chosen on the run's validation set) is copied, measured on fresh instances
(`jacobiscope.recipes._looped_lm_shipping.ship_looped_lm`: accuracy per loop count 1..4x the trained depth on 500
in-range and 500 harder instances, the dynamics at the trained depth on 8), and written with its card, atomically.
Then ``benchmarks/looped_lms.py`` draws the figure and prints the RESULTS.md rows.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from jacobiscope.recipes._looped_lm_shipping import ship_looped_lm

FAMILIES = {
    "hrm_text": "HRM-Text (transformers' `HrmTextForCausalLM`): two stacks, z_L <- L(z_L + z_H) L_cycles times then "
                "z_H <- H(z_H + z_L), H_cycles times, prefix-LM attention over the prompt",
    "dory": "Dory (transformers' `DoryForCausalLM`, nGPT-style normalized layers): input layers once, the shared "
            "recurrent layers looped `n_recurrent_loops` times with the input section's output re-injected, output "
            "layers once",
    "inkling2_loop": "Inkling-2 loop (transformers' `Inkling2LoopForCausalLM`, mixture-of-experts layers): the "
                     "looped layer range run `loop_num_passes` times, later passes reading gated messages from the "
                     "previous one",
}

TASKS = {
    "addition5": "5-digit addition `a+b=` with the sum written most-significant digit first (6 digits); the level "
                 "is the longest carry chain, so a harder instance needs a longer carry propagated through the "
                 "same fixed-width text",
    "addition": "8-digit addition, the level the longest carry chain",
    "reachability": "the number of hops from s to t in a small graph given as an edge list",
    "chains": "variable chains: 16 variables `a`-`p`, each defined once by another variable or a digit (`xy`: x "
              "takes y's value), in 4 chains ending in 4 different digits, then the query `|q:`; the answer is the "
              "digit q's chain ends in and the level the number of look-ups (1-4 in training, 5-12 harder), so a "
              "loop that does one look-up at a time needs more loops for a harder instance",
    "chains4q": "variable chains as in `chains`, with a query on each of the 4 chains (`|abcd:` -> 4 digits); the "
                "level is the longest-reaching query's look-ups",
    "jumps": "jumps: 32 cells of digits 1-3 and 10 different letters, then `:`; a walk starts at the last cell and "
             "moves left by each digit it stands on until it reaches a letter, the answer; the level is the number "
             "of jumps (1-4 in training, 5-12 harder), each resolved after the one before it",
    "parity": "parity: 24 cells, blanks `-` then 1-24 bits, then `:`; the answer is the parity of the bits and the "
              "level the number of bits (1-8 in training, 9-24 harder), all prompts the same length",
    "digitsum": "digit sums: 16 cells, blanks `-` then 1-16 digits, then `:`; the answer is the last digit of their "
                "sum and the level the number of digits (1-6 in training, 7-16 harder), all prompts the same length",
}

#: run folder name -> shipped short name (runs absent on this machine are skipped)
RUNS = {
    "looped-lm-hrm-text-addition": "hrm-text-addition",
    "looped-lm-dory-addition": "dory-addition",
    "looped-lm-inkling2-loop-addition": "inkling2-loop-addition",
    "looped-lm-dory-addition-shallow": "dory-addition-shallow",
    "looped-lm-dory-addition-h256": "dory-addition-2m",
    "looped-lm-hrm-text-addition-h256": "hrm-text-addition-3m",
    "looped-lm-inkling2-loop-addition-h160": "inkling2-loop-addition-2m",
    "looped-lm-dory-chains": "dory-chains",
    "looped-lm-dory-jumps": "dory-jumps",
    "looped-lm-dory-chains4q": "dory-chains4q",
    "looped-lm-dory-parity": "dory-parity",
    "looped-lm-dory-parity-seed1": "dory-parity-seed1",
    "looped-lm-dory-digitsum": "dory-digitsum",
}
#: The issue's bar: a checkpoint below it at its trained depth on in-range instances is not shipped.
MIN_EXACT_MATCH = 0.90


def training_loops(recipe: dict) -> str:
    low, high = recipe.get("loops_min"), recipe.get("loops_max")
    if low is not None and high is not None and high > low:
        return f"a loop count drawn uniformly from {low}-{high} for every batch (trained depth {recipe['loops']})"
    return f"a FIXED loop count of {recipe['loops']} (the trained depth)"


def description(recipe: dict) -> str:
    family = FAMILIES.get(recipe.get("family"), recipe.get("family"))
    task = TASKS.get(recipe.get("task"), recipe.get("task"))
    window = recipe.get("attention_window")
    if window is not None:
        family += (f"; every layer a sliding-window layer over the last {window} tokens (itself included), so a "
                   f"token hears {window - 1} cell(s) further per layer and the loop count bounds how far "
                   "information travels")
    return (f"{family}; hidden size {recipe.get('hidden_size')}. Trained from scratch on CPU with "
            f"`jacobiscope.recipes.looped_lm` on {task}, at {training_loops(recipe)}, with EMA weights and the "
            "checkpoint chosen on fresh validation instances.")


def limitations(recipe: dict) -> list[str]:
    return ["A small model trained on one shared CPU thread (minutes to hours) on one synthetic task; it knows "
            "nothing else.",
            "Harder-than-trained instances keep the input length fixed, so they test depth, not length "
            "generalization.",
            f"Why this run: {recipe.get('extra', {}).get('why', '-')}"]


def training_record(run: Path) -> dict:
    """The run's train_summary.json; for a run stopped by hand before it finished (no summary), what its validation
    history shows: the steps trained, the checkpoint chosen and the wall clock from its first to its last validation
    (so a card never shows a blank training cost, nor a finished run's fields it does not have)."""
    summary = run / "train_summary.json"
    if summary.is_file():
        return json.loads(summary.read_text())
    history = json.loads((run / "validation_history.json").read_text()) if (run / "validation_history.json").is_file() \
        else []
    if not history:
        return {}
    from datetime import datetime

    best = max(history, key=lambda row: row["exact_match"])
    span = datetime.fromisoformat(history[-1]["time"]) - datetime.fromisoformat(history[0]["time"])
    return {"finished": False, "steps_trained": history[-1]["step"], "best_step": best["step"],
            "best_exact_match": best["exact_match"], "best_weights": best["weights"],
            "hours_between_first_and_last_validation": round(span.total_seconds() / 3600, 2),
            "note": "stopped by hand before max_steps / the target (the time available); the card's model is the "
                    "best validation checkpoint up to here"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default="/work/runs32", help="the folder holding the run folders")
    parser.add_argument("--only", default=None, help="ship only this short name")
    parser.add_argument("--n", type=int, default=500)
    args = parser.parse_args()
    for run, name in RUNS.items():
        best = Path(args.runs) / run / "best"
        if (args.only and name != args.only) or not (best / "model.safetensors").is_file():
            continue
        chosen = json.loads((best / "validation.json").read_text()) if (best / "validation.json").is_file() else {}
        if chosen.get("exact_match", 1.0) < MIN_EXACT_MATCH:
            print(f"not shipping {name}: its best validation exact match is {chosen['exact_match']:.3f} "
                  f"< {MIN_EXACT_MATCH}")
            continue
        recipe = json.loads((best.parent / "recipe.json").read_text())
        training = training_record(best.parent)
        folder = ship_looped_lm(best, name, description=description(recipe), limitations=limitations(recipe),
                                n=args.n, training=training)
        results = json.loads((folder / "results.json").read_text())
        print(f"shipped {name}: {100 * results['train']['accuracy'][str(results['configured'])]:.1f}% at its "
              f"trained depth {results['configured']} -> {folder}")


if __name__ == "__main__":
    main()
