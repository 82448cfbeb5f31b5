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
    # each measurement was written as it was taken, in order; the times are medians of warm runs
    logged = [json.loads(line) for line in (tmp_path / "measurements.jsonl").read_text().splitlines()]
    items = [(entry["section"], entry["item"]) for entry in logged]
    assert items.index(("llama_layer", "lyapunov")) < items.index(("llama_layer", "section")) < items.index(
        ("analyze_1b", "layer 0"))
    timed = sections["llama_layer"]["lyapunov"]
    warm = sorted(timed["warm"])
    assert len(warm) == 3 and timed["median"] == warm[1] and timed["cold"] > 0
    lines = (tmp_path / "verdicts.txt").read_text().splitlines()
    assert [line.split(":")[0] for line in lines] == ["PASS agreement", "PASS llama_layer", "PASS analyze_1b"]
    assert "9/9" in lines[0] and "computed on this machine's CPU" in lines[0] and lines == result.stdout.strip(
        ).splitlines()[-3:]


@pytest.mark.slow
def test_references_prepared_here_travel_with_the_run_and_are_what_it_compares_against(tmp_path):
    """--prepare writes the float64 references with their inputs; a run given them computes no reference and
    compares against exactly those numbers (checked by tampering with one: that check then fails)."""
    from safetensors.torch import load_file, save_file

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    references = tmp_path / "references"
    prepared = subprocess.run([sys.executable, str(SCRIPT), "--tiny", "--prepare", str(references)],
                              capture_output=True, text=True, timeout=300, env=env)
    assert prepared.returncode == 0, prepared.stderr[-3000:]
    tensors = load_file(str(references / "references.safetensors"))
    tensors["value.lyapunov"] = tensors["value.lyapunov"] + 0.01   # off by 5x the tolerance
    save_file(tensors, str(references / "references.safetensors"))
    run = subprocess.run([sys.executable, str(SCRIPT), "--tiny", "--references", str(references), "--only",
                          "agreement", "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=300,
                         env=env)
    assert run.returncode == 1
    checks = {c["name"]: c for c in json.loads((tmp_path / "out" / "gpu_check.json").read_text())[
        "sections"]["agreement"]["checks"]}
    assert not checks["lyapunov"]["ok"] and checks["lyapunov"]["error"] == pytest.approx(0.01, rel=1e-3)
    assert all(check["ok"] for name, check in checks.items() if name != "lyapunov")
    verdict = (tmp_path / "out" / "verdicts.txt").read_text()
    assert verdict.startswith("FAIL agreement: 8/9") and "shipped from the preparing machine's CPU" in verdict
