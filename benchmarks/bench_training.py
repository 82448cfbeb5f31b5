"""Benchmark: step-time overhead of the training regularizers on the ItrSA Sudoku model.

    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_training.py            # hidden 128, T=16, batch 64
    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_training.py --quick    # tiny: checks it runs

Each configuration trains through `transformers.Trainer` (plain) or `SpectralRegTrainer` for ``--steps`` optimizer
steps (after ``--warmup`` untimed ones); a callback times each optimizer step from ``on_step_begin`` to
``on_step_end`` (forward, penalties, backward, clipping, Adam). The configurations run in interleaved rounds
(``--repeats``), so background load hits them alike; the reported time is the median over all timed steps, and the
overhead is relative to the plain Trainer's median. Targets: the weight regularizer (persistent power iteration)
<= 5%. Writes benchmarks/out/training.json (training_quick.json with --quick) and prints a markdown table.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import torch
import transformers
from transformers import Trainer, TrainerCallback

from jacobiscope.data import sudoku
from jacobiscope.models import ItrSAConfig, ItrSAForSudoku
from jacobiscope.training import SpectralRegTrainer, SpectralRegTrainingArguments

CONFIGURATIONS = {
    "plain Trainer": None,
    "weight spectral (power, 1 it/step)": dict(spec_reg_weight=1e-3),
    "weight spectral (exact SVD)": dict(spec_reg_weight=1e-3, spec_reg_exact=True),
    "Jacobian (4 samples, 4 its)": dict(jacobian_reg_weight=1e-2, jacobian_reg_samples=4, jacobian_reg_iterations=4),
    "Jacobian (1 sample, 2 its)": dict(jacobian_reg_weight=1e-2, jacobian_reg_samples=1, jacobian_reg_iterations=2),
    "energy e_multi": dict(energy_reg="e_multi", energy_reg_weight=1e-3),
    "weight + Jacobian + energy": dict(spec_reg_weight=1e-3, jacobian_reg_weight=1e-2, jacobian_reg_samples=4,
                                       jacobian_reg_iterations=4, energy_reg="e_multi", energy_reg_weight=1e-3),
}


class StepTimer(TrainerCallback):
    def __init__(self, warmup: int):
        self.warmup, self.times, self._started = warmup, [], None

    def on_step_begin(self, args, state, control, **kwargs):
        self._started = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step > self.warmup:
            self.times.append(time.perf_counter() - self._started)


def puzzles(n, seed=0):
    return sudoku.relabelled_rows(n, seed)


def run(name, options, model_config, data, batch, steps, warmup, folder) -> list[float]:
    torch.manual_seed(0)
    model = ItrSAForSudoku(ItrSAConfig(**model_config))
    args = SpectralRegTrainingArguments(
        output_dir=folder, per_device_train_batch_size=batch, max_steps=steps + warmup, learning_rate=1e-3,
        max_grad_norm=1.0, logging_steps=10_000, save_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True,
        dataloader_num_workers=0, seed=0, **(options or {}))
    timer = StepTimer(warmup)
    trainer_class = Trainer if options is None else SpectralRegTrainer
    trainer = trainer_class(model=model, args=args, train_dataset=data, callbacks=[timer])
    trainer.remove_callback(transformers.trainer_callback.PrinterCallback)
    trainer.train()
    return timer.times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny model (hidden 16, 2 loops, batch 8, 3 steps)")
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--loops", type=int, default=16)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=10, help="timed steps per configuration and round")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3, help="interleaved rounds over the configurations")
    parser.add_argument("--only", nargs="*", help="substrings of the configurations to run (the plain one always runs)")
    args = parser.parse_args()
    if args.quick:
        args.hidden, args.heads, args.loops, args.batch, args.steps, args.warmup, args.repeats = 16, 2, 2, 8, 3, 1, 1
    transformers.logging.set_verbosity_error()
    model_config = dict(hidden_size=args.hidden, num_heads=args.heads, loops=args.loops)
    data = puzzles(args.batch * 8)
    selected = {name: options for name, options in CONFIGURATIONS.items()
                if options is None or not args.only or any(s in name for s in args.only)}
    times: dict[str, list[float]] = {name: [] for name in selected}
    record = {"model": {"arch": "itrsa", **model_config}, "batch_size": args.batch, "steps": args.steps,
              "warmup": args.warmup, "repeats": args.repeats, "quick": args.quick,
              "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count(),
                          "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
                          "transformers": transformers.__version__, "loadavg_start": os.getloadavg()}}
    with tempfile.TemporaryDirectory() as folder:
        for round_index in range(args.repeats):
            for name, options in selected.items():
                step_times = run(name, options, model_config, data, args.batch, args.steps, args.warmup, folder)
                times[name].extend(step_times)
                print(f"round {round_index + 1}: {name}: median {statistics.median(step_times) * 1e3:.1f} ms/step",
                      flush=True)
    baseline = statistics.median(times["plain Trainer"])
    results = {}
    for name, values in times.items():
        median = statistics.median(values)
        results[name] = {"median_seconds_per_step": median, "min_seconds_per_step": min(values),
                         "overhead_percent": 100.0 * (median / baseline - 1.0), "timed_steps": len(values)}
    record["results"] = results
    record["machine"]["loadavg_end"] = os.getloadavg()
    out = Path(__file__).parent / "out"
    out.mkdir(exist_ok=True)
    (out / ("training_quick.json" if args.quick else "training.json")).write_text(json.dumps(record, indent=2))
    print(f"\nItrSA hidden {args.hidden}, {args.heads} heads, T={args.loops}, batch {args.batch}; "
          f"{args.steps} timed steps x {args.repeats} rounds; loadavg {record['machine']['loadavg_start']}")
    print("| configuration | median ms/step | min ms/step | overhead vs plain |")
    print("|---|---|---|---|")
    for name, result in results.items():
        print(f"| {name} | {result['median_seconds_per_step'] * 1e3:.1f} | {result['min_seconds_per_step'] * 1e3:.1f} | "
              f"{result['overhead_percent']:+.1f}% |")


if __name__ == "__main__":
    main()
