"""A run killed after its last checkpoint and before its final weights resumes to exactly the uninterrupted run's end:
no step past max_steps, final/ and final_ema/ equal to the last checkpoint's weights and average. Without the guard
transformers trains step max_steps + 1 whenever max_steps is not on an epoch boundary (found by the random-SIGKILL
test, which failed about once in eight)."""
import json
import shutil

import pytest
import torch
from safetensors.torch import load_file

from jacobiscope.training import SpectralRegTrainer, SpectralRegTrainingArguments, StopAtMaxStepsMixin


def _weights(path):
    return load_file(str(path))


def _same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _as_if_killed_after_the_last_save(run):
    """What a kill between the last checkpoint and the end leaves: no final weights, no summary."""
    for name in ("final", "final_ema", "train_summary.json"):
        target = run / name
        shutil.rmtree(target) if target.is_dir() else target.unlink(missing_ok=True)


def test_spectral_reg_trainer_resumed_at_max_steps_trains_no_further_step(tmp_path):
    from jacobiscope.models import ItrSAConfig, ItrSAForSudoku

    torch.manual_seed(0)
    data = [{"input_ids": torch.randint(0, 10, (81,)), "labels": torch.randint(1, 10, (81,))} for _ in range(4)]
    args = SpectralRegTrainingArguments(str(tmp_path), spec_reg_weight=1e-2, max_steps=3, save_steps=3,
                                        per_device_train_batch_size=1, report_to=[], use_cpu=True, disable_tqdm=True,
                                        learning_rate=0.05)

    def trainer():
        torch.manual_seed(1)
        return SpectralRegTrainer(ItrSAForSudoku(ItrSAConfig(hidden_size=8, num_heads=2, loops=2)), args,
                                  train_dataset=data)

    assert trainer().train().global_step == 3
    saved = _weights(tmp_path / "checkpoint-3" / "model.safetensors")
    resumed = trainer()
    assert resumed.train(resume_from_checkpoint=str(tmp_path / "checkpoint-3")).global_step == 3
    now = {k: v.detach() for k, v in resumed.model.state_dict().items()}
    assert all(torch.equal(now[k], saved[k]) for k in saved)   # not one more optimizer step
    assert not (tmp_path / "checkpoint-4").exists()
    assert issubclass(SpectralRegTrainer, StopAtMaxStepsMixin)


def test_sudoku_run_killed_before_its_final_weights_ends_where_the_whole_run_ends(tmp_path):
    from jacobiscope.recipes.sudoku import SudokuRecipe, train_sudoku

    torch.set_num_threads(1)
    # 32 training rows in batches of 4: 8 steps per epoch, so max_steps=10 is mid-epoch
    recipe = SudokuRecipe(arch="itrsa", hidden_size=8, num_heads=2, loops=2, batch_size=4, learning_rate=0.03,
                          max_steps=10, warmup_steps=2, save_steps=5, logging_steps=1000, train_limit=32,
                          eval_limit=3, ema_beta=0.5, ema_every=1, ema_start=1, seed=0)
    whole = tmp_path / "whole"
    train_sudoku(recipe, whole, progress=False)
    killed = tmp_path / "killed"
    shutil.copytree(whole, killed)
    _as_if_killed_after_the_last_save(killed)
    summary = train_sudoku(recipe, killed, progress=False)
    assert summary["steps"] == 10 and summary["steps_this_process"] == 0
    assert not (killed / "checkpoint-11").exists()
    for name in ("final", "final_ema", "best"):
        assert _same(_weights(whole / name / "model.safetensors"), _weights(killed / name / "model.safetensors")), name
    assert json.loads((killed / "accuracy_history.json").read_text()) == \
        json.loads((whole / "accuracy_history.json").read_text())


@pytest.mark.parametrize("family", ["dory", "hrm_text"])
def test_looped_lm_run_killed_before_its_final_weights_ends_where_the_whole_run_ends(tmp_path, family):
    from jacobiscope.recipes.looped_lm import LoopedLMRecipe, train_looped_lm

    torch.set_num_threads(1)
    recipe = LoopedLMRecipe(family=family, hidden_size=16, intermediate_size=32, num_heads=2, num_layers=1, loops=2,
                            loops_min=1, loops_max=3, batch_size=4, max_steps=4, warmup_steps=0, save_steps=2,
                            logging_steps=1, validation_examples=4, ema_beta=0.5, ema_every=1, ema_start=1,
                            learning_rate=3e-3)
    whole = tmp_path / "whole"
    train_looped_lm(recipe, whole)
    killed = tmp_path / "killed"
    shutil.copytree(whole, killed)
    _as_if_killed_after_the_last_save(killed)
    summary = train_looped_lm(recipe, killed)
    assert summary["steps"] == 4 and not (killed / "checkpoint-5").exists()
    for name in ("final", "final_ema"):
        assert _same(_weights(whole / name / "model.safetensors"), _weights(killed / name / "model.safetensors")), name
