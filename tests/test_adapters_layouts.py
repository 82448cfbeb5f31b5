"""Families whose blocks hold the state in another layout, or that have no block module (issue 15, breadth).

XLNet and FSMT keep the state time-major inside their blocks, SqueezeBERT channels-first (and its encoder calls
``layer.forward`` directly, which skips hooks), XLM and Flaubert spread a layer over parallel lists, CPM-Ant
carries prompt tokens its outputs drop. The reference is each model's own ``hidden_states``: one step of the map
from ``x0`` (entry i) must give entry i + 1, for every layer, in a padded batch where the family masks padding.
"""
import math

import pytest
import torch
import transformers as T

import jacobiscope
from jacobiscope.adapters import find_blocks
from jacobiscope.adapters._layouts import from_batch_first, to_batch_first, token_window

IDS = torch.tensor([[5, 17, 9, 33, 2, 41, 12, 7], [8, 3, 22, 6, 19, 2, 1, 1]])
MASK = torch.tensor([[1] * 8, [1] * 6 + [0] * 2])

FAMILIES = {
    "xlnet": lambda: T.XLNetModel(T.XLNetConfig(vocab_size=64, d_model=32, n_layer=3, n_head=4, d_inner=64)),
    "fsmt": lambda: T.FSMTModel(T.FSMTConfig(
        langs=["en", "de"], src_vocab_size=64, tgt_vocab_size=64, d_model=32, encoder_layers=3, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
        max_position_embeddings=64)),
    "squeezebert": lambda: T.SqueezeBertModel(T.SqueezeBertConfig(
        vocab_size=64, hidden_size=32, embedding_size=32, num_hidden_layers=3, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=64, q_groups=2, k_groups=2, v_groups=2,
        post_attention_groups=2, intermediate_groups=4, output_groups=2)),
    "xlm": lambda: T.XLMModel(T.XLMConfig(vocab_size=64, emb_dim=32, n_layers=3, n_heads=4, max_position_embeddings=64)),
    "xlm_causal": lambda: T.XLMModel(T.XLMConfig(vocab_size=64, emb_dim=32, n_layers=3, n_heads=4,
                                                 max_position_embeddings=64, causal=True)),
    # pre_norm=True: transformers 5.24's own forward fails (it indexes its cache object), so there is no reference
    "flaubert": lambda: T.FlaubertModel(T.FlaubertConfig(vocab_size=64, emb_dim=32, n_layers=3, n_heads=4,
                                                         max_position_embeddings=64)),
    "cpmant": lambda: T.CpmAntModel(T.CpmAntConfig(vocab_size=256, hidden_size=32, num_hidden_layers=3,
                                                   num_attention_heads=4, dim_head=8, dim_ff=64, prompt_length=4,
                                                   prompt_types=3, segment_types=4)),
}
PADDED = {"xlnet", "xlm", "xlm_causal", "flaubert", "squeezebert"}  # their forward takes this padded batch as is


def _model(family):
    torch.manual_seed(0)
    return FAMILIES[family]().eval()


def _inputs(family):
    if family in PADDED:
        return {"input_ids": IDS, "attention_mask": MASK}
    if family == "fsmt":  # an encoder-decoder: its encoder layers are looped
        return {"input_ids": IDS[:1], "decoder_input_ids": IDS[:1, :3]}
    return {"input_ids": IDS[:1]}


def _own_hidden_states(model, inputs):
    with torch.no_grad():
        output = model(**inputs, output_hidden_states=True)
    return output.encoder_hidden_states if "decoder_input_ids" in inputs else output.hidden_states


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_layer_steps_to_the_models_next_hidden_state(family):
    model, inputs = _model(family), _inputs(family)
    states = _own_hidden_states(model, inputs)
    _, blocks, spec = find_blocks(model)
    assert len(blocks) == 3 and spec is not None
    last = len(blocks) - 1
    for layer in range(len(blocks)):
        looped = jacobiscope.looped_block(model, inputs, layer=layer)
        with torch.no_grad():
            stepped = looped(looped.x0)
        assert looped.x0.shape[0] == (IDS.shape[0] if family in PADDED else 1)
        window = token_window(looped.x0, states[layer])
        torch.testing.assert_close(looped.x0[:, window], states[layer], rtol=1e-5, atol=1e-5)
        if layer < last or family != "cpmant":  # CPM-Ant's last entry is after its final LayerNorm
            torch.testing.assert_close(stepped[:, window], states[layer + 1], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_check_adapter_passes_and_analyze_is_finite(family):
    model, inputs = _model(family), _inputs(family)
    result = jacobiscope.check_adapter(model, inputs, layers=[0, 2], raise_on_failure=False)
    assert result.passed, str(result)
    report = jacobiscope.analyze(model, inputs, layers=[1], loops=3, diagnostics=["lyapunov"], progress=False)
    assert all(math.isfinite(row.lyapunov["exponents"][0]) for row in report.rows)


def test_time_major_map_has_the_blocks_jacobian_up_to_the_permutation():
    """The map's Jacobian, in batch-first coordinates, is the block's own (time-major) Jacobian permuted: checked
    with dense autograd Jacobians of the raw block call in float64."""
    model = _model("xlnet").double()
    looped = jacobiscope.looped_block(model, {"input_ids": IDS[:1, :5]}, layer=1)
    x0 = looped.x0.double()
    dense_map = torch.autograd.functional.jacobian(looped, x0).reshape(x0.numel(), x0.numel())
    replay = looped.module.replay  # the block replayed in its own time-major layout

    def native(state):
        return replay(state)

    native_x0 = from_batch_first(x0, "time_major").contiguous()
    dense_native = torch.autograd.functional.jacobian(native, native_x0)
    permuted = to_batch_first(to_batch_first(dense_native, "time_major").permute(3, 4, 5, 0, 1, 2), "time_major")
    permuted = permuted.permute(3, 4, 5, 0, 1, 2).reshape(x0.numel(), x0.numel())
    torch.testing.assert_close(dense_map, permuted, rtol=1e-10, atol=1e-10)
    sigma = jacobiscope.spectral_norm(looped.to(dtype=torch.float64), x0, tol=1e-10).value
    assert float(sigma.reshape(-1)[0]) == pytest.approx(float(torch.linalg.matrix_norm(dense_map, ord=2)), rel=1e-6)


def test_xlm_padding_stays_zero_along_the_loop():
    model = _model("xlm")
    looped = jacobiscope.looped_block(model, {"input_ids": IDS, "attention_mask": MASK}, layer=0)
    state = looped.x0
    with torch.no_grad():
        for _ in range(5):
            state = looped(state)
    assert float(state[1, 6:].abs().max()) == 0.0 and float(state[1, :6].abs().max()) > 0.1


def test_attention_mode_on_a_layer_assembled_from_lists_says_block_mode():
    with pytest.raises(jacobiscope.AdapterError, match="mode='block'"):
        jacobiscope.looped_block(_model("xlm"), {"input_ids": IDS[:1]}, layer=0, mode="attention")


def test_token_window_finds_the_reported_tokens():
    state = torch.randn(2, 10, 4)
    assert token_window(state, state) == slice(None)
    assert token_window(state, state[:, 3:]) == slice(3, None)
    assert token_window(state, state[:, :7]) == slice(0, 7)
    assert token_window(state, state[:, :, :2]) is None
    assert token_window(state, torch.randn(2, 12, 4)) is None
