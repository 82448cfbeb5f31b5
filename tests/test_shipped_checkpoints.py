"""The published checkpoints load by short name offline and still solve what their model cards say."""
import json

import pytest
import torch

import jacobiscope
from jacobiscope.data import sudoku
from jacobiscope.hub import shipped_checkpoints
from jacobiscope.recipes._scaling import scaling_section
from jacobiscope.recipes._sudoku_dynamics import dynamics_section
from jacobiscope.recipes.shipping import CHECK_SLICE, _table

EXPECTED = ["akorn-sudoku", "akorn-sudoku-general", "itrsa-sudoku", "itrsa-sudoku-general"]
MARGIN = 0.02  # two boards in a hundred: thread-count and BLAS rounding can flip a borderline board
# Shipped before the cards measured odd loop counts; every other checkpoint must carry check_slice.per_loop.
BEFORE_ODD_T: set[str] = set()


def test_expected_checkpoints_are_shipped():
    assert set(EXPECTED) <= set(shipped_checkpoints())


def _solvers() -> list[str]:
    """The shipped Sudoku solvers (the looped language models have their own card checks:
    tests/test_looped_lm_eval.py and tests/test_looped_lm_shipping.py)."""
    solvers = []
    for name, folder in sorted(shipped_checkpoints().items()):
        config = json.loads((folder / "config.json").read_text())
        if config.get("model_type") in ("itrsa_sudoku", "akorn_sudoku"):
            solvers.append(name)
    return solvers


def _checkpoints():
    """Every shipped solver: the four reference ones in the default suite, the zoo's under ``-m slow`` (each
    card check runs the model on the check slice; 21 zoo variants would add ~40 s to the suite on 2 cores)."""
    return [name if name in EXPECTED else pytest.param(name, marks=pytest.mark.slow) for name in _solvers()]


@pytest.mark.parametrize("name", _checkpoints())
def test_checkpoint_meets_its_model_card(name):
    folder = shipped_checkpoints()[name]
    results = json.loads((folder / "results.json").read_text())
    card = (folder / "README.md").read_text()
    assert card.startswith("---\n") and "library_name: transformers" in card
    config = json.loads((folder / "config.json").read_text())
    assert "auto_map" not in config and config["model_type"] in ("itrsa_sudoku", "akorn_sudoku")
    model = jacobiscope.load_pretrained(name).eval()
    _, test = sudoku.satnet_splits()
    rows = test.select(range(CHECK_SLICE))
    puzzles, solutions = sudoku.to_tensor(list(rows["puzzle"])), sudoku.to_tensor(list(rows["solution"]))
    with torch.no_grad():
        prediction = model.solve(puzzles, loops=results["check_slice"]["loops"])
    accuracy = sudoku.board_accuracy(prediction, puzzles, solutions)
    assert accuracy >= results["check_slice"]["board_accuracy"] - MARGIN
    assert f"{100 * results['check_slice']['board_accuracy']:.1f}%" in card
    assert scaling_section(results) in card, f"{name}: stale scaling section; run refresh_scaling_section on it"
    assert dynamics_section(results) in card, f"{name}: stale dynamics section; run examples/remeasure_dynamics.py"
    position = 0
    for split in ("id", "ood", "fresh"):  # each table as results.json renders it, with its Wilson interval line
        at = card.find(_table(results, split), position)
        assert at >= 0, f"{name}: stale {split} table; run examples/same_sample_votes.py"
        position = at + len(_table(results, split))
    # Odd and even loop counts alike, where the card measured them (every checkpoint shipped since odd T was added).
    per_loop = results["check_slice"].get("per_loop")
    assert per_loop is not None or name in BEFORE_ODD_T, f"{name}: results.json lacks check_slice.per_loop"
    if per_loop is not None:
        recheck = [t for t in (16, 17, 32, 33) if str(t) in per_loop]
        assert any(t % 2 for t in recheck) and any(t % 2 == 0 for t in recheck), sorted(per_loop)
        along = model.solve_along(puzzles, loops=recheck)
        for t in recheck:
            assert sudoku.board_accuracy(along[t], puzzles, solutions) >= per_loop[str(t)] - MARGIN, t


def test_shipped_folders_carry_no_code():
    """Code in a checkpoint folder would be a copy of the package's, free to drift: `prepare_for_hub` writes it."""
    from jacobiscope._resources import shipped_folder

    root = shipped_folder("hub_configs")
    assert sorted(path.relative_to(root).as_posix() for path in root.rglob("*.py")) == []
    folders = {folder.relative_to(root).as_posix() for folder in shipped_checkpoints().values()}
    assert len(folders) == len(shipped_checkpoints()) >= 25
    solver = ["README.md", "config.json", "model.safetensors", "results.json"]
    # a looped LM also carries its tokenizer, its generation defaults and the eval records its card reports
    language_model = sorted(solver + ["eval-harder.json", "eval-train.json", "generation_config.json",
                                      "tokenizer.json", "tokenizer_config.json"])
    for folder in shipped_checkpoints().values():
        is_lm = "task" in json.loads((folder / "results.json").read_text())
        assert sorted(path.name for path in folder.iterdir()) == (language_model if is_lm else solver), folder


# A Hub user without jacobiscope: a fresh interpreter that never imports it loads each prepared folder's own code.
_REMOTE = """
import sys, torch, transformers
folders, puzzles, out = sys.argv[1:-2], torch.load(sys.argv[-2]), {}
for folder in folders:
    model = transformers.AutoModel.from_pretrained(folder, trust_remote_code=True).eval()
    assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
    kwargs = {"generator": torch.Generator().manual_seed(3)} if "akorn" in type(model).__name__.lower() else {}
    with torch.no_grad():
        out[folder] = model(puzzles, **kwargs).logits
assert "jacobiscope" not in sys.modules, "the remote code must not need jacobiscope"
torch.save(out, sys.argv[-1])
"""


@pytest.mark.parametrize("which", ["reference", pytest.param("all", marks=pytest.mark.slow)])
def test_a_prepared_shipped_checkpoint_loads_with_its_own_code_offline(tmp_path, which):
    """`prepare_for_hub` writes the package's code byte for byte, and the prepared folder loaded with
    ``trust_remote_code=True`` (no jacobiscope, no network) gives the logits of ``load_pretrained(name)``."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    import jacobiscope.models
    from jacobiscope.hub import prepare_for_hub

    package = Path(jacobiscope.models.__file__).parent
    names = sorted(EXPECTED) if which == "reference" else _solvers()
    prepared = {name: prepare_for_hub(name, tmp_path / "prepared" / name) for name in names}
    for name, folder in prepared.items():
        code = sorted(folder.glob("*.py"))
        family = "akorn" if json.loads((folder / "config.json").read_text())["model_type"] == "akorn_sudoku" else "itrsa"
        assert [path.name for path in code] == [f"configuration_{family}.py", f"modeling_{family}.py"], name
        for path in code:
            assert path.read_bytes() == (package / family / path.name).read_bytes(), path
    puzzles = sudoku.to_tensor(list(sudoku.satnet_splits()[1].select(range(3))["puzzle"]))
    torch.save(puzzles, tmp_path / "puzzles.pt")
    result = subprocess.run([sys.executable, "-c", _REMOTE, *map(str, prepared.values()), str(tmp_path / "puzzles.pt"),
                             str(tmp_path / "logits.pt")], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules")})
    assert result.returncode == 0, result.stderr[-2000:]
    remote = torch.load(tmp_path / "logits.pt")
    assert len(remote) == len(names)
    for name, folder in prepared.items():
        model = jacobiscope.load_pretrained(name).eval()
        kwargs = {"generator": torch.Generator().manual_seed(3)} if model.config.model_type == "akorn_sudoku" else {}
        with torch.no_grad():
            logits = model(puzzles, **kwargs).logits
        assert logits.shape == (3, 81, 9) and torch.equal(remote[str(folder)], logits), name


def test_a_shipped_folder_loads_without_code_or_auto_map():
    """``from_pretrained`` of a shipped folder resolves its model_type through the classes `jacobiscope.models`
    registers; ``trust_remote_code=True`` changes nothing (there is no remote code to run)."""
    import transformers

    import jacobiscope.models  # noqa: F401 - registers the reference models with AutoModel

    folder = shipped_checkpoints()["akorn-sudoku"]
    plain = transformers.AutoModel.from_pretrained(folder)
    trusted = jacobiscope.load_pretrained("akorn-sudoku", trust_remote_code=True)
    assert type(plain) is type(trusted) is jacobiscope.models.AKOrNForSudoku
    for (name, a), (_, b) in zip(plain.state_dict().items(), trusted.state_dict().items()):
        assert torch.equal(a, b), name
