"""A fast sample of the breadth sweep (benchmarks/bench_breadth.py, issue 15): families of different shapes that
pass there, each built tiny from a config in code (no downloads).

Per family: block mode applied once to ``x0`` at layer 0 and at the last layer is the model's own next hidden
state (``output_hidden_states=True``; the tuple is ``hidden_states``, or ``encoder_hidden_states`` for the encoder
blocks of encoder-decoders), and ``analyze`` on layer 0 returns a finite lambda_max. The last layer is skipped
for the families whose last hidden state is the final-normed one (GPT-2, Llama-style decoders, T5, Whisper).
"""
import math

import pytest
import torch
import transformers as T

import jacobiscope
from jacobiscope.adapters import find_blocks

IDS = torch.tensor([[5, 17, 9, 33, 2, 41, 12, 7]])
DECODER_IDS = IDS[:, :4].clone()


def _pixels(size=32):
    return torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(0))


# family -> (config, inputs, hidden-state field, last layer checked)
SAMPLE = {
    "gpt2": (lambda: T.GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=64, n_positions=64),
             lambda: {"input_ids": IDS}, "hidden_states", False),
    # blocks without the markers the generic search reads: found through adapters/encoders_without_markers.json
    "mpnet": (lambda: T.MPNetConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                                    vocab_size=64, max_position_embeddings=64),
              lambda: {"input_ids": IDS}, "hidden_states", True),
    "bert": (lambda: T.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                                  vocab_size=64, max_position_embeddings=64),
             lambda: {"input_ids": IDS}, "hidden_states", True),
    "llama": (lambda: T.LlamaConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                    intermediate_size=64, vocab_size=64, max_position_embeddings=64),
              lambda: {"input_ids": IDS}, "hidden_states", False),
    "mixtral": (lambda: T.MixtralConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                        intermediate_size=64, num_local_experts=4, num_experts_per_tok=2, vocab_size=64,
                                        max_position_embeddings=64),
                lambda: {"input_ids": IDS}, "hidden_states", False),
    "vit": (lambda: T.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                                image_size=32, patch_size=8),
            lambda: {"pixel_values": _pixels()}, "hidden_states", True),
    "t5": (lambda: T.T5Config(d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4, vocab_size=64),
           lambda: {"input_ids": IDS, "decoder_input_ids": DECODER_IDS}, "encoder_hidden_states", False),
    "bart": (lambda: T.BartConfig(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                                  decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, vocab_size=64,
                                  max_position_embeddings=64),
             lambda: {"input_ids": IDS, "decoder_input_ids": DECODER_IDS}, "encoder_hidden_states", True),
    "whisper": (lambda: T.WhisperConfig(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                                        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, vocab_size=64,
                                        num_mel_bins=16, max_source_positions=16, max_target_positions=32,
                                        pad_token_id=1, bos_token_id=2, eos_token_id=2, decoder_start_token_id=3),
                lambda: {"input_features": torch.randn(1, 16, 32, generator=torch.Generator().manual_seed(0)),
                         "decoder_input_ids": DECODER_IDS}, "encoder_hidden_states", False),
    # blocks recorded as a list of classes in _can_record_outputs (not the longer conv feature-extractor list)
    "wav2vec2": (lambda: T.Wav2Vec2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                                          conv_dim=(32,) * 7, num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4,
                                          vocab_size=64),
                 lambda: {"input_values": torch.randn(1, 4000, generator=torch.Generator().manual_seed(0))},
                 "hidden_states", True),
}


def _model(family):
    torch.manual_seed(0)
    config = SAMPLE[family][0]()
    return T.AutoModel.from_config(config, attn_implementation="eager").eval()


@pytest.mark.parametrize("family", sorted(SAMPLE))
def test_one_block_loop_is_the_models_next_hidden_state(family):
    _, make_inputs, field, check_last = SAMPLE[family]
    model, inputs = _model(family), make_inputs()
    with torch.no_grad():
        states = getattr(model(**inputs, output_hidden_states=True), field)
    _, blocks, _ = find_blocks(model)
    assert len(states) == len(blocks) + 1
    for layer in [0, len(blocks) - 1] if check_last else [0]:
        m = jacobiscope.looped_block(model, inputs, layer=layer, mode="block")
        assert torch.equal(m.x0, states[layer])
        with torch.no_grad():
            stepped = m(m.x0)
        target = states[layer + 1]
        assert stepped.shape == target.shape
        assert float((stepped - target).abs().max()) <= 1e-4 * float(target.abs().max())


@pytest.mark.parametrize("family", sorted(SAMPLE))
def test_analyze_layer_0_has_a_finite_lambda_max(family):
    _, make_inputs, _, _ = SAMPLE[family]
    report = jacobiscope.analyze(_model(family), make_inputs(), layers=[0], loops=4, diagnostics=["lyapunov"],
                                 progress=False)
    assert len(report.rows) == 1 and report.rows[0].layer == 0
    assert math.isfinite(report.rows[0].scalars()["lambda_max"])
