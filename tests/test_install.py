"""The README's install paths and checkpoint names are true, and the built wheel and sdist carry what they need.

The full check (a fresh virtual environment per artifact, outside the repository, with every dependency, running
the main job) is the wheel step of `.ci/run`; here the artifacts are built by the standard front end
(`python -m build`), their contents checked, and the wheel run from outside the repository (under -m slow).
"""
import os
import re
import shlex
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest

from jacobiscope.hub import shipped_checkpoints

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
# A checkpoint-like name: itrsa-... / akorn-... (or zoo/...), not a file (.json) and not an anchor (#itrsa-scaling).
CHECKPOINT_NAME = re.compile(r"(?<![\w/.#-])((?:zoo/)?(?:itrsa|akorn)-[a-z0-9][\w-]*)(?![\w.-]*\.\w)")
# Named in the README as what a script will write, each in a paragraph that says it is not shipped.
NOT_SHIPPED = {"itrsa-sudoku-512", "akorn-sudoku-512"}


def paragraph_of(text: str, position: int) -> str:
    start = text.rfind("\n\n", 0, position)
    end = text.find("\n\n", position)
    return text[start + 2 if start >= 0 else 0:end if end >= 0 else len(text)]


def shipped_data_files() -> set[str]:
    """Every file the wheel must carry for the package to work without a checkout, as wheel paths."""
    expected = set()
    for folder in ("adapters", "hub_configs"):
        for path in (ROOT / folder).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".py":
                expected.add(f"jacobiscope/_shipped/{folder}/{path.relative_to(ROOT / folder).as_posix()}")
    for path in (ROOT / "jacobiscope" / "data" / "benchmarks").iterdir():
        if path.suffix == ".xz" or path.name == "PROVENANCE.md":
            expected.add(f"jacobiscope/data/benchmarks/{path.name}")
    return expected


def test_every_checkpoint_the_readme_names_is_shipped():
    shipped = set(shipped_checkpoints())
    shipped |= {name.split("/", 1)[1] for name in shipped if name.startswith("zoo/")}   # the zoo table's short names
    assert {"itrsa-sudoku", "akorn-sudoku", "zoo/itrsa-base"} <= shipped
    named = {match.group(1): match.start() for match in CHECKPOINT_NAME.finditer(README)}
    assert "itrsa-sudoku" in named and len(named) > 20, sorted(named)
    unknown = sorted(name for name in named if name not in shipped and name not in NOT_SHIPPED)
    assert not unknown, f"README.md names checkpoints that hub_configs/ does not ship: {unknown}"
    for name in NOT_SHIPPED & set(named):
        assert "not shipped" in paragraph_of(README, named[name]).replace("\n", " ").replace("Neither is shipped",
                                                                                              "not shipped"), name


def registry_requirements(text: str) -> list[str]:
    """The requirements of every `pip install` in ``text`` that name jacobiscope as a registry package.

    Example::

        >>> registry_requirements('pip install -e ".[plot]" && pip install "jacobiscope[plot]" dist/x.whl')
        ['jacobiscope[plot]']
    """
    found = []
    for arguments in re.findall(r"pip install ([^\n`#&;|]*)", text):
        words, skip = shlex.split(arguments.replace("<", "").replace(">", "")), False
        for word in words:
            if skip or word.startswith("-"):
                skip = word in ("-c", "-r", "--constraint", "--requirement", "-e", "--editable", "-f")
                continue
            if re.match(r"jacobiscope\b(?![\w-])", word):
                found.append(word)
    return found


def test_the_readme_claims_no_registry_release():
    assert "not released on PyPI" in README
    assert registry_requirements(README) == [], "README.md installs jacobiscope from a registry it is not on"
    assert registry_requirements("pip install -q jacobiscope==0.1.0") == ["jacobiscope==0.1.0"]
    assert f"dist/jacobiscope-{VERSION}-py3-none-any.whl" in README, f"the README's wheel name is not version {VERSION}"


def test_the_quick_start_commands_are_read_from_the_readme():
    script = ROOT / ".ci" / "readme_command.py"
    main = subprocess.run([sys.executable, str(script), "main"], capture_output=True, text=True, check=True).stdout
    tests = subprocess.run([sys.executable, str(script), "tests"], capture_output=True, text=True, check=True).stdout
    assert "jacobiscope analyze itrsa-sudoku" in main and "--out report.html" in main and "constraints-cpu" in main
    assert "pytest" in tests and ".[test]" in tests


def test_the_wheel_would_carry_every_checkpoint_and_data_file():
    expected = shipped_data_files()
    for name in ("itrsa-sudoku", "akorn-sudoku", "zoo/itrsa-base"):
        for file in ("config.json", "model.safetensors", "README.md", "results.json"):
            assert f"jacobiscope/_shipped/hub_configs/{name}/{file}" in expected, (name, file)
    assert {"jacobiscope/data/benchmarks/satnet.csv.xz", "jacobiscope/data/benchmarks/rrn-test.csv.xz"} <= expected
    manifest = (ROOT / "MANIFEST.in").read_text()   # what the sdist takes; the wheel is built from the sdist
    assert "graft adapters" in manifest and "graft hub_configs" in manifest and "benchmarks" in manifest


def _build(tmp_path) -> tuple[Path, Path]:
    done = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(tmp_path / "dist"),
                           str(ROOT)], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("jacobiscope-*.whl")
    (sdist,) = (tmp_path / "dist").glob("jacobiscope-*.tar.gz")
    return wheel, sdist


@pytest.mark.slow
def test_built_wheel_and_sdist_carry_everything_and_run_outside_the_repository(tmp_path):
    pytest.importorskip("build")
    wheel, sdist = _build(tmp_path)
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = sorted(shipped_data_files() - names)
    assert not missing, missing[:10]
    assert not [n for n in names if n.startswith("jacobiscope/_shipped/") and n.endswith(".py")]
    with tarfile.open(sdist) as archive:
        members = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    for needed in ("setup.py", "pyproject.toml", "MANIFEST.in", "constraints-cpu.txt", "adapters/README.md",
                   "hub_configs/itrsa-sudoku/model.safetensors", "jacobiscope/data/benchmarks/satnet.csv.xz"):
        assert needed in members, needed
    target, work = tmp_path / "site", tmp_path / "elsewhere"
    work.mkdir()
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(target),
                    str(wheel)], check=True, capture_output=True, timeout=600)
    code = ("import jacobiscope, jacobiscope.hub as hub\n"
            f"assert jacobiscope.__file__.startswith({str(target)!r}), jacobiscope.__file__\n"
            "print(len(hub.shipped_checkpoints()))\n"
            "model = jacobiscope.load_pretrained('itrsa-sudoku')\n"
            "from jacobiscope.data import sudoku\n"
            "print(len(sudoku.satnet_splits()[1]))\n")
    env = dict(os.environ, PYTHONPATH=str(target), HF_HUB_OFFLINE="1")
    env.pop("JACOBISCOPE_SUDOKU_DATA", None)
    done = subprocess.run([sys.executable, "-c", code], cwd=work, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == [str(len(shipped_checkpoints())), "1000"]
