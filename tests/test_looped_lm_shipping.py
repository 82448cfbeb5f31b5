"""Shipping a looped LM (jacobiscope/recipes/_looped_lm_shipping.py, _looped_lm_card.py): the folder appears whole,
loads with its head by short-name machinery, its results are what `evaluate_task` measures on the same instances,
its card shows them, and the curve summary reads peaks and collapses right."""
import json

import pytest
import torch
import transformers

import jacobiscope
from jacobiscope.data.tasks import task_tokenizer
from jacobiscope.recipes import TaskEvaluation, evaluate_task
from jacobiscope.recipes._looped_lm_shipping import SHIP_SEED, curve_summary, ship_looped_lm


@pytest.mark.parametrize("accuracy, configured, expected", [
    ({1: 0.0, 2: 0.5, 3: 1.0, 4: 0.9, 6: 0.2}, 3, (3, 6, "collapses")),      # below half the peak at 6
    ({1: 0.2, 2: 0.9, 4: 0.95, 8: 0.99}, 2, (8, None, "keeps improving")),
    ({1: 0.2, 2: 0.9, 4: 0.9, 8: 0.88}, 2, (2, None, "holds")),
    ({1: 0.2, 2: 0.9, 4: 0.7, 8: 0.6}, 2, (2, None, "degrades")),          # lower, but above half the peak
    ({1: 0.0, 2: 0.0}, 1, (1, None, "holds")),                              # a flat zero curve peaks at its first loop
])
def test_curve_summary_reads_peak_collapse_and_what_happens_past_the_depth(accuracy, configured, expected):
    summary = curve_summary(accuracy, configured)
    assert (summary["peak_loop"], summary["collapse_loop"], summary["past_depth"]) == expected
    assert summary["at_configured"] == accuracy[configured]


def _run_folder(tmp_path, validation_seed=1):
    torch.manual_seed(0)
    tokenizer = task_tokenizer()
    config = transformers.DoryConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32,
                                     num_hidden_layers=3, num_attention_heads=2, num_key_value_heads=1, head_dim=8,
                                     n_input_layers=1, n_output_layers=1, n_recurrent_loops=2,
                                     pad_token_id=tokenizer.pad_token_id)
    best = tmp_path / "run" / "best"
    transformers.DoryForCausalLM(config).save_pretrained(best)
    tokenizer.save_pretrained(best)
    (best.parent / "recipe.json").write_text(json.dumps({"family": "dory", "task": "addition5",
                                                         "validation_seed": validation_seed}))
    return best


@pytest.mark.slow   # ~6-14 s: two evaluations to 8 loops, analyze and the lens
def test_a_shipped_folder_holds_what_evaluate_task_measures_and_its_card(tmp_path):
    best = _run_folder(tmp_path)
    folder = ship_looped_lm(best, "tiny-dory", description="A tiny random Dory.", limitations=["untrained"],
                            destination=tmp_path / "hub" / "tiny-dory", n=12, dynamics_instances=2)
    assert sorted(p.name for p in (tmp_path / "hub").iterdir()) == ["tiny-dory"]   # no staging folder left
    model = jacobiscope.load_pretrained(folder)
    assert type(model).__name__ == "DoryForCausalLM"            # the head, not the bare DoryModel
    results = json.loads((folder / "results.json").read_text())
    assert results["configured"] == 2 and results["loops"] == list(range(1, 9))
    again = evaluate_task(model, "addition5", loops=range(1, 9), n=12, levels="harder", seed=SHIP_SEED + 1)
    stored = TaskEvaluation.from_json(folder / "eval-harder.json")
    assert [r["predicted"] for r in stored.records] == [r["predicted"] for r in again.records]
    assert {int(k): v for k, v in results["harder"]["accuracy"].items()} == again.accuracy
    card = (folder / "README.md").read_text()
    assert card.count("\n| ") == 8 + 1 and "| **2** (trained) |" in card   # header + one row per loop count
    assert "jacobiscope tasks eval tiny-dory --task addition5 --loops 1-8 --levels harder" in card
    dynamics = results["dynamics"]
    assert sum(dynamics["verdicts"].values()) == dynamics["instances"] == 2
    assert all(norm > 0 for norm in dynamics["spectral_norm_at_depth"])


def test_a_run_selected_on_the_cards_instances_is_refused(tmp_path):
    best = _run_folder(tmp_path, validation_seed=SHIP_SEED)
    with pytest.raises(ValueError, match="validation_seed"):
        ship_looped_lm(best, "tiny-dory", description="", limitations=[], destination=tmp_path / "hub" / "x", n=4)
