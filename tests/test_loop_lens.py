"""jacobiscope.loop_lens on tiny random HRM-Text, Dory and ALBERT from configs (no downloads): at the configured
depth the lens is the model's own logits, it runs past that depth with finite values, its KL / entropy / top-k /
flips are a direct torch computation on its logits, its ||J||_2, spectral radius and expansion rates are the dense
autograd Jacobian's, and the registered "loop_lens" diagnostic runs under analyze."""
import math

import pytest
import torch
import transformers

import jacobiscope
from jacobiscope.errors import ArgumentError
from conftest import autograd_jacobian


def hrm():
    torch.manual_seed(0)
    config = transformers.HrmTextConfig(vocab_size=40, hidden_size=8, intermediate_size=16, num_hidden_layers=2,
                                        num_attention_heads=2, head_dim=4, H_cycles=3, L_cycles=4,
                                        max_position_embeddings=32)
    model = transformers.HrmTextForCausalLM(config).eval()
    with torch.no_grad():
        model.base_model.z_L_init.normal_()
    return model, 4  # the default recurrence: the fast L loop, L_cycles iterations


def dory(dtype=torch.float32):
    torch.manual_seed(0)
    config = transformers.DoryConfig(
        vocab_size=40, hidden_size=16, intermediate_size=32, num_hidden_layers=5, num_attention_heads=2,
        num_key_value_heads=1, head_dim=8, sliding_window=2, ngpt_alpha_init=0.4,
        layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention"],
        n_input_layers=1, n_recurrent_layers=2, n_output_layers=2, n_recurrent_loops=3)
    return transformers.DoryForCausalLM(config).to(dtype).eval(), 3


def albert():
    torch.manual_seed(0)
    config = transformers.AlbertConfig(vocab_size=40, embedding_size=8, hidden_size=12, num_hidden_layers=5,
                                       num_attention_heads=2, intermediate_size=24)
    return transformers.AlbertForMaskedLM(config).eval(), 5


FAMILIES = {"hrm_text": hrm, "dory": dory, "albert": albert}
IDS = torch.tensor([[3, 5, 7, 9, 11, 2], [4, 6, 8, 10, 1, 12]])


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_lens_at_the_configured_depth_is_the_models_own_logits_and_runs_past_it(family):
    model, configured = FAMILIES[family]()
    with torch.no_grad():
        own = model(input_ids=IDS).logits
    lens = jacobiscope.loop_lens(model, IDS, loops=3 * configured, jacobian_every=2 * configured,
                                 spectral_radius=False)
    assert lens.configured == configured and lens.loops == 3 * configured and len(lens.labels) == 2
    read = lens.logits(configured)
    assert read.shape == own.shape  # both rows, concatenated like the model's own batch
    assert float((read - own).abs().max()) <= 1e-4, family
    assert float((lens.logits(configured, input=1) - own[1:]).abs().max()) <= 1e-4
    # recomputed from the stored state through the readout: the same logits
    assert torch.allclose(jacobiscope.loop_lens(model, IDS, loops=configured, dynamics=False,
                                                keep_logits=False).logits(configured), read, atol=1e-6)
    for name in ("entropy", "kl_final", "top_probs", "step_size", "expansion_rate"):
        assert bool(torch.isfinite(getattr(lens, name)).all()), (family, name)
    assert bool(torch.isfinite(lens.kl_prev[:, 1:]).all()) and bool(torch.isnan(lens.kl_prev[:, 0]).all())
    sampled = lens.spectral_norm[:, [0, 2 * configured, 3 * configured]]
    assert bool(torch.isfinite(sampled).all()) and bool((sampled > 0).all())
    assert bool(torch.isnan(lens.spectral_norm[:, 1]).all())  # not sampled: jacobian_every
    assert float(lens.kl_final[:, -1].abs().max()) < 1e-12
    assert float(lens.kl_final[:, 0].max()) > 1e-6  # the output moves along the loop: the lens measures something


def test_kl_entropy_top_k_and_flips_are_a_direct_torch_computation():
    model, configured = albert()
    lens = jacobiscope.loop_lens(model, IDS[:1], loops=8, top_k=3, dynamics=False)
    logits = torch.stack([lens.logits(t)[0].double() for t in range(9)])  # [loops + 1, T, V]
    log_p = torch.log_softmax(logits, -1)
    kl = torch.nn.functional.kl_div
    for t in range(9):
        entropy = -(log_p[t].exp() * log_p[t]).sum(-1)
        to_final = kl(log_p[t], log_p[-1], log_target=True, reduction="none").sum(-1)
        assert torch.allclose(lens.entropy[0, t], entropy, atol=1e-10)
        assert torch.allclose(lens.kl_final[0, t], to_final, atol=1e-10)
        if t:
            to_prev = kl(log_p[t], log_p[t - 1], log_target=True, reduction="none").sum(-1)
            assert torch.allclose(lens.kl_prev[0, t], to_prev, atol=1e-10)
        probs, ids = log_p[t].exp().sort(-1, descending=True)
        assert torch.equal(lens.top_ids[0, t], ids[:, :3]) and torch.allclose(lens.top_probs[0, t], probs[:, :3])
    argmax = logits.argmax(-1)
    flips = [max([t for t in range(1, 9) if argmax[t, p] != argmax[t - 1, p]], default=0) for p in range(6)]
    assert lens.flip_loop[0].tolist() == flips
    assert lens.answer_flip_loop() == max(flips)


def test_jacobian_norm_radius_and_expansion_rate_are_the_dense_ones():
    model, _ = dory(torch.float64)
    ids = torch.tensor([[3, 5, 7]])
    lens = jacobiscope.loop_lens(model, ids, loops=4, jacobian_every=2, seed=3)
    looped = jacobiscope.native_loop(model, ids)
    generator = torch.Generator().manual_seed(3)
    tangent = torch.randn(looped.x0.shape, generator=generator, dtype=torch.float64).reshape(-1)
    tangent = tangent / tangent.norm()
    for t in range(5):
        x = lens.state(t)
        assert torch.equal(x, looped.trajectory(looped.x0, t)[-1]) if t else torch.equal(x, looped.x0)
        dense = autograd_jacobian(looped.step, x)
        pushed = dense @ tangent
        assert float(lens.expansion_rate[0, t]) == pytest.approx(math.log(float(pushed.norm())), rel=1e-6)
        tangent = pushed / pushed.norm()
        if t in (0, 2, 4):
            assert float(lens.spectral_norm[0, t]) == pytest.approx(float(torch.linalg.matrix_norm(dense, 2)),
                                                                     rel=1e-4)
            radius = float(torch.linalg.eigvals(dense).abs().max())
            assert float(lens.spectral_radius[0, t]) == pytest.approx(radius, rel=1e-6)
        else:
            assert math.isnan(float(lens.spectral_norm[0, t]))
        with torch.no_grad():
            step = (looped.step(x) - x).norm() / x.norm()
        assert float(lens.step_size[0, t]) == pytest.approx(float(step), rel=1e-10)


def contraction_map():
    """A map whose readout, gate and Jacobian are known: X <- 0.5 X + b, logits = X, gate = sigmoid(sum X)."""
    b = torch.tensor([[1.0, -2.0, 0.5]], dtype=torch.float64)
    looped = jacobiscope.LoopedMap(lambda x: 0.5 * x + b, x0=torch.zeros(1, 3, dtype=torch.float64))
    looped.info.readout, looped.info.loops = (lambda x: x), 3
    looped.meta["gate"] = lambda x: torch.sigmoid(x.sum(-1))
    return looped


def test_a_looped_map_with_a_readout_and_a_gate_and_its_dataframe_and_figure(tmp_path):
    looped = contraction_map()
    lens = jacobiscope.loop_lens(looped, top_k=2)
    assert lens.loops == 3 and lens.configured == 3
    states = looped.trajectory(looped.x0, 3)
    assert torch.allclose(lens.gate[0, :, 0], torch.sigmoid(states.sum(-1)).reshape(-1))
    assert torch.allclose(lens.spectral_norm[0], torch.full((4,), 0.5, dtype=torch.float64))
    assert torch.allclose(lens.spectral_radius[0], torch.full((4,), 0.5, dtype=torch.float64))
    assert torch.allclose(lens.expansion_rate[0], torch.full((4,), math.log(0.5), dtype=torch.float64))
    assert lens.expansive_loop() is None
    frame = lens.to_dataframe()
    assert len(frame) == 4 and list(frame["loop"]) == [0, 1, 2, 3]
    assert {"top2_id", "top2_prob", "gate", "spectral_norm", "expansion_rate"} <= set(frame.columns)
    assert frame["entropy"].tolist() == pytest.approx(lens.entropy[0, :, 0].tolist())
    png, svg = lens.plot(path=tmp_path / "lens.png"), lens.plot(path=tmp_path / "lens.svg")
    assert (tmp_path / "lens.png").read_bytes()[:4] == b"\x89PNG" and b"<svg" in (tmp_path / "lens.svg").read_bytes()
    assert len(png.axes) == 2 and png.axes[0].get_shared_x_axes().joined(png.axes[0], png.axes[1])
    assert svg is not png


def test_an_expanding_map_is_expansive_from_the_loop_its_tangents_grow():
    """X <- tanh(a_t X): contracting while a_t X is large (saturated tanh), a linear growth 1.5 near 0."""
    looped = jacobiscope.LoopedMap(lambda x: 1.5 * x, x0=torch.ones(1, 2, dtype=torch.float64))
    looped.info.readout = lambda x: torch.cat([x, -x], -1)
    lens = jacobiscope.loop_lens(looped, loops=3, spectral_radius=False)
    assert lens.expansive_loop() == 0
    assert lens.expansion_rate[0].tolist() == pytest.approx([math.log(1.5)] * 4)


def test_the_registered_diagnostic_runs_under_analyze_and_matches_the_lens():
    model, configured = albert()
    ids = IDS[:1]
    report = jacobiscope.analyze(model, ids, loops=2 * configured, diagnostics=["loop_lens"],
                                 options={"lens_every": configured, "lens_radius": False}, progress=False)
    (row,) = report.rows
    result = row.diagnostic("loop_lens")
    assert result is not None, row.flags
    lens = jacobiscope.loop_lens(model, ids, loops=2 * configured, dynamics=False)
    assert result.kl_final == pytest.approx(lens.kl_final[0].mean(-1).tolist(), abs=1e-5)
    assert result.entropy == pytest.approx(lens.entropy[0].mean(-1).tolist(), abs=1e-5)
    assert result.flip_loop == lens.answer_flip_loop()
    assert len(result.spectral_norm) == 2 * configured + 1 and math.isfinite(result.spectral_norm[configured])
    assert result.spectral_norm[1] is None and result.kl_prev[0] is None  # not measured: null in a report
    frame = report.to_dataframe()
    assert frame["loop_lens.flip_loop"].tolist() == [result.flip_loop]
    assert result.columns()["answer flips at"] == result.flip_loop


def test_bad_calls_are_refused_naming_the_fix():
    looped = contraction_map()
    lens = jacobiscope.loop_lens(looped, dynamics=False)
    with pytest.raises(ArgumentError, match="loop must be an int in 0..3"):
        lens.logits(4)
    with pytest.raises(ArgumentError, match="input must be an int"):
        lens.state(0, input=2)
    bare = jacobiscope.LoopedMap(lambda x: 0.5 * x, x0=torch.ones(2))
    with pytest.raises(ArgumentError, match="no readout"):
        jacobiscope.loop_lens(bare, loops=2)
    with pytest.raises(ArgumentError, match="pass loops=N"):
        bare.info.readout = lambda x: x
        jacobiscope.loop_lens(bare)
    with pytest.raises(ArgumentError, match="top_k must be a positive int"):
        jacobiscope.loop_lens(looped, top_k=0)


@pytest.mark.parametrize("rates, window, expected", [
    ([-0.5, 0.2, -0.5, 0.3, 0.4, 0.1], 3, 3),      # one stretching step inside a contracting run does not count
    ([-0.5, 0.2, -0.5, 0.3, 0.4, 0.1], 1, 1),      # window 1: the raw first positive rate
    ([0.9, -0.1, -0.2, -0.3], 3, 0),               # mean over loops 0..2 is +0.2
    ([-0.1, -0.1, 0.05], 3, 2),                    # the window shrinks at the end: the last loop alone
    ([-0.1, float("nan"), -0.2], 3, None),         # never expansive; a missing rate is skipped
    ([], 3, None),
])
def test_the_first_expansive_loop_is_judged_on_a_window_mean(rates, window, expected):
    from jacobiscope.diagnostics._loop_lens import first_expansive

    assert first_expansive(rates, window) == expected


def test_a_tokenizers_batch_encoding_is_taken_as_the_models_keyword_arguments():
    """A tokenizer's output is a BatchEncoding (a mapping, not a dict): the lens and native_loop read it as the
    keyword arguments, with the same numbers as the plain dict (it was taken for token ids: InputError)."""
    model, configured = albert()
    encoded = transformers.BatchEncoding({"input_ids": IDS, "attention_mask": torch.ones_like(IDS)})
    plain = jacobiscope.loop_lens(model, dict(encoded), loops=configured, dynamics=False)
    lens = jacobiscope.loop_lens(model, encoded, loops=configured, dynamics=False)
    assert torch.equal(lens.logits(configured), plain.logits(configured))
    with torch.no_grad():
        own = model(**encoded).logits
    assert float((lens.logits(configured, input=1) - own[1]).abs().max()) < 1e-4
    assert jacobiscope.native_loop(model, encoded).meta["loops"] == configured
