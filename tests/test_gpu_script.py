"""examples/train_512.py, the script for a lent GPU, runs end to end on the CPU with a tiny budget."""
import pytest
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import torch

import jacobiscope
from jacobiscope.data import sudoku

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "train_512.py"


def test_gpu_script_configures_the_akorn_repo_scale():
    spec = importlib.util.spec_from_file_location("train_512", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.COMMON["hidden_size"] == 512 and module.COMMON["batch_size"] == 100
    assert module.COMMON["epochs"] == 100 and module.COMMON["loops_min"] % 2 != module.COMMON["loops_max"] % 2
    assert {spec["arch"] for spec in module.MODELS.values()} == {"itrsa", "akorn"}
    assert module.MODELS["akorn-sudoku-512"]["oscillator_dim"] == 4


@pytest.mark.slow
def test_gpu_script_tiny_run_trains_measures_and_ships(tmp_path):
    result = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path), "--tiny", "--only", "itrsa-sudoku-512"],
                            capture_output=True, text=True, timeout=600, env={**__import__("os").environ,
                                                                              "HF_HUB_OFFLINE": "1"})
    assert result.returncode == 0, result.stderr[-2000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["models"]["itrsa-sudoku-512"]["steps"] == 6
    folder = tmp_path / "itrsa-sudoku-512"
    model = jacobiscope.load_pretrained(folder)
    assert model.config.hidden_size == 16  # the tiny stand-in for 512
    # The shipped numbers are the model's own: recompute ID accuracy at T=3 on the same 40 puzzles.
    _, test = sudoku.satnet_splits(limit=40)
    puzzles, solutions = sudoku.to_tensor(list(test["puzzle"])), sudoku.to_tensor(list(test["solution"]))
    results = json.loads((folder / "results.json").read_text())
    expected = sudoku.cell_accuracy(model.solve(puzzles, loops=3), puzzles, solutions)
    assert abs(results["id"]["votes=1"]["3"]["cell_accuracy"] - expected) < 1e-9
    assert torch.isfinite(torch.tensor(results["dynamics_id"]["max_lyapunov_mean"]))
    assert "under a wall-clock budget" in (folder / "README.md").read_text()
