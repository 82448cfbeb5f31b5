"""jacobiscope/linalg/_linearized.py, _graph_split.py, _trace.py: jvps from a recorded graph split at the state.

References are independent of the recorded path: dense autograd Jacobians (torch.autograd.functional.jacobian) and
the eager dual-number jvp.
"""
import collections

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

import jacobiscope
from jacobiscope.linalg import _linearized, _trace
from jacobiscope.linalg._graph_split import split_linear
from jacobiscope.linalg._trace import trace_graph
from jacobiscope.linalg.operators import JacobianOperator, jvp

from conftest import autograd_jacobian
from hf_models import tiny_inputs, tiny_model


@pytest.fixture(autouse=True)
def fresh_graphs(monkeypatch):
    """Graphs are shared by modules of one structure, process-wide: each test starts with none."""
    monkeypatch.setattr(_trace, "_SHARED", collections.OrderedDict())


def block_map(family, layer=0, dtype=torch.float64):
    model = tiny_model(family).to(dtype)
    return jacobiscope.looped_block(model, tiny_inputs(family), layer).detached()


def dense(looped_map, x):
    return autograd_jacobian(looped_map.step, x)


@pytest.mark.parametrize("norm", ["layer_norm", "group_norm", "rms_norm"])
def test_a_fused_normalization_records_and_its_product_is_the_dense_jacobians(norm):
    """torch's fused norms give a tangent on the meta device under fake tensors (every LayerNorm model failed to
    record); recorded through their formulas, the product is J v of the fused forward."""
    generator = torch.Generator().manual_seed(0)
    weight = torch.rand(8, generator=generator, dtype=torch.float64) + 0.5
    bias = torch.randn(8, generator=generator, dtype=torch.float64)
    W = torch.randn(8, 8, generator=generator, dtype=torch.float64)
    step = {"layer_norm": lambda x: F.layer_norm(x @ W, (8,), weight, bias, 1e-5),
            "group_norm": lambda x: F.group_norm((x @ W).reshape(3, 8, 1), 2, weight, bias).reshape(3, 8),
            "rms_norm": lambda x: F.rms_norm(x @ W, (8,), weight, 1e-6)}[norm]
    x, v = torch.randn(3, 8, generator=generator, dtype=torch.float64), torch.randn(3, 8, generator=generator,
                                                                                   dtype=torch.float64)

    def product(x, v):
        return torch.func.jvp(lambda z: step(z) @ W, (x,), (v,))

    graph = trace_graph(product, x, torch.zeros_like(v))
    output, tangent = graph(x, v)
    J = autograd_jacobian(lambda z: step(z) @ W, x)
    assert torch.allclose(output, step(x) @ W, atol=1e-12)
    assert torch.allclose(tangent.reshape(-1), J @ v.reshape(-1), atol=1e-11)


def test_the_split_runs_the_forward_once_and_each_product_only_its_linear_part():
    """The constant graph holds the forward's work (tanh and its slope), the linear graph has the products only."""
    W = torch.randn(5, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(1))

    def product(x, v):
        return torch.func.jvp(lambda z: torch.tanh(z @ W) @ W, (x,), (v,))

    x = torch.randn(2, 5, dtype=torch.float64)
    constant, linear = split_linear(trace_graph(product, x, torch.ones_like(x)), vector_inputs=1)
    targets = [node.target for node in linear.graph.nodes if node.op == "call_function"]
    assert torch.ops.aten.tanh.default not in targets   # the forward's nonlinearity is not rerun
    assert torch.ops.aten.mm.default in targets
    saved = constant(x)
    J = autograd_jacobian(lambda z: torch.tanh(z @ W) @ W, x)
    for seed in range(3):
        v = torch.randn(2, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(10 + seed))
        output, tangent = linear(*saved, v)
        assert torch.allclose(output, torch.tanh(x @ W) @ W)
        assert torch.allclose(tangent.reshape(-1), J @ v.reshape(-1), atol=1e-12)


def test_an_in_place_write_into_a_value_computed_once_refuses_the_split():
    def product(x, v):
        saved = x.exp()
        return saved.add_(v)   # writes the vector into what the constant side computed

    graph = make_fx(product)(torch.ones(3), torch.ones(3))
    with pytest.raises(ValueError, match="writes into a value computed once per state"):
        split_linear(graph, vector_inputs=1)


@pytest.mark.parametrize("family", ["gpt2", "bert", "llama"])
def test_linearized_products_of_a_transformer_block_are_the_dense_jacobians(family):
    looped = block_map(family)
    x = looped.x0
    J = dense(looped, x)
    # Llama's RMSNorm computes in float32 whatever the model's dtype: products agree to float32 rounding there.
    atol = 1e-6 if family == "llama" else 1e-10
    operator = JacobianOperator(looped, x, linearize=True)
    V = torch.randn(3, *x.shape, dtype=x.dtype, generator=torch.Generator().manual_seed(2))
    assert torch.allclose(operator.matvec(V[0]).reshape(-1), J @ V[0].reshape(-1), atol=atol)
    assert operator.product_path == "linearized"
    block = operator.matmat(V).reshape(3, -1)
    assert torch.allclose(block, V.reshape(3, -1) @ J.T, atol=atol)
    # The next layer (same structure, its own weights) reuses the graph at once, with its own Jacobian.
    other = block_map(family, layer=1)
    other_operator = JacobianOperator(other, other.x0)
    product = other_operator.matvec(V[1])
    assert other_operator.product_path == "linearized"
    assert torch.allclose(product.reshape(-1), dense(other, other.x0) @ V[1].reshape(-1), atol=atol)


def test_the_automatic_policy_records_once_the_eager_products_have_cost_a_recording(monkeypatch):
    looped = block_map("gpt2")
    x, v = looped.x0, torch.randn(looped.x0.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    monkeypatch.setattr(_linearized, "trace_cost_seconds", lambda eager_seconds=0.0: 1e6)
    operator = JacobianOperator(looped, x)
    for _ in range(3):
        operator.matvec(v)
    assert operator.product_path == "eager"   # a recording that never pays
    monkeypatch.setattr(_linearized, "trace_cost_seconds", lambda eager_seconds=0.0: 0.0)
    first = operator.matvec(v)   # recorded, checked against the eager product, from the recording
    assert operator.product_path == "linearized"
    assert torch.equal(operator.matvec(v), first)   # one path from here on: the same rounding
    assert JacobianOperator(looped, x, linearize=False).matvec(v).equal(jvp(looped, x, v))


def test_a_step_with_control_flow_on_the_state_values_stays_eager_and_right():
    W = torch.randn(4, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(4))

    def step(x):
        return torch.tanh(x @ W) if float(x.detach().sum()) > 0 else torch.sin(x @ W)

    x = torch.ones(2, 4, dtype=torch.float64)
    operator = JacobianOperator(step, x, linearize=True)
    v = torch.randn(2, 4, dtype=torch.float64)
    assert torch.allclose(operator.matvec(v).reshape(-1), autograd_jacobian(step, x) @ v.reshape(-1))
    assert operator.product_path == "eager"


class Scaled(torch.nn.Module):
    """A constant that is neither a parameter nor a buffer: a recording bakes it in."""

    def __init__(self, scale):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4, dtype=torch.float64)
        self.scale = torch.tensor(scale, dtype=torch.float64)

    def forward(self, x):
        return torch.tanh(self.linear(x)) * self.scale


def test_a_shared_graph_with_another_modules_baked_constant_is_caught_and_dropped():
    torch.manual_seed(5)
    first, second = Scaled(1.0), Scaled(3.0)
    second.load_state_dict(first.state_dict())   # same weights: only the baked constant differs
    x = torch.randn(2, 4, dtype=torch.float64)
    v = torch.randn(2, 4, dtype=torch.float64)
    assert JacobianOperator(first, x, linearize=True).product_path == "eager"   # nothing run yet
    recorded = JacobianOperator(first, x, linearize=True)
    recorded.matvec(v)
    assert recorded.product_path == "linearized"
    operator = JacobianOperator(second, x)   # same structure: the graph is found...
    product = operator.matvec(v)
    assert operator.product_path == "eager"   # ...and refused: its F(x) is the first module's
    assert torch.allclose(product.reshape(-1), autograd_jacobian(second, x) @ v.reshape(-1))


def test_spectral_norm_and_eigenvalues_of_a_layernorm_block_equal_their_eager_values(monkeypatch):
    """What analyze's products run through: the same numbers as eager jvps, to rounding."""
    looped = block_map("bert")
    x = looped.x0
    monkeypatch.setattr(_linearized, "trace_cost_seconds", lambda eager_seconds=0.0: 1e6)
    eager_sigma = jacobiscope.spectral_norm(looped, x, tol=1e-12)
    eager_eigen = jacobiscope.jacobian_eigenvalues(looped, x, k=3, method="arnoldi")
    monkeypatch.setattr(_linearized, "trace_cost_seconds", lambda eager_seconds=0.0: 0.0)
    sigma = jacobiscope.spectral_norm(looped, x, tol=1e-12)
    eigen = jacobiscope.jacobian_eigenvalues(looped, x, k=3, method="arnoldi")
    J = dense(looped, x)
    assert float(sigma.value) == pytest.approx(float(torch.linalg.matrix_norm(J, 2)), rel=1e-10)
    assert float(sigma.value) == pytest.approx(float(eager_sigma.value), rel=1e-10)
    assert torch.allclose(eigen.values, eager_eigen.values, atol=1e-8)
    reference = torch.linalg.eigvals(J)
    top = reference[reference.abs().argsort(descending=True)][:3]
    assert torch.allclose(eigen.values.abs().sort().values, top.abs().sort().values, atol=1e-8)


def test_a_layernorm_models_lyapunov_loop_now_runs_traced_with_the_eager_exponents(monkeypatch):
    """Before, every LayerNorm block refused to trace (meta-device tangents) and ran eagerly at ~2x the cost."""
    from jacobiscope.dynamics import _tangent_policy

    looped = block_map("gpt2")
    monkeypatch.setattr(_tangent_policy, "trace_cost_seconds", lambda eager_loop_seconds=0.0: 0.0)
    automatic = jacobiscope.lyapunov_spectrum(looped, looped.x0, steps=12, k=3)
    eager = jacobiscope.lyapunov_spectrum(looped, looped.x0, steps=12, k=3, compile=False)
    assert automatic.meta["tangent_path"] == "linearized"
    assert torch.allclose(automatic.exponents, eager.exponents, atol=1e-10, rtol=0)
    monkeypatch.setattr(_tangent_policy, "split_graph", lambda *args, **kwargs: None)   # the vmap graph traces too
    traced = jacobiscope.lyapunov_spectrum(looped, looped.x0, steps=12, k=3)
    assert traced.meta["tangent_path"] == "traced"
    assert torch.allclose(traced.exponents, eager.exponents, atol=1e-10, rtol=0)


def test_measure_of_a_single_trajectory_module_map_shares_its_recording_across_calls(monkeypatch):
    """measure batches a one-trajectory map; a module map stays a module (weights as graph inputs), so the next
    call, on a map of the same structure, reuses the recording (a closure's recording served one call) and gives
    the eager numbers."""
    def spectral(seed):
        m = jacobiscope.systems.self_attention_map(5, 8, 2, seed=seed, dtype=torch.float64)
        row = jacobiscope.measure(m, m.x0, loops=6, diagnostics=["spectral_norm"], spectral_samples=2)
        return row.results["spectral_norm"].values

    monkeypatch.setattr(_linearized, "trace_cost_seconds", lambda eager_seconds=0.0: 1e6)
    eager = spectral(seed=4)
    monkeypatch.setattr(_linearized, "trace_cost_seconds", lambda eager_seconds=0.0: 0.0)
    spectral(seed=3)   # records
    recorded = [graph for cache in _trace._SHARED.values() for key, graph in cache.items()
                if isinstance(key, tuple) and key[0] == "linearized" and isinstance(graph, tuple)]
    assert len(recorded) == 1
    monkeypatch.setattr(_linearized, "trace_cost_seconds", lambda eager_seconds=0.0: 1e6)   # would never record
    eager_products = []
    original = _linearized.ProductPolicy._eager
    monkeypatch.setattr(_linearized.ProductPolicy, "_eager",
                        lambda self, v: eager_products.append(1) or original(self, v))
    again = spectral(seed=4)
    assert again == pytest.approx(eager, rel=1e-10)
    assert len(eager_products) == 1   # the check of the new module's first product; the rest from the recording
    assert len([1 for cache in _trace._SHARED.values() for key in cache
                if isinstance(key, tuple) and key[0] == "linearized"]) == 1   # the same recording, reused
