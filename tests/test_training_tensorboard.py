"""The monitoring callbacks in a researcher's workflow: what they measure reaches TensorBoard through the Trainer's
own ``log`` (event files written by real Trainer runs, read back offline), and a run in which they would measure
nothing, or in which their metrics would miss ``report_to``, is said at the start."""
import json
import logging
import math
import warnings
from pathlib import Path

import pytest
import torch
import transformers

pytest.importorskip("tensorboard")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

from jacobiscope.data import sudoku  # noqa: E402
from jacobiscope.models import ItrSAConfig, ItrSAForSudoku  # noqa: E402
from jacobiscope.training import LyapunovCallback, SpectralRegTrainer, SpectralRegTrainingArguments  # noqa: E402

transformers.logging.set_verbosity_error()

ROWS = sudoku.relabelled_rows(4, 0)
PROBE = torch.stack([row["input_ids"] for row in ROWS[:1]])


def _model():
    torch.manual_seed(0)
    return ItrSAForSudoku(ItrSAConfig(hidden_size=8, num_heads=2, loops=2, initializer_range=0.3))


def _args(out, **options):
    settings = dict(output_dir=str(out), report_to=["tensorboard"], use_cpu=True, disable_tqdm=True,
                    save_strategy="no", logging_steps=1, max_steps=2, per_device_train_batch_size=2, seed=0,
                    dataloader_num_workers=0)
    settings.update(options)
    return SpectralRegTrainingArguments(**settings)


def _callback(**options):
    # Few loops and Lanczos iterations: the numbers only have to be the ones the callback measured.
    return LyapunovCallback(PROBE, steps=4, transient=1, max_iter=10, **options)


def _events(out: Path) -> EventAccumulator:
    (folder,) = {path.parent for path in out.rglob("events.out.tfevents.*")}
    events = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    return events


def _scalars(events: EventAccumulator, tag: str) -> dict[int, float]:
    return {event.step: event.value for event in events.Scalars(tag)}


def _text(events: EventAccumulator, tag: str) -> dict[int, str]:
    return {event.step: event.tensor_proto.string_val[0].decode() for event in events.Tensors(f"{tag}/text_summary")}


def test_dynamics_measured_during_training_and_evaluation_reach_tensorboard(tmp_path, caplog):
    """SpectralRegTrainer binds the callback itself: every_steps=1 measures at steps 1 and 2 (train/...), the
    evaluation at step 2 too (eval/...); each TensorBoard scalar is the value the callback measured."""
    callback = _callback(every_steps=1)
    args = _args(tmp_path, eval_strategy="steps", eval_steps=2)
    trainer = SpectralRegTrainer(model=_model(), args=args, train_dataset=ROWS, eval_dataset=ROWS[:2],
                                 callbacks=[callback])
    assert callback.trainer is trainer
    with warnings.catch_warnings(), caplog.at_level(logging.INFO, logger="jacobiscope.training.callbacks"):
        warnings.simplefilter("error", UserWarning)  # the callback measures and is bound: nothing to warn about
        trainer.train()
    events = _events(tmp_path)
    measured = {(entry["step"], "eval" if "eval_lyapunov_max" in entry else "train"): entry
                for entry in callback.history}
    assert sorted(measured) == [(1, "train"), (2, "eval"), (2, "train")]
    for (step, split), entry in measured.items():
        prefix = "eval_" if split == "eval" else ""
        for name in ("lyapunov_max", "lyapunov_max_worst", "jacobian_norm", "regime_agreement"):
            value = entry[prefix + name]
            assert math.isfinite(value)
            assert _scalars(events, f"{split}/{name}")[step] == pytest.approx(value, rel=1e-6)  # float32 on disk
        assert _text(events, f"{split}/regime")[step] == entry[prefix + "regime"]
    assert measured[(1, "train")]["jacobian_norm"] > 0
    assert measured[(2, "train")]["regime"] in {"converging", "periodic", "critical", "chaotic", "oscillating",
                                                  "diverging", "undetermined", "unknown"}
    # the loss still reaches TensorBoard beside the dynamics, and the milestones reach the log
    assert set(_scalars(events, "train/loss")) == {1, 2}
    lines = [record.getMessage() for record in caplog.records if record.name == "jacobiscope.training.callbacks"]
    assert len(lines) == 3 and lines[0].startswith("LyapunovCallback at step 1: lyapunov_max=")


def test_a_plain_trainer_reaches_tensorboard_once_bound_and_says_so_when_not(tmp_path):
    callback = _callback(every_steps=1)
    trainer = transformers.Trainer(model=_model(), args=_args(tmp_path / "bound", max_steps=1),
                                   train_dataset=ROWS, callbacks=[callback])
    callback.bind(trainer)
    trainer.train()
    ((_, entry),) = [(e["step"], e) for e in callback.history]
    assert _scalars(_events(tmp_path / "bound"), "train/lyapunov_max") == {1: pytest.approx(entry["lyapunov_max"],
                                                                                            rel=1e-6)}
    unbound = _callback(every_steps=1)
    trainer = transformers.Trainer(model=_model(), args=_args(tmp_path / "unbound", max_steps=1),
                                   train_dataset=ROWS, callbacks=[unbound])
    with pytest.warns(UserWarning, match=r"LyapunovCallback is not bound to its Trainer, so its metrics reach "
                                         r"trainer.state.log_history but not tensorboard — call callback.bind"):
        trainer.train()
    # still measured, into the trainer's history, not into the event file
    assert any("lyapunov_max" in entry for entry in trainer.state.log_history)
    assert "train/lyapunov_max" not in _events(tmp_path / "unbound").Tags()["scalars"]


@pytest.mark.parametrize("options, problem", [
    pytest.param({}, r"it measures at evaluations and eval_strategy is 'no'", id="no-evaluation"),
    pytest.param({"every_steps": 5}, r"it measures at evaluations and eval_strategy is 'no'; every_steps=5 has no multiple in steps 1-2",
                 id="every-steps-beyond-max-steps"),
])
def test_a_callback_that_would_never_measure_says_so_with_the_fix(tmp_path, options, problem):
    """The README's trainer block (no evaluation, no every_steps) measured nothing and said nothing."""
    callback = _callback(**options)
    trainer = SpectralRegTrainer(model=_model(), args=_args(tmp_path, report_to=[]), train_dataset=ROWS,
                                 callbacks=[callback])
    with pytest.warns(UserWarning, match=r"LyapunovCallback will measure nothing in this run: " + problem
                      + r" — pass LyapunovCallback\(\.\.\., every_steps=N\) with N <= 2"):
        trainer.train()
    assert callback.history == []


@pytest.mark.parametrize("dynamics_every", [None, pytest.param(2, marks=pytest.mark.slow)])  # the dynamics: ~2 s
def test_sudoku_train_reports_the_loss_validation_and_dynamics_to_tensorboard(tmp_path, dynamics_every):
    """``jacobiscope sudoku train --report-to tensorboard``: the event files under OUT/runs hold the loss, the
    validation accuracy of accuracy_history.json and (``dynamics_every``) the dynamics the trainer logged."""
    from jacobiscope.cli import main

    recipe = {"arch": "itrsa", "hidden_size": 8, "num_heads": 2, "loops": 2, "batch_size": 4, "train_limit": 8,
              "eval_limit": 4, "validation_loops": [2], "save_steps": 2, "logging_steps": 1, "ema_beta": 0.0,
              "augment": False, "warmup_steps": 0, "dynamics_every": dynamics_every}
    (tmp_path / "recipe.json").write_text(json.dumps(recipe))
    out = tmp_path / "run"
    assert main(["sudoku", "train", "--config", str(tmp_path / "recipe.json"), "--out", str(out), "--max-steps", "2",
                 "--report-to", "tensorboard", "--quiet"]) == 0
    assert json.loads((out / "recipe.json").read_text())["report_to"] == ["tensorboard"]
    events = _events(out / "runs")
    assert set(_scalars(events, "train/loss")) == {1, 2}
    (validated,) = json.loads((out / "accuracy_history.json").read_text())
    assert _scalars(events, "train/validation_board_accuracy") == {
        2: pytest.approx(validated["validation_board_accuracy"], abs=1e-7)}
    assert _scalars(events, "train/validation_cell_accuracy")[2] == pytest.approx(
        validated["validation_cell_accuracy"], rel=1e-6)
    logged = [entry for entry in json.loads((out / "checkpoint-2" / "trainer_state.json").read_text())["log_history"]
              if "lyapunov_max" in entry]
    assert [entry["step"] for entry in logged] == ([2] if dynamics_every else [])
    for entry in logged:
        for name in ("lyapunov_max", "jacobian_norm"):
            assert _scalars(events, f"train/{name}")[2] == pytest.approx(entry[name], rel=1e-6)
        assert _text(events, "train/regime")[2] == entry["regime"]


@pytest.mark.parametrize("flag, message", [
    pytest.param("tensorbord", "did you mean 'tensorboard'?", id="typo"),
    pytest.param("dvclive", "'dvclive', whose package is not installed here — install it (pip install dvclive)",
                 id="not-installed"),
])
def test_sudoku_train_refuses_a_report_to_that_cannot_start_before_any_work(tmp_path, capsys, flag, message):
    from transformers.integrations.integration_utils import is_dvclive_available

    from jacobiscope.cli import main

    if flag == "dvclive" and is_dvclive_available():
        pytest.skip("dvclive is installed here")
    assert main(["sudoku", "train", "--out", str(tmp_path / "run"), "--max-steps", "1", "--report-to", flag]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("jacobiscope: error: ") and message in line
    assert not (tmp_path / "run").exists()
