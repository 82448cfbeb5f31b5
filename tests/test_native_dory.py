"""native_loop on Nemotron Dory (``h <- R(L2norm(h) + e)`` over a shared recurrent stack): the iterates are the
model's own states, the map runs past the trained depth, its Jacobian is the dense one, and the recurrence is
listed. A tiny random config built here: no downloads."""
import pytest
import torch
import transformers

import jacobiscope
from jacobiscope.adapters import AdapterError
from conftest import check_loop_depth_readout

LOOPS = 3
INPUT, RECURRENT, OUTPUT = 1, 2, 2


def _dory(dtype=torch.float32):
    torch.manual_seed(0)
    # Both attention types in the recurrent stack (layers 1, 2) and a window shorter than the text, so the replay
    # must carry each layer's own mask and rotary table; large rates so the layers visibly move the state.
    config = transformers.DoryConfig(
        vocab_size=40, hidden_size=16, intermediate_size=32, num_hidden_layers=INPUT + RECURRENT + OUTPUT,
        num_attention_heads=2, num_key_value_heads=1, head_dim=8, sliding_window=2, ngpt_alpha_init=0.4,
        layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention"],
        n_input_layers=INPUT, n_recurrent_layers=RECURRENT, n_output_layers=OUTPUT, n_recurrent_loops=LOOPS)
    return transformers.DoryForCausalLM(config).to(dtype).eval()


def _own_states(model, kwargs):
    """The state entering the first iteration (the input section's output) and the output of the recurrent
    stack after each of the model's own iterations, recorded with forward hooks on its own forward."""
    layers = model.model.layers
    entering, after = [], []
    hooks = [layers[INPUT - 1].register_forward_hook(lambda _, __, out: entering.append(out.detach().clone())),
             layers[INPUT + RECURRENT - 1].register_forward_hook(lambda _, __, out: after.append(out.detach().clone()))]
    with torch.no_grad():
        model(**kwargs)
    for hook in hooks:
        hook.remove()
    return entering, after


def test_dory_iterates_are_the_models_own_states_and_run_past_the_trained_depth():
    model = _dory()
    # padding in the second row: the captured masks must be the model's own
    kwargs = {"input_ids": torch.tensor([[3, 5, 7, 9, 11, 2], [4, 6, 8, 10, 1, 1]]),
              "attention_mask": torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])}
    looped = jacobiscope.native_loop(model, kwargs)
    assert looped.meta["loops"] == LOOPS and looped.meta["recurrence"] == "loop"
    entering, own = _own_states(model, kwargs)
    assert len(entering) == 1 and len(own) == LOOPS
    assert torch.equal(looped.x0, entering[0])
    with torch.no_grad():
        states = looped.trajectory(looped.x0, 4 * LOOPS)
    errors = [float((states[t] - state).abs().max()) for t, state in enumerate(own, start=1)]
    print("max |iterate - model state| per loop:", errors)
    assert max(errors) < 1e-5, errors
    assert not torch.allclose(states[1], states[2], atol=1e-3)  # the loop moves the state: a real check
    # beyond the configured count: finite (each step re-normalizes its input, so the state stays bounded)
    assert torch.isfinite(states).all() and float(states.norm(dim=-1).max()) < 10


def test_dory_step_jacobian_is_the_dense_autograd_jacobian():
    model = _dory(torch.float64)
    looped = jacobiscope.native_loop(model, {"input_ids": torch.tensor([[3, 5, 7]])})
    x = looped.x0
    assert x.dtype == torch.float64 and x.numel() == 48
    dense = torch.autograd.functional.jacobian(looped.step, x).reshape(x.numel(), x.numel())
    sigma = float(jacobiscope.spectral_norm(looped, looped.x0).value)
    expected = float(torch.linalg.matrix_norm(dense, ord=2))
    print("spectral norm:", sigma, "dense:", expected)
    assert torch.isfinite(torch.tensor(sigma)) and sigma == pytest.approx(expected, rel=1e-5)


def test_dory_recurrence_is_listed_and_a_wrong_name_is_refused():
    model = _dory()
    assert jacobiscope.list_recurrences(model) == ["loop"]
    assert jacobiscope.list_recurrences("dory") == ["loop"]
    with pytest.raises(AdapterError, match="no recurrence 'H' — it offers loop"):
        jacobiscope.native_loop(model, torch.tensor([[1, 2, 3]]), recurrence="H")
    assert jacobiscope.adapters.get_adapter_spec("dory").recurrences["loop"]["builder"] == "dory"


def test_dory_readout_is_the_output_section_and_head_and_feeds_the_loop_depth_sweep():
    model = _dory()
    inputs = {"input_ids": torch.tensor([[3, 5, 7, 9, 11, 2]])}
    check_loop_depth_readout(model, inputs)
    # The readout runs the model's own (float32) modules: a float64 analysis casts the state for it.
    report = jacobiscope.analyze(model, inputs, loops=2 * LOOPS, dtype=torch.float64, diagnostics=["loop_depth"],
                                 progress=False)
    assert report.rows[0].diagnostic("loop_depth").kl[LOOPS] == pytest.approx(0.0, abs=1e-6)
    assert "readout" not in jacobiscope.native_loop(model.model, inputs).meta  # DoryModel: no head, no readout
