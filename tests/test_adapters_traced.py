"""jacobiscope/adapters/_infer.py: mode='attention' for families no spec describes, traced from one block call."""
import pytest
import torch
import transformers as T

import jacobiscope
from jacobiscope.adapters import AdapterError, find_blocks
from jacobiscope.adapters._infer import infer_attention

from hf_models import tiny_configs, tiny_inputs, tiny_model

FAMILIES = sorted(tiny_configs())


def _kwargs(family, inputs):
    return {"pixel_values": inputs} if family == "vit" else {"input_ids": inputs}


@pytest.mark.parametrize("family", FAMILIES)
def test_traced_attention_map_equals_the_shipped_spec_map(family, monkeypatch):
    """Every family with a shipped spec, its spec hidden: the trace finds the same parts and the same map (norm
    weights moved off their initial (1, 0), where Norm(h) = h for a post-norm stream would hide a wrong x0)."""
    model, inputs = tiny_model(family), tiny_inputs(family)
    _perturb_norms(model)
    spec = jacobiscope.adapters.get_adapter_spec(model)
    by_spec = jacobiscope.looped_block(model, inputs, 1, mode="attention", eta=0.7)
    monkeypatch.setattr(jacobiscope.adapters.spec, "get_adapter_spec", lambda model: None)
    assert find_blocks(model)[2] is None
    traced = jacobiscope.looped_block(model, inputs, 1, mode="attention", eta=0.7)
    assert traced.meta["adapter"] == "traced" and "traced from one call of the block" in " ".join(traced.meta["notes"])
    assert f"'{spec.attention_norm}'" in traced.meta["notes"][-1]
    assert torch.allclose(traced.x0, by_spec.x0, atol=1e-6)
    probe = by_spec.x0 + 0.1 * torch.randn(by_spec.x0.shape, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        assert torch.allclose(traced(probe), by_spec(probe), atol=1e-6)
        assert torch.allclose(traced.drive(probe), by_spec.drive(probe), atol=1e-6)


def _perturb_norms(model):
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for module in model.modules():
            if "norm" in type(module).__name__.lower():
                for name, parameter in module.named_parameters(recurse=False):
                    parameter.add_(0.3 * torch.randn(parameter.shape, generator=generator))


def _zero(module):
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.zero_()


UNSPECIFIED = {
    # family: (model, the block's MLP output layer to zero (block(h) is then h + its attention branch), paths)
    "gemma2": (lambda: T.Gemma2Model(T.Gemma2Config(
        hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        head_dim=4, vocab_size=60, bos_token_id=0, eos_token_id=0, pad_token_id=0)),
        "mlp.down_proj", {"attention": "self_attn", "output": ["post_attention_layernorm"], "norm": "input_layernorm"}),
    "t5": (lambda: T.T5EncoderModel(T.T5Config(d_model=16, d_ff=32, num_layers=2, num_heads=2, d_kv=8,
                                               vocab_size=60)),
           "layer.1.DenseReluDense.wo", {"attention": "layer.0.SelfAttention", "output": [], "norm": "layer.0.layer_norm"}),
    "gpt_neox": (lambda: T.GPTNeoXModel(T.GPTNeoXConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                                          num_attention_heads=2, vocab_size=60)),
                 "mlp.dense_4h_to_h", {"attention": "attention", "output": [], "norm": "input_layernorm"}),
    "qwen3": (lambda: T.Qwen3Model(T.Qwen3Config(hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                                 num_attention_heads=4, num_key_value_heads=2, head_dim=4,
                                                 vocab_size=60, bos_token_id=0, eos_token_id=0, pad_token_id=0)),
              "mlp.down_proj", {"attention": "self_attn", "output": [], "norm": "input_layernorm"}),
    # DINOv2 scales the attention's output (layer_scale1) before the residual: the scale joins the drive
    "dinov2": (lambda: T.Dinov2Model(T.Dinov2Config(hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                                    num_attention_heads=2, image_size=8, patch_size=4)),
               "mlp.fc2", {"attention": "attention", "output": ["layer_scale1"], "norm": "norm1"}),
}


def _model_kwargs(family):
    if family == "dinov2":
        return {"pixel_values": torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(1))}
    return {"input_ids": tiny_inputs("llama")}


@pytest.mark.parametrize("family", sorted(UNSPECIFIED))
def test_traced_pre_norm_branch_is_the_blocks_own_attention_branch(family):
    """With its MLP zeroed the block computes h + branch(Norm(h)): the traced drive at the map's x0 = Norm(h) must be
    the difference of the model's own hidden states (Gemma2's sandwich norm included, T5's nested attention found)."""
    build, mlp_out, paths = UNSPECIFIED[family]
    torch.manual_seed(0)
    model = build().eval()
    path, blocks, spec = find_blocks(model)
    assert spec is None  # no shipped spec: the trace is what finds the parts
    _zero(blocks[0].get_submodule(mlp_out))
    inputs = _model_kwargs(family)
    m = jacobiscope.looped_block(model, inputs, 0, mode="attention")
    through = " and ".join(repr(path) for path in paths["output"])
    assert m.meta["notes"][-1].endswith(
        f"pre-norm: attention '{paths['attention']}' reads the output of norm '{paths['norm']}'"
        + (f"; its output goes through {through} before the residual" if through else ""))
    with torch.no_grad():
        hidden = model(**inputs, output_hidden_states=True).hidden_states
        norm = blocks[0].get_submodule(paths["norm"])
        assert torch.allclose(m.x0, norm(hidden[0]), atol=1e-6)
        assert torch.allclose(m.drive(m.x0), hidden[1] - hidden[0], atol=1e-5)
    result = jacobiscope.lyapunov_spectrum(m, steps=4, k=2)
    assert torch.isfinite(result.exponents).all()


def test_traced_post_norm_block_is_the_blocks_own_attention_sublayer():
    """ELECTRA (a BERT clone without a shipped spec): post-norm, found by value (the norm sees h + dense(self(h)));
    at eta = 1 the map is the block's own attention sub-layer."""
    torch.manual_seed(0)
    model = T.ElectraModel(T.ElectraConfig(hidden_size=16, embedding_size=16, intermediate_size=32,
                                           num_hidden_layers=2, num_attention_heads=2, vocab_size=60)).eval()
    assert jacobiscope.adapters.get_adapter_spec(model) is None
    m = jacobiscope.looped_block(model, tiny_inputs("bert"), 1, mode="attention")
    note = m.meta["notes"][-1]
    assert ("post-norm: attention 'attention.self' (its output through 'attention.output.dense'), then norm "
            "'attention.output.LayerNorm' on the residual sum") in note
    block = model.encoder.layer[1]
    with torch.no_grad():
        assert torch.allclose(m(m.x0), block.attention(m.x0)[0], atol=1e-6)


def test_traced_post_norm_map_starts_at_the_models_own_hidden_state():
    """Post-norm: the state is the stream itself, so x0 is the hidden state entering the layer, not Norm(h) (with
    the norms' initial weights (1, 0) the two coincide: LayerNorm of a LayerNorm output; trained ones do not)."""
    torch.manual_seed(0)
    model = T.ElectraModel(T.ElectraConfig(hidden_size=16, embedding_size=16, intermediate_size=32,
                                           num_hidden_layers=2, num_attention_heads=2, vocab_size=60)).eval()
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.weight.uniform_(0.5, 2.0)
                module.bias.normal_(0.0, 0.3)
    inputs = tiny_inputs("bert")
    m = jacobiscope.looped_block(model, inputs, 1, mode="attention")
    with torch.no_grad():
        hidden = model(input_ids=inputs, output_hidden_states=True).hidden_states[1]
        assert torch.allclose(m.x0, hidden, atol=1e-6)
        assert torch.allclose(m(hidden), model.encoder.layer[1].attention(hidden)[0], atol=1e-6)


def test_trace_refuses_blocks_without_an_itrsa_form_attention():
    torch.manual_seed(0)
    # OLMo-2 normalizes the attention's output, never its input: no ItrSA form to read off.
    olmo = T.Olmo2Model(T.Olmo2Config(hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                      num_attention_heads=2, vocab_size=60, pad_token_id=0, bos_token_id=0,
                                      eos_token_id=0)).eval()
    with pytest.raises(AdapterError, match=r"shows no attention sub-layer of the ItrSA form.*register_adapter"):
        jacobiscope.looped_block(olmo, tiny_inputs("llama"), 0, mode="attention")
    assert jacobiscope.looped_block(olmo, tiny_inputs("llama"), 0).meta["mode"] == "block"  # block mode still works

    # BLOOM hands its attention the residual and adds it inside: the output is h + Attn, no drive to replay.
    bloom = T.BloomModel(T.BloomConfig(hidden_size=16, n_layer=2, n_head=2, vocab_size=60)).eval()
    with pytest.raises(AdapterError, match="'self_attention' is handed the block's input as well and adds the residual"):
        jacobiscope.looped_block(bloom, tiny_inputs("llama"), 0, mode="attention")

    class MixerBlock(torch.nn.Module):  # no attention module at all
        def __init__(self):
            super().__init__()
            self.norm, self.mix = torch.nn.LayerNorm(4), torch.nn.Linear(4, 4)

        def forward(self, hidden_states):
            return hidden_states + self.mix(self.norm(hidden_states))

    with pytest.raises(AdapterError, match="no submodule whose class is an attention in MixerBlock"):
        infer_attention(MixerBlock(), (torch.zeros(1, 3, 4),), {})


def test_check_adapter_checks_the_traced_attention_mode_and_says_when_there_is_none():
    torch.manual_seed(0)
    qwen3 = UNSPECIFIED["qwen3"][0]().eval()
    result = jacobiscope.check_adapter(qwen3)
    names = [name for name, ok, _ in result.checks if ok]
    assert result.passed and "layer 0: attention mode" in names
    assert "layer 0 attention: jvp = finite differences (float64)" in names
    olmo = T.Olmo2Model(T.Olmo2Config(hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                      num_attention_heads=2, vocab_size=60, pad_token_id=0, bos_token_id=0,
                                      eos_token_id=0)).eval()
    result = jacobiscope.check_adapter(olmo)
    detail = dict((name, detail) for name, _, detail in result.checks)["layer 0: attention mode"]
    assert result.passed and detail.startswith("not available, block mode only")


class ToyAttention(torch.nn.Module):
    """An 'attention' (by class name) that is a linear map, with a call counter for a stateful variant."""

    def __init__(self, stateful=False):
        super().__init__()
        self.proj, self.stateful, self.calls = torch.nn.Linear(4, 4), stateful, 0

    def forward(self, hidden_states):
        self.calls += 1
        return self.proj(hidden_states) * (self.calls if self.stateful else 1.0)


class MergedResidual(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.alpha = torch.nn.Parameter(torch.tensor(0.5))

    def forward(self, branch, residual):
        return residual + self.alpha * branch


class ToyBlock(torch.nn.Module):
    def __init__(self, merge=False, stateful=False):
        super().__init__()
        self.norm, self.attn = torch.nn.LayerNorm(4), ToyAttention(stateful)
        self.merge = MergedResidual() if merge else None

    def forward(self, hidden_states):
        branch = self.attn(self.norm(hidden_states))
        return self.merge(branch, hidden_states) if self.merge is not None else hidden_states + branch


def test_trace_accepts_a_plain_pre_norm_block_and_refuses_merged_or_stateful_branches():
    torch.manual_seed(0)
    x = torch.randn(1, 3, 4)
    traced = infer_attention(ToyBlock(), (x,), {})
    assert traced.paths == {"attention": "attn", "output": [], "norm": "norm"} and traced.norm_position == "pre"
    with pytest.raises(AdapterError, match=r"the output of 'attn' is merged into the stream by 'merge', a module of "
                                           r"several inputs"):
        infer_attention(ToyBlock(merge=True), (x,), {})
    # a stateful attention: the replay (second call) doubles the traced output, a relative difference of exactly 1
    with pytest.raises(AdapterError, match=r"replaying 'attn' differs from its traced call by 1\.0e\+00"):
        infer_attention(ToyBlock(stateful=True), (x,), {})
