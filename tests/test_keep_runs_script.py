"""examples/keep_runs.py: the kept copy of a run resumes where the run was, even when a save was being written."""
import shutil
from pathlib import Path

from conftest import load_script
from jacobiscope.recipes.sudoku import SudokuRecipe, train_sudoku


def _module(store: Path):
    module = load_script("examples/keep_runs.py")
    module.STORE = store  # never the repository's own examples/recipes/resume
    return module


def _recipe(steps: int) -> SudokuRecipe:
    return SudokuRecipe(arch="itrsa", hidden_size=16, num_heads=2, loops=2, batch_size=8, max_steps=steps,
                        warmup_steps=0, train_limit=32, eval_limit=4, save_steps=2, logging_steps=1,
                        ema_beta=0.5, ema_every=1, ema_start=1, augment=False)


def test_a_save_in_progress_is_not_kept_and_the_kept_run_resumes(tmp_path):
    run = tmp_path / "itrsa-run"
    train_sudoku(_recipe(4), run, progress=False)
    # A save caught half-way: the Trainer's files are there, the weight average is not yet.
    shutil.copytree(run / "checkpoint-4", run / "checkpoint-6")
    (run / "checkpoint-6" / "ema.safetensors").unlink()
    keep = _module(tmp_path / "store")
    keep.save([run])
    kept = tmp_path / "store" / "itrsa-run"
    assert sorted(p.name for p in kept.glob("checkpoint-*")) == ["checkpoint-4"]
    assert (kept / "recipe.json").is_file() and (kept / "best" / "model.safetensors").is_file()
    keep.restore(tmp_path / "restored")
    summary = train_sudoku(_recipe(6), tmp_path / "restored" / "itrsa-run", progress=False)
    assert summary["resumed_from"].endswith("checkpoint-4") and summary["steps"] == 6
