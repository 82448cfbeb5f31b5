"""The wheel carries the top-level data folders, and the public names are importable."""
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import jacobiscope
from jacobiscope._resources import shipped_folder

ROOT = Path(__file__).resolve().parents[1]


def test_public_names_are_exported():
    for name in ("LoopedMap", "jacobian", "spectral_norm", "jacobian_eigenvalues", "lyapunov_spectrum",
                 "oscillation_measures", "pseudo_energy", "JacobianOperator"):
        assert name in jacobiscope.__all__ and hasattr(jacobiscope, name)


def test_shipped_folders_are_found():
    assert (shipped_folder("adapters") / "README.md").is_file()
    assert (shipped_folder("hub_configs") / "README.md").is_file()


def test_wheel_contains_adapters_and_hub_configs(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path), str(ROOT)],
        check=True,
    )
    (wheel,) = tmp_path.glob("jacobiscope-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for folder in ("adapters", "hub_configs"):
        expected = {f"jacobiscope/_shipped/{folder}/{p.relative_to(ROOT / folder).as_posix()}"
                    for p in (ROOT / folder).rglob("*") if p.is_file() and "__pycache__" not in p.parts}
        assert expected and expected <= names, sorted(expected - names)
    # A checkpoint carries no code (prepare_for_hub writes it): a stale copy from an old build must not ship either.
    stale = sorted(name for name in names if name.startswith("jacobiscope/_shipped/hub_configs/") and name.endswith(".py"))
    assert stale == [], stale[:3]
    assert "jacobiscope/dynamics/lyapunov.py" in names
    # Every subpackage of the source tree is in the wheel (a missed __init__ would drop one silently).
    source = {p.relative_to(ROOT).as_posix() for p in (ROOT / "jacobiscope").rglob("*.py") if "__pycache__" not in p.parts}
    assert source <= names, sorted(source - names)[:5]
    # The Sudoku benchmark files: a wheel user has no checkout beside it.
    for name in ("satnet.csv.xz", "rrn-test.csv.xz", "PROVENANCE.md"):
        assert f"jacobiscope/data/benchmarks/{name}" in names


@pytest.mark.slow  # suite time (a subprocess or a training run); CI runs it in its slow step
def test_import_loads_the_engine_only():
    """`import jacobiscope` and the engine's names pull in neither transformers' Trainer, accelerate nor datasets."""
    code = ("import sys, jacobiscope\n"
            "assert 'torch' not in sys.modules, 'import jacobiscope alone must not import torch'\n"
            "jacobiscope.LoopedMap, jacobiscope.spectral_norm, jacobiscope.lyapunov_spectrum, jacobiscope.Report\n"
            "heavy = [m for m in ('transformers.trainer', 'accelerate', 'datasets') if m in sys.modules]\n"
            "assert not heavy, heavy\n"
            "assert sorted(jacobiscope.__all__) == sorted(set(jacobiscope.__all__))\n"
            "missing = [name for name in jacobiscope.__all__ if getattr(jacobiscope, name, None) is None]\n"
            "assert not missing, missing\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
