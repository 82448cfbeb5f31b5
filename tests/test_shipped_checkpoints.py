"""The published checkpoints load by short name offline and still solve what their model cards say."""
import json

import pytest
import torch

import jacobiscope
from jacobiscope.data import sudoku
from jacobiscope.hub import shipped_checkpoints
from jacobiscope.recipes._scaling import scaling_section
from jacobiscope.recipes.shipping import CHECK_SLICE

EXPECTED = ["akorn-sudoku", "akorn-sudoku-general", "itrsa-sudoku", "itrsa-sudoku-general"]
MARGIN = 0.02  # two boards in a hundred: thread-count and BLAS rounding can flip a borderline board
# Shipped before the cards measured odd loop counts; every other checkpoint must carry check_slice.per_loop.
BEFORE_ODD_T: set[str] = set()


def test_expected_checkpoints_are_shipped():
    assert set(EXPECTED) <= set(shipped_checkpoints())


@pytest.mark.parametrize("name", sorted(shipped_checkpoints()))
def test_checkpoint_meets_its_model_card(name):
    folder = shipped_checkpoints()[name]
    results = json.loads((folder / "results.json").read_text())
    card = (folder / "README.md").read_text()
    assert card.startswith("---\n") and "library_name: transformers" in card
    config = json.loads((folder / "config.json").read_text())
    assert config["auto_map"]["AutoModel"].startswith("modeling_")
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
    # Odd and even loop counts alike, where the card measured them (every checkpoint shipped since odd T was added).
    per_loop = results["check_slice"].get("per_loop")
    assert per_loop is not None or name in BEFORE_ODD_T, f"{name}: results.json lacks check_slice.per_loop"
    if per_loop is not None:
        recheck = [t for t in (16, 17, 32, 33) if str(t) in per_loop]
        assert any(t % 2 for t in recheck) and any(t % 2 == 0 for t in recheck), sorted(per_loop)
        along = model.solve_along(puzzles, loops=recheck)
        for t in recheck:
            assert sudoku.board_accuracy(along[t], puzzles, solutions) >= per_loop[str(t)] - MARGIN, t


@pytest.mark.parametrize("name", sorted(shipped_checkpoints()))
def test_shipped_code_is_the_packages_code(name):
    """The folder's own modeling code (for Hub users) must not drift from jacobiscope's: re-run
    jacobiscope.hub.prepare_for_hub on the folder after changing a model."""
    from pathlib import Path

    import jacobiscope.models

    folder = shipped_checkpoints()[name]
    package = Path(jacobiscope.models.__file__).parent
    for code in folder.glob("*.py"):
        (source,) = package.glob(f"*/{code.name}")
        assert code.read_text() == source.read_text(), f"{code} differs from {source}"
