"""The Inkling-2 loop family's own recurrence ("pass"): exact against the model's own passes, differentiable."""
import pytest
import torch
import transformers

import jacobiscope
from jacobiscope.adapters import AdapterError
from jacobiscope.adapters.spec import shipped_recurrence_specs
from conftest import autograd_jacobian, check_loop_depth_readout

PASSES = 4
LOOP = (1, 4)  # layers 1, 2 and 3 are looped: one full-attention layer between two sliding ones


def tiny_config(**overrides):
    values = dict(vocab_size=64, unpadded_vocab_size=64, eos_token_id=None, hidden_size=16, num_hidden_layers=5,
                  num_attention_heads=2, num_key_value_heads=1, head_dim=8, swa_num_attention_heads=2,
                  swa_num_key_value_heads=1, swa_head_dim=8, sliding_window_size=4, d_rel=4, rel_extent=8,
                  moe_intermediate_size=16, n_routed_experts=4, num_experts_per_tok=2, conv_kernel_size=3,
                  n_layers_per_attn_res_block=1, loop_layer_index_start=LOOP[0], loop_layer_index_end=LOOP[1],
                  loop_num_passes=PASSES, loop_gate_rank=4,
                  layer_types=["hybrid_sliding", "hybrid_sliding", "hybrid", "hybrid_sliding", "hybrid"])
    values.update(overrides)
    return transformers.Inkling2LoopTextConfig(**values)


def randomized(model):
    """The init zeroes the attention-residual queries and convolution taps (uniform mixing) and makes the message
    gates tiny: randomize them so the passes differ visibly and the test sees every path a trained model uses."""
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith(("query", "static_weight")) or "message_gate." in name:
                parameter.copy_(0.5 * torch.randn(parameter.shape, generator=generator))
    return model.eval()


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return randomized(transformers.Inkling2LoopForCausalLM(tiny_config()))


INPUTS = {
    "one sequence": {"input_ids": torch.tensor([[3, 7, 1, 9, 4, 12]])},
    "padded batch": {"input_ids": torch.tensor([[3, 7, 1, 9, 4, 12], [0, 0, 5, 2, 8, 6]]),
                     "attention_mask": torch.tensor([[1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1]])},
}


def model_pass_states(model, inputs):
    """The model's own state after each pass, recorded by hooks on its forward: the inputs of the looped block
    boundaries (but the first) and the output of the last looped layer, per call; plus what ``message_input``
    actually receives in the passes after the first."""
    text = model.model
    layers = text.layers[LOOP[0]:LOOP[1]]
    inputs_seen, outputs, consumed = {i: [] for i in range(len(layers))}, [], []
    handles = [layer.register_forward_pre_hook(lambda m, a, i=i: inputs_seen[i].append(a[0].clone()))
               for i, layer in enumerate(layers)]
    handles.append(layers[-1].register_forward_hook(lambda m, a, out: outputs.append(out.clone())))

    def record_consumed(module, args):  # once per pass: the stack it reads messages from (returns None: no edit)
        if args[2] == 0:
            consumed.append(torch.cat([args[0], args[1].unsqueeze(-2)], dim=-2).clone())

    handles.append(text.message_input.register_forward_pre_hook(record_consumed))
    try:
        with torch.no_grad():
            model(**inputs, use_cache=False)
    finally:
        for handle in handles:
            handle.remove()
    boundaries = [i for i, layer in enumerate(layers) if layer.is_block_boundary][1:]
    states = [torch.stack([inputs_seen[i][p] for i in boundaries] + [outputs[p]], dim=-2) for p in range(PASSES)]
    return states, consumed


@pytest.mark.parametrize("case", list(INPUTS))
def test_iterates_equal_the_models_own_passes(model, case):
    inputs = INPUTS[case]
    looped = jacobiscope.native_loop(model, inputs)
    assert looped.meta["loops"] == PASSES - 1 and looped.meta["recurrence"] == "pass"
    states, consumed = model_pass_states(model, inputs)
    assert len(consumed) == PASSES - 1
    trajectory = looped.trajectory(looped.x0, PASSES - 1)
    errors = [float((trajectory[t] - states[t]).abs().max()) for t in range(PASSES)]
    print(f"{case}: max |iterate t - model state after pass t+1| = {errors}")
    assert max(errors) < 1e-5
    # ...and each iterate is exactly what the model's next pass consumes
    assert max(float((trajectory[t] - consumed[t]).abs().max()) for t in range(PASSES - 1)) < 1e-5


def test_the_map_runs_beyond_the_configured_passes(model):
    looped = jacobiscope.native_loop(model, INPUTS["one sequence"])
    trajectory = looped.trajectory(looped.x0, 4 * PASSES, on_nonfinite="raise")
    assert trajectory.shape == (4 * PASSES + 1, *looped.x0.shape)
    assert bool(torch.isfinite(trajectory).all())


def test_spectral_norm_matches_the_dense_jacobian(model):
    looped = jacobiscope.native_loop(model, INPUTS["one sequence"])
    x = looped.x0
    result = jacobiscope.spectral_norm(looped, x)
    dense = torch.linalg.matrix_norm(autograd_jacobian(looped.step, x).double(), 2)
    print(f"spectral norm {float(result.value):.8f}, dense {float(dense):.8f}")
    assert bool(torch.isfinite(result.value).all())
    assert float(result.value) == pytest.approx(float(dense), rel=1e-5)


def test_recurrence_is_listed_and_a_wrong_name_names_it(model):
    assert jacobiscope.list_recurrences(model) == ["pass"]
    assert jacobiscope.list_recurrences("inkling2_loop_text") == ["pass"]
    assert jacobiscope.list_recurrences("inkling2_loop") == ["pass"]
    with pytest.raises(AdapterError, match="pass"):
        jacobiscope.native_loop(model, INPUTS["one sequence"], recurrence="loop")
    documented = shipped_recurrence_specs()
    assert documented["inkling2_loop_text"]["pass"]["builder"] == "inkling2_loop"
    assert documented["inkling2_loop"] == documented["inkling2_loop_text"]


def _multimodal():
    """A tiny Inkling-2 vision-language model whose language model has the tiny text config."""
    text = tiny_config().to_dict()
    vision = dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, projection_hidden_dim=16,
                  text_hidden_size=16, posemb_grid_size=2)
    torch.manual_seed(0)
    config = transformers.Inkling2LoopConfig(text_config=text, vision_config=vision, image_token_id=63)
    multimodal = randomized(transformers.Inkling2LoopForConditionalGeneration(config))
    return multimodal


def test_the_multimodal_model_loops_its_language_model():
    multimodal = _multimodal()
    inputs = INPUTS["one sequence"]
    causal = randomized(transformers.Inkling2LoopForCausalLM(tiny_config()))
    causal.model.load_state_dict(multimodal.model.language_model.state_dict())
    looped, reference = jacobiscope.native_loop(multimodal, inputs), jacobiscope.native_loop(causal, inputs)
    assert jacobiscope.list_recurrences(multimodal) == ["pass"]
    assert torch.allclose(looped.trajectory(looped.x0, PASSES - 1), reference.trajectory(reference.x0, PASSES - 1),
                          atol=1e-6)


def test_block_mode_finds_the_blocks_of_a_family_recording_several_block_classes(model):
    """Inkling-2 records hidden states from a tuple of block classes; block mode must still find its layers, and
    loop mode (its default) runs the pass recurrence."""
    inputs = {"input_ids": torch.tensor([[3, 7, 1, 9]])}
    blocks = jacobiscope.analyze(model, inputs, mode="block", layers=[0], loops=3, progress=False,
                                 diagnostics=["lyapunov"])
    assert blocks.rows[0].mode == "block" and len(blocks.rows) == 1
    loop = jacobiscope.analyze(model, inputs, loops=3, progress=False, diagnostics=["lyapunov"])
    assert loop.rows[0].mode == "loop" and "'pass'" in loop.provenance["adapter"]


def test_the_readout_continues_after_the_last_pass_and_feeds_the_loop_depth_sweep(model):
    """The readout rebuilds the block states the last pass leaves (restart blocks, the restart hidden state, the
    state's own blocks) and runs layer 4, final_input, the norm, lm_head and the softcap: the model's own logits."""
    check_loop_depth_readout(model, INPUTS["one sequence"])
    assert "readout" not in jacobiscope.native_loop(model.model, INPUTS["one sequence"]).meta  # the text model


def test_the_multimodal_model_reads_out_through_its_own_head():
    multimodal = _multimodal()
    inputs = INPUTS["one sequence"]
    looped = jacobiscope.native_loop(multimodal, inputs)
    with torch.no_grad():
        own = multimodal(**inputs).logits
        read = looped.meta["readout"](looped.trajectory(looped.x0, PASSES - 1)[-1])
    assert float((read - own).abs().max()) <= 1e-4


def test_a_loop_range_past_the_layers_is_refused_with_the_rule():
    torch.manual_seed(0)
    model = randomized(transformers.Inkling2LoopForCausalLM(tiny_config()))
    model.model.config.loop_layer_index_end = 99
    with pytest.raises(AdapterError, match="loops layers 1..98 but has"):
        jacobiscope.native_loop(model, INPUTS["one sequence"])
