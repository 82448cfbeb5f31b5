"""Experiment: fine-tuning (or training) the reference ItrSA Sudoku solver with and without the spectral regularizer,
and with E-multi.

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/exp_regularizers.py               # the run in RESULTS.md
    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/exp_regularizers.py --quick       # tiny: checks it runs

By default every configuration fine-tunes the shipped ``itrsa-sudoku`` checkpoint (128 channels, 8 heads, T=16) with
its recipe (examples/recipes/itrsa-sudoku.json: batch 64, symmetry augmentation) at lr 5e-4 (50 warm-up steps) for
``--steps`` optimizer steps, with the same seeds; ``--init-from none --steps 2500 --learning-rate 1e-3`` trains from
scratch instead. Only the regularizer differs:

- ``none``: the plain recipe;
- ``spec``: + ``spec_reg_weight`` x R_spec (sigma_max(W)^2 - 1)^2 over W_Q, W_K, W_V, W_O and ||b||^4, persistent
  power iteration, one iteration per step);
- ``e_multi``: + ``energy_reg_weight`` x the E-multi distance (skew parts of each head's QK and value maps).

Each run trains with `jacobiscope.recipes.train_sudoku` (resumable: an interrupted experiment continues where it
stopped) and is then measured with `measure_checkpoint` on its final weights (the raw weights after the last step:
no selection on the test set, so every regularizer gets its whole budget): ID board accuracy on the full
SATNet test set (1,000) and OOD on the first ``--ood`` RRN puzzles at T = 16 / 32 / 64, the max Lyapunov exponent and
the Jacobian spectral norm of the loop on 16 ID puzzles, and the weights' spectral statistics. Writes
benchmarks/out/regularizers.json (regularizers_quick.json with --quick) and prints a markdown table.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch

from jacobiscope._io import atomic_write_text
from jacobiscope.recipes.shipping import measure_checkpoint
from jacobiscope.recipes.sudoku import SudokuRecipe, train_sudoku
from jacobiscope.training import energy_penalty, spectral_penalty
from jacobiscope.training.regularizers import spectral_targets

ROOT = Path(__file__).resolve().parents[1]


def configurations(spec_weight: float, energy_weight: float) -> dict:
    return {
        "none": {},
        "spec": {"spec_reg_weight": spec_weight},
        "e_multi": {"energy_reg": "e_multi", "energy_reg_weight": energy_weight},
    }


def recipe_steps(recipe: SudokuRecipe) -> int:
    return recipe.max_steps


def weight_statistics(model) -> dict:
    """sigma_max of each regularized weight, the penalties themselves (exact), for the record."""
    with torch.no_grad():
        sigmas = [float(torch.linalg.matrix_norm(target.weight().detach().double(), 2)) for target in spectral_targets(model)]
        return {"sigma_max_mean": statistics.fmean(sigmas), "sigma_max_max": max(sigmas), "sigma_max_min": min(sigmas),
                "r_spec": float(spectral_penalty(model)), "e_multi_distance": float(energy_penalty(model, "e_multi"))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000, help="Optimizer steps per run (same for all).")
    parser.add_argument("--init-from", default="itrsa-sudoku",
                        help="Fine-tune these weights (shipped name or folder); 'none' trains from scratch.")
    parser.add_argument("--learning-rate", type=float, default=5e-4)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--spec-weight", type=float, default=1e-3)
    parser.add_argument("--energy-weight", type=float, default=1e-3)
    parser.add_argument("--only", nargs="+", default=None, help="Run only these configurations.")
    parser.add_argument("--ood", type=int, default=1000, help="RRN puzzles for the OOD accuracy.")
    parser.add_argument("--runs", default=str(ROOT / "runs" / "regularizers"), help="Where the training runs go.")
    parser.add_argument("--out", default=None, help="The JSON record (default benchmarks/out/regularizers.json).")
    parser.add_argument("--quick", action="store_true", help="Tiny model, few steps: checks that it runs.")
    options = parser.parse_args()

    base = SudokuRecipe.from_json(ROOT / "examples" / "recipes" / "itrsa-sudoku.json")
    init_from = None if options.init_from.lower() == "none" else options.init_from
    base = replace(base, max_steps=options.steps, save_steps=250, eval_limit=300, init_from=init_from,
                   learning_rate=options.learning_rate, warmup_steps=50 if init_from else base.warmup_steps)
    loops, ood = (16, 32, 64), options.ood
    runs = Path(options.runs)
    if options.quick:
        base = replace(base, hidden_size=16, num_heads=2, loops=4, max_steps=20, save_steps=10, eval_limit=20,
                       batch_size=16, train_limit=256, warmup_steps=5, ema_start=5, ema_every=1, init_from=None)
        loops, ood, runs = (4, 8), 50, runs.with_name(runs.name + "_quick")
    chosen = configurations(options.spec_weight, options.energy_weight)
    if options.only:
        chosen = {name: chosen[name] for name in options.only}

    out_path = ROOT / "benchmarks" / "out" / ("regularizers_quick.json" if options.quick else "regularizers.json")
    out_path = Path(options.out) if options.out else out_path
    record = json.loads(out_path.read_text()) if out_path.exists() else {"runs": {}}
    record.update({"recipe": asdict(base), "configurations": chosen, "loops": list(loops), "ood_puzzles": ood,
                   "machine": f"{platform.processor() or platform.machine()}, torch {torch.__version__}, "
                              f"{torch.get_num_threads()} threads"})
    if base.init_from and "start" not in record["runs"]:  # the common starting point, measured the same way
        from jacobiscope.hub import load_pretrained

        start = load_pretrained(base.init_from).eval()
        record["runs"]["start"] = {"train": {"steps": 0}, "measured": measure_checkpoint(start, loops=loops, ood_limit=ood),
                                   "weights": weight_statistics(start), "init_from": base.init_from}
        atomic_write_text(out_path, json.dumps(record, indent=1))
    for seed in options.seeds:
        for name, regularizer in chosen.items():
            key = f"{name}/seed{seed}"
            if record["runs"].get(key, {}).get("train", {}).get("steps") == recipe_steps(base):
                continue  # measured already (a re-run adds what is missing)
            recipe = replace(base, seed=seed, **regularizer)
            started = time.perf_counter()
            summary = train_sudoku(recipe, runs / f"{name}-seed{seed}")
            from jacobiscope.models import ItrSAForSudoku

            model = ItrSAForSudoku.from_pretrained(runs / f"{name}-seed{seed}" / "final").eval()
            measured = measure_checkpoint(model, loops=loops, ood_limit=ood, dynamics_puzzles=16)
            record["runs"][key] = {"train": summary, "measured": measured, "weights": weight_statistics(model),
                                   "accuracy_history": json.loads((runs / f"{name}-seed{seed}" / "accuracy_history.json").read_text()),
                                   "seconds": time.perf_counter() - started}
            out_path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(out_path, json.dumps(record, indent=1))
            print(f"[regularizers] {key} done", flush=True)
    print(table(record, loops))


def table(record: dict, loops) -> str:
    head = ("| run | ID " + " | ID ".join(f"T={t}" for t in loops) + " | OOD " + " | OOD ".join(f"T={t}" for t in loops)
            + " | max Lyapunov (T=train) | ‖J‖ start → end | mean σ_max(W) | R_spec | E-multi dist. |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for key, run in record["runs"].items():
        measured, dynamics, weights = run["measured"], run["measured"]["dynamics_id"], run["weights"]
        cells = [f"{100 * measured['id']['votes=1'][str(t)]['board_accuracy']:.1f}%" for t in loops]
        cells += [f"{100 * measured['ood']['votes=1'][str(t)]['board_accuracy']:.1f}%" for t in loops]
        cells += [f"{dynamics['max_lyapunov_mean']:+.3f} ± {dynamics['max_lyapunov_std']:.3f}",
                  f"{dynamics['spectral_norm_start_mean']:.2f} → {dynamics['spectral_norm_end_mean']:.2f}",
                  f"{weights['sigma_max_mean']:.2f}", f"{weights['r_spec']:.1f}", f"{weights['e_multi_distance']:.1f}"]
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
