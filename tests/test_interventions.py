"""jacobiscope.intervene: activation patching across loop steps, checked where the outcome is provable.

- alpha = 0 and noise = 0 change nothing: the patched run equals the plain lens bit for bit;
- a map without input injection (ALBERT's shared layer on inputs of one length, no mask: the step of every input is
  the same function) continued from input j's state at loop k *is* input j's run from there on;
- any map (HRM-Text and Dory inject their input) restarted at loop k from its own state at loop j < k repeats its
  own trajectory shifted by k - j; and from another input's state it does not become that input's run.
"""
import pytest
import torch

import jacobiscope
from jacobiscope.errors import ArgumentError
from test_loop_lens import albert as _albert, dory as _dory, hrm as _hrm

IDS = torch.tensor([[3, 5, 7, 9, 11, 2], [4, 6, 8, 10, 1, 12]])


def _model(build):
    """The loop-lens tests' tiny random model of a family (tests/test_loop_lens.py), without its depth."""
    return build()[0]


def same(a, b):
    """Bit-for-bit equality of two lenses' states, logits, readout statistics (NaN equal to NaN); the Jacobian's
    spectral norm to the lens's Lanczos tolerance (1e-3 on sigma^2): its jvps run eagerly or from a graph an earlier
    call recorded (`_linearized`), whose rounding may stop Lanczos an iteration apart."""
    assert all(torch.equal(x, y) for x, y in zip(a.states, b.states))
    assert torch.equal(a.logits(a.loops), b.logits(b.loops))
    for name in ("entropy", "kl_final", "top_ids", "flip_loop", "expansion_rate", "step_size"):
        assert torch.equal(getattr(a, name).nan_to_num(-7.0), getattr(b, name).nan_to_num(-7.0)), name
    assert torch.allclose(a.spectral_norm, b.spectral_norm, rtol=1e-4, atol=0, equal_nan=True)


@pytest.mark.parametrize("build", [_hrm, _dory])
def test_alpha_zero_and_noise_zero_reproduce_the_unpatched_run_exactly(build):
    model = _model(build)
    # the dynamics (Lanczos at loops 0 and 4) on the cheaper Dory; HRM-Text's states and readout only
    options = dict(loops=4, jacobian_every=4, spectral_radius=False, dynamics=build is _dory)
    ids = IDS[:1]
    plain = jacobiscope.loop_lens(model, ids, **options)
    other = plain.state(1)  # any state shaped like X_2: the run's own earlier one
    interpolated = jacobiscope.intervene(model, ids, at_loop=2, interpolate=(other, 0.0), **options)
    same(interpolated, plain)
    same(jacobiscope.intervene(model, ids, at_loop=2, noise=0.0, **options), plain)
    assert interpolated.intervention == {"at_loop": 2, "kind": "interpolate", "noise": None, "from_input": None,
                                         "alpha": 0.0}
    moved = jacobiscope.intervene(model, ids, at_loop=2, interpolate=(other, 0.5), loops=4, dynamics=False)
    assert torch.allclose(moved.state(2), 0.5 * plain.state(2) + 0.5 * other)
    assert not torch.allclose(moved.state(4), plain.state(4), atol=1e-4)  # a real change propagates


def test_without_injection_another_inputs_state_makes_the_rest_of_the_run_that_inputs():
    model, k = _model(_albert), 2
    plain = jacobiscope.loop_lens(model, IDS, loops=8, jacobian_every=8, spectral_radius=False)
    patched = jacobiscope.intervene(model, IDS, at_loop=k, from_input=1, loops=8, jacobian_every=8,
                                    spectral_radius=False, baseline=True)
    same(patched.baseline, plain)
    assert not torch.allclose(plain.state(k, input=0), plain.state(k, input=1), atol=1e-3)
    for t in range(k, 9):  # input 0 continues as input 1 would: the same state, logits, Jacobian
        assert torch.equal(patched.state(t, input=0), plain.state(t, input=1)), t
        assert torch.equal(patched.logits(t, input=0), plain.logits(t, input=1)), t
    assert torch.equal(patched.state(k - 1, input=0), plain.state(k - 1, input=0))  # before k: untouched
    # ||J_8||_2 at the same state; Lanczos (tol 1e-3) is warm-started from each input's own earlier loop: close
    assert float(patched.spectral_norm[0, 8]) == pytest.approx(float(plain.spectral_norm[1, 8]), rel=1e-3)
    assert torch.equal(patched.expansion_rate[0, k:].isfinite(), torch.ones(9 - k, dtype=torch.bool))
    # the KL to the last loop is now measured against input 1's final output
    assert torch.allclose(patched.kl_final[0, k:], plain.kl_final[1, k:], atol=1e-12)


@pytest.mark.parametrize("build", [_hrm, _dory])
def test_an_injected_map_restarted_from_its_own_earlier_state_repeats_its_trajectory(build):
    model, j, k = _model(build), 1, 3
    plain = jacobiscope.loop_lens(model, IDS[:1], loops=8, dynamics=False)
    restarted = jacobiscope.intervene(model, IDS[:1], at_loop=k, replace=plain.state(j), loops=8, dynamics=False)
    for s in range(0, 9 - k):
        assert torch.equal(restarted.state(k + s), plain.state(j + s)), s
        assert torch.equal(restarted.logits(k + s), plain.logits(j + s)), s
    # from another input's state the injected input pulls the run away from that input's own trajectory
    crossed = jacobiscope.intervene(model, IDS, at_loop=k, from_input=1, loops=8, dynamics=False)
    both = jacobiscope.loop_lens(model, IDS, loops=8, dynamics=False)
    assert torch.equal(crossed.state(k, input=0), both.state(k, input=1))
    assert not torch.allclose(crossed.state(8, input=0), both.state(8, input=1), atol=1e-4)


def test_noise_is_the_seeded_gaussian_scaled_by_the_states_rms():
    model = _model(_dory)
    plain = jacobiscope.loop_lens(model, IDS[:1], loops=4, dynamics=False)
    noisy = jacobiscope.intervene(model, IDS[:1], at_loop=1, noise=0.1, seed=5, loops=4, dynamics=False)
    x = plain.state(1)
    draw = torch.randn(x.shape, generator=torch.Generator().manual_seed(5), dtype=torch.float64).to(x)
    assert torch.allclose(noisy.state(1), x + 0.1 * x.pow(2).mean().sqrt() * draw, atol=1e-7)
    assert torch.equal(noisy.state(0), plain.state(0))


def test_bad_interventions_are_refused_naming_the_fix():
    model = _model(_dory)
    with pytest.raises(ArgumentError, match="exactly one of"):
        jacobiscope.intervene(model, IDS, at_loop=1, noise=0.1, from_input=1, loops=3)
    with pytest.raises(ArgumentError, match="exactly one of"):
        jacobiscope.intervene(model, IDS, at_loop=1, loops=3)
    with pytest.raises(ArgumentError, match="past the last loop"):
        jacobiscope.intervene(model, IDS, at_loop=5, noise=0.1, loops=3)
    with pytest.raises(ArgumentError, match="from_input must be an input index in 0..1"):
        jacobiscope.intervene(model, IDS, at_loop=1, from_input=2, loops=3)
    with pytest.raises(ArgumentError, match="shaped like the state"):
        jacobiscope.intervene(model, IDS, at_loop=1, replace=torch.zeros(3), loops=3, dynamics=False)


def test_a_model_with_a_random_initial_state_patches_and_baselines_the_same_run():
    """Huginn draws its initial state at random on every forward: the patched run, its baseline and the donor
    share one draw, so noise=0 reproduces the baseline bit for bit and from_input hands over the baseline's state
    (before the fix each ran its own draw)."""
    from mimics.huginn_mimic import RavenConfig, RavenForCausalLM

    torch.manual_seed(0)
    model = RavenForCausalLM(RavenConfig(n_embd=16, n_heads=2, n_layers=4, vocab_size=40, intermediate_size=32,
                                         n_layers_in_prelude=1, n_layers_in_recurrent_block=2, n_layers_in_coda=1,
                                         mean_recurrence=3)).eval()
    same = jacobiscope.intervene(model, IDS, at_loop=1, noise=0.0, loops=4, baseline=True, dynamics=False)
    assert torch.equal(same.state(4, input=1), same.baseline.state(4, input=1))
    moved = jacobiscope.intervene(model, IDS, at_loop=2, from_input=1, loops=4, baseline=True, dynamics=False)
    assert torch.equal(moved.state(2, input=0), moved.baseline.state(2, input=1))
    assert not torch.allclose(moved.baseline.state(2, input=0), moved.baseline.state(2, input=1))
