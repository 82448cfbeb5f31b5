"""`evaluate_task`: every loop count read from ONE trajectory of a looped LM's own loop is what the model's own forward
gives with its loop knob set to that count (H_cycles of HRM-Text, n_recurrent_loops of Dory, loop_num_passes of
Inkling-2 loop), logits to 1e-4 and each instance's teacher-forced argmax, correctness and wrong-token count exactly;
the records, per-level accuracy, JSON and join with `solved_from_sudoku_eval` are read back; bad inputs are refused
with the fix. Tiny random models from configs (no downloads)."""
import json

import pytest
import torch
import transformers

import jacobiscope
from jacobiscope.data.tasks import TaskExample, encode, exact_match, get_task, task_tokenizer
from jacobiscope.errors import ArgumentError
from jacobiscope.recipes._looped_lm_eval import TaskEvaluation, evaluate_task, logits_along
from jacobiscope.recipes._looped_lm_eval_checks import LOOP_KNOBS

VOCAB = 50  # len(task_tokenizer())


def hrm_text():
    torch.manual_seed(0)
    config = transformers.HrmTextConfig(vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                        num_attention_heads=2, head_dim=8, H_cycles=2, L_cycles=2,
                                        max_position_embeddings=64, initializer_range=0.3)
    model = transformers.HrmTextForCausalLM(config).eval()
    with torch.no_grad():
        model.base_model.z_L_init.normal_()
    return model


def dory():
    torch.manual_seed(0)
    config = transformers.DoryConfig(vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=4,
                                     num_attention_heads=2, num_key_value_heads=1, head_dim=8, n_input_layers=1,
                                     n_recurrent_layers=2, n_output_layers=1, n_recurrent_loops=2)
    return transformers.DoryForCausalLM(config).eval()


def inkling2_loop():
    torch.manual_seed(0)
    config = transformers.Inkling2LoopTextConfig(
        vocab_size=VOCAB, unpadded_vocab_size=VOCAB, eos_token_id=None, hidden_size=16, num_hidden_layers=3,
        num_attention_heads=2, num_key_value_heads=1, head_dim=8, swa_num_attention_heads=2, swa_num_key_value_heads=1,
        swa_head_dim=8, sliding_window_size=4, d_rel=4, rel_extent=8, moe_intermediate_size=16, n_routed_experts=2,
        num_experts_per_tok=1, n_layers_per_attn_res_block=1, loop_layer_index_start=1, loop_layer_index_end=2,
        loop_num_passes=2, loop_gate_rank=4)
    model = transformers.Inkling2LoopForCausalLM(config)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():  # the init makes the message gates tiny: randomized, so the passes differ visibly
        for name, parameter in model.named_parameters():
            if name.endswith(("query", "static_weight")) or "message_gate." in name:
                parameter.copy_(0.5 * torch.randn(parameter.shape, generator=generator))
    return model.eval()


FAMILIES = {"hrm_text": hrm_text, "dory": dory, "inkling2_loop": inkling2_loop}
LOOPS = (1, 2, 3, 5)  # below, at and past the configured depth 2


def forward_at(model, inputs, loops):
    """The independent reference: the model's own forward with its loop knob set to ``loops`` (cache off: HRM-Text
    sizes its cache for the configured cycles)."""
    knob = LOOP_KNOBS[model.config.model_type].attribute
    configured = getattr(model.config, knob)
    setattr(model.config, knob, loops)
    try:
        with torch.no_grad():
            return model(**inputs, use_cache=False).logits
    finally:
        setattr(model.config, knob, configured)


def reference_records(model, examples, tokenizer, loops):
    """Per loop count: exact match (the data API's), wrong supervised tokens and the predicted answer, from the
    model's own forward at that depth; plus its logits."""
    batch = encode(examples, tokenizer)
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    target, supervised = batch["labels"][:, 1:], batch["labels"][:, 1:] != -100
    out = {}
    for count in loops:
        logits = forward_at(model, inputs, count)
        predicted = logits[:, :-1].argmax(-1)
        answers = ["".join(tokenizer.convert_ids_to_tokens(predicted[row, supervised[row]].tolist()[:-1]))
                   for row in range(len(examples))]
        out[count] = {"logits": logits, "correct": exact_match(logits, batch["labels"]).tolist(),
                      "wrong": ((predicted != target) & supervised).sum(1).tolist(), "predicted": answers}
    return inputs, out


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_loop_count_from_one_trajectory_is_the_models_own_forward_at_that_depth(family):
    model, tokenizer = FAMILIES[family](), task_tokenizer()
    examples = get_task("addition").generate(6, seed=3)
    inputs, reference = reference_records(model, examples, tokenizer, LOOPS)
    read = dict(logits_along(model, inputs, LOOPS))
    for count in LOOPS:
        assert float((read[count] - reference[count]["logits"]).abs().max()) <= 1e-4, (family, count)
    result = evaluate_task(model, "addition", loops=LOOPS, n=6, seed=3, batch_size=4, tokenizer=tokenizer)
    assert [(r["prompt"], r["answer"]) for r in result.records] == [(e.prompt, e.answer) for e in examples]
    for count in LOOPS:
        assert [r["correct"][str(count)] for r in result.records] == reference[count]["correct"]
        assert [r["wrong_tokens"][str(count)] for r in result.records] == reference[count]["wrong"]
        assert [r["predicted"][str(count)] for r in result.records] == reference[count]["predicted"]
    # not vacuous: the depth changes what the model says
    assert reference[1]["predicted"] != reference[5]["predicted"], family
    assert result.configured == 2 and model.config.to_dict()[LOOP_KNOBS[model.config.model_type].attribute] == 2


def eos_tokenizer(character: str):
    """The tasks' vocabulary with ``character`` as its end-of-sequence token: with an empty answer, an instance is
    exactly right where the model's argmax after the prompt is that character."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_object=task_tokenizer().backend_tokenizer, pad_token="<pad>",
                                   bos_token="<bos>", eos_token=character, unk_token="<unk>")


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_exact_match_per_instance_and_loop_is_the_forwards_with_some_right_and_some_wrong(family):
    model, tokenizer = FAMILIES[family](), task_tokenizer()
    prompts = [TaskExample(ex.prompt, "", ex.level) for ex in get_task("addition").generate(24, seed=0)]
    batch = encode(prompts, tokenizer)
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    after_prompt = batch["attention_mask"].sum(1) - 2
    said = torch.stack([forward_at(model, inputs, count)[torch.arange(24), after_prompt].argmax(-1)
                        for count in LOOPS])
    ordinary = [i for i in said.reshape(-1).tolist() if i >= 4]  # a character, not a special token
    character = tokenizer.convert_ids_to_tokens(max(set(ordinary), key=ordinary.count))
    expected = (said == tokenizer.convert_tokens_to_ids(character))
    result = evaluate_task(model, "addition", loops=LOOPS, examples=prompts, batch_size=7,
                           tokenizer=eos_tokenizer(character))
    for row, count in enumerate(LOOPS):
        assert [r["correct"][str(count)] for r in result.records] == expected[row].tolist(), (family, count)
        assert result.accuracy[count] == pytest.approx(float(expected[row].float().mean()))
    assert 0 < int(expected.sum()) < expected.numel(), family  # some right, some wrong: the check can fail
    assert [r["solved_at"] for r in result.records] == [[c for j, c in enumerate(LOOPS) if expected[j, i]]
                                                        for i in range(24)]


def test_records_levels_json_dataframe_and_the_join_with_diagnostics(tmp_path):
    model, tokenizer = FAMILIES["dory"](), task_tokenizer()
    task = get_task("reachability")
    result = evaluate_task(model, task, loops=[3, 1], n=10, levels="harder", seed=5, tokenizer=tokenizer)
    generated = task.generate(10, levels=task.harder_levels, seed=5)  # fresh, seeded: the same instances again
    assert result.loops == [1, 3] and result.levels == task.harder_levels and result.n == 10
    assert [(r["index"], r["prompt"], r["answer"], r["level"]) for r in result.records] == [
        (i, ex.prompt, ex.answer, ex.level) for i, ex in enumerate(generated)]
    assert sum(result.level_counts.values()) == 10 and set(result.level_counts) == {ex.level for ex in generated}
    assert result.examples() == generated  # encode(result.examples(), tokenizer): the inputs, for the diagnostics
    for count in (1, 3):
        for level, value in result.per_level[count].items():
            rows = [r for r in result.records if r["level"] == level]
            assert value == sum(r["correct"][str(count)] for r in rows) / len(rows)
        assert all(r["wrong_tokens"][str(count)] <= len(r["answer"]) + 1 for r in result.records)
        assert all(len(r["predicted"][str(count)]) == len(r["answer"]) for r in result.records)
    written = result.to_json(tmp_path / "eval.json")
    record = json.loads((tmp_path / "eval.json").read_text())
    assert record == json.loads(written) == json.loads(json.dumps(result.to_dict()))
    assert record["puzzles"]["reachability"][4]["prompt"] == generated[4].prompt
    assert TaskEvaluation.from_json(tmp_path / "eval.json") == result  # every field read back, keys as ints again
    (tmp_path / "other.json").write_text('{"task": "addition"}')
    with pytest.raises(ArgumentError, match="is not a task evaluation record .* — pass the file"):
        TaskEvaluation.from_json(tmp_path / "other.json")
    assert sorted(record["results"]["reachability"]) == ["1", "3"]
    for count in (1, 3):  # what sudoku eval's join reads: per instance, solved at that loop count
        assert jacobiscope.recipes.solved_from_sudoku_eval(record, "reachability", loops=count) == [
            r["correct"][str(count)] for r in result.records]
    frame = result.to_dataframe()
    assert len(frame) == 20 and list(frame.loop[:2]) == [1, 3] and list(frame["index"][:3]) == [0, 0, 1]
    assert frame.wrong_tokens.sum() == sum(sum(r["wrong_tokens"].values()) for r in result.records)
    table = result.table().splitlines()
    assert table[0].split()[:2] == ["loops", "exact"] and table[2].startswith("    3 ")  # 3: not the depth (2)


def test_the_batch_size_does_not_change_a_score_and_the_models_mode_is_kept():
    model, tokenizer = FAMILIES["hrm_text"](), task_tokenizer()
    one = evaluate_task(model, "reachability", loops=(1, 4), n=9, levels="2-3", seed=2, batch_size=9,
                        tokenizer=tokenizer)
    model.train()  # scored in eval mode all the same, and handed back in training mode
    other = evaluate_task(model, "reachability", loops=(1, 4), n=9, levels=(2, 3), seed=2, batch_size=2,
                          tokenizer=tokenizer)
    assert model.training and one.levels == other.levels == (2, 3)
    assert {r["level"] for r in one.records} == {2, 3}
    assert [r["wrong_tokens"] for r in one.records] == [r["wrong_tokens"] for r in other.records]
    assert [r["predicted"] for r in one.records] == [r["predicted"] for r in other.records]


@pytest.fixture(scope="module")
def tiny():
    return dory()


@pytest.mark.parametrize("options, fragments", [
    ({"task": "additon"}, ("unknown task 'additon'", "did you mean 'addition'")),
    ({"loops": (0, 2)}, ("loops must be >= 1", "pass e.g.")),
    ({"loops": (2.5,)}, ("whole loop counts", "2.5")),
    ({"loops": "4"}, ("positive int or a list", "'4'")),
    ({"loops": (True,)}, ("whole loop counts", "True")),
    ({"n": 0}, ("n must be a whole number of instances", "n=500")),
    ({"n": 2.5}, ("n must be a whole number", "pass e.g.")),
    ({"levels": (7, 30)}, ("has levels 0..8", "harder_levels")),
    ({"levels": "sideways"}, ("levels must be N, A-B, train or harder", "1-4")),
    ({"batch_size": 0}, ("batch_size must be a positive int", "batch_size=500")),
    ({"seed": 1.5}, ("seed must be an int", "seed=0")),
    ({"tokenizer": None}, ("not loaded from a folder", "task_tokenizer()")),
    ({"tokenizer": "chars"}, ("must be a transformers tokenizer", "task_tokenizer()")),
    ({"examples": []}, ("non-empty list of TaskExample", "task.generate")),
])
def test_bad_arguments_are_refused_with_the_fix(tiny, options, fragments):
    arguments = {"task": "addition", "loops": (1, 2), "n": 4, "tokenizer": task_tokenizer(), **options}
    task = arguments.pop("task")
    with pytest.raises(ArgumentError) as caught:
        evaluate_task(tiny, task, **arguments)
    message = str(caught.value)
    assert " — " in message
    for fragment in fragments:
        assert fragment in message, (fragment, message)


def test_a_model_that_is_not_a_looped_lm_is_refused_with_the_fix():
    llama = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2)).eval()
    with pytest.raises(ArgumentError, match="is not a looped model.*— pass an HRM-Text, Dory or Inkling-2 loop"):
        evaluate_task(llama, "addition", n=2, tokenizer=task_tokenizer())
    base = transformers.DoryModel(dory().config).eval()  # the loop, but no head: it predicts no token
    with pytest.raises(ArgumentError, match="no language-model head, so it predicts no tokens — load it with .*AutoModelForCausalLM"):
        evaluate_task(base, "addition", n=2, tokenizer=task_tokenizer())
    with pytest.raises(ArgumentError, match="must be a looped language model"):
        evaluate_task("dory", "addition", n=2, tokenizer=task_tokenizer())
    from jacobiscope.recipes._looped_lm_eval_checks import load_looped_lm

    with pytest.raises(ArgumentError, match="'itrsa-sudoku' is a 'itrsa_sudoku' model, not a looped language model"):
        load_looped_lm("itrsa-sudoku")  # a shipped name, refused before its weights are read


def test_a_tokenizer_that_does_not_fit_the_model_or_the_task_is_refused(tmp_path):
    small = transformers.DoryForCausalLM(transformers.DoryConfig(
        vocab_size=20, hidden_size=16, intermediate_size=32, num_hidden_layers=3, num_attention_heads=2,
        num_key_value_heads=1, head_dim=8, n_input_layers=1, n_output_layers=1)).eval()
    with pytest.raises(ArgumentError, match="id 41 is past the model's 20 embedding rows: .* — pass that one"):
        evaluate_task(small, "addition", n=2, tokenizer=task_tokenizer())
    with pytest.raises(ArgumentError, match="no token for '>' of the task's text — pass the tokenizer"):
        evaluate_task(dory(), "reachability", n=2, tokenizer=_without(">"))
    model = dory()
    model.save_pretrained(tmp_path / "no-tokenizer")
    loaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "no-tokenizer")
    with pytest.raises(ArgumentError, match="has no tokenizer.*task_tokenizer\\(\\).save_pretrained\\(folder\\)"):
        evaluate_task(loaded, "addition", n=2)
    task_tokenizer().save_pretrained(tmp_path / "no-tokenizer")
    assert evaluate_task(loaded, "addition", loops=(2,), n=3).records[0]["wrong_tokens"]["2"] >= 0


def _without(character):
    """A tokenizer whose vocabulary lacks ``character`` (it becomes the unknown token)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    vocab = {token: index for token, index in task_tokenizer().get_vocab().items() if token != character}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core.decoder = decoders.Fuse()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", bos_token="<bos>",
                                                eos_token="<eos>", unk_token="<unk>")


def test_a_position_whose_logits_hold_nan_predicts_nothing_right():
    """torch's argmax points at a NaN logit: without the check, a NaN in the row of token '1' would make every
    position whose answer is '1' count as right."""
    model, tokenizer = dory(), task_tokenizer()
    with torch.no_grad():
        model.lm_head.weight[tokenizer.convert_tokens_to_ids("1")] = float("nan")
    result = evaluate_task(model, "addition", loops=(1, 2), n=5, seed=1, tokenizer=tokenizer)
    assert any("1" in r["answer"] for r in result.records)
    for r in result.records:
        assert r["wrong_tokens"] == {"1": len(r["answer"]) + 1, "2": len(r["answer"]) + 1}
        assert r["predicted"]["2"] == "<unk>" * len(r["answer"]) and r["solved_at"] == []
    assert result.accuracy == {1: 0.0, 2: 0.0}


def _recorded_evals():
    """Every ``jacobiscope tasks eval --out`` record shipped beside a checkpoint (``hub_configs/<name>/*.json``)."""
    from jacobiscope.hub import shipped_checkpoints

    found = []
    for name, folder in shipped_checkpoints().items():
        for path in sorted(folder.glob("*.json")):
            try:
                record = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if isinstance(record, dict) and {"task", "puzzles", "loops", "levels", "seed", "n"} <= set(record):
                found.append(pytest.param(name, path, id=f"{name}/{path.name}"))
    return found or [pytest.param(None, None, marks=pytest.mark.skip(reason="no shipped checkpoint records a task "
                                                                                "eval yet"))]


@pytest.mark.parametrize("name, path", _recorded_evals())
def test_a_shipped_checkpoints_recorded_eval_reproduces_on_a_slice(name, path):
    """The card's numbers come from the record; its first instances, generated afresh from the record's seed and
    levels (generate(k) is generate(n)[:k]) and scored again by the shipped weights, give the same answers."""
    from jacobiscope.hub import locate_model
    from jacobiscope.recipes._looped_lm_eval_checks import load_looped_lm

    record = json.loads(path.read_text(encoding="utf-8"))
    recorded = record["puzzles"][record["task"]][:8]
    model = load_looped_lm(locate_model(name))
    result = evaluate_task(model, record["task"], loops=record["loops"], n=len(recorded),
                           levels=tuple(record["levels"]), seed=record["seed"])
    assert [(r["prompt"], r["answer"]) for r in result.records] == [(r["prompt"], r["answer"]) for r in recorded]
    assert [r["correct"] for r in result.records] == [r["correct"] for r in recorded]
    assert [r["wrong_tokens"] for r in result.records] == [r["wrong_tokens"] for r in recorded]
