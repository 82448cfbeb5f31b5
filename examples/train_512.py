"""Train and ship the AKOrN-repo scale solvers, `itrsa-sudoku-512` and `akorn-sudoku-512`, inside one GPU lease.

    # on the lent GPU (one command; about 10 minutes of device time in all):
    PYTHONPATH=. PYTHONUNBUFFERED=1 python3 examples/train_512.py --out $OUT --budget 240
    # on a CPU, a tiny run that proves the script works end to end (what the test suite does):
    python examples/train_512.py --out /tmp/gpu512 --tiny

The AKOrN repository's Sudoku recipe at its own scale: 512 channels (ItrSA with 8 heads; AKOrN with oscillators of
N = 4, i.e. 128 per cell), batch 100, Adam at 1e-3, 100 epochs of SATNet rows 0-8999 (9,000 steps) — here cut by a
wall-clock budget per model (`--budget` seconds), since a lease is short. Loop counts are drawn per batch from
[8, 33] (odd and even), checkpoints are chosen on generated validation puzzles (never on test puzzles), bf16
autocast runs the matmuls on the tensor cores (weights and optimizer in fp32). Each model is then measured on its
device (ID: all 1,000 SATNet test puzzles; OOD: the first `--ood` RRN puzzles; T = 16/32/64/128; the loop's max
Lyapunov exponent and Jacobian norm) and shipped with its card as `<out>/<name>/` — copy the folders to
`hub_configs/` to publish them. A `summary.json` in `<out>` records what each model reached and how long it took.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from jacobiscope.recipes.shipping import ship_checkpoint
from jacobiscope.recipes.sudoku import SudokuRecipe, train_sudoku

COMMON = {"hidden_size": 512, "num_heads": 8, "loops": 16, "loops_min": 8, "loops_max": 33, "batch_size": 100,
          "learning_rate": 1e-3, "epochs": 100, "warmup_steps": 200, "save_steps": 500, "logging_steps": 100,
          "eval_limit": 200, "validation_loops": [16, 33], "augment": True, "seed": 0}
MODELS = {
    "itrsa-sudoku-512": {"arch": "itrsa", "eta": 1.0, "norm": "rmsnorm", "initializer_range": 0.05},
    "akorn-sudoku-512": {"arch": "akorn", "oscillator_dim": 4, "unit_embeddings": True},
}
DESCRIPTIONS = {
    "itrsa-sudoku-512": "ItrSA in the paper form `X <- RMSNorm(X + eta (MSA(X) + C))` at the AKOrN repository's scale: "
                        "512 channels, 8 heads, eta = 1, the puzzle injected every loop; trained with loop counts "
                        "drawn from [8, 33] per batch.",
    "akorn-sudoku-512": "AKOrN at the AKOrN repository's scale: 512 channels as 128 oscillators of N = 4 per cell on unit "
                        "spheres, `x <- normalize(x + gamma (Omega x + y - <y,x>x))`, `y = J(x) + c`; trained with loop "
                        "counts drawn from [8, 33] per batch.",
}
TINY = {"hidden_size": 16, "num_heads": 2, "batch_size": 16, "max_steps": 6, "save_steps": 3, "logging_steps": 3,
        "eval_limit": 8, "train_limit": 64, "warmup_steps": 0, "loops_min": 2, "loops_max": 3,
        "validation_loops": [2]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for the runs, the shipped folders and summary.json")
    parser.add_argument("--budget", type=float, default=240.0, help="training seconds per model (default 240)")
    parser.add_argument("--ood", type=int, default=2000, help="RRN puzzles measured (default 2000)")
    parser.add_argument("--tiny", action="store_true", help="a few steps of a 16-channel model: test the script on CPU")
    parser.add_argument("--only", choices=sorted(MODELS), help="train one of the two (default: both)")
    options = parser.parse_args()
    out = Path(options.out)
    cuda = torch.cuda.is_available()
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
    summary = {"device": torch.cuda.get_device_name(0) if cuda else "cpu", "torch": torch.__version__, "models": {}}
    for name, specific in MODELS.items():
        if options.only and name != options.only:
            continue
        fields = {**COMMON, **specific, "max_seconds": options.budget, "bf16": cuda}
        if options.tiny:
            fields.update(TINY)
        recipe = SudokuRecipe(**fields)
        started = time.perf_counter()
        trained = train_sudoku(recipe, out / "runs" / name, progress=False)
        training_seconds = time.perf_counter() - started
        folder = ship_checkpoint(out / "runs" / name / "best", name, description=DESCRIPTIONS[name],
                                 limitations=[f"Trained for {trained['steps']} steps ({training_seconds:.0f} s on "
                                              f"{summary['device']}) under a wall-clock budget, not the repository's "
                                              "full 100 epochs."],
                                 votes=(1, 16) if specific["arch"] == "akorn" else (1,),
                                 loops=(2, 3) if options.tiny else (16, 17, 32, 33, 64, 65, 128, 129),
                                 dynamics_puzzles=2 if options.tiny else 16, fresh_limit=10 if options.tiny else 1000,
                                 ood_limit=20 if options.tiny else options.ood, vote_limit=8 if options.tiny else 200,
                                 id_limit=40 if options.tiny else None, destination=out / name,
                                 training={"summary": f"{trained['steps']} steps, batch {recipe.batch_size}, "
                                                      f"{training_seconds:.0f} s, best validation board accuracy "
                                                      f"{trained['best_validation_board_accuracy']:.3f}"},
                                 device="cuda" if cuda else None)
        results = json.loads((folder / "results.json").read_text())
        summary["models"][name] = {"steps": trained["steps"], "training_seconds": training_seconds,
                                   "id": results["id"], "ood": results["ood"], "dynamics_id": results["dynamics_id"]}
        print(f"[train_512] {name}: {trained['steps']} steps in {training_seconds:.0f} s; ID/OOD board accuracy "
              + ", ".join(f"{split} T={t}: {100 * v['board_accuracy']:.1f}%"
                          for split in ("id", "ood") for t, v in results[split]["votes=1"].items()), flush=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
