"""The built-in recurrence of IQuest-Coder Loop (remote code, ``model_type`` "iquestloopcoder") against a tiny mimic
with the same module names, config fields and forward semantics (tests/mimics/iquest_loop_mimic.py): the iterates
are the model's own states after each pass past the first, the Jacobian is the dense one, the readout is the
model's logits, analyze runs the model's own loop, and a model laid out differently is refused."""
import pytest
import torch

import jacobiscope
from jacobiscope.adapters import AdapterError
from conftest import check_loop_depth_readout, check_spectral_norm_is_dense
from mimics.iquest_loop_mimic import IQuestLoopCoderConfig, IQuestLoopCoderForCausalLM

LOOP_NUM = 4  # three applications of the step after the plain first pass


def _iquest(dtype=torch.float32, **overrides):
    torch.manual_seed(0)
    # a window shorter than the text: the later passes' own attention is windowed, their K1/V1 attention is not
    settings = dict(vocab_size=48, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                    num_key_value_heads=1, head_dim=8, loop_num=LOOP_NUM, loop_window_size=2)
    config = IQuestLoopCoderConfig(**{**settings, **overrides})
    return IQuestLoopCoderForCausalLM(config).to(dtype).eval()


def _own_passes(model, kwargs):
    """The state after each of the model's passes, from forward hooks on its last layer's MLP block (called as a
    module in every pass): the MLP's input residual plus its output."""
    last = model.model.layers[-1]
    residual, update = [], []
    hooks = [last.post_attention_layernorm.register_forward_hook(lambda _, args, __: residual.append(args[0].clone())),
             last.mlp.register_forward_hook(lambda _, __, out: update.append(out.clone()))]
    with torch.no_grad():
        model(**kwargs)
    for hook in hooks:
        hook.remove()
    return [r + u for r, u in zip(residual, update)]


def test_iquest_iterates_are_the_models_own_passes_after_the_first():
    model = _iquest()
    kwargs = {"input_ids": torch.tensor([[3, 5, 7, 9, 11, 2], [4, 6, 8, 10, 1, 1]]),
              "attention_mask": torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])}
    looped = jacobiscope.native_loop(model, kwargs)
    own = _own_passes(model, kwargs)
    assert looped.meta["loops"] == LOOP_NUM - 1 and len(own) == LOOP_NUM
    assert float((looped.x0 - own[0]).abs().max()) < 1e-6  # x0: the output of the plain first pass
    with torch.no_grad():
        states = looped.trajectory(looped.x0, 3 * LOOP_NUM)
    errors = [float((states[t] - state).abs().max()) for t, state in enumerate(own[1:], start=1)]
    print("max |iterate - model pass| per loop:", errors)
    assert max(errors) < 1e-5, errors
    assert not torch.allclose(states[1], states[2], atol=1e-3) and torch.isfinite(states).all()


def test_iquest_step_jacobian_is_the_dense_autograd_jacobian():
    model = _iquest(torch.float64)
    looped = jacobiscope.native_loop(model, {"input_ids": torch.tensor([[3, 5, 7]])})
    x = looped.x0
    check_spectral_norm_is_dense(looped, x, numel=48)


def test_iquest_readout_is_the_models_logits_and_feeds_analyze():
    model = _iquest()
    inputs = {"input_ids": torch.tensor([[3, 5, 7, 9, 11, 2]])}
    check_loop_depth_readout(model, inputs)  # configured depth: the model's logits (1e-4); analyze sweeps 2x
    looped = jacobiscope.native_loop(model, inputs)
    report = jacobiscope.analyze(model, inputs["input_ids"], loops=4, progress=False, diagnostics=["lyapunov"])
    (row,) = report.rows
    assert row.mode == "loop" and report.provenance["adapter"] == "native recurrence 'loop'"
    expected = jacobiscope.lyapunov_spectrum(looped, looped.x0, steps=4, k=4).exponents
    assert row.lyapunov["exponents"] == pytest.approx(expected.tolist(), abs=1e-5)


def test_iquest_is_listed_and_a_different_layout_is_refused():
    model = _iquest()
    assert jacobiscope.list_recurrences(model) == ["loop"] == jacobiscope.list_recurrences("iquestloopcoder")
    for layer in model.model.layers:  # the older revision's layout: gates outside the layers
        del layer.gate_projection
    with pytest.raises(AdapterError, match=r"does not match the IQuest Loop layout.*has no gate_projection.*older "
                                           r"revision.*jacobiscope_recurrence"):
        jacobiscope.native_loop(model, torch.tensor([[1, 2, 3]]))
    with pytest.raises(AdapterError, match="loop_num = 1: a single plain pass"):
        jacobiscope.native_loop(_iquest(loop_num=1), torch.tensor([[1, 2, 3]]))
