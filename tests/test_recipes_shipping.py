import json

import torch

from jacobiscope.hub import prepare_for_hub
from jacobiscope.models import AKOrNConfig, AKOrNForSudoku
from jacobiscope.recipes.shipping import ship_checkpoint


def test_ship_checkpoint_writes_a_consistent_folder(tmp_path):
    torch.manual_seed(0)
    model = AKOrNForSudoku(AKOrNConfig(hidden_size=16, num_heads=2, loops=2)).eval()
    model.save_pretrained(tmp_path / "run" / "best")
    (tmp_path / "run" / "recipe.json").write_text(json.dumps({"arch": "akorn", "hidden_size": 16,
                                                              "max_seconds": 8999.999946}))
    prepare_for_hub(tmp_path / "run" / "best")  # a run prepared for the Hub in place: code and auto_map to leave out
    assert (tmp_path / "run" / "best" / "modeling_akorn.py").is_file()
    folder = ship_checkpoint(tmp_path / "run" / "best", "tiny-akorn", description="A test.", limitations=["tiny"],
                             loops=(1, 2), votes=(1, 2), ood_limit=20, vote_limit=10, destination=tmp_path / "out",
                             fresh_limit=8, dynamics_puzzles=2)
    results = json.loads((folder / "results.json").read_text())
    assert list(results["id"]) == ["votes=1", "votes=1 first=10", "votes=2"]
    assert results["id"]["votes=2"]["1"]["puzzles"] == 10
    # one vote on the same 10 puzzles the voted row used: the model's own solves of those puzzles, scored here
    from jacobiscope.data import sudoku

    rows = sudoku.satnet_splits()[1].select(range(10))
    puzzles, solutions = sudoku.to_tensor(list(rows["puzzle"])), sudoku.to_tensor(list(rows["solution"]))
    reloaded = AKOrNForSudoku.from_pretrained(folder).eval()
    with torch.no_grad():
        for t in ("1", "2"):
            expected = sudoku.board_accuracy(reloaded.solve(puzzles, loops=int(t)), puzzles, solutions)
            assert results["id"]["votes=1 first=10"][t]["board_accuracy"] == expected
    assert results["id"]["votes=1"]["2"]["puzzles"] == 1000 and results["ood"]["votes=1"]["1"]["puzzles"] == 20
    assert results["fresh"]["votes=1"]["2"]["puzzles"] == 8 and results["dynamics_id"]["puzzles"] == 2
    card = (folder / "README.md").read_text()
    assert card.startswith("---\n") and "| 2 (first 10 puzzles) |" in card and "| 1 (first 10 puzzles) |" in card
    assert card.index("| 1 (first 10 puzzles) |") < card.index("| 2 (first 10 puzzles) |")
    # the widest Wilson interval of each row: 1,000 ID puzzles at the worst cell, 10 voted ones
    from jacobiscope._proportions import wilson_interval

    def widest(rows, n):
        return max((hi - lo) / 2 for lo, hi in (wilson_interval(round(v["board_accuracy"] * n), n)
                                                for v in rows.values()))

    expected = (f"95% Wilson intervals: +/- {100 * widest(results['id']['votes=1'], 1000):.1f} points at most for 1 "
                f"vote(s) (n = 1,000); +/- {100 * widest(results['id']['votes=1 first=10'], 10):.1f} points")
    assert expected in card
    from jacobiscope.recipes._sudoku_dynamics import dynamics_section

    assert dynamics_section(results) in card and results["dynamics_id"]["start_state"] == "float64"
    assert f"{100 * results['check_slice']['board_accuracy']:.1f}%" in card
    config = json.loads((folder / "config.json").read_text())
    assert "auto_map" not in config and config["model_type"] == "akorn_sudoku" and config["hidden_size"] == 16
    assert sorted(path.name for path in folder.iterdir()) == ["README.md", "config.json", "model.safetensors",
                                                             "results.json"]  # no code: prepare_for_hub writes it
    prepared = prepare_for_hub(folder, tmp_path / "upload")
    assert json.loads((prepared / "config.json").read_text())["auto_map"]["AutoModel"] == "modeling_akorn.AKOrNForSudoku"
    assert (prepared / "modeling_akorn.py").is_file() and (prepared / "configuration_akorn.py").is_file()
    assert not (tmp_path / "out.staging").exists()
    assert results["ood_rows"] == "RRN test rows 0-19 (of 18,000)" and "RRN test rows 0-19 (of 18,000)" in card
    assert "Fine-tuned from" not in card  # trained from scratch: the card must not claim a starting checkpoint
    # the recipe as recorded, less the last call's time budget (not part of what trained the weights)
    assert '"hidden_size": 16' in card and "max_seconds" not in card and "8999.99" not in card
    from jacobiscope.recipes._scaling import scaling_section
    from jacobiscope.recipes.shipping import refresh_scaling_section

    assert scaling_section(results) in card and not refresh_scaling_section(folder)  # written once, current

    from jacobiscope.recipes.shipping import write_model_card

    tuned = tmp_path / "tuned"
    tuned.mkdir()
    write_model_card(tuned, name="tiny-tuned", recipe={"arch": "akorn", "init_from": "akorn-sudoku"}, results=results,
                     training={"summary": "10 steps."}, description="A test.", limitations=["tiny"])
    assert "Fine-tuned from `akorn-sudoku`" in (tuned / "README.md").read_text()
