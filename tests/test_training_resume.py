"""Resume is exact: a real `jacobiscope sudoku train` run killed (SIGKILL) several times at random points, some
mid-save, then resumed to the end, ends with the same raw and EMA weights as an uninterrupted run; a finished run
is reported as finished, not extended."""
import json
import os
import random
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

RECIPE = {"arch": "itrsa", "hidden_size": 16, "num_heads": 2, "loops": 3, "loops_min": 1, "loops_max": 4,
          "batch_size": 8, "learning_rate": 0.003, "max_steps": 40, "warmup_steps": 0, "save_steps": 4,
          "logging_steps": 50, "train_limit": 64, "eval_limit": 4, "ema_beta": 0.5, "ema_every": 1, "ema_start": 1,
          "augment": True, "seed": 0}


def _command(config: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "jacobiscope", "sudoku", "train", "--config", str(config), "--out", str(out),
            "--quiet"]


def _environment() -> dict:
    return dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", PYTHONWARNINGS="ignore")


def _checkpoints(out: Path) -> int:
    """The newest checkpoint's step (folders rotate: their count stays at save_total_limit)."""
    return max((int(p.name.split("-")[-1]) for p in out.glob("checkpoint-*")), default=0)


def _weights(folder: Path) -> dict:
    return load_file(str(folder / "model.safetensors"))


@pytest.mark.slow
def test_killed_runs_resume_to_the_same_weights(tmp_path):
    from jacobiscope.recipes.sudoku import SudokuRecipe, train_sudoku

    config = tmp_path / "recipe.json"
    config.write_text(json.dumps(RECIPE))
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    torch.set_num_threads(1)  # the killed runs compute on one thread too: the same float sums
    train_sudoku(SudokuRecipe.from_json(config), whole, progress=False)
    chooser = random.Random(0)
    kills = 0
    for _ in range(2):
        process = subprocess.Popen(_command(config, killed), env=_environment(), stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
        seen = _checkpoints(killed)
        deadline = time.time() + 120
        # Kill once a new checkpoint starts to appear, after a random delay: sometimes mid-save, sometimes mid-step.
        while process.poll() is None and _checkpoints(killed) <= seen and time.time() < deadline:
            time.sleep(0.01)
        time.sleep(chooser.uniform(0.0, 0.05))
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
            kills += 1
        process.wait()
    assert kills >= 2, "the run finished before it could be killed: make it longer"
    done = subprocess.run(_command(config, killed), env=_environment(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    for folder in ("final", "final_ema"):
        expected, got = _weights(whole / folder), _weights(killed / folder)
        assert expected.keys() == got.keys()
        worst = max(float((expected[k] - got[k]).abs().max()) for k in expected)
        assert worst <= 1e-6, f"{folder}: resumed weights differ by {worst}"
    summary = json.loads((killed / "train_summary.json").read_text())
    assert summary["steps"] == RECIPE["max_steps"]
    # Running the finished run again trains nothing and leaves final/ as it was.
    before = (killed / "final" / "model.safetensors").stat().st_mtime_ns
    again = train_sudoku(SudokuRecipe.from_json(config), killed, progress=False)
    assert again["already_finished"] and again["steps"] == RECIPE["max_steps"]
    assert (killed / "final" / "model.safetensors").stat().st_mtime_ns == before


def test_an_incomplete_checkpoint_is_skipped_with_a_warning_naming_it(tmp_path):
    from jacobiscope.recipes._sudoku_callbacks import _latest_checkpoint

    for step, files in ((2, ("trainer_state.json", "model.safetensors", "ema.safetensors")),
                        (4, ("trainer_state.json",)), (6, ("model.safetensors", "ema.safetensors"))):
        folder = tmp_path / f"checkpoint-{step}"
        folder.mkdir()
        for name in files:
            (folder / name).write_text("{}")
    with pytest.warns(UserWarning, match="skipping incomplete checkpoint\\(s\\) checkpoint-4, checkpoint-6"):
        assert _latest_checkpoint(tmp_path, needs_average=True).endswith("checkpoint-2")


class _Killed(BaseException):
    """Stands for SIGKILL at one chosen point of a save (BaseException: nothing in the Trainer catches it)."""


SHORT = dict(RECIPE, max_steps=12, save_steps=4)


@pytest.mark.parametrize("point, step", [("before the weight average", 8), ("before the random streams", 8),
                                         ("during validation", 8), ("before the random streams", 4)])
def test_a_kill_at_each_point_of_a_save_resumes_exactly(tmp_path, monkeypatch, point, step):
    """Each file a save writes after the Trainer's own is a point where a kill leaves a folder that looks complete;
    the resumed run must end where an uninterrupted one does, with one validation record per save. Step 4 is the
    run's first save: no earlier checkpoint shows that this run records its random streams."""
    from jacobiscope.recipes import _sudoku_callbacks as callbacks
    from jacobiscope.recipes.sudoku import SudokuRecipe, train_sudoku

    torch.set_num_threads(1)
    recipe = SudokuRecipe(**SHORT)
    train_sudoku(recipe, tmp_path / "whole", progress=False)
    target = {"before the weight average": callbacks.EMACallback,
              "before the random streams": callbacks.RandomStreamsCallback,
              "during validation": callbacks._AccuracyCallback}[point]
    original = target.on_save

    def dies_at_the_step(self, args, state, control, **kwargs):
        if state.global_step == step:
            raise _Killed()
        return original(self, args, state, control, **kwargs)

    monkeypatch.setattr(target, "on_save", dies_at_the_step)
    with pytest.raises(_Killed):
        train_sudoku(recipe, tmp_path / "killed", progress=False)
    monkeypatch.setattr(target, "on_save", original)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the skipped checkpoint is named in a warning (tested above)
        train_sudoku(recipe, tmp_path / "killed", progress=False)
    for folder in ("final", "final_ema"):
        expected, got = _weights(tmp_path / "whole" / folder), _weights(tmp_path / "killed" / folder)
        worst = max(float((expected[k] - got[k]).abs().max()) for k in expected)
        assert worst <= 1e-6, f"{point}: {folder} differs by {worst}"
    history = json.loads((tmp_path / "killed" / "accuracy_history.json").read_text())
    whole = json.loads((tmp_path / "whole" / "accuracy_history.json").read_text())
    assert [entry["step"] for entry in history] == [entry["step"] for entry in whole] == [4, 8, 12]
    assert [e["validation_board_accuracy"] for e in history] == [e["validation_board_accuracy"] for e in whole]


def test_a_checkpoint_without_its_random_streams_is_incomplete_when_the_run_records_them(tmp_path):
    from jacobiscope.recipes._sudoku_callbacks import _latest_checkpoint

    for step, files in ((2, ("trainer_state.json", "model.safetensors", "random_streams.json")),
                        (4, ("trainer_state.json", "model.safetensors"))):
        folder = tmp_path / f"checkpoint-{step}"
        folder.mkdir()
        for name in files:
            (folder / name).write_text("{}")
    with pytest.warns(UserWarning, match="checkpoint-4"):
        assert _latest_checkpoint(tmp_path).endswith("checkpoint-2")
    # a run saved before the streams were recorded (no checkpoint has them) still resumes from its newest
    (tmp_path / "checkpoint-2" / "random_streams.json").unlink()
    assert _latest_checkpoint(tmp_path).endswith("checkpoint-4")


def test_a_run_that_declares_its_streams_never_resumes_from_a_checkpoint_without_them(tmp_path):
    from jacobiscope.recipes._sudoku_callbacks import (
        CHECKPOINT_FORMAT_FILE, _declare_checkpoint_format, _latest_checkpoint,
    )

    folder = tmp_path / "checkpoint-4"
    folder.mkdir()
    for name in ("trainer_state.json", "model.safetensors"):
        (folder / name).write_text("{}")
    # Killed between the Trainer's files and the streams of the run's only checkpoint: nothing shows the run
    # records streams except its declaration, written before training.
    _declare_checkpoint_format(tmp_path, None)
    with pytest.warns(UserWarning, match="checkpoint-4.*resuming from the start"):
        assert _latest_checkpoint(tmp_path) is None
    # An older run resumed from a checkpoint without streams declares them from that step on ...
    (tmp_path / CHECKPOINT_FORMAT_FILE).unlink()
    _declare_checkpoint_format(tmp_path, str(folder))
    assert json.loads((tmp_path / CHECKPOINT_FORMAT_FILE).read_text()) == {"random_streams_after_step": 4}
    assert _latest_checkpoint(tmp_path).endswith("checkpoint-4")
    # ... and a later resume keeps that declaration; a fresh start (resume=False) declares step 0 again.
    _declare_checkpoint_format(tmp_path, str(folder))
    assert json.loads((tmp_path / CHECKPOINT_FORMAT_FILE).read_text())["random_streams_after_step"] == 4
    _declare_checkpoint_format(tmp_path, None)
    assert json.loads((tmp_path / CHECKPOINT_FORMAT_FILE).read_text())["random_streams_after_step"] == 0


def test_a_finished_run_extended_to_more_steps_ends_where_one_long_run_does(tmp_path, monkeypatch):
    """Raising ``max_steps`` of a finished run continues it exactly; its old summary is dropped as soon as training
    goes on (a kill before the new end leaves no summary claiming the run ended), and the new summary's throughput
    counts only the steps this process trained."""
    from jacobiscope.recipes import _sudoku_callbacks as callbacks
    from jacobiscope.recipes.sudoku import SudokuRecipe, train_sudoku

    torch.set_num_threads(1)
    train_sudoku(SudokuRecipe(**SHORT), tmp_path / "long", progress=False)
    short = train_sudoku(SudokuRecipe(**dict(SHORT, max_steps=8)), tmp_path / "extended", progress=False)
    assert short["steps"] == 8 and (tmp_path / "extended" / "train_summary.json").is_file()
    original = callbacks.RandomStreamsCallback.on_save

    def dies_at_step_12(self, args, state, control, **kwargs):
        if state.global_step == 12:
            raise _Killed()
        return original(self, args, state, control, **kwargs)

    monkeypatch.setattr(callbacks.RandomStreamsCallback, "on_save", dies_at_step_12)
    with pytest.raises(_Killed):
        train_sudoku(SudokuRecipe(**SHORT), tmp_path / "extended", progress=False)
    monkeypatch.setattr(callbacks.RandomStreamsCallback, "on_save", original)
    assert not (tmp_path / "extended" / "train_summary.json").exists()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        extended = train_sudoku(SudokuRecipe(**SHORT), tmp_path / "extended", progress=False)
    assert extended["steps"] == 12 and extended["steps_this_process"] == 4
    assert extended["resumed_from"].endswith("checkpoint-8")
    assert extended["puzzles_per_second"] == pytest.approx(4 * SHORT["batch_size"] / extended["seconds"])
    for folder in ("final", "final_ema"):
        expected, got = _weights(tmp_path / "long" / folder), _weights(tmp_path / "extended" / folder)
        worst = max(float((expected[k] - got[k]).abs().max()) for k in expected)
        assert worst <= 1e-6, f"{folder} differs by {worst}"
