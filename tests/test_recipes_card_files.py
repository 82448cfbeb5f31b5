"""The shipped folder reader the card refreshers share: what it returns, and the error a half-shipped folder gets."""
import json

import pytest

from jacobiscope.recipes._card_files import read_shipped_card
from jacobiscope.recipes._sudoku_dynamics import refresh_dynamics_section
from jacobiscope.recipes.shipping import refresh_accuracy_tables, refresh_scaling_section


def test_reads_the_card_and_its_results(tmp_path):
    (tmp_path / "README.md").write_text("# a card\n")
    (tmp_path / "results.json").write_text(json.dumps({"id": {"votes=1": {"16": {"board_accuracy": 0.25}}}}))
    path, card, results = read_shipped_card(tmp_path, "a caller")
    assert path == tmp_path / "README.md" and card == "# a card\n"
    assert results["id"]["votes=1"]["16"]["board_accuracy"] == 0.25


@pytest.mark.parametrize("refresh", [refresh_dynamics_section, refresh_scaling_section, refresh_accuracy_tables])
@pytest.mark.parametrize("missing", ["README.md", "results.json"])
def test_every_refresher_names_the_missing_file_and_itself(tmp_path, refresh, missing):
    for name in ("README.md", "results.json"):
        if name != missing:
            (tmp_path / name).write_text("{}" if name.endswith(".json") else "# card\n")
    with pytest.raises(FileNotFoundError, match=rf"{missing} does not exist: {refresh.__name__} needs a shipped"):
        refresh(tmp_path)
    assert not (tmp_path / missing).exists()   # nothing written in its place
