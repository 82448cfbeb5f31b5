"""Bad inputs to `jacobiscope.depth_dynamics` (and the truncation of text inputs, shared with analyze): options
checked before the model runs, a non-finite norm or exponent flagged in the result (never a plain number), a clamp
or a truncation said. Tiny real GPT-2 models and a real word-level tokenizer."""
import math

import numpy as np
import pytest
import torch
import transformers

import jacobiscope
from jacobiscope.adapters.spec import AdapterError
from jacobiscope.errors import ArgumentError

IDS = torch.tensor([[1, 2, 3]])


def _gpt2(layers=3, scale=None, where=None):
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_embd=8, n_layer=layers, n_head=2, vocab_size=52, n_positions=64)
    model = transformers.GPT2Model(config).eval()
    if scale is not None:
        with torch.no_grad():
            model.get_submodule(where).weight.mul_(scale)
    return model


@pytest.fixture(scope="module")
def gpt2():
    return _gpt2()


@pytest.fixture(scope="module")
def one_layer():
    return _gpt2(layers=1)


@pytest.fixture(scope="module")
def tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocabulary = {f"w{i}": i for i in range(50)} | {"[UNK]": 50, "[PAD]": 51}
    backend = Tokenizer(models.WordLevel(vocabulary, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", pad_token="[PAD]")


LONG = " ".join(f"w{i % 50}" for i in range(20))


@pytest.mark.parametrize("options, problem, fix", [
    pytest.param({"k": 0}, "k must be a positive int, got 0", "e.g. k=1", id="k-zero",
                 marks=pytest.mark.guards("internal")),
    pytest.param({"k": True}, "k must be a positive int, got True", "e.g. k=1", id="k-bool",
                 marks=pytest.mark.guards("silent")),
    pytest.param({"k": 2.0}, "k must be a positive int, got 2.0", "e.g. k=1", id="k-float",
                 marks=pytest.mark.guards("internal")),
    pytest.param({"k": 10**9}, "k=1000000000 is over the budget of 1024 tangent vectors", "pass k <= 1024",
                 id="k-billion", marks=pytest.mark.guards("hang")),
    pytest.param({"seed": "0"}, "seed must be an int, got '0'", "seed=0", id="seed-str",
                 marks=pytest.mark.guards("internal")),
    pytest.param({"seed": 1.5}, "seed must be an int, got 1.5", "seed=0", id="seed-float",
                 marks=pytest.mark.guards("internal")),
    pytest.param({"dtype": "float64"}, "dtype must be a floating torch.dtype, got 'float64'", "dtype=torch.float64",
                 id="dtype-str", marks=pytest.mark.guards("internal")),
    pytest.param({"dtype": torch.int64}, "dtype must be a floating torch.dtype", "torch.float64", id="dtype-integer",
                 marks=pytest.mark.guards("internal")),
    pytest.param({"token_limit": -1}, "token_limit must be a non-negative int, got -1", "token_limit=0",
                 id="token-limit-negative", marks=pytest.mark.guards("silent")),
    pytest.param({"token_limit": 2.5}, "token_limit must be a non-negative int, got 2.5", "token_limit=0",
                 id="token-limit-float", marks=pytest.mark.guards("internal")),
    pytest.param({"max_length": 0}, "max_length must be a positive int, got 0", "max_length=1",
                 id="max-length-zero", marks=pytest.mark.guards("internal")),
    pytest.param({"max_length": 2.5}, "max_length must be a positive int, got 2.5", "max_length=1",
                 id="max-length-float", marks=pytest.mark.guards("internal")),
    pytest.param({"tokenizer": "gpt2"}, "tokenizer must be a tokenizer object, got str 'gpt2'",
                 "AutoTokenizer.from_pretrained", id="tokenizer-str", marks=pytest.mark.guards("internal")),
])
def test_a_bad_option_is_refused_before_the_model_runs(gpt2, options, problem, fix):
    calls = []
    handle = gpt2.register_forward_pre_hook(lambda *_: calls.append(1))
    try:
        with pytest.raises(ArgumentError) as info:
            jacobiscope.depth_dynamics(gpt2, IDS, **options)
    finally:
        handle.remove()
    assert problem in str(info.value) and fix in str(info.value)
    assert not calls


@pytest.mark.guards("internal")
def test_a_model_name_instead_of_a_model_is_refused_with_the_loader():
    with pytest.raises(ArgumentError, match=r"model must be a torch nn.Module .*got str — pass jacobiscope.hub.load_pretrained\('gpt2'\)"):
        jacobiscope.depth_dynamics("gpt2", IDS)


@pytest.mark.guards("internal")
def test_a_module_without_blocks_is_refused_before_any_input_is_prepared():
    with pytest.raises(AdapterError):
        jacobiscope.depth_dynamics(torch.nn.Linear(3, 3), IDS)


@pytest.mark.guards("silent")
def test_k_larger_than_the_state_is_clamped_and_said(gpt2):
    with pytest.warns(UserWarning, match=r"k=100 clamped to 24"):
        (depth,) = jacobiscope.depth_dynamics(gpt2, IDS, k=100)
    assert len(depth.exponents) == 24
    assert depth.flags == ["k=100 clamped to 24: the state has D=24 entries"]
    assert depth.to_dict()["flags"] == depth.flags


@pytest.mark.guards("silent")
def test_a_layer_that_overflows_flags_its_norm_and_every_later_number():
    model = _gpt2(scale=1e37, where="h.0.mlp.c_proj")
    (depth,) = jacobiscope.depth_dynamics(model, IDS, k=2)
    assert math.isnan(depth.layers[2]["spectral_norm"]) and all(math.isnan(v) for v in depth.exponents)
    text = " | ".join(depth.flags)
    assert "is not finite" in text and "an earlier layer overflowed" in text and "dtype=torch.float64" in text
    assert "exponents NaN/Inf at index(es) [0, 1]" in text
    assert "spectral_norm NaN/Inf at layer(s) [0, 1, 2]" in text
    assert "token_gain NaN" in text


@pytest.mark.guards("silent")
def test_a_jacobian_that_overflows_in_a_middle_layer_is_flagged_with_that_layer():
    model = _gpt2(scale=1e30, where="h.1.attn.c_proj")
    (depth,) = jacobiscope.depth_dynamics(model, IDS, k=2)
    assert math.isfinite(depth.layers[0]["spectral_norm"])  # the layer before is still a measurement
    assert not depth.flags or any("layer(s) [1" in flag or "layer 2" in flag for flag in depth.flags)
    assert all(math.isfinite(v) for v in depth.exponents) or any("exponents NaN/Inf" in f for f in depth.flags)


@pytest.mark.guards("silent")
def test_a_finite_run_has_no_flags(gpt2):
    (depth,) = jacobiscope.depth_dynamics(gpt2, IDS, k=np.int64(2), seed=np.int64(1))
    assert depth.flags == [] and all(math.isfinite(v) for v in depth.exponents)


@pytest.mark.guards("silent")
def test_token_limit_zero_measures_no_gains_on_purpose(gpt2):
    (depth,) = jacobiscope.depth_dynamics(gpt2, IDS, k=1, token_limit=0)
    assert depth.token_gain == [] and depth.flags == []


@pytest.mark.guards("silent")
def test_depth_dynamics_says_a_text_was_truncated(one_layer, tokenizer):
    short, long_ = jacobiscope.depth_dynamics(one_layer, ["w1 w2", LONG], tokenizer=tokenizer, max_length=8, k=1,
                                              token_limit=0)
    assert short.flags == []
    assert long_.flags == ["input 1 truncated to its first 8 of its 20 tokens by max_length=8 — the rest is not "
                           "measured; pass a larger max_length (up to the model's positions) or a shorter text"]


@pytest.mark.guards("silent")
def test_analyze_says_a_text_was_truncated_in_the_notes_and_its_rows(one_layer, tokenizer):
    report = jacobiscope.analyze(one_layer, [LONG, "w1 w2"], tokenizer=tokenizer, max_length=8, loops=2,
                                 diagnostics=["spectral_norm"], progress=False)
    flag = ("input 0 truncated to its first 8 of its 20 tokens by max_length=8 — the rest is not measured; pass a "
            "larger max_length (up to the model's positions) or a shorter text")
    assert flag in report.notes
    first, second = report.rows
    assert flag in first.flags and not any("truncated" in f for f in second.flags)


@pytest.mark.guards("silent")
def test_a_text_exactly_at_max_length_is_not_called_truncated(one_layer, tokenizer):
    report = jacobiscope.analyze(one_layer, [" ".join(f"w{i}" for i in range(8))], tokenizer=tokenizer, max_length=8,
                                 loops=2, diagnostics=["spectral_norm"], progress=False)
    assert not any("truncated" in note for note in report.notes)
    assert not any("truncated" in flag for flag in report.rows[0].flags)
