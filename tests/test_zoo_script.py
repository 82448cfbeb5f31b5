"""examples/train_zoo.py: every variant differs from its base in one thing; a tiny run trains, ships and tabulates."""
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

import jacobiscope
from conftest import load_script

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "train_zoo.py"


def _module():
    return load_script("examples/train_zoo.py")


def test_each_variant_differs_from_its_base_in_one_thing():
    """One change from what it starts from: its family's base, or the variant it names first (large-N AKOrN with
    the oscillator norm starts from large-N AKOrN); a seed repeat also changes the seed."""
    zoo = _module()
    bases = {"itrsa": zoo.recipe_for("itrsa-base"), "akorn": zoo.recipe_for("akorn-n4")}
    wanted = {"itrsa-heads-1", "itrsa-heads-2", "itrsa-heads-8", "itrsa-e-single", "itrsa-e-multi", "itrsa-no-norm",
              "itrsa-spec", "akorn-n8", "akorn-n32", "akorn-oscillator-norm", "akorn-spec", "akorn-n32-oscillator-norm"}
    assert wanted <= set(zoo.ZOO["variants"])
    for name, (first, _) in zoo.ZOO["variants"].items():
        family = zoo.family_of(name)
        if "-seed" in name:  # a repeat of a shipped variant: that variant's recipe with only the seed changed
            repeated = dataclasses.asdict(zoo.recipe_for(name.rsplit("-seed", 1)[0]))
            recipe = dataclasses.asdict(zoo.recipe_for(name))
            assert [key for key in recipe if recipe[key] != repeated[key]] == ["seed"], name
            assert recipe["seed"] == int(name.rsplit("-seed", 1)[1]) != repeated["seed"], name
            continue
        start = bases[family] if first in zoo.ZOO["bases"] else zoo.recipe_for(first)
        recipe, start = dataclasses.asdict(zoo.recipe_for(name)), dataclasses.asdict(start)
        differing = [key for key in recipe if recipe[key] != start[key]]
        assert len(differing) == (0 if name in ("itrsa-base", "akorn-n4") else 1), (name, differing)
        zoo.recipe_for(name).model_config()  # a valid model configuration
        assert bases[family].hidden_size % zoo.recipe_for(name).oscillator_dim == 0
    large = zoo.recipe_for("akorn-n32-oscillator-norm")
    assert (large.oscillator_dim, large.oscillator_norm) == (32, True)


def test_seed_repeats_are_described_as_repeats_of_the_variant_they_repeat():
    zoo = _module()
    for name, (_, changes) in zoo.ZOO["variants"].items():
        words = zoo.describe(name)
        if "seed" not in changes:
            assert "one change" in words, name
            continue
        repeated = name.rsplit("-seed", 1)[0]
        assert f"the recipe of `zoo/{repeated}` with seed={changes['seed']} instead of 0" in words, name
        assert "one change" not in words and "seed as every other" not in words, name
    # and the shipped cards say it too
    shipped = Path(__file__).resolve().parents[1] / "hub_configs" / "zoo"
    for card in shipped.glob("*/README.md"):
        name = card.parent.name
        if name in zoo.ZOO["variants"]:
            assert zoo.describe(name) in card.read_text(), f"{card}: re-describe it (examples/train_zoo.py)"


@pytest.mark.slow  # suite time: a longer end-to-end run (pytest -m slow)
def test_tiny_zoo_run_ships_a_variant_and_tabulates_it(tmp_path):
    command = [sys.executable, str(SCRIPT), "--tiny", "--only", "itrsa-heads-1", "--runs", str(tmp_path / "runs"),
               "--ship-dir", str(tmp_path / "ship")]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    folder = tmp_path / "ship" / "itrsa-heads-1"
    model = jacobiscope.load_pretrained(folder)
    assert model.config.num_heads == 1 and model.config.hidden_size == 32
    results = json.loads((folder / "results.json").read_text())
    assert {"id", "ood", "fresh"} <= set(results) and "33" in results["id"]["votes=1"]
    best = json.loads((tmp_path / "runs" / "itrsa-heads-1" / "best" / "accuracy.json").read_text())
    assert f"the {best['weights']} weights of step {best['step']}, the best save" in (folder / "README.md").read_text()
    table = subprocess.run([sys.executable, str(SCRIPT), "--table", "--ship-dir", str(tmp_path / "ship")],
                           capture_output=True, text=True, timeout=120).stdout
    row = next(line for line in table.splitlines() if "itrsa-heads-1" in line)
    dynamics = results["dynamics_id"]
    low, high = dynamics["max_lyapunov_iqr"]
    assert "num_heads=1" in row and f"{dynamics['max_lyapunov_median']:.3f} [{low:.3f}, {high:.3f}]" in row
    # the median and quartiles are those of the per-puzzle exponents the card keeps
    import statistics

    per_puzzle = dynamics["per_puzzle"]["max_lyapunov"]
    assert dynamics["max_lyapunov_median"] == pytest.approx(statistics.median(per_puzzle), abs=1e-12)
    assert dynamics["start_state"] == "float64" and len(per_puzzle) == dynamics["puzzles"]
    blanks = [f"{100 * results['id']['votes=1'][t]['cell_accuracy']:.1f}" for t in ("16", "128")]
    assert f"| {blanks[0]} / {blanks[1]} |" in row
    # --update-readme writes that table into a README in place, between the text around it
    zoo = load_script("examples/train_zoo.py")
    readme = tmp_path / "README.md"
    readme.write_text("intro\n\n  | variant | change | old |\n  |---|---|---|\n  | `stale` | x | y |\n\nafter\n")
    assert zoo.update_readme(tmp_path / "ship", readme) == 1
    text = readme.read_text()
    assert text.startswith("intro\n\n  | variant | change | ID T=16") and text.endswith("|\n\nafter\n")
    assert "`stale`" not in text and f"  {row}" in text.splitlines()
    # Shipped again: skipped, nothing retrained.
    again = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and "[zoo]" not in again.stdout


def test_redescribe_rewrites_a_stale_card_description_in_place(tmp_path):
    zoo = _module()
    card = tmp_path / "itrsa-spec-seed1" / "README.md"
    card.parent.mkdir()
    card.write_text("---\nlibrary_name: transformers\n---\n\n# zoo/itrsa-spec-seed1\n\nan old description\n\n## More\n")
    assert zoo.redescribe(tmp_path) == ["itrsa-spec-seed1"]
    lines = card.read_text().split("\n")
    assert lines[6] == zoo.describe("itrsa-spec-seed1") and lines[8] == "## More"
    assert zoo.redescribe(tmp_path) == []  # already right: left as it is
