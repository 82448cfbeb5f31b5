"""The built-in recurrence of Ouro (remote code, ``model_type`` "ouro") against a tiny mimic with the same module
names, config fields and forward semantics (tests/mimics/ouro_mimic.py): the iterates are the model's own states
after each pass, the Jacobian is the dense one, the readout is the model's logits, the exit gate is the model's,
analyze runs the model's own loop, and a model laid out differently is refused."""
import pytest
import torch
from torch import nn

import jacobiscope
from jacobiscope.adapters import AdapterError
from conftest import check_loop_depth_readout, check_spectral_norm_is_dense
from mimics.ouro_mimic import OuroConfig, OuroForCausalLM

LOOPS = 3


def _ouro(dtype=torch.float32, **overrides):
    torch.manual_seed(0)
    # a sliding window shorter than the text and both attention types: the replay must carry each layer's own mask
    config = OuroConfig(vocab_size=48, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                        num_key_value_heads=1, sliding_window=2, layer_types=["sliding_attention", "full_attention"],
                        total_ut_steps=LOOPS, **overrides)
    return OuroForCausalLM(config).to(dtype).eval()


def _own_passes(model, kwargs):
    """The state after each of the model's own passes (forward hooks on its final norm) and its gate logits."""
    after, gates = [], []
    hooks = [model.model.norm.register_forward_hook(lambda _, __, out: after.append(out.detach().clone())),
             model.model.early_exit_gate.register_forward_hook(lambda _, __, out: gates.append(out.detach().clone()))]
    with torch.no_grad():
        model(**kwargs)
    for hook in hooks:
        hook.remove()
    return after, gates


def test_ouro_iterates_are_the_models_own_passes_and_run_past_the_configured_depth():
    model = _ouro()
    kwargs = {"input_ids": torch.tensor([[3, 5, 7, 9, 11, 2], [4, 6, 8, 10, 1, 1]]),
              "attention_mask": torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])}
    looped = jacobiscope.native_loop(model, kwargs)
    assert looped.meta["loops"] == LOOPS and looped.meta["recurrence"] == "loop"
    assert torch.equal(looped.x0, model.model.embed_tokens(kwargs["input_ids"]).detach())
    own, gates = _own_passes(model, kwargs)
    assert len(own) == LOOPS
    with torch.no_grad():
        states = looped.trajectory(looped.x0, 4 * LOOPS)
        errors = [float((states[t] - state).abs().max()) for t, state in enumerate(own, start=1)]
        # the exit gate: the model's own per-pass probability sigmoid(gate logit), per token
        gate_errors = [float((looped.meta["gate"](states[t]) - torch.sigmoid(g.squeeze(-1))).abs().max())
                       for t, g in enumerate(gates, start=1)]
    print("max |iterate - model pass| per loop:", errors, "gate:", gate_errors)
    assert max(errors) < 1e-5 and max(gate_errors) < 1e-6, (errors, gate_errors)
    assert not torch.allclose(states[1], states[2], atol=1e-3)  # the loop moves the state
    gate = looped.meta["gate"](states[1])
    assert gate.shape == (2, 6) and bool(((gate > 0) & (gate < 1)).all())
    # past the configured depth: finite, and bounded (every pass ends in the RMS norm: |h| ~ sqrt(hidden))
    assert torch.isfinite(states).all() and float(states[1:].norm(dim=-1).max()) < 10
    bare = jacobiscope.native_loop(model.model, kwargs)  # the bare OuroModel: the same loop, no head to read out
    assert "readout" not in bare.meta and torch.equal(bare.step(states[2]), looped.step(states[2]))


def test_ouro_step_jacobian_is_the_dense_autograd_jacobian():
    model = _ouro(torch.float64)
    looped = jacobiscope.native_loop(model, {"input_ids": torch.tensor([[3, 5, 7]])})
    x = looped.trajectory(looped.x0, 1)[-1].detach()  # a normalized state, as every later step sees
    check_spectral_norm_is_dense(looped, x, numel=48)


def test_ouro_readout_is_the_models_logits_at_every_exit_and_feeds_analyze():
    model = _ouro()
    inputs = {"input_ids": torch.tensor([[3, 5, 7, 9, 11, 2]])}
    check_loop_depth_readout(model, inputs)  # configured depth: the model's logits (1e-4); analyze sweeps 2x
    looped = jacobiscope.native_loop(model, inputs)
    with torch.no_grad():
        states = looped.trajectory(looped.x0, LOOPS)
        for step in range(LOOPS):  # the model's own exit_at_step logits are the readout at that pass
            own = model(**inputs, exit_at_step=step).logits
            assert float((looped.meta["readout"](states[step + 1]) - own).abs().max()) <= 1e-5
    # analyze(model, inputs) measures the model's own loop by default: its exponents are the native loop's
    report = jacobiscope.analyze(model, inputs["input_ids"], loops=2 * LOOPS, progress=False, diagnostics=["lyapunov"])
    (row,) = report.rows
    assert row.mode == "loop" and report.provenance["adapter"] == "native recurrence 'loop'"
    expected = jacobiscope.lyapunov_spectrum(looped, looped.x0, steps=2 * LOOPS, k=4).exponents
    assert row.lyapunov["exponents"] == pytest.approx(expected.tolist(), abs=1e-5)


def test_ouro_is_listed_and_a_different_layout_is_refused():
    model = _ouro()
    assert jacobiscope.list_recurrences(model) == ["loop"] == jacobiscope.list_recurrences("ouro")
    assert jacobiscope.adapters.get_adapter_spec("ouro").recurrences["loop"]["builder"] == "ouro"
    del model.model.early_exit_gate
    with pytest.raises(AdapterError, match=r"does not match the Ouro layout.*no module 'early_exit_gate'.*"
                                           r"jacobiscope_recurrence"):
        jacobiscope.native_loop(model, torch.tensor([[1, 2, 3]]))
    model = _ouro()
    model.model.layers[0].input_layernorm_2 = None  # a plain (non-sandwich) layer is not Ouro's
    del model.model.layers[0].input_layernorm_2
    with pytest.raises(AdapterError, match="OuroDecoderLayer has no input_layernorm_2"):
        jacobiscope.native_loop(model, torch.tensor([[1, 2, 3]]))
    model = _ouro()
    model.model.early_exit_gate = nn.Linear(16, 2)
    with pytest.raises(AdapterError, match="early_exit_gate gives 2 outputs, not 1"):
        jacobiscope.native_loop(model, torch.tensor([[1, 2, 3]]))


def test_a_protocol_model_can_expose_its_exit_gate_as_ouro_does():
    class Gated(nn.Module):
        jacobiscope_recurrences = ("core",)

        def __init__(self):
            super().__init__()
            self.core, self.exit = nn.Linear(3, 3), nn.Linear(3, 1)

        def jacobiscope_recurrence(self, name, input_ids, gate=None):
            found = {"step": lambda h: torch.tanh(self.core(h)), "x0": torch.ones(1, 2, 3), "loops": 2}
            return {**found, "gate": gate if gate is not None else (lambda h: torch.sigmoid(self.exit(h)).squeeze(-1))}

    model = Gated()
    looped = jacobiscope.native_loop(model, {"input_ids": torch.tensor([[1, 2]])})
    with torch.no_grad():
        expected = torch.sigmoid(model.exit(torch.ones(1, 2, 3))).squeeze(-1)
        assert torch.equal(looped.meta["gate"](looped.x0), expected)
    with pytest.raises(AdapterError, match="'gate' must be a callable state -> exit probability"):
        jacobiscope.native_loop(model, {"input_ids": torch.tensor([[1, 2]]), "gate": 3})
