"""depth_dynamics against the dense Jacobians of a tiny GPT-2 stack (float64): each layer's norm, the QR exponents
of the product J_L ... J_1, and the per-token gains."""
import pytest
import torch
import transformers

import jacobiscope


def _layer_jacobians(model, input_ids):
    """Dense Jacobian of every layer at the hidden state entering it, each layer called with the arguments the
    model passed it (recorded by this test's own pre-hooks: the causal mask lives there)."""
    calls = {}
    handles = [block.register_forward_pre_hook(
        lambda module, args, kwargs, index=index: calls.setdefault(index, (args, kwargs)), with_kwargs=True)
        for index, block in enumerate(model.h)]
    with torch.no_grad():
        model(input_ids=input_ids, use_cache=False)
    for handle in handles:
        handle.remove()
    jacobians = []
    for index, block in enumerate(model.h):
        args, kwargs = calls[index]
        x = args[0].detach()

        def layer(state, block=block, args=args, kwargs=kwargs):
            out = block(state, *args[1:], **kwargs)
            return out[0] if isinstance(out, tuple) else out

        jacobians.append(torch.autograd.functional.jacobian(layer, x).reshape(x.numel(), x.numel()))
    return jacobians, calls[0][0][0].shape


def test_depth_dynamics_matches_the_dense_chain():
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_embd=8, n_layer=3, n_head=2, vocab_size=30, attn_implementation="eager")
    model = transformers.GPT2Model(config).double().eval()
    input_ids = torch.tensor([[3, 1, 4, 1, 5]])
    (depth,) = jacobiscope.depth_dynamics(model, input_ids, k=3, seed=0)
    jacobians, shape = _layer_jacobians(model, input_ids)
    for layer, dense in zip(depth.layers, jacobians):
        assert layer["spectral_norm"] == pytest.approx(float(torch.linalg.matrix_norm(dense, ord=2)), rel=1e-5)
    generator = torch.Generator().manual_seed(0)
    frame, _ = torch.linalg.qr(torch.randn(dense.shape[0], 3, generator=generator, dtype=torch.float64))
    chain = jacobians[2] @ jacobians[1] @ jacobians[0]
    _, r = torch.linalg.qr(chain @ frame)
    expected = (r.diagonal().abs().log() / 3).tolist()
    assert depth.exponents == pytest.approx(expected, abs=1e-8)
    # Token gains: the reverse chain J^T u of each probe, as the function draws them (after the frame), against the
    # dense chain; the gain is the probes' mean ||(J^T u)[token]||^2 / d, square-rooted.
    probes = torch.randn(8, *shape, generator=generator, dtype=torch.float64).reshape(8, -1)
    pulled = (probes @ chain).reshape(8, shape[1], shape[2])
    estimate = (pulled.pow(2).sum(dim=-1).mean(dim=0) / shape[2]).sqrt()
    assert depth.token_gain == pytest.approx(estimate.tolist(), rel=1e-8)
    # ... which estimates the exact root-mean-square gain of a unit direction on the token, ||J[:, token]||_F / sqrt(d)
    exact = [float(chain.reshape(-1, shape[1], shape[2])[:, token].norm() / shape[2] ** 0.5) for token in range(5)]
    (many,) = jacobiscope.depth_dynamics(model, input_ids, k=3, seed=1, token_samples=1000)
    assert many.token_gain == pytest.approx(exact, rel=0.08)
    assert depth.token_gain != pytest.approx(exact, rel=1e-3)   # 8 probes: an estimate, not the exact value
    # Causal attention: a nudge to the last token reaches only itself, to the first one every token.
    assert len(depth.token_gain) == 5 and all(g > 0 for g in depth.token_gain)
    assert exact[0] > exact[-1]


# ------------------------------------------------------------------ tabular results (depth_dynamics and describe)


def test_depth_results_are_still_the_list_and_give_dataframes():
    pytest.importorskip("pandas")
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_embd=8, n_layer=3, n_head=2, vocab_size=30, attn_implementation="eager")
    model = transformers.GPT2Model(config).double().eval()
    results = jacobiscope.depth_dynamics(model, torch.tensor([[3, 1, 4, 1], [5, 9, 2, 6]]), k=2, seed=0)
    # Every old read of the list: len, indexing, iteration, unpacking, the layer dicts' keys, == with a list.
    assert isinstance(results, list) and len(results) == 2
    first, second = results
    assert results[0] is first and [d.label for d in results] == [first.label, second.label]
    assert results == [first, second] and results[-1:] == [second]
    assert sorted(first.layers[0]) == ["layer", "log_stretch", "spectral_norm"]
    assert first.to_dict()["layers"] == first.layers
    frame = results.to_dataframe()
    assert frame.shape == (6, 6)
    assert frame.columns.tolist() == ["input_index", "label", "layer", "spectral_norm", "log_stretch_0",
                                      "log_stretch_1"]
    for (index, depth), (_, rows) in zip(enumerate(results), frame.groupby("input_index")):
        assert rows["label"].tolist() == [depth.label] * 3
        assert rows["layer"].tolist() == [entry["layer"] for entry in depth.layers]
        assert rows["spectral_norm"].tolist() == [entry["spectral_norm"] for entry in depth.layers]
        assert rows[["log_stretch_0", "log_stretch_1"]].values.tolist() == [e["log_stretch"] for e in depth.layers]
    # The exponents are the mean log stretch over the layers, in both forms.
    exponents = results.exponents_dataframe()
    assert exponents[["exponent_0", "exponent_1"]].values.tolist() == [d.exponents for d in results]
    assert exponents["exponent_0"].tolist() == pytest.approx(
        frame.groupby("input_index")["log_stretch_0"].mean().tolist(), rel=1e-12)
    gains = results.token_gain_dataframe()
    assert gains["gain"].tolist() == first.token_gain + second.token_gain
    assert gains["token"].tolist() == [0, 1, 2, 3] * 2
    assert first.to_dataframe().equals(frame[frame.input_index == 0].reset_index(drop=True))


def test_describe_plans_are_still_the_list_and_give_a_dataframe():
    pytest.importorskip("pandas")
    model = transformers.GPT2Model(transformers.GPT2Config(n_embd=8, n_layer=2, n_head=2, vocab_size=30)).eval()
    plans = jacobiscope.describe(model, torch.tensor([[1, 2, 3]]), loops=4, diagnostics=["lyapunov", "energy"])
    assert isinstance(plans, list) and len(plans) == 2 and plans[0].layer == 0
    assert [plan.layer for plan in plans] == [0, 1]
    frame = plans.to_dataframe()
    assert frame["layer"].tolist() == [0, 1] and frame["state_size"].tolist() == [24, 24]
    assert frame["state_shape"].tolist() == [(3, 8), (3, 8)]
    assert frame["estimated_seconds"].tolist() == [plan.estimated_seconds for plan in plans]
    assert frame["seconds.lyapunov"].tolist() == [plan.per_diagnostic_seconds["lyapunov"] for plan in plans]
    assert plans.total_seconds == pytest.approx(sum(plan.estimated_seconds for plan in plans))
