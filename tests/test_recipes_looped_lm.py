"""The looped-LM recipe: fields checked on construction, the loop knob each family reads at forward time, the data
stream and its loop counts, a real Trainer run interrupted and resumed bit-exactly, and folders that plain
transformers loads offline."""
import json

import pytest
import torch
import transformers
from conftest import load_script

from jacobiscope.data.tasks import encode, get_task, task_tokenizer
from jacobiscope.errors import RecipeError
from jacobiscope.recipes.looped_lm import (
    FAMILIES, GeneratedTaskDataset, LoopedLMCollator, LoopedLMRecipe, build_model, exact_match_rate, get_loops,
    set_loops, train_looped_lm,
)

TINY = dict(hidden_size=16, intermediate_size=32, num_heads=2, num_layers=1)


def _tiny(family, **overrides):
    return LoopedLMRecipe(**dict(TINY, family=family, **overrides))


def _batch(n=3, task="addition"):
    return encode(get_task(task).generate(n, seed=1), task_tokenizer())


@pytest.mark.parametrize("family", FAMILIES)
def test_the_loop_knob_sets_the_depth_of_the_next_forward(family):
    """Setting the knob on a built model gives the logits of a model built with that depth (same weights)."""
    torch.manual_seed(0)
    model = build_model(_tiny(family, loops=2)).eval()
    batch = _batch()
    with torch.no_grad():
        at_two = model(input_ids=batch["input_ids"], use_cache=False).logits
        set_loops(model, 3)
        at_three = model(input_ids=batch["input_ids"], use_cache=False).logits
    torch.manual_seed(0)
    reference = build_model(_tiny(family, loops=3)).eval()
    reference.load_state_dict(model.state_dict())
    with torch.no_grad():
        expected = reference(input_ids=batch["input_ids"], use_cache=False).logits
    assert get_loops(model) == 3 and get_loops(reference) == 3
    assert (at_three - expected).abs().max() <= 1e-5
    # The knob changed the computation (Inkling-2's message gates start tiny: a small but real change).
    assert (at_three - at_two).abs().max() > 1e-6


@pytest.mark.parametrize("window, loops", [(2, 1), (2, 3), (3, 2)])
def test_attention_window_bounds_how_far_a_token_hears_by_the_loop_count(window, loops):
    """Dory with a sliding window: the last token's logits depend on exactly the last (layers * (window - 1) + 1)
    tokens, layers = input + loops + output — read from the dense gradient with respect to every input embedding."""
    torch.manual_seed(0)
    model = build_model(_tiny("dory", attention_window=window, loops=loops)).eval()
    assert set(model.config.layer_types) == {"sliding_attention"} and model.config.sliding_window == window
    ids = _batch(1, task="parity")["input_ids"][:, :-2]          # <bos>, 24 cells, ":"
    embeds = model.model.embed_tokens(ids).detach().requires_grad_(True)
    model(inputs_embeds=embeds, use_cache=False).logits[0, -1].sum().backward()
    heard = embeds.grad[0].abs().sum(-1) > 0
    reach = (loops + 2) * (window - 1)
    assert heard.nonzero().flatten().tolist() == list(range(ids.shape[1] - 1 - reach, ids.shape[1]))


def test_exact_match_rate_restores_the_knob_and_mode():
    model = build_model(_tiny("dory", loops=2)).train()
    rate = exact_match_rate(model, _batch(4), loops=5)
    assert 0.0 <= rate <= 1.0 and get_loops(model) == 2 and model.training


def test_data_stream_is_a_pure_function_of_seed_and_index():
    recipe = LoopedLMRecipe(task="reachability", seed=3)
    data = GeneratedTaskDataset(recipe)
    task = get_task("reachability")
    items = [data[i] for i in (0, 1, 1000, len(data) - 1)]
    assert items == [GeneratedTaskDataset(recipe)[i] for i in (0, 1, 1000, len(data) - 1)]
    assert all(task.solve(item["prompt"]) == item["answer"] for item in items)
    assert all(task.train_levels[0] <= item["level"] <= task.train_levels[1] for item in items)
    assert data[0] != GeneratedTaskDataset(LoopedLMRecipe(task="reachability", seed=4))[0]
    with pytest.raises(IndexError):
        data[len(data)]


def test_curriculum_opens_the_levels_one_at_a_time_by_step():
    """curriculum_steps=100 over chains' 4 train levels: steps 0-24 draw level 1 only, 25-49 levels 1-2, ..., 75 on
    all four; instance i belongs to step i // batch_size; after the curriculum the stream is the plain one."""
    recipe = LoopedLMRecipe(task="chains", batch_size=8, curriculum_steps=100, seed=2)
    data, plain = GeneratedTaskDataset(recipe), GeneratedTaskDataset(LoopedLMRecipe(task="chains", batch_size=8,
                                                                                    seed=2))
    task = get_task("chains")
    for step, highest in ((0, 1), (24, 1), (25, 2), (49, 2), (50, 3), (75, 4), (99, 4)):
        levels = [data[step * 8 + i]["level"] for i in range(8)]
        assert max(levels) <= highest and min(levels) >= 1, (step, levels)
        assert all(task.solve(data[step * 8 + i]["prompt"]) == data[step * 8 + i]["answer"] for i in range(8))
    assert {data[i]["level"] for i in range(0, 25 * 8)} == {1}
    assert {data[i]["level"] for i in range(75 * 8, 100 * 8)} == {1, 2, 3, 4}
    assert [data[i] for i in range(800, 840)] == [plain[i] for i in range(800, 840)]
    assert data[0] != plain[0] or data[1] != plain[1]   # the curriculum changed what the first steps see


def test_collator_draws_loop_counts_in_range_from_its_seed():
    recipe = LoopedLMRecipe(loops=4, loops_min=2, loops_max=6, seed=5)
    data = GeneratedTaskDataset(recipe)
    collate = LoopedLMCollator(recipe)
    draws = [collate([data[i], data[i + 1]])["loops"] for i in range(60)]
    again = LoopedLMCollator(recipe)
    assert draws == [again([data[i], data[i + 1]])["loops"] for i in range(60)]
    assert set(draws) == {2, 3, 4, 5, 6}
    fixed = LoopedLMCollator(LoopedLMRecipe(loops=3))
    batch = fixed([data[0], data[1]])
    assert batch["loops"] == 3 and "answer_mask" not in batch
    assert (batch["labels"] != -100).sum() == 2 * (len(data[0]["answer"]) + 1)


@pytest.mark.parametrize("fields, words", [
    (dict(family="hrm-text"), ["family", "did you mean 'hrm_text'"]),
    (dict(task="addtion"), ["task", "did you mean 'addition'"]),
    (dict(hidden_size=30, num_heads=4), ["hidden_size=30 must be divisible by num_heads=4", "e.g. 32"]),
    (dict(hidden_size=12, num_heads=4), ["must be even", "hidden_size=16"]),
    (dict(loops_min=5, loops_max=2), ["loops_min <= loops_max", "swap them"]),
    (dict(loops=0), ["loops must be an int in [1, 256]"]),
    (dict(family="dory", inner_loops=2), ["inner_loops=2", "set inner_loops to 1"]),
    (dict(num_experts=2, experts_per_token=3), ["experts_per_token=3", "num_experts=2"]),
    (dict(learning_rate="1e-3"), ["learning_rate must be a number"]),
    (dict(family="hrm_text", attention_window=2), ["attention_window=2 is Dory's sliding window", "to null"]),
    (dict(attention_window=0), ["attention_window must be an int in [1, 4096]"]),
])
def test_recipe_fields_are_checked_on_construction(fields, words):
    with pytest.raises(RecipeError) as info:
        LoopedLMRecipe(**fields)
    message = str(info.value)
    assert all(word in message for word in words), message
    assert " — " in message


def test_recipe_file_round_trip_and_unknown_keys(tmp_path):
    recipe = LoopedLMRecipe(family="hrm_text", inner_loops=2, loops_min=1, loops_max=5)
    path = tmp_path / "recipe.json"
    path.write_text(json.dumps(recipe.to_dict()))
    assert LoopedLMRecipe.from_json(path) == recipe
    path.write_text(json.dumps({"famliy": "dory"}))
    with pytest.raises(RecipeError, match="did you mean 'family'"):
        LoopedLMRecipe.from_json(path)
    with pytest.raises(FileNotFoundError, match="does not exist"):   # a PathError, as for every recipe
        LoopedLMRecipe.from_json(tmp_path / "missing.json")


def _run_recipe(steps, family="dory", **overrides):
    fields = dict(TINY, family=family, loops=2, loops_min=1, loops_max=3, batch_size=4, max_steps=steps,
                  warmup_steps=0, save_steps=2, logging_steps=1, validation_examples=4, ema_beta=0.5, ema_every=1,
                  ema_start=1, learning_rate=3e-3)
    fields.update(overrides)
    return LoopedLMRecipe(**fields)


def _weights(folder):
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def test_interrupted_and_resumed_run_continues_bit_exactly(tmp_path):
    """4 steps in one go against 2 steps, then the same folder again with max_steps=4: the raw and EMA weights
    are equal bit for bit (same batches, same loop counts, same average), and the change is recorded."""
    torch.set_num_threads(1)
    whole = train_looped_lm(_run_recipe(4), tmp_path / "whole")
    train_looped_lm(_run_recipe(2), tmp_path / "split")
    # The resume state kept in the repository (examples/_resume_store.py) and put back on another machine's empty
    # run folder continues exactly as the folder it was kept from.
    store = load_script("examples/_resume_store.py")
    assert store.keep(tmp_path / "split", tmp_path / "kept") == 2
    assert store.keep(tmp_path / "split", tmp_path / "kept") is None   # nothing newer: the kept copy stays
    assert store.restore(tmp_path / "kept", tmp_path / "moved") == 2
    assert store.restore(tmp_path / "kept", tmp_path / "moved") is None   # the run is as new: left as it is
    assert not (tmp_path / "moved" / "final").exists()   # what resuming needs, not the finished folders
    resumed = train_looped_lm(_run_recipe(4), tmp_path / "split")
    moved = train_looped_lm(_run_recipe(4), tmp_path / "moved")
    assert resumed["resumed_from"].endswith("checkpoint-2") and resumed["steps"] == whole["steps"] == 4
    assert moved["resumed_from"].endswith("checkpoint-2") and moved["steps"] == 4
    assert resumed["recipe_changes"] == [{"field": "max_steps", "old": 2, "new": 4}]
    for name in ("final", "final_ema"):
        a, b, c = (_weights(tmp_path / run / name) for run in ("whole", "split", "moved"))
        assert all(torch.equal(a[k], b[k]) and torch.equal(a[k], c[k]) for k in a), name
    raw, ema = _weights(tmp_path / "whole" / "final"), _weights(tmp_path / "whole" / "final_ema")
    assert max(float((raw[k] - ema[k]).abs().max()) for k in raw) > 1e-5   # the average is not the raw weights
    history = json.loads((tmp_path / "split" / "validation_history.json").read_text())
    assert [r["step"] for r in history] == [2, 4]
    # Same folder, finished: reported, not trained again; a model change is refused with the fix.
    assert train_looped_lm(_run_recipe(4), tmp_path / "split")["already_finished"] is True
    with pytest.raises(RecipeError, match="hidden_size changed from 16 to 32.*set hidden_size back to 16"):
        train_looped_lm(_run_recipe(6, hidden_size=32), tmp_path / "split")


def _check_best_folder(run, tokenizer_check=True):
    """best/ loads with plain transformers, offline, and holds the weights its marker names: the logits of the
    checkpoint of that step (its raw weights, or its EMA file put into them) on fresh instances."""
    from safetensors.torch import load_file

    folder = run / "best"
    model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    marker = json.loads((folder / "validation.json").read_text())
    reference = type(model).from_pretrained(run / f"checkpoint-{marker['step']}").eval()
    if marker["weights"] == "ema":
        reference.load_state_dict(load_file(str(run / f"checkpoint-{marker['step']}" / "ema.safetensors")),
                                  strict=False)
    batch = encode(get_task("addition5").generate(3, seed=11), tokenizer)
    assert batch["input_ids"][0, 0] == tokenizer.bos_token_id == 1
    with torch.no_grad():
        got = model(input_ids=batch["input_ids"], use_cache=False).logits
        expected = reference(input_ids=batch["input_ids"], use_cache=False).logits
    assert torch.equal(got, expected)
    return model, marker


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_each_family_trains_and_its_folders_load_with_plain_transformers(tmp_path, family):
    torch.set_num_threads(1)
    summary = train_looped_lm(_run_recipe(4, family=family, loops=2, ema_start=1), tmp_path / "run")
    assert summary["steps"] == 4
    model, marker = _check_best_folder(tmp_path / "run")
    assert get_loops(model) == 2 and type(model).__name__.lower().startswith(family.replace("_", "")[:4])
    for name in ("final", "final_ema"):
        loaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "run" / name)
        assert get_loops(loaded) == 2
        assert transformers.AutoTokenizer.from_pretrained(tmp_path / "run" / name).eos_token_id == 2


def test_best_folder_loads_with_plain_transformers_offline(tmp_path):
    from jacobiscope.recipes.looped_lm import validation_examples

    torch.set_num_threads(1)
    train_looped_lm(_run_recipe(2, save_steps=2, ema_start=1, task="addition5"), tmp_path / "run")
    model, marker = _check_best_folder(tmp_path / "run")
    assert type(model).__name__ == "DoryForCausalLM" and get_loops(model) == 2
    # The marker's score is the loaded model's own exact match on the run's validation instances.
    recipe = LoopedLMRecipe.from_json(tmp_path / "run" / "recipe.json")
    check = encode(validation_examples(recipe), transformers.AutoTokenizer.from_pretrained(tmp_path / "run" / "best"))
    assert exact_match_rate(model, check, 2) == marker["exact_match"]


def test_best_is_chosen_at_the_depth_first_then_by_how_far_past_training_it_goes():
    """The selection order: exact match at the trained depth, then the mean over the validation loops of the in-range
    and the harder exact match, then the later step; a record from before the harder scores counts them as 0."""
    from jacobiscope.recipes._looped_lm_callbacks import ValidationCallback

    def record(step, at_depth, mean, harder=None):
        row = {"step": step, "exact_match": at_depth, "exact_match_mean": mean, "validation": "key"}
        return row if harder is None else {**row, "harder_exact_match_mean": harder}

    callback = ValidationCallback.__new__(ValidationCallback)
    callback.key = "key"
    for order in (1, -1):
        # 1,500 wins: 2,000 is worse at the depth; 1,000's in-range mean is higher (a luckier coin at too few loops)
        # but its harder instances lag; 2,500 is a hair lower pooled.
        rows = [record(500, 1.0, 0.96), record(1000, 1.0, 0.96, harder=0.66), record(1500, 1.0, 0.954, harder=0.70),
                record(2000, 0.99, 0.99, harder=1.0), record(2500, 1.0, 0.95, harder=0.70)]
        callback.history = sorted(rows, key=lambda r: r["step"] * order)
        assert callback.best_record()["step"] == 1500
    callback.history = [record(500, 1.0, 0.96), record(1000, 1.0, 0.96, harder=0.0), record(1500, 1.0, 0.90)]
    assert callback.best_record()["step"] == 1000   # ties go to the later step
    assert ValidationCallback._score_key(record(1, 1.0, 0.9, harder=0.5)) == (1.0, 0.7)


def test_shipped_recipes_are_valid_and_cover_the_three_families():
    from pathlib import Path

    folder = Path(__file__).resolve().parents[1] / "examples" / "recipes"
    recipes = {path.stem: LoopedLMRecipe.from_json(path) for path in sorted(folder.glob("looped-lm-*.json"))}
    assert {recipe.family for recipe in recipes.values()} == set(FAMILIES)
    # Variety: at least one trained at random loop counts around its depth, one at a fixed depth.
    ranges = [recipe.training_loops() for recipe in recipes.values()]
    assert any(low < high for low, high in ranges) and any(low == high for low, high in ranges)
    assert all(recipe.threads == 1 for recipe in recipes.values())
    # A windowed recipe on a digit-sum row can hear its farthest training digit at its fewest training loops: the
    # answer position hears (loops + 2) * (window - 1) cells back (input layer, loops, output layer).
    from jacobiscope.data.tasks import DigitSumTask

    windowed = [r for r in recipes.values() if r.attention_window is not None]
    assert windowed
    for recipe in windowed:
        task = get_task(recipe.task)
        assert isinstance(task, DigitSumTask)
        reach = (recipe.training_loops()[0] + 2) * (recipe.attention_window - 1)
        assert reach >= task.train_levels[1], recipe
        assert (4 * recipe.loops + 2) * (recipe.attention_window - 1) >= task.harder_levels[1], recipe
