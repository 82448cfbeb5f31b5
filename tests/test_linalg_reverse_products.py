"""Steps with a custom autograd.Function that forward mode and torch.func cannot enter: products by double
backward, checked against dense reverse-mode Jacobians and against the same step written in plain torch ops."""
import warnings

import pytest
import torch
import transformers as T

import jacobiscope
from jacobiscope.errors import SlowDerivativesWarning
from jacobiscope.linalg import jacobian_matmat, jvp, vjp
from jacobiscope.linalg._reverse_products import needs_reverse_products, uses_reverse_products


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(0.7978845608 * (x + 0.044715 * x ** 3)))


def _gelu_tanh_derivative(x):
    inner = 0.7978845608 * (x + 0.044715 * x ** 3)
    tanh = torch.tanh(inner)
    return 0.5 * (1.0 + tanh) + 0.5 * x * (1.0 - tanh ** 2) * 0.7978845608 * (1.0 + 3 * 0.044715 * x ** 2)


class OldStyleGelu(torch.autograd.Function):
    """Written the pre-functorch way (ctx in forward, no setup_context, no jvp) — as Bloom's GeLUFunction is."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return _gelu_tanh(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * _gelu_tanh_derivative(x)


class NoVmapGelu(torch.autograd.Function):
    """New style (setup_context, jvp) but no vmap rule: one tangent works, a vmapped block does not."""

    @staticmethod
    def forward(x):
        return _gelu_tanh(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.x = inputs[0]

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * _gelu_tanh_derivative(x)

    @staticmethod
    def jvp(ctx, tangent):
        return tangent * _gelu_tanh_derivative(ctx.x)


def _maps(activation_of_custom):
    torch.manual_seed(0)
    W1 = torch.randn(6, 6, dtype=torch.float64) / 6 ** 0.5
    W2 = torch.randn(6, 6, dtype=torch.float64) / 6 ** 0.5

    def custom(x):
        return torch.tanh(activation_of_custom(x @ W1) @ W2) + 0.5 * x

    def plain(x):
        return torch.tanh(_gelu_tanh(x @ W1) @ W2) + 0.5 * x

    x0 = torch.randn(3, 6, dtype=torch.float64)
    return (jacobiscope.LoopedMap(custom, x0=x0, name="custom"), jacobiscope.LoopedMap(plain, x0=x0, name="plain"),
            x0)


def _dense(step, x):
    """The reference: reverse-mode autograd's full Jacobian (no forward mode, no torch.func)."""
    return torch.autograd.functional.jacobian(step, x).reshape(x.numel(), x.numel())


def test_old_style_function_is_refused_by_forward_mode_itself():
    custom, _, x0 = _maps(OldStyleGelu.apply)
    with pytest.raises((NotImplementedError, RuntimeError)) as caught:
        torch.func.jvp(custom.step, (x0,), (x0,))
    assert needs_reverse_products(caught.value)
    assert not needs_reverse_products(RuntimeError("vmap: called random operation while in randomness error mode"))


def test_jvp_and_vjp_match_dense_reverse_jacobian():
    custom, _, x0 = _maps(OldStyleGelu.apply)
    J = _dense(custom.step, x0)
    v, u = torch.randn(2, *x0.shape, dtype=torch.float64)
    with pytest.warns(SlowDerivativesWarning, match="double backward"):
        got = jvp(custom, x0, v)
    assert uses_reverse_products(custom)
    torch.testing.assert_close(got.reshape(-1), J @ v.reshape(-1), rtol=1e-12, atol=1e-13)
    torch.testing.assert_close(vjp(custom, x0, u).reshape(-1), J.T @ u.reshape(-1), rtol=1e-12, atol=1e-13)
    V = torch.randn(5, *x0.shape, dtype=torch.float64)
    block = jacobian_matmat(custom, x0, V)
    torch.testing.assert_close(block.reshape(5, -1), (J @ V.reshape(5, -1).T).T, rtol=1e-12, atol=1e-13)
    operator = jacobiscope.JacobianOperator(custom, x0)
    torch.testing.assert_close(operator.rmatmat(V).reshape(5, -1), (J.T @ V.reshape(5, -1).T).T, rtol=1e-12,
                               atol=1e-13)


def test_function_without_vmap_rule_falls_back_only_for_blocks():
    custom, plain, x0 = _maps(NoVmapGelu.apply)
    V = torch.randn(4, *x0.shape, dtype=torch.float64)
    one = jvp(custom, x0, V[0])  # its own jvp staticmethod: forward mode works
    assert not uses_reverse_products(custom)
    torch.testing.assert_close(one, jvp(plain, x0, V[0]), rtol=1e-12, atol=1e-13)
    with pytest.warns(SlowDerivativesWarning):
        block = jacobian_matmat(custom, x0, V)
    torch.testing.assert_close(block, jacobian_matmat(plain, x0, V), rtol=1e-12, atol=1e-13)


def test_diagnostics_of_such_a_step_equal_those_of_plain_ops():
    custom, plain, x0 = _maps(OldStyleGelu.apply)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SlowDerivativesWarning)
        got = jacobiscope.measure(custom, x0, loops=12, k=3, diagnostics=["spectral_norm", "lyapunov"])
    expected = jacobiscope.measure(plain, x0, loops=12, k=3, diagnostics=["spectral_norm", "lyapunov"])
    assert uses_reverse_products(custom)  # learnt through measure's copy of the map
    for a, b in zip(got.lyapunov["exponents"], expected.lyapunov["exponents"]):
        assert a == pytest.approx(b, abs=1e-10)
    for a, b in zip(got.spectral_norm, expected.spectral_norm):
        assert a["value"] == pytest.approx(b["value"], rel=1e-8)
    dense_norm = float(torch.linalg.matrix_norm(_dense(custom.step, x0), ord=2))
    assert got.spectral_norm[0]["value"] == pytest.approx(dense_norm, abs=got.spectral_norm[0]["tolerance"])
    assert got.spectral_norm[0]["value"] == pytest.approx(dense_norm, rel=1e-6)


def test_a_weight_penalty_through_torch_func_says_what_to_replace():
    custom, _, x0 = _maps(OldStyleGelu.apply)
    with pytest.raises(NotImplementedError, match="plain torch ops"):
        jvp(custom, x0, x0, composable=True)


def test_bloom_block_is_measured_as_with_plain_gelu(monkeypatch):
    """transformers' Bloom runs every MLP through GeLUFunction (old style): analyze measures it anyway, and its
    numbers are those of the same block with the GELU in plain torch ops."""
    from transformers.models.bloom import modeling_bloom

    torch.manual_seed(0)
    model = T.BloomModel(T.BloomConfig(hidden_size=16, n_layer=2, n_head=2, vocab_size=60)).eval()
    inputs = {"input_ids": torch.tensor([[3, 14, 15, 9, 26, 5]])}
    options = dict(loops=8, k=2, layers=[0], dtype=torch.float64, progress=False,
                   diagnostics=["spectral_norm", "lyapunov"])
    with warnings.catch_warnings():
        warnings.simplefilter("error", SlowDerivativesWarning)  # analyze says it in the report's notes instead
        report = jacobiscope.analyze(model, inputs, **options)
    assert sum("double backward" in note for note in report.notes) == 1
    monkeypatch.setattr(modeling_bloom.BloomGelu, "forward", lambda self, x: modeling_bloom.bloom_gelu_forward(x))
    reference = jacobiscope.analyze(model, inputs, **options)
    assert not any("double backward" in note for note in reference.notes)
    got, expected = report.rows[0], reference.rows[0]
    for a, b in zip(got.lyapunov["exponents"], expected.lyapunov["exponents"]):
        assert a == pytest.approx(b, abs=1e-9)
    assert got.spectral_norm[0]["value"] == pytest.approx(expected.spectral_norm[0]["value"], rel=1e-7)
