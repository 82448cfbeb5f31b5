"""The test-time-scaling verdict of per-loop accuracies, and the model-card section written from it."""
import json

import pytest

from jacobiscope.recipes._scaling import loop_scaling, scaling_section


def test_monotone_accuracies_keep_scaling_within_a_point():
    import jacobiscope

    assert jacobiscope.recipes.loop_scaling is loop_scaling  # the public name
    verdict = loop_scaling({16: 0.50, 17: 0.505, 32: 0.70, 33: 0.695, 64: 0.80, 128: 0.79})
    assert verdict["keeps_scaling"] is True
    assert verdict["largest_drop"] == pytest.approx(0.01) and verdict["drop_loops"] == 128
    assert (verdict["peak_loops"], verdict["peak_accuracy"]) == (64, 0.80)
    assert verdict["parity_gap"] == pytest.approx(0.005) and verdict["parity_loops"] == (32, 33)


def test_a_fall_after_the_peak_is_measured_from_the_best_smaller_loop_count():
    # 0.88 at T=32 is the running best; the fall to 0.05 at T=65 is 83 points, even though T=64 already fell
    verdict = loop_scaling({"16": {"board_accuracy": 0.6}, "32": {"board_accuracy": 0.88},
                            "64": {"board_accuracy": 0.40}, "65": {"board_accuracy": 0.05},
                            "128": {"board_accuracy": 0.30}})
    assert verdict["keeps_scaling"] is False
    assert verdict["largest_drop"] == pytest.approx(0.83) and verdict["drop_loops"] == 65
    assert verdict["parity_gap"] == pytest.approx(0.35) and verdict["parity_loops"] == (64, 65)
    assert (verdict["last_loops"], verdict["last_accuracy"]) == (128, 0.30)


def test_ties_peak_at_the_smallest_loop_count_and_no_pairs_mean_no_parity_gap():
    verdict = loop_scaling({32: 0.9, 16: 0.9, 128: 0.9})
    assert verdict["peak_loops"] == 16 and verdict["largest_drop"] == 0 and verdict["drop_loops"] is None
    assert verdict["parity_gap"] is None and verdict["parity_loops"] is None


def test_no_board_solved_has_no_scaling_to_keep():
    assert loop_scaling({16: 0.0, 32: 0.0})["keeps_scaling"] is None
    with pytest.raises(ValueError, match="empty"):
        loop_scaling({})


def test_the_card_section_flags_each_split():
    falling = {"16": {"board_accuracy": 0.6}, "17": {"board_accuracy": 0.6}, "32": {"board_accuracy": 0.9},
               "128": {"board_accuracy": 0.1}}
    rising = {"16": {"board_accuracy": 0.1}, "32": {"board_accuracy": 0.2}}
    section = scaling_section({"id": {"votes=1": falling}, "ood": {"votes=1": rising},
                               "fresh": {"votes=1": {"16": {"board_accuracy": 0.0}}}})
    rows = {line.split("|")[1].strip(): line.split("|")[-2].strip() for line in section.splitlines()
            if line.startswith("| ") and "---" not in line and "split" not in line}
    assert rows == {"SATNet test (ID)": "**no**", "RRN (OOD)": "yes", "fresh puzzles": "no board solved"}
    assert "90.0% at T=32" in section and "80.0 at T=128" in section and "0.0 (T=16 / 17)" in section


def test_refresh_rewrites_a_stale_section_in_place(tmp_path):
    from jacobiscope.recipes.shipping import refresh_scaling_section

    results = {"id": {"votes=1": {"16": {"board_accuracy": 0.5}, "32": {"board_accuracy": 0.2}}}}
    (tmp_path / "results.json").write_text(json.dumps(results))
    (tmp_path / "README.md").write_text("# card\n\nCI check.\n\n## Dynamics of the loop\n\nrows\n")
    assert refresh_scaling_section(tmp_path) is True
    first = (tmp_path / "README.md").read_text()
    assert first.index("## Test-time scaling") < first.index("## Dynamics") and "**no**" in first
    assert refresh_scaling_section(tmp_path) is False  # idempotent
    results["id"]["votes=1"]["32"]["board_accuracy"] = 0.7
    (tmp_path / "results.json").write_text(json.dumps(results))
    assert refresh_scaling_section(tmp_path) is True
    second = (tmp_path / "README.md").read_text()
    assert second.count("## Test-time scaling") == 1 and "**no**" not in second and "| yes |" in second
    assert second.endswith("## Dynamics of the loop\n\nrows\n") and "CI check.\n\n## Test-time" in second
    (tmp_path / "README.md").write_text("# card\n\n## Test-time scaling (old)\n\nstale\n")  # the last section
    assert refresh_scaling_section(tmp_path) is True
    last = (tmp_path / "README.md").read_text()
    assert "stale" not in last and last.startswith("# card\n\n## Test-time scaling (single pass") and "| yes |" in last
    (tmp_path / "README.md").write_text("# card without sections\n")
    with pytest.raises(ValueError, match="Dynamics of the loop"):
        refresh_scaling_section(tmp_path)
