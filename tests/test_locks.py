"""One writer per folder: a second process is refused while the first lives, and a killed holder blocks nothing."""
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import load_script
from jacobiscope._locks import LOCK_NAME, FolderBusyError, folder_lock

HOLD = """
import sys, time
from jacobiscope._locks import folder_lock
with folder_lock(sys.argv[1], "trained"):
    print("held", flush=True)
    time.sleep(120)
"""


def _holder(folder: Path) -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, "-c", HOLD, str(folder)], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "held"
    return process


def test_a_live_holder_is_named_and_a_killed_one_blocks_nothing(tmp_path):
    holder = _holder(tmp_path / "run")
    try:
        with pytest.raises(FolderBusyError, match=f"being trained by process {holder.pid} on ") as caught:
            with folder_lock(tmp_path / "run", "trained"):
                pass
        assert caught.value.pid == holder.pid and "use another folder" in str(caught.value)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    # SIGKILL ran no clean-up: the file is still there, naming the dead holder, and the lock is free all the same.
    assert json.loads((tmp_path / "run" / LOCK_NAME).read_text())["pid"] == holder.pid
    with folder_lock(tmp_path / "run", "trained") as path:
        assert json.loads(path.read_text())["pid"] != holder.pid


def test_released_on_exceptions_and_independent_by_name(tmp_path):
    with pytest.raises(KeyError):
        with folder_lock(tmp_path, "trained"):
            raise KeyError("inside")
    with folder_lock(tmp_path, "trained"):
        with folder_lock(tmp_path, "shipped", name=".other.lock"):  # another lock on the same folder
            with pytest.raises(FolderBusyError):
                with folder_lock(tmp_path, "trained"):
                    pass


@pytest.mark.slow  # suite time (a subprocess or a training run); CI runs it in its slow step
def test_training_a_busy_run_folder_is_refused_before_anything_is_written(tmp_path):
    from jacobiscope.recipes.sudoku import SudokuRecipe, train_sudoku

    run = tmp_path / "run"
    holder = _holder(run)
    try:
        with pytest.raises(FolderBusyError, match=str(holder.pid)):
            train_sudoku(SudokuRecipe(hidden_size=16, num_heads=2, max_steps=1, train_limit=8), run, progress=False)
        assert sorted(p.name for p in run.iterdir()) == [LOCK_NAME]  # no recipe.json, no checkpoint
        cli = subprocess.run([sys.executable, "-m", "jacobiscope", "sudoku", "train", "--out", str(run),
                              "--max-steps", "1", "--quiet"], capture_output=True, text=True, timeout=300)
        assert cli.returncode == 2 and cli.stdout == ""
        (line,) = cli.stderr.strip().splitlines()
        assert line.startswith("jacobiscope: error: ") and f"process {holder.pid}" in line
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()


def test_two_zoo_calls_share_the_variants(tmp_path, capsys):
    """A variant another call holds is skipped, not trained twice; the call goes on to the next variant."""
    zoo = load_script("examples/train_zoo.py")
    tried = []
    zoo.train_one = lambda name, *args: tried.append(name) or True
    with folder_lock(tmp_path / "runs" / "itrsa-heads-1", "trained or shipped", name=".zoo.lock"):
        zoo.train(["itrsa-heads-1", "itrsa-heads-2"], 60.0, tmp_path / "runs", tmp_path / "ship", {}, {})
    assert tried == ["itrsa-heads-2"]
    assert "[zoo] itrsa-heads-1: skipped" in capsys.readouterr().out
