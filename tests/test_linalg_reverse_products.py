"""Steps with a custom autograd.Function that forward mode and torch.func cannot enter: products by double
backward, checked against dense reverse-mode Jacobians and against the same step written in plain torch ops."""
import math
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


class _GeluBlock(torch.nn.Module):
    def __init__(self, activation):
        super().__init__()
        torch.manual_seed(0)
        self.first = torch.nn.Linear(6, 6, dtype=torch.float64)
        self.second = torch.nn.Linear(6, 6, dtype=torch.float64)
        self.activation = activation

    def forward(self, x):
        return torch.tanh(self.second(self.activation(self.first(x)))) + 0.5 * x


def test_a_jacobian_penalty_through_such_a_step_has_the_plain_ops_gradient():
    """``composable=True`` (the training penalties): the double-backward product keeps its graph to the weights, so
    loss.backward() through ||J v||^2 gives the same weight gradients as the step in plain ops."""
    from jacobiscope.training import jacobian_spectral_penalty

    x = torch.randn(3, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    gradients = []
    for activation in (OldStyleGelu.apply, _gelu_tanh):
        block = _GeluBlock(activation)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SlowDerivativesWarning)
            penalty = jacobian_spectral_penalty(jacobiscope.LoopedMap(block), x, iterations=4, seed=0)
        penalty.penalty.backward()
        gradients.append((float(penalty.penalty.detach()), [p.grad.clone() for p in block.parameters()]))
    (custom_loss, custom_grads), (plain_loss, plain_grads) = gradients
    assert custom_loss == pytest.approx(plain_loss, rel=1e-12)
    assert all(float(g.abs().max()) > 0 for g in plain_grads)
    for got, expected in zip(custom_grads, plain_grads):
        torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)


def test_inside_torch_func_grad_the_error_names_loss_backward():
    block = _GeluBlock(OldStyleGelu.apply)
    looped = jacobiscope.LoopedMap(block)
    x = torch.randn(3, 6, dtype=torch.float64)
    params = {name: p.detach() for name, p in block.named_parameters()}

    def penalty(params):
        return jvp(looped.with_params(params), x, x, composable=True).square().sum()

    with pytest.raises(NotImplementedError, match=r"loss\.backward\(\)"):
        torch.func.grad(penalty)(params)


def test_spectral_reg_trainer_trains_bloom_with_the_jacobian_penalty(tmp_path, monkeypatch):
    """A real Trainer run on BLOOM (GeLUFunction inside) with the Jacobian penalty: its first logged penalty equals
    the same run's with the GELU in plain ops."""
    from transformers.models.bloom import modeling_bloom

    from jacobiscope.training import SpectralRegTrainer, SpectralRegTrainingArguments

    generator = torch.Generator().manual_seed(5)
    data = [{"input_ids": ids, "labels": ids} for ids in torch.randint(3, 60, (8, 8), generator=generator)]

    def first_penalty():
        torch.manual_seed(0)
        model = T.BloomForCausalLM(T.BloomConfig(hidden_size=16, n_layer=2, n_head=2, vocab_size=60))
        args = SpectralRegTrainingArguments(str(tmp_path), jacobian_reg_weight=1e-2, max_steps=2,
                                            per_device_train_batch_size=4, logging_steps=1, save_strategy="no",
                                            report_to=[], use_cpu=True, disable_tqdm=True, seed=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SlowDerivativesWarning)
            trainer = SpectralRegTrainer(model, args, train_dataset=data)
            trainer.train()
        return trainer.state.log_history[0]["jacobian_penalty"]

    custom = first_penalty()
    monkeypatch.setattr(modeling_bloom.BloomGelu, "forward", lambda self, x: modeling_bloom.bloom_gelu_forward(x))
    plain = first_penalty()
    assert math.isfinite(custom) and custom > 0
    assert custom == pytest.approx(plain, rel=1e-4)
