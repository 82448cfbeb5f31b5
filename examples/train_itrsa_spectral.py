"""Train the ItrSA Sudoku solver with jacobiscope's regularizers and watch its dynamics while it learns.

    python examples/train_itrsa_spectral.py                                   # small defaults: about a minute on a CPU
    python examples/train_itrsa_spectral.py --spec_reg_weight 1e-3 --jacobian_reg_weight 1e-2 --max_steps 500
    python examples/train_itrsa_spectral.py --energy_reg e_multi --energy_reg_weight 1e-2    # see it cost accuracy
    python examples/train_itrsa_spectral.py --help                            # every Trainer / regularizer flag

Data: SATNet training rows (the copy bundled with jacobiscope, or ``$JACOBISCOPE_SUDOKU_DATA``); the held-out
puzzles are the last training rows, so the reported test set is never used for tuning. At each evaluation the `LyapunovCallback` logs the largest Lyapunov exponent and the
Jacobian's spectral norm of the loop on a fixed probe batch, and the `PseudoEnergyCallback` the pseudo-energy along
the loop; the train logs carry the penalties and spectral norms. The end prints board accuracy at 1x and 2x the
training loops.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import torch
from transformers import HfArgumentParser

from jacobiscope.data import sudoku
from jacobiscope.models import ItrSAConfig, ItrSAForSudoku
from jacobiscope.training import (
    LyapunovCallback,
    PseudoEnergyCallback,
    SpectralRegTrainer,
    SpectralRegTrainingArguments,
)


@dataclass
class ModelArguments:
    hidden_size: int = field(default=32, metadata={"help": "Channels per cell."})
    num_heads: int = field(default=4, metadata={"help": "Attention heads."})
    loops: int = field(default=8, metadata={"help": "Loops at training (evaluation also runs 2x)."})
    eta: float = field(default=1.0, metadata={"help": "Step size of X <- Norm(X + eta (MSA(X) + C))."})
    norm: str = field(default="rmsnorm", metadata={"help": "rmsnorm | layernorm | none."})
    attention: str = field(default="standard", metadata={"help": "standard | e_single | e_multi."})
    train_size: int = field(default=1024, metadata={"help": "Training puzzles."})
    eval_size: int = field(default=128, metadata={"help": "Held-out puzzles (evaluation loss and accuracy)."})
    probe_size: int = field(default=8, metadata={"help": "Puzzles of the fixed probe batch of the callbacks."})
    lyapunov_steps: int = field(default=32, metadata={"help": "Loops the Lyapunov exponent is averaged over."})


@dataclass
class ExampleTrainingArguments(SpectralRegTrainingArguments):
    """Small defaults for a CPU; every TrainingArguments / regularizer flag can be overridden."""

    output_dir: str = field(default="runs/itrsa_spectral", metadata={"help": "Where checkpoints go."})
    max_steps: int = field(default=200, metadata={"help": "Optimizer steps."})
    per_device_train_batch_size: int = field(default=32, metadata={"help": "Batch size."})
    per_device_eval_batch_size: int = field(default=64, metadata={"help": "Evaluation batch size."})
    learning_rate: float = field(default=1e-3, metadata={"help": "Adam learning rate."})
    warmup_steps: int = field(default=20, metadata={"help": "Learning-rate warm-up steps."})
    lr_scheduler_type: str = field(default="constant_with_warmup", metadata={"help": "Learning-rate schedule."})
    logging_steps: int = field(default=20, metadata={"help": "Log every n steps."})
    eval_strategy: str = field(default="steps", metadata={"help": "When to evaluate."})
    eval_steps: int = field(default=100, metadata={"help": "Evaluate every n steps."})
    save_strategy: str = field(default="steps", metadata={"help": "When to save checkpoints."})
    save_steps: int = field(default=100, metadata={"help": "Save every n steps."})
    save_total_limit: int = field(default=2, metadata={"help": "Checkpoints kept."})
    report_to: str = field(default="none", metadata={"help": "Reporting integrations."})
    use_cpu: bool = field(default=not torch.cuda.is_available(), metadata={"help": "Train on the CPU."})
    remove_unused_columns: bool = field(default=False, metadata={"help": "Keep the dataset columns as they are."})
    spec_reg_weight: float = field(default=1e-3, metadata={"help": "Weight of the spectral penalty."})
    jacobian_reg_weight: float = field(default=1e-2, metadata={"help": "Weight of the Jacobian penalty."})


def load_puzzles(model_args: ModelArguments, seed: int):
    """(train, held-out) Datasets, both from SATNet's training rows 0-8999 (the test rows stay untouched)."""
    rows, _ = sudoku.satnet_splits()
    if model_args.train_size + model_args.eval_size > len(rows):
        raise SystemExit(f"train_size + eval_size must be at most {len(rows)} (SATNet's training rows).")
    train = rows.select(range(model_args.train_size))
    test = rows.select(range(len(rows) - model_args.eval_size, len(rows)))
    print(f"[data] SATNet training rows: {len(train)} for training, {len(test)} held out")
    columns = ["input_ids", "labels"]
    return train.with_format("torch", columns=columns), test.with_format("torch", columns=columns), test


def main() -> None:
    parser = HfArgumentParser((ModelArguments, ExampleTrainingArguments))
    model_args, args = parser.parse_args_into_dataclasses()
    torch.manual_seed(args.seed)
    train, test, test_rows = load_puzzles(model_args, args.seed)
    model = ItrSAForSudoku(ItrSAConfig(hidden_size=model_args.hidden_size, num_heads=model_args.num_heads,
                                       loops=model_args.loops, eta=model_args.eta, norm=model_args.norm,
                                       attention=model_args.attention))
    probe = test[: model_args.probe_size]["input_ids"]
    callbacks = [LyapunovCallback(probe, steps=model_args.lyapunov_steps, transient=8), PseudoEnergyCallback(probe)]
    trainer = SpectralRegTrainer(model=model, args=args, train_dataset=train, eval_dataset=test, callbacks=callbacks)
    if trainer.spectral_regularizer is not None:
        print(f"[reg] spectral penalty on {[t.name for t in trainer.spectral_regularizer.targets]}")
    trainer.train()
    metrics = trainer.evaluate()

    model.eval()
    puzzles = sudoku.to_tensor(list(test_rows["puzzle"]))
    solutions = sudoku.to_tensor(list(test_rows["solution"]))
    accuracy = {loops: sudoku.board_accuracy(model.solve(puzzles, loops=loops), puzzles, solutions)
                for loops in (model_args.loops, 2 * model_args.loops)}
    summary = {"board_accuracy": accuracy,
               **{k: v for k, v in metrics.items() if "lyapunov" in k or "jacobian" in k or "energy" in k}}
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
