"""benchmarks/gpu_check.py, the script for a lent GPU, runs end to end on the CPU at its --tiny size."""
import pytest
import json
import math
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.py"


def _numbers(value):
    """Every number in a nested JSON value (bools excluded)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return
    if isinstance(value, (int, float)):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _numbers(item)
    elif isinstance(value, list):
        for item in value:
            yield from _numbers(item)


@pytest.mark.slow
def test_tiny_run_measures_every_section_and_agrees_with_float64(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    result = subprocess.run([sys.executable, str(SCRIPT), "--tiny", "--out", str(tmp_path)], capture_output=True,
                            text=True, timeout=300, env=env)
    assert result.returncode == 0, (result.stdout[-3000:], result.stderr[-3000:])
    record = json.loads((tmp_path / "gpu_check.json").read_text())
    assert record["device"] == "cpu" and record["tiny"]
    sections = record["sections"]
    assert set(sections) == {"agreement", "llama_layer", "analyze_1b"}
    assert not any("error" in section for section in sections.values()), sections
    for name in ("agreement", "llama_layer", "analyze_1b"):
        assert all(math.isfinite(number) for number in _numbers(sections[name])), name
    checks = sections["agreement"]["checks"]
    assert {check["name"] for check in checks} >= {"jvp", "vjp", "spectral_norm", "eigenvalue_moduli", "lyapunov",
                                                   "finite_time", "llama_lyapunov", "llama_spectral_norm",
                                                   "analyze_lambda_max"}
    for check in checks:
        assert check["ok"] and check["error"] <= check["tolerance"], check
        assert len(check["device"]) == len(check["reference"]) >= 1
    # The reference really is another computation: float32 and float64 differ by rounding, not by nothing.
    assert all(check["error"] > 0 for check in checks)
    lyapunov = sections["llama_layer"]["lyapunov"]
    assert len(lyapunov["exponents"]) == 16 and lyapunov["exponents"] == sorted(lyapunov["exponents"], reverse=True)
    assert sections["llama_layer"]["state"] == [1, 64, 64]
    assert [row["layer"] for row in sections["analyze_1b"]["rows"]] == [0, 1]
    table = (tmp_path / "gpu_check.md").read_text()
    assert "| lyapunov (abs) |" in table and "analyze on a 1B-shaped Llama" in table
