import warnings

import pytest
import torch
from torch import nn

import jacobiscope
from jacobiscope import LoopedMap, NonFiniteStateError, NonFiniteWarning, StateError, StepOutputError


def test_callable_step_and_call_agree():
    m = LoopedMap(lambda x: 0.5 * x + 1.0)
    x = torch.tensor([2.0, 4.0])
    assert torch.equal(m(x), torch.tensor([2.0, 3.0]))
    assert torch.equal(m.step(x), m(x))


def test_module_parameters_are_passed_functionally_not_baked_in():
    linear = nn.Linear(3, 3, bias=False)
    m = LoopedMap(linear)
    x = torch.randn(3)
    before = m(x)
    with torch.no_grad():
        linear.weight.mul_(2.0)  # a live parameter update must be seen by the map
    assert torch.allclose(m(x), 2 * before)
    swapped = m.with_params({"weight": torch.eye(3)})
    assert torch.equal(swapped(x), x)
    assert torch.allclose(m(x), 2 * before)  # the original map is untouched


def test_gradients_flow_to_parameters_through_with_params():
    linear = nn.Linear(2, 2, bias=False)
    m = LoopedMap(linear)
    x = torch.tensor([1.0, 2.0])

    def loss(weight):
        return m.with_params({"weight": weight})(x).sum()

    grad = torch.func.grad(loss)(linear.weight.detach())
    assert torch.allclose(grad, x.expand(2, 2))  # d/dW sum(W x) = 1 x^T


def test_trajectory_every_and_initial():
    m = LoopedMap(lambda x: 2 * x)
    states = m.trajectory(torch.ones(3), steps=6, every=2)
    assert states.shape == (4, 3)
    assert torch.equal(states[:, 0], torch.tensor([1.0, 4.0, 16.0, 64.0]))
    no_initial = m.trajectory(torch.ones(3), steps=6, every=3, include_initial=False)
    assert torch.equal(no_initial[:, 0], torch.tensor([8.0, 64.0]))


def test_batched_trajectory_matches_individual_runs():
    m = jacobiscope.systems.henon_map(batch=4)
    batched = m.trajectory(steps=10)
    for b in range(4):
        single = jacobiscope.systems.henon_map().trajectory(m.x0[b], steps=10)
        assert torch.allclose(batched[:, b], single, atol=0, rtol=1e-15)


def test_to_float64_casts_module_and_leaves_original():
    m = jacobiscope.systems.self_attention_map(tokens=3, dim=4, heads=1)
    m64 = m.to(torch.float64)
    assert m64.x0.dtype == torch.float64 and m.x0.dtype == torch.float32
    assert next(m64.module.parameters()).dtype == torch.float64
    assert next(m.module.parameters()).dtype == torch.float32
    assert torch.allclose(m64(m64.x0).float(), m(m.x0), atol=1e-5)
    # the drive (a bound method) follows the copy
    assert m64.drive(m64.x0).dtype == torch.float64


def test_step_changing_shape_is_a_clear_error():
    m = LoopedMap(lambda x: x[:-1])
    with pytest.raises(StepOutputError, match=r"changed the state's shape: expected \(3,\), got \(2,\)"):
        m.trajectory(torch.ones(3), steps=2)


def test_step_returning_tuple_or_non_tensor_is_a_clear_error():
    with pytest.raises(StepOutputError, match=r"tuple of 2 items.*f\(x\)\[0\]"):
        LoopedMap(lambda x: (x, None)).trajectory(torch.ones(2), steps=1)
    with pytest.raises(StepOutputError, match="returned float"):
        LoopedMap(lambda x: 1.0).trajectory(torch.ones(2), steps=1)


def test_step_changing_dtype_is_a_clear_error():
    weight = torch.eye(2)
    m = LoopedMap(lambda x: (x.float() @ weight))
    with pytest.raises(StepOutputError, match="returned torch.float32 for a torch.float64 state"):
        m.trajectory(torch.ones(2, dtype=torch.float64), steps=1)


def test_integer_and_nan_initial_states_are_refused():
    m = LoopedMap(lambda x: x)
    with pytest.raises(StateError, match="floating dtype.*x.float\\(\\)"):
        m.trajectory(torch.ones(3, dtype=torch.long), steps=1)
    with pytest.raises(StateError, match="NaN or Inf \\(1 entries\\)"):
        m.trajectory(torch.tensor([1.0, float("nan")]), steps=1)
    with pytest.raises(StateError, match="No initial state"):
        m.trajectory(None, steps=1)


def test_state_shape_is_checked():
    m = LoopedMap(lambda x: x, state_shape=(2, 3), batch_dims=1)
    m.trajectory(torch.ones(5, 2, 3), steps=1)
    with pytest.raises(StateError, match=r"Expected a state of shape \[\*batch\(1 dims\), 2, 3\], got \(5, 3, 2\)"):
        m.trajectory(torch.ones(5, 3, 2), steps=1)


def test_nonfinite_trajectory_warns_with_step_or_raises():
    m = LoopedMap(lambda x: x * 1e150)  # 1e100 -> 1e250 -> inf: overflows at the second loop
    with pytest.warns(NonFiniteWarning, match="at loop 2"):
        states = m.trajectory(torch.tensor([1e100], dtype=torch.float64), steps=10)
    assert states.shape[0] == 3 and torch.isinf(states[-1]).all()
    with pytest.raises(NonFiniteStateError) as caught:
        m.trajectory(torch.tensor([1e100], dtype=torch.float64), steps=10, on_nonfinite="raise")
    assert caught.value.step == 2


def test_training_mode_dropout_warns():
    module = nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.1))
    with pytest.warns(RuntimeWarning, match="dropout p=0.1 in training mode"):
        LoopedMap(module)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        LoopedMap(module.eval())


def test_bad_constructor_arguments():
    with pytest.raises(TypeError, match="callable or an nn.Module"):
        LoopedMap(3)
    with pytest.raises(ValueError, match="batch_dims"):
        LoopedMap(lambda x: x, batch_dims=-1)
    with pytest.raises(ValueError, match="steps must be a positive int"):
        LoopedMap(lambda x: x).trajectory(torch.ones(1), steps=0)


def test_power_is_the_p_loop_map_and_its_jacobian_is_the_chain_product():
    torch.manual_seed(0)
    layer = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh()).double()
    m = jacobiscope.LoopedMap(layer, name="mlp")
    x = torch.randn(4, dtype=torch.float64)
    thrice = m.power(3)
    assert torch.allclose(thrice(x), m(m(m(x))), atol=0, rtol=0)
    assert thrice.name == "mlp^3" and thrice.meta["power"] == 3 and m(x).shape == x.shape  # the original is intact
    assert torch.equal(m.power(2).power(2)(x), m.power(4)(x))
    twice = m.power(2)
    dense = torch.autograd.functional.jacobian(twice.step, x)
    chain = torch.autograd.functional.jacobian(m.step, m(x)) @ torch.autograd.functional.jacobian(m.step, x)
    assert torch.allclose(dense, chain, atol=1e-12)
    matrix_free = jacobiscope.spectral_norm(twice, x, tol=1e-10).value  # jvps/vjps through both loops
    assert float(matrix_free) == pytest.approx(float(torch.linalg.matrix_norm(chain, ord=2)), rel=1e-8)
    # Copies keep the power: a cast, new weights.
    assert torch.allclose(twice.to(torch.float32)(x.float()), twice(x).float(), atol=1e-6)
    zeros = {name: torch.zeros_like(value) for name, value in m.params.items()}
    assert torch.equal(twice.with_params(zeros)(x), torch.zeros(4, dtype=torch.float64))
    with pytest.raises(jacobiscope.errors.ArgumentError, match="positive int"):
        m.power(0)
