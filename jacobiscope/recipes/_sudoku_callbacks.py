"""The callbacks and checkpoint checks of Sudoku training: weight averaging, a time budget, validation accuracy
with the best weights kept, and which checkpoint a resumed run may trust."""
from __future__ import annotations

import copy
import json
import logging
import os
import time
import warnings
from pathlib import Path

import torch
from transformers import TrainerCallback

from .._io import atomic_write_text

logger = logging.getLogger(__name__)


class EMACallback(TrainerCallback):
    """Exponential moving average of the weights (beta, every ``every`` steps after ``start``), saved with each
    checkpoint as ``ema.safetensors`` and restored on resume. `swap_in` puts the EMA weights in the model."""

    def __init__(self, beta: float = 0.995, every: int = 10, start: int = 100, resume_from: str | None = None):
        self.beta, self.every, self.start = beta, every, start
        self.resume_from = resume_from
        self.shadow: dict[str, torch.Tensor] | None = None

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if self.shadow is None:
            self.shadow = {k: v.detach().clone() for k, v in model.state_dict().items() if v.dtype.is_floating_point}
        # `Trainer.train(resume_from_checkpoint=...)` does not set `args.resume_from_checkpoint`, so the folder is
        # handed to the callback by the caller; otherwise a resumed run restarts its average from the raw weights.
        folder = self.resume_from or args.resume_from_checkpoint
        if state.global_step and folder:
            self._load(Path(folder), model)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        step = state.global_step
        if step < self.start or step % self.every:
            return
        with torch.no_grad():
            for name, value in model.state_dict().items():
                if name in self.shadow:
                    if step == self.start:
                        self.shadow[name].copy_(value)
                    else:
                        self.shadow[name].lerp_(value.detach(), 1 - self.beta)

    def on_save(self, args, state, control, model=None, **kwargs):
        from safetensors.torch import save_file

        folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        folder.mkdir(parents=True, exist_ok=True)
        temporary = folder / "ema.safetensors.tmp"
        save_file({k: v.contiguous() for k, v in self.shadow.items()}, str(temporary))
        os.replace(temporary, folder / "ema.safetensors")

    def _load(self, folder: Path, model):
        from safetensors.torch import load_file

        path = folder / "ema.safetensors"
        if not path.exists():
            raise FileNotFoundError(f"checkpoint {folder} has no ema.safetensors: it was saved without its weight "
                                    f"average (interrupted save?); delete the folder to resume from the one before")
        if path.exists():
            loaded = load_file(str(path))
            for name, value in loaded.items():
                if name in self.shadow:
                    self.shadow[name].copy_(value)

    def swap_in(self, model) -> None:
        with torch.no_grad():
            state = model.state_dict()
            for name, value in self.shadow.items():
                state[name].copy_(value)


class TimeBudgetCallback(TrainerCallback):
    """Ends training, with a checkpoint, once ``seconds`` of training have passed in this process."""

    def __init__(self, seconds: float):
        self.seconds = float(seconds)
        self.started: float | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        self.started = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        if self.started is not None and time.perf_counter() - self.started >= self.seconds:
            control.should_training_stop = True
            control.should_save = True
        return control


BEST = "best"
BEST_MARKER = "accuracy.json"  # written into best/ after its weights: the step and hash best/ holds
_BEST_PARTIAL, _BEST_OLD = ".best.partial", ".best.old"


def _sha256(path: Path) -> str:
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _best_holds(folder: Path, record: dict) -> bool:
    """Whether ``folder`` is a complete best/ holding the weights of ``record`` (its step and kind, and the
    hash its marker recorded when it was written)."""
    try:
        marker = json.loads((folder / BEST_MARKER).read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(marker, dict) or marker.get("step") != record.get("step"):
        return False
    if marker.get("weights", "raw") != record.get("weights", "raw"):
        return False
    weights = folder / "model.safetensors"
    if not (folder / "config.json").is_file() or not weights.is_file():
        return False
    expected = marker.get("model_sha256")
    return expected is None or _sha256(weights) == expected  # markers written before the hash: trust the step


def _write_best(model, record: dict, out_dir: Path) -> None:
    """Replace ``out_dir/best`` by ``model`` with ``record`` as its marker, so that a kill at any instant leaves
    either the old best/ or the new one complete (or, between two renames, a complete copy `_repair_best` puts
    back): written into a side folder, the marker last, then swapped in by renames."""
    import shutil

    partial, old, best = out_dir / _BEST_PARTIAL, out_dir / _BEST_OLD, out_dir / BEST
    shutil.rmtree(partial, ignore_errors=True)
    model.save_pretrained(partial)
    marker = dict(record, model_sha256=_sha256(partial / "model.safetensors"))
    atomic_write_text(partial / BEST_MARKER, json.dumps(marker))
    shutil.rmtree(old, ignore_errors=True)
    if best.exists():
        os.replace(best, old)
    os.replace(partial, best)
    shutil.rmtree(old, ignore_errors=True)


def _repair_best(out_dir: Path, record: dict | None, model) -> str | None:
    """Make best/ hold the weights of ``record`` (the save the validation history calls best). Returns what was
    done (None when best/ was right): a copy left by an interrupted swap is put back, else the weights are rebuilt
    from that step's checkpoint (raw weights, or its weight average for an EMA winner)."""
    import shutil

    best = out_dir / BEST
    leftovers = [out_dir / _BEST_PARTIAL, out_dir / _BEST_OLD]
    if record is None:
        return None
    if _best_holds(best, record):
        for folder in leftovers:
            shutil.rmtree(folder, ignore_errors=True)
        return None
    step, kind = record["step"], record.get("weights", "raw")
    for folder in leftovers:
        if _best_holds(folder, record):
            shutil.rmtree(out_dir / (_BEST_OLD if folder.name == _BEST_PARTIAL else _BEST_PARTIAL), ignore_errors=True)
            if best.exists():
                shutil.rmtree(best)
            os.replace(folder, best)
            return f"best/ put back from {folder.name} (a swap was interrupted)"
    checkpoint = out_dir / f"checkpoint-{step}"
    needed = ["model.safetensors"] + (["ema.safetensors"] if kind == "ema" else [])
    if not all((checkpoint / name).is_file() for name in needed):
        warnings.warn(f"best/ in {out_dir} does not hold the weights of step {step}, which the validation history "
                      f"calls best, and {checkpoint.name} (which held them) is gone: best/ is left as it is — retrain "
                      "to that step, or choose from the remaining checkpoints", UserWarning, stacklevel=3)
        return "left as it is"
    from safetensors.torch import load_file

    rebuilt = copy.deepcopy(model).eval()
    with torch.no_grad():
        state = rebuilt.state_dict()
        for name in needed:
            for key, value in load_file(str(checkpoint / name)).items():
                if key in state:
                    state[key].copy_(value)
    _write_best(rebuilt, record, out_dir)
    done = f"best/ rebuilt from {checkpoint.name} ({kind} weights, the step the validation history calls best)"
    warnings.warn(f"{done} in {out_dir}: an earlier process was stopped while writing best/", UserWarning, stacklevel=3)
    return done


class _AccuracyCallback(TrainerCallback):
    """Board accuracy on the validation puzzles at each save (raw and EMA weights, mean over the validation loop
    counts); keeps the better as ``best/``. Ties — above all a run that has solved no board yet, where every save
    scores 0 — go to the higher blank-cell accuracy, so ``best/`` follows the training instead of staying at the
    first save.

    ``best/`` is always the save the history calls best: it is written atomically after the history, with a marker
    (step, kind, hash), and `on_train_begin` repairs it on resume. Scores are compared only between saves validated
    on the same puzzles (``validation_key``): a resumed run with other validation puzzles scores its starting point
    again and chooses among the new scores."""

    def __init__(self, puzzles, solutions, ema: EMACallback | None, out_dir: Path, loops: list[int],
                 validation_key: dict | None = None):
        self.puzzles, self.solutions, self.ema, self.out_dir = puzzles, solutions, ema, out_dir
        self.loops = [int(count) for count in loops]
        self.validation_key = validation_key
        self.best, self.best_key = -1.0, (-1.0, -1.0)
        self.history: list[dict] = []
        self.repaired: str | None = None
        self.trainer = None
        previous = out_dir / "accuracy_history.json"
        if previous.exists():  # a resumed run continues the record and the best score
            self.history = json.loads(previous.read_text())

    def bind(self, trainer) -> "_AccuracyCallback":
        """Also log each validation through ``trainer.log`` (so ``report_to`` receives it); returns self."""
        self.trainer = trainer
        return self

    def _comparable(self, entry: dict) -> bool:
        return "validation" not in entry or self.validation_key is None or entry["validation"] == self.validation_key

    def best_record(self) -> dict | None:
        """The history's best record among comparable ones (the first of equal scores, as saves replace best/ only
        when strictly better)."""
        best = None
        for entry in self.history:
            if self._comparable(entry) and (best is None or self._key(entry) > self._key(best)):
                best = entry
        return best

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        # Records past the resumed step belong to a save that was interrupted: the run will redo those steps.
        self.history = [entry for entry in self.history if entry["step"] <= state.global_step]
        chosen = self.best_record()
        self.best_key = self._key(chosen) if chosen is not None else (-1.0, -1.0)
        self.best = self.best_key[0]
        if state.global_step and not any(entry["step"] == state.global_step and self._comparable(entry)
                                         for entry in self.history):
            # The process died while validating the checkpoint it resumes from (or the validation puzzles changed):
            # score it now, as it would have been.
            self.on_save(args, state, control, model=model)
        if state.global_step:
            self.repaired = _repair_best(self.out_dir, self.best_record(), model)

    @staticmethod
    def _key(record: dict) -> tuple:
        """What ``best/`` maximizes: board accuracy, then blank-cell accuracy (-1 in records written before it)."""
        return (record.get("validation_board_accuracy", -1.0), record.get("validation_cell_accuracy", -1.0))

    def on_save(self, args, state, control, model=None, **kwargs):
        from ..data.sudoku import board_accuracy, cell_accuracy

        # Both the raw and the EMA weights are scored: with beta=0.995 every 10 steps the average spans ~2000
        # steps, so early in a run it trails the raw weights, and late in a run it usually beats them.
        candidates = {"raw": copy.deepcopy(model).eval()}
        if self.ema is not None and self.ema.shadow is not None and state.global_step >= self.ema.start:
            averaged = copy.deepcopy(model).eval()
            self.ema.swap_in(averaged)
            candidates["ema"] = averaged
        grids = {name: {count: candidate.solve(self.puzzles, loops=count) for count in self.loops}
                 for name, candidate in candidates.items()}
        per_loop = {name: {count: board_accuracy(grid, self.puzzles, self.solutions) for count, grid in by_loop.items()}
                    for name, by_loop in grids.items()}
        cells = {name: sum(cell_accuracy(grid, self.puzzles, self.solutions) for grid in by_loop.values()) / len(by_loop)
                 for name, by_loop in grids.items()}
        scores = {name: sum(values.values()) / len(values) for name, values in per_loop.items()}
        winner = max(scores, key=lambda name: (scores[name], cells[name]))
        accuracy = scores[winner]
        record = {"step": state.global_step, "epoch": state.epoch, "validation_board_accuracy": accuracy,
                  "validation_cell_accuracy": cells[winner], "weights": winner,
                  **{f"validation_board_accuracy_{name}": value for name, value in scores.items()},
                  **{f"validation_cell_accuracy_{name}": value for name, value in cells.items()},
                  "per_loop": {name: {str(k): v for k, v in values.items()} for name, values in per_loop.items()},
                  "time": time.strftime("%Y-%m-%dT%H:%M:%S")}
        if self.validation_key is not None:
            record["validation"] = self.validation_key
        self.history.append(record)
        atomic_write_text(self.out_dir / "accuracy_history.json", json.dumps(self.history, indent=1))
        if self._key(record) > self.best_key:
            self.best, self.best_key = accuracy, self._key(record)
            _write_best(candidates[winner], record, self.out_dir)
            logger.info("best/ now holds step %d (%s weights)", state.global_step, winner)
        logger.info("[sudoku] step %d: validation board accuracy %s, blank cells %.3f (best %.3f)",
                    state.global_step, per_loop, cells[winner], self.best)
        if self.trainer is not None:  # to report_to (TensorBoard, W&B, ...) beside the loss
            self.trainer.log({"validation_board_accuracy": accuracy, "validation_cell_accuracy": cells[winner],
                              **{f"validation_board_accuracy_T{count}": value
                                 for count, value in per_loop[winner].items()}})


def _checkpoint_is_complete(folder: Path, needs_average: bool, needs_streams: bool = False) -> bool:
    """A process killed mid-save leaves a folder without some file or with a truncated state: not resumable.

    The Trainer writes ``trainer_state.json`` after its own files; the callbacks write the weight average and the
    random streams after it, so those are checked by name."""
    required = ["trainer_state.json", "model.safetensors"] + (["ema.safetensors"] if needs_average else [])
    required += [RandomStreamsCallback.FILE] if needs_streams else []
    if not all((folder / name).is_file() for name in required):
        return False
    try:
        json.loads((folder / "trainer_state.json").read_text())
    except (OSError, ValueError):
        return False
    return True


CHECKPOINT_FORMAT_FILE = "checkpoint_format.json"


def _step(folder: Path) -> int:
    return int(folder.name.split("-")[-1])


def _streams_required_after(out_dir: Path, checkpoints: list[Path]) -> float:
    """The step after which every checkpoint of this run must carry its random streams.

    A run started by this jacobiscope says so in ``checkpoint_format.json`` before its first save, so a kill between
    a checkpoint's ``trainer_state.json`` and its streams is caught even when that checkpoint is the run's only one.
    A run without that file (saved by an older jacobiscope) needs them only if some checkpoint has them."""
    declared = out_dir / CHECKPOINT_FORMAT_FILE
    if declared.is_file():
        try:
            return int(json.loads(declared.read_text())["random_streams_after_step"])
        except (OSError, ValueError, KeyError, TypeError):
            pass  # unreadable: fall back to what the checkpoints show
    return 0 if any((p / RandomStreamsCallback.FILE).is_file() for p in checkpoints) else float("inf")


def _declare_checkpoint_format(out_dir: Path, resumed_from: str | None) -> None:
    """Record that every checkpoint saved from now on carries its random streams: from step 0 for a run that
    starts from scratch, from the checkpoint it resumes for an older run that never declared it."""
    declared = Path(out_dir) / CHECKPOINT_FORMAT_FILE
    if resumed_from is None or not declared.is_file():
        step = _step(Path(resumed_from)) if resumed_from else 0
        atomic_write_text(declared, json.dumps({"random_streams_after_step": step}))


def _latest_checkpoint(out_dir: Path, needs_average: bool = False) -> str | None:
    out_dir = Path(out_dir)
    checkpoints = sorted((p for p in out_dir.glob("checkpoint-*") if p.name.split("-")[-1].isdigit()), key=_step)
    # Without its random streams a resumed run draws other batches than an uninterrupted one.
    streams_after = _streams_required_after(out_dir, checkpoints)
    complete = [p for p in checkpoints if _checkpoint_is_complete(p, needs_average, _step(p) > streams_after)]
    newest = _step(complete[-1]) if complete else -1
    skipped = [p.name for p in checkpoints if p not in complete and _step(p) > newest]
    if skipped:
        warnings.warn(f"skipping incomplete checkpoint(s) {', '.join(skipped)} in {out_dir} (a save was interrupted); "
                      f"resuming from {complete[-1].name if complete else 'the start'}", stacklevel=4)
    return str(complete[-1]) if complete else None


class RandomStreamsCallback(TrainerCallback):
    """Saves the Python random streams the data pipeline draws from (the augmentation, the loop counts) with each
    checkpoint as ``random_streams.json``, and restores them on resume: the Trainer restores torch's and numpy's
    generators, not these, so without this a resumed run would see other batches than an uninterrupted one.

    ``streams`` maps a name to the ``random.Random`` holder: an object with ``.rng`` or a dict with ``"rng"``. The
    collator calls `record` after each batch: the data loader fetches one batch ahead of training, so the state
    saved with step N is the one recorded after the N-th batch, not the live one (which already drew batch N+1).
    Exact for one batch per optimizer step (no gradient accumulation), as the Sudoku recipes train."""

    FILE = "random_streams.json"

    def __init__(self, streams: dict, resume_from: str | None = None):
        self.streams, self.resume_from = streams, resume_from
        self.history: dict[int, dict] = {}
        self.drawn = 0
        self.start_step = 0

    @staticmethod
    def _rng(holder):
        return holder["rng"] if isinstance(holder, dict) else holder.rng

    def _snapshot(self) -> dict:
        return {name: self._rng(holder).getstate() for name, holder in self.streams.items()}

    def record(self) -> None:
        self.drawn += 1
        self.history[self.drawn] = self._snapshot()
        self.history.pop(self.drawn - 8, None)

    def on_train_begin(self, args, state, control, **kwargs):
        self.start_step = state.global_step
        if state.global_step and self.resume_from:
            self._restore(Path(self.resume_from) / self.FILE)
        self.history[0] = self._snapshot()

    def _restore(self, path: Path) -> None:
        if not path.is_file():
            warnings.warn(f"{path.parent} has no {self.FILE} (saved by an older jacobiscope): the augmentation and "
                          "loop-count streams restart from their seeds", stacklevel=3)
            return
        saved = json.loads(path.read_text())
        for name, holder in self.streams.items():
            if name in saved:
                version, internal, gauss = saved[name]
                self._rng(holder).setstate((version, tuple(internal), gauss))

    def on_save(self, args, state, control, **kwargs):
        consumed = state.global_step - self.start_step
        snapshot = self.history.get(consumed, self._snapshot())
        folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        folder.mkdir(parents=True, exist_ok=True)
        streams = {name: [value[0], list(value[1]), value[2]] for name, value in snapshot.items()}
        atomic_write_text(folder / self.FILE, json.dumps(streams))


class DivergenceCallback(TrainerCallback):
    """Stops a run whose gradients go non-finite, with the last finite weights: they are put back into the model
    before the stop's checkpoint is saved, and ``diverged.json`` in the run folder records the step, so a later call
    reports the run as diverged instead of resuming into NaN weights. Without it a diverging run (a loop without
    normalization) trains on NaN until ``max_steps`` and leaves nothing to measure."""

    FILE = "diverged.json"

    def __init__(self, out_dir: Path):
        self.out_dir = Path(out_dir)
        self.finite: dict[str, torch.Tensor] | None = None
        self.step: int | None = None

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        if self.step is not None or model is None:
            return
        if all(p.grad is None or bool(torch.isfinite(p.grad).all()) for p in model.parameters()):
            return
        self.step = state.global_step  # optimizer steps completed with finite gradients
        self.finite = {name: value.detach().clone() for name, value in model.state_dict().items()}

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if self.finite is None:
            return control
        with torch.no_grad():
            model.load_state_dict(self.finite)
        self.finite = {}  # restored once; the record stays
        atomic_write_text(self.out_dir / self.FILE, json.dumps({
            "step": self.step, "stopped_at": state.global_step,
            "why": f"gradients became non-finite in optimizer step {self.step + 1}; the weights after step "
                   f"{self.step} (the last finite ones) were kept and training stopped"}))
        control.should_training_stop = True
        control.should_save = True
        return control
