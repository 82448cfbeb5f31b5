"""The built-in recurrence of Huginn / Raven (remote code, ``model_type`` "huginn_raven") against a tiny mimic with
the same module names, config fields and forward semantics (tests/mimics/huginn_mimic.py): the iterates are the
model's own core outputs, from its own random initial state, the Jacobian is the dense one, the readout (coda,
norm, head) is the model's logits, analyze runs the model's own loop, and a model laid out differently is
refused."""
import pytest
import torch
from torch import nn

import jacobiscope
from jacobiscope.adapters import AdapterError
from conftest import check_loop_depth_readout, check_spectral_norm_is_dense
from mimics.huginn_mimic import RavenConfig, RavenForCausalLM

LOOPS = 3


def _huginn(dtype=torch.float32, **overrides):
    torch.manual_seed(0)
    config = RavenConfig(n_embd=16, n_heads=2, n_layers=4, vocab_size=40, intermediate_size=32,
                         n_layers_in_prelude=1, n_layers_in_recurrent_block=2, n_layers_in_coda=1,
                         mean_recurrence=LOOPS, **overrides)
    return RavenForCausalLM(config).to(dtype).eval()


def _own_steps(model, kwargs):
    """The state after each of the model's own recurrence steps (forward hooks on its last core block)."""
    after = []
    hook = model.transformer.core_block[-1].register_forward_hook(lambda _, __, out: after.append(out.detach().clone()))
    with torch.no_grad():
        logits = model(**kwargs).logits
    hook.remove()
    return after, logits


def test_huginn_iterates_are_the_models_own_steps_from_its_own_random_state():
    model = _huginn()
    kwargs = {"input_ids": torch.tensor([[3, 5, 7, 9, 11, 2], [4, 6, 8, 10, 1, 12]])}
    torch.manual_seed(7)
    looped = jacobiscope.native_loop(model, kwargs)
    torch.manual_seed(7)  # the same draw: x0 is the model's own initial state
    own, _ = _own_steps(model, kwargs)
    assert looped.meta["loops"] == LOOPS and len(own) == LOOPS
    with torch.no_grad():
        states = looped.trajectory(looped.x0, 4 * LOOPS)
    errors = [float((states[t] - state).abs().max()) for t, state in enumerate(own, start=1)]
    print("max |iterate - model step| per loop:", errors)
    assert max(errors) < 1e-5, errors
    assert not torch.allclose(states[1], states[2], atol=1e-3)  # the loop moves the state
    # the initial state is random, as the model draws it: a second map starts elsewhere
    other = jacobiscope.native_loop(model, kwargs)
    assert float((other.x0 - looped.x0).abs().max()) > 1e-3
    # given input_states the model starts there, and so does the map
    start = torch.randn(2, 6, 16)
    assert torch.equal(jacobiscope.native_loop(model, {**kwargs, "input_states": start}).x0, start)
    assert torch.isfinite(states).all() and float(states.norm(dim=-1).max()) < 10  # sandwich norms keep it bounded


def test_huginn_num_steps_in_the_inputs_is_the_configured_depth():
    model = _huginn()
    start = torch.randn(1, 4, 16)
    inputs = {"input_ids": torch.tensor([[3, 5, 7, 9]]), "input_states": start, "num_steps": torch.tensor(5)}
    looped = jacobiscope.native_loop(model, inputs)
    assert looped.meta["loops"] == 5
    with torch.no_grad():
        read = looped.meta["readout"](looped.trajectory(looped.x0, 5)[-1])
        assert float((read - model(**inputs).logits).abs().max()) <= 1e-4
    model.train()
    with pytest.raises(AdapterError, match="training mode.*model.eval"):
        jacobiscope.native_loop(model, {"input_ids": torch.tensor([[3, 5]])})


def test_huginn_step_jacobian_is_the_dense_autograd_jacobian():
    model = _huginn(torch.float64)
    looped = jacobiscope.native_loop(model, {"input_ids": torch.tensor([[3, 5, 7]])})
    x = looped.x0
    check_spectral_norm_is_dense(looped, x, numel=48)


def test_huginn_readout_is_coda_norm_and_head_and_feeds_analyze():
    model = _huginn()
    inputs = {"input_ids": torch.tensor([[3, 5, 7, 9, 11, 2]]), "input_states": torch.randn(1, 6, 16)}
    check_loop_depth_readout(model, inputs)  # configured depth: the model's logits (1e-4); analyze sweeps 2x
    looped = jacobiscope.native_loop(model, inputs)
    report = jacobiscope.analyze(model, inputs, loops=2 * LOOPS, progress=False, diagnostics=["lyapunov"])
    (row,) = report.rows
    assert row.mode == "loop" and report.provenance["adapter"] == "native recurrence 'loop'"
    expected = jacobiscope.lyapunov_spectrum(looped, looped.x0, steps=2 * LOOPS, k=4).exponents
    assert row.lyapunov["exponents"] == pytest.approx(expected.tolist(), abs=1e-5)


def test_huginn_is_listed_and_a_different_layout_or_a_noisy_step_is_refused():
    model = _huginn()
    assert jacobiscope.list_recurrences(model) == ["loop"] == jacobiscope.list_recurrences("huginn_raven")
    assert jacobiscope.adapters.get_adapter_spec("huginn_raven").recurrences["loop"]["builder"] == "huginn_raven"
    del model.transformer["adapter"]
    with pytest.raises(AdapterError, match=r"does not match the Huginn layout.*no transformer.adapter.*"
                                           r"jacobiscope_recurrence"):
        jacobiscope.native_loop(model, torch.tensor([[1, 2, 3]]))
    model = _huginn()
    model.transformer["adapter"] = nn.Linear(16, 16)  # no injection: not Huginn's adapter
    with pytest.raises(AdapterError, match="adapter takes 16 features, not 2 \\* n_embd = 32"):
        jacobiscope.native_loop(model, torch.tensor([[1, 2, 3]]))
    model = _huginn(test_time_noise=0.1)
    with pytest.raises(AdapterError, match="test_time_noise = 0.1"):
        jacobiscope.native_loop(model, torch.tensor([[1, 2, 3]]))


def test_the_loop_lens_at_the_configured_depth_is_the_models_logits_from_the_same_initial_state():
    """Huginn draws its initial state at random on every forward: the lens and the model agree when both start from
    the same state (``input_states``), and the lens keeps finite values past the configured depth."""
    model = _huginn()
    kwargs = {"input_ids": torch.tensor([[3, 5, 7, 9, 11, 2], [4, 6, 8, 10, 1, 12]]),
              "input_states": torch.randn(2, 6, 16, generator=torch.Generator().manual_seed(3))}
    with torch.no_grad():
        logits = model(**kwargs).logits
    lens = jacobiscope.loop_lens(model, kwargs, loops=3 * LOOPS, jacobian_every=LOOPS)
    for row in range(2):
        gap = float((lens.logits(LOOPS, input=row) - logits[row]).abs().max())
        assert gap < 1e-4, (row, gap)
    assert torch.isfinite(lens.logits(3 * LOOPS, input=0)).all()


def test_analyze_and_the_lens_draw_the_initial_state_under_their_seed():
    """Without input_states, analyze and loop_lens cut the maps from a forward under their seed: the same call starts
    from the same state — the model's own draw under that seed (the reference: its first core input, seeded the
    same way) — and the caller's random state is left where it was."""
    model = _huginn()
    ids = torch.tensor([[3, 5, 7, 9, 11, 2]])
    torch.manual_seed(2)
    with torch.no_grad():
        own = model(input_ids=ids, output_hidden_states=False)  # moves the global stream: the analyses must not
    before = torch.random.get_rng_state()
    runs = [jacobiscope.analyze(model, ids, loops=2, diagnostics=["spectral_norm"], seed=seed, progress=False)
            for seed in (4, 4, 5)]
    assert torch.equal(torch.random.get_rng_state(), before)
    assert runs[0].rows[0].state_norm == runs[1].rows[0].state_norm != runs[2].rows[0].state_norm
    assert any("draws random numbers" in note and "seeded to 4" in note for note in runs[0].notes)
    torch.manual_seed(4)
    expected = jacobiscope.native_loop(model, {"input_ids": ids}).x0
    with jacobiscope.map_source(model, ids, seed=4) as source:
        torch.testing.assert_close(next(iter(source)).maps[0].x0, expected, rtol=0, atol=0)
    lenses = [jacobiscope.loop_lens(model, ids, loops=LOOPS, dynamics=False, seed=seed) for seed in (4, 4, 5)]
    assert torch.equal(lenses[0].logits(LOOPS), lenses[1].logits(LOOPS))
    assert not torch.equal(lenses[0].logits(LOOPS), lenses[2].logits(LOOPS))
    del own
