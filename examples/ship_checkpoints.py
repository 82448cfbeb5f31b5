"""Publish a trained Sudoku run as a checkpoint folder under hub_configs/ — how the shipped folders were made.

    python examples/ship_checkpoints.py itrsa-sudoku runs/itrsa/best
    python examples/ship_checkpoints.py akorn-sudoku runs/akorn-units/best

`ship_checkpoint` copies the weights and config, measures the model (ID board accuracy on the 1,000 SATNet test
puzzles and OOD on the first 2,000 RRN puzzles at T = 16 / 32 / 64 / 128; AKOrN also with K=16 energy votes on the
first 200 puzzles of each split; the max Lyapunov exponent and the loop's Jacobian spectral norm on 16 ID puzzles),
writes results.json and the model card (no code: `jacobiscope hub prepare` writes it for an upload), and replaces
the folder atomically.
The run folder's ``recipe.json`` and ``best/accuracy.json`` describe the training in the card.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from jacobiscope.recipes.shipping import ship_checkpoint

DESCRIPTIONS = {
    "itrsa-sudoku": (
        "ItrSA, the looped self-attention of Tomihari & Karakida (NeurIPS 2025) in its paper form: "
        "`X <- RMSNorm(X + eta * (MSA(X) + C))` with `C` the embedded puzzle (digit + row/column/box embeddings) "
        "injected at every loop, eta = 1, one attention block of 8 heads on 128 channels looped {training_loops} at "
        "training, and a LayerNorm + linear readout to 9 digits per cell. Attention only: no MLP inside the loop. "
        "About 72k parameters."
    ),
    "akorn-sudoku": (
        "AKOrN (artificial Kuramoto oscillatory neurons, Miyato et al., ICLR 2025) for Sudoku: 32 oscillators of "
        "dimension N = 4 per cell (128 channels) on unit spheres, updated {training_loops} at training by "
        "`x <- normalize(x + gamma * (Omega x + y - <y, x> x))` with `y = J(x) + c`, where J is 8-head "
        "self-attention over the 81 cells (2-D rotary positions), c the embedded puzzle (digit + row/column/box "
        "embeddings), Omega a learnable global rotation and gamma a learnable step. Givens start at their "
        "embedding, blanks at Gaussian noise; a phase-invariant readout (norm over each oscillator) and a small MLP "
        "give 9 digits per cell. Energy voting: `model.solve(puzzles, votes=K)` runs K noise draws and keeps the one "
        "with the lowest summed pseudo-energy `-Tr(x^T y)`."
    ),
}

# The general-regime checkpoints are the same models trained on generated puzzles as well (the card says which).
DESCRIPTIONS["itrsa-sudoku-general"] = DESCRIPTIONS["itrsa-sudoku"]
DESCRIPTIONS["akorn-sudoku-general"] = DESCRIPTIONS["akorn-sudoku"]


def training_loops(recipe: dict) -> str:
    """How the recipe loops at training: a fixed T, or T drawn per batch from a range."""
    low, high = recipe.get("loops_min"), recipe.get("loops_max")
    if low is not None and high is not None and high > low:
        return f"a number of times drawn uniformly from {low}-{high} for each batch (odd and even)"
    return f"T = {recipe.get('loops', 16)} times"


LIMITATIONS = {
    "itrsa-sudoku": [
        "Trained on CPU for a short budget (see the recipe); the AKOrN repo trains its baselines for 100 epochs on GPU.",
        "{ood_note}",
        "Row/column/box position embeddings give the model the Sudoku units; the paper does not say how its ItrSA "
        "encodes position.",
        "The paper's hyper-parameters (width, eta, regularization) are not published; these are ours.",
        "Deterministic: energy voting (several noise draws) does not apply to ItrSA.",
    ],
    "akorn-sudoku": [
        "128 channels, trained on a 2-core CPU for a short budget; the AKOrN repo's configuration is 512 channels "
        "for 100 epochs on GPU (its table: 100% ID, 51.7% OOD at T=128; 81.6% OOD with K=100 votes).",
        "The repo's geometric transform attention (GTA) is replaced by 2-D rotary positions on queries and keys, and "
        "row/column/box embeddings are added to the conditioning c: without them (the repo form with rotary only) "
        "our run was at 64% blank-cell accuracy at step 1,250 and had solved no board by step 1,900, since relative row and "
        "column offsets cannot say whether two cells share a box.",
        "{ood_note} Voted figures (K=16) use the first 200 puzzles of each split, because voting costs K forward "
        "passes.",
        "Stochastic: blanks start from noise, so a single forward pass depends on the seed (`solve(..., seed=0)`).",
        # Measured statements (what the model reaches, where it peaks) are added to the card by hand after shipping:
        # they belong to one run, not to the architecture.
    ],
}


def training_summary(run: Path, recipe: dict) -> str:
    best = json.loads((run / "best" / "accuracy.json").read_text())
    warmup = recipe.get("warmup_steps", 0)
    summary = run / "train_summary.json"
    trained = json.loads(summary.read_text())["steps"] if summary.is_file() else best["step"]
    return (f"Adam (lr {recipe.get('learning_rate')}, {warmup} warm-up steps, constant), batch "
            f"{recipe.get('batch_size')}, gradient clipping {recipe.get('max_grad_norm', 1.0)}, cross-entropy over all "
            f"81 cells, EMA of the weights (beta {recipe.get('ema_beta', 0.995)} every {recipe.get('ema_every', 10)} "
            f"steps); trained {trained} steps on a 2-core CPU; the published "
            f"weights are the {best['weights']} weights of step {best['step']} ({best['epoch']:.1f} epochs), chosen by "
            + (f"mean board accuracy at T={recipe.get('validation_loops') or [recipe.get('loops')]} on "
               f"{recipe.get('eval_limit')} generated validation puzzles ({recipe.get('validation_givens', (31, 42))} "
               "givens; no test puzzle was used to choose weights)."
               if "validation_board_accuracy" in best else
               f"board accuracy on the first {recipe.get('eval_limit')} ID test puzzles."))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name", choices=sorted(DESCRIPTIONS))  # the protocol names replace the shipped ones
    parser.add_argument("source", help="A run's best/ folder (config.json + model.safetensors).")
    parser.add_argument("--ood", type=int, default=2000)
    options = parser.parse_args()
    source = Path(options.source)
    recipe = json.loads((source.parent / "recipe.json").read_text())
    votes = (1, 16) if recipe.get("arch") == "akorn" else (1,)
    description = DESCRIPTIONS[options.name].format(training_loops=training_loops(recipe))
    ood_note = ("Out-of-distribution figures use all 18,000 RRN test puzzles." if options.ood >= 18000 else
                f"Out-of-distribution figures use the first {options.ood:,} of the 18,000 RRN test puzzles to keep the "
                "measurement short.")
    limitations = [line.format(ood_note=ood_note)
                   for line in LIMITATIONS.get(options.name, LIMITATIONS[options.name.replace("-general", "")])]
    folder = ship_checkpoint(source, options.name, description=description, limitations=limitations, votes=votes,
                             ood_limit=options.ood, training={"summary": training_summary(source.parent, recipe)},
                             vote_limit=200)
    results = json.loads((folder / "results.json").read_text())
    for split in ("id", "ood", "fresh"):
        for votes_key, per_loop in results[split].items():
            row = " / ".join(f"{100 * v['board_accuracy']:.1f}" for v in per_loop.values())
            print(f"{options.name} {split} {votes_key}: T={'/'.join(per_loop)}: {row} %")
    print("dynamics:", results["dynamics_id"])


if __name__ == "__main__":
    main()
