"""Kill a real Sudoku training run anywhere — at every file operation of a save, and at random instants — resume it,
and it ends exactly where an uninterrupted run ends: the same raw, EMA and best weights, the same validation
history, and best/ holding the weights of the save that history calls best.

Children start cheaply: a "forkserver" whose server has imported this module (torch, transformers, jacobiscope), so
a child only trains. A deterministic kill is a child that hard-exits (``os._exit``, no cleanup, as SIGKILL) just
before its N-th file operation (open for writing, os.open, os.replace/rename/unlink, shutil.rmtree, torch.save,
safetensors' save_file); the random kills are real SIGKILLs."""
import builtins
import gc
import io
import json
import lzma
import multiprocessing
import os
import random
import shutil
import signal
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import jacobiscope.recipes.sudoku  # noqa: F401 - imported once in the fork server, not in every child

RECIPE = {"arch": "itrsa", "hidden_size": 8, "num_heads": 2, "loops": 2, "loops_min": 1, "loops_max": 3,
          "batch_size": 4, "learning_rate": 0.03, "max_steps": 6, "warmup_steps": 2, "save_steps": 2,
          "logging_steps": 1000, "train_limit": 32, "eval_limit": 6, "ema_beta": 0.5, "ema_every": 1,
          "ema_start": 1, "augment": True, "seed": 0}
PRELOAD = ["pytest", "torch", "safetensors.torch", "datasets", "transformers", "transformers.trainer",
           "transformers.modeling_utils", "jacobiscope", "jacobiscope.hub", "jacobiscope.models",
           "jacobiscope.data.sudoku", "jacobiscope.recipes.sudoku", "jacobiscope.recipes._sudoku_callbacks"]
KILLED = 77  # a child's exit status when it killed itself at the chosen file operation


# ------------------------------------------------------------------------------------------------- the child
def _install_tripwire(kill_at, start_marker, log):
    """Count file operations (after the first one whose path contains ``start_marker``, if given); hard-exit just
    before the ``kill_at``-th. ``log`` collects (kind, path) of each counted operation."""
    import safetensors.torch
    import transformers.modeling_utils

    state = {"armed": start_marker is None, "count": 0}

    def event(kind, path):
        text = os.fspath(path) if isinstance(path, (str, bytes, os.PathLike)) else str(path)
        text = text.decode() if isinstance(text, bytes) else text
        if not state["armed"] and start_marker in text:
            state["armed"] = True
        if not state["armed"]:
            return
        state["count"] += 1
        log.append((kind, text))
        if kill_at is not None and state["count"] >= kill_at:
            os._exit(KILLED)

    def wrap(kind, function, writes=lambda *a, **k: True):
        def wrapped(*args, **kwargs):
            if writes(*args, **kwargs):
                event(kind, args[0] if args else kwargs.get("file", kwargs.get("filename", "?")))
            return function(*args, **kwargs)
        return wrapped

    def open_writes(file, mode="r", *args, **kwargs):
        return any(flag in mode for flag in "wax+")

    def os_open_writes(path, flags, *args, **kwargs):
        return bool(flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT))

    original_open = builtins.open
    builtins.open = io.open = wrap("open", original_open, open_writes)
    os.open = wrap("os.open", os.open, os_open_writes)
    for name in ("replace", "rename", "unlink"):
        setattr(os, name, wrap(f"os.{name}", getattr(os, name)))
    shutil.rmtree = wrap("rmtree", shutil.rmtree)

    def second(kind, function):  # torch.save and save_file take the path second
        def wrapped(obj, target, *args, **kwargs):
            event(kind, target)
            return function(obj, target, *args, **kwargs)
        return wrapped

    torch.save = second("torch.save", _TORCH_SAVE)
    safetensors.torch.save_file = transformers.modeling_utils.safe_save_file = second("save_file", _SAVE_FILE)


_TORCH_SAVE = torch.save
from safetensors.torch import save_file as _SAVE_FILE  # noqa: E402


def _child(out, data, fields, kill_at, start_marker, log_path):
    gc.freeze()  # the inherited modules: nothing for the Trainer's gc.collect() to walk
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    sys.stdout = sys.stderr = open(os.devnull, "w")
    log = []
    _install_tripwire(kill_at, start_marker, log)
    from jacobiscope.recipes.sudoku import SudokuRecipe, train_sudoku

    train_sudoku(SudokuRecipe(**fields), out, progress=False, data_path=data)
    if log_path is not None:
        Path(log_path).write_text(json.dumps(log))
    os._exit(0)


# ------------------------------------------------------------------------------------------------- the parent
@pytest.fixture(scope="module")
def context():
    multiprocessing_context = multiprocessing.get_context("forkserver")
    # Python 3.11's fork server ignores sys.path, so it preloads installed modules (this test module is imported by
    # each child from the inherited path, cheaply: its imports are all preloaded).
    multiprocessing_context.set_forkserver_preload(PRELOAD)
    warm = multiprocessing_context.Process(target=_noop)  # starts the server now, so no child's timing includes it
    warm.start()
    warm.join(300)
    return multiprocessing_context


def _noop():
    pass


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A SATNet-shaped file (10,000 rows, the split is by index) made of 64 real rows: quick for every child."""
    from jacobiscope.data import sudoku

    train, _ = sudoku.satnet_splits(limit=64)
    rows = [f"{p},{s}\n" for p, s in zip(train["puzzle"], train["solution"])]
    folder = tmp_path_factory.mktemp("satnet")
    (folder / "satnet.csv.xz").write_bytes(lzma.compress("".join(rows[i % 64] for i in range(10_000)).encode()))
    return folder


def _run(context, out, data, *, kill_at=None, start_marker=None, log_path=None, fields=RECIPE) -> int:
    process = context.Process(target=_child, args=(str(out), str(data), fields, kill_at, start_marker,
                                                   None if log_path is None else str(log_path)))
    process.start()
    process.join(120)
    assert process.exitcode is not None, "a training child hung"
    return process.exitcode


def _tensors(folder: Path, name: str = "model.safetensors") -> dict:
    return load_file(str(folder / name))


def _assert_same_run(whole: Path, killed: Path, what: str) -> None:
    for folder in ("final", "final_ema", "best"):
        expected, got = _tensors(whole / folder), _tensors(killed / folder)
        assert expected.keys() == got.keys(), f"{what}: {folder}"
        worst = max(float((expected[k] - got[k]).abs().max()) for k in expected)
        assert worst == 0.0, f"{what}: {folder}/ differs from the uninterrupted run's by {worst}"
    history = json.loads((killed / "accuracy_history.json").read_text())
    reference = json.loads((whole / "accuracy_history.json").read_text())
    strip = [{k: v for k, v in entry.items() if k != "time"} for entry in history]
    assert strip == [{k: v for k, v in entry.items() if k != "time"} for entry in reference], what
    best = None
    for entry in history:  # the first of the highest (board, blank-cell) scores, as saves replace best/
        key = (entry["validation_board_accuracy"], entry["validation_cell_accuracy"])
        if best is None or key > best[0]:
            best = (key, entry)
    marker = json.loads((killed / "best" / "accuracy.json").read_text())
    assert marker["step"] == best[1]["step"] and marker["weights"] == best[1]["weights"], what
    assert not (killed / ".best.partial").exists() and not (killed / ".best.old").exists(), what


@pytest.fixture(scope="module")
def reference(context, data, tmp_path_factory):
    """An uninterrupted run, and the file operations of its second save (step 4) onwards."""
    root = tmp_path_factory.mktemp("reference")
    log = root / "log.json"
    assert _run(context, root / "whole", data, start_marker="checkpoint-4", log_path=log) == 0
    history = json.loads((root / "whole" / "accuracy_history.json").read_text())
    assert [entry["step"] for entry in history] == [2, 4, 6]
    # best/ must move during the run for a kill inside its swap to matter
    return root / "whole", json.loads(log.read_text())


def _save_operations(log: list) -> list:
    """The operations of the save of step 4 (up to the first one of step 6's save)."""
    for index, (_kind, path) in enumerate(log):
        if "checkpoint-6" in path:
            return log[:index]
    return log


def _index(operations: list, kind: str, fragment: str) -> int:
    """The 1-based position of the first operation of ``kind`` on a path containing ``fragment``."""
    return next(i for i, (k, path) in enumerate(operations, 1) if k == kind and fragment in path)


def _phases(operations: list) -> tuple[list, list]:
    """Kill points across the save, named by what they interrupt: those that leave checkpoint-4 incomplete (a resume
    redoes the save, so they chain in one folder), and those after it (each needs its own copy of the run)."""
    complete = _index(operations, "os.replace", "random_streams") + 1  # checkpoint-4 is complete from here on
    before = [1, _index(operations, "torch.save", "optimizer.pt"), _index(operations, "open", "trainer_state.json"),
              _index(operations, "save_file", "ema.safetensors"), _index(operations, "os.replace", "ema.safetensors"),
              _index(operations, "os.open", "random_streams"), complete - 1]
    swap = [i for i, (kind, path) in enumerate(operations, 1) if kind == "os.replace"
            and path.rstrip("/").endswith(("/best", "/.best.partial"))]  # best -> .best.old, then partial -> best
    after = [complete, _index(operations, "os.replace", "accuracy_history"),  # history written, best/ not yet
             _index(operations, "save_file", ".best.partial"), _index(operations, "os.replace", ".best.partial/"),
             *swap, swap[-1] + 1]
    return sorted(set(before)), sorted(set(after))


def _kill(context, out, data, index, operations):
    code = _run(context, out, data, kill_at=index, start_marker="checkpoint-4")
    assert code == KILLED, f"operation {index} ({operations[index - 1]}) was never reached: exit {code}"


@pytest.mark.guards("lost")
@pytest.mark.slow  # suite time: a longer end-to-end run (pytest -m slow)
def test_kills_inside_a_save_resume_to_the_same_run(context, data, reference, tmp_path):
    """Killed before each kind of file operation of a save — the Trainer's files, the weight average, the random
    streams, the validation history, best/'s weights, its marker and each rename of its swap — then resumed: the
    run ends as the uninterrupted one (best/ included, rebuilt or put back where the kill left it stale)."""
    whole, log = reference
    operations = _save_operations(log)
    before, after = _phases(operations)
    chain = tmp_path / "chain"
    for number, index in enumerate(before):  # each resume redoes the save: the next kill lands inside it again
        _kill(context, chain, data, index, operations)
        if number == 0:
            shutil.copytree(chain, tmp_path / "start")  # checkpoint-2 complete, step 4 not saved yet
    assert _run(context, chain, data) == 0
    _assert_same_run(whole, chain, f"killed before operations {before}")
    for index in after:
        out = tmp_path / f"kill-{index}"
        shutil.copytree(tmp_path / "start", out)
        _kill(context, out, data, index, operations)
        assert _run(context, out, data) == 0, f"the resume after a kill before {operations[index - 1]} failed"
        _assert_same_run(whole, out, f"killed before {operations[index - 1]}")
    assert len(before) + len(after) >= 10


@pytest.mark.slow
@pytest.mark.guards("lost")
def test_a_kill_before_every_file_operation_of_a_save_resumes_to_the_same_run(context, data, reference, tmp_path,
                                                                              request):
    if "slow" not in (request.config.getoption("markexpr") or "") or "not slow" in request.config.getoption("markexpr"):
        pytest.skip("~30 kills, ~60 s: run with -m slow")
    whole, log = reference
    operations = _save_operations(log)
    start = tmp_path / "start"
    _kill(context, start, data, 1, operations)
    for index in range(1, len(operations) + 1):
        out = tmp_path / f"kill-{index}"
        shutil.copytree(start, out)
        _kill(context, out, data, index, operations)
        assert _run(context, out, data) == 0, f"the resume after a kill before {operations[index - 1]} failed"
        _assert_same_run(whole, out, f"killed before {operations[index - 1]}")
        shutil.rmtree(out)


@pytest.mark.guards("lost")
@pytest.mark.slow  # suite time (a subprocess or a training run); CI runs it in its slow step
def test_random_sigkills_then_resume_end_where_one_run_ends(context, data, tmp_path):
    """Real SIGKILLs at random instants of a longer run (mid-step, mid-save, mid-validation), each followed by a
    resume that may itself be killed; the run ends as an uninterrupted one."""
    longer = dict(RECIPE, max_steps=10)
    started = time.perf_counter()
    assert _run(context, tmp_path / "whole", data, fields=longer) == 0
    duration = time.perf_counter() - started
    chooser = random.Random(1)
    out = tmp_path / "killed"
    kills = 0
    for _attempt in range(8):
        process = context.Process(target=_child, args=(str(out), str(data), longer, None, None, None))
        process.start()
        # Past the start, before a resumed run's end: a resumed run has fewer steps left, and on a fast machine the
        # start-up is most of a run, so the instants lean early (0.2-0.5 of a whole run) and up to 8 tries are made.
        time.sleep(chooser.uniform(0.2, 0.5) * duration)
        if process.exitcode is None:
            os.kill(process.pid, signal.SIGKILL)
            kills += 1
        process.join(60)
        if kills >= 3:
            break
    assert kills >= 2, "the run finished before it could be killed: make it longer"
    assert _run(context, out, data, fields=longer) == 0
    _assert_same_run(tmp_path / "whole", out, f"{kills} random SIGKILLs")
