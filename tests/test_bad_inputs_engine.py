"""Bad inputs to the engine (maps, linalg, dynamics, measure): each gets jacobiscope's own exception with a message
naming the problem and the fix, or a flagged result; never a torch-internal traceback, never a silent number.

One case per bad input. Real maps only (plain callables and small nn.Modules), float64 where numbers matter.
"""
import math
import warnings

import numpy as np
import pytest
import torch
from torch import nn

import jacobiscope
from jacobiscope import LoopedMap, as_looped_map
from jacobiscope.dynamics.clusters import token_order_parameters
from jacobiscope.errors import (ArgumentError, JacobiscopeError, MemoryBudgetError, NonFiniteWarning, StateError,
                                StepError, StepOutputError)
from jacobiscope.linalg import (JacobianOperator, jacobian, jacobian_eigenvalues, jacobian_matmat, jvp,
                                spectral_norm, vjp)
from jacobiscope.dynamics.lyapunov import kaplan_yorke_dimension, lyapunov_spectrum
from jacobiscope.dynamics.energy import pseudo_energy
from jacobiscope.dynamics.oscillation import oscillation_measures

F64 = torch.float64


def smooth(x):
    """A smooth map with a well-defined, non-zero Jacobian everywhere."""
    return 0.5 * x + torch.sin(x)


def x3():
    return torch.tensor([0.1, 0.2, 0.3], dtype=F64)


def x30():
    return torch.linspace(-1.0, 1.0, 30, dtype=F64)


def batched(step=smooth):
    return LoopedMap(step, batch_dims=1)


def mixing(x):
    """Couples the rows of a batch: trajectory i sees the batch mean."""
    return x + x.mean(0)


def inplace(x):
    return x.mul_(0.5)


def detaching(x):
    return x.detach() * 2.0


def step_under_no_grad(x):
    with torch.no_grad():
        return 0.5 * x + torch.sin(x)


def measure(step, x0, **kwargs):
    return jacobiscope.measure(step, x0, loops=kwargs.pop("loops", 3), **kwargs)


# ------------------------------------------------------------------------------------------------ bad states
STATE_CASES = [
    pytest.param(lambda: spectral_norm(smooth, torch.zeros(0, dtype=F64)), StateError,
                 r"empty: shape \(0,\).*pass a state with at least one entry", id="empty-1d-spectral"),
    pytest.param(lambda: spectral_norm(batched(), torch.zeros(3, 0, dtype=F64)), StateError,
                 r"shape \(3, 0\).*no entries per trajectory.*pass a state", id="empty-3x0-batched"),
    pytest.param(lambda: lyapunov_spectrum(batched(), torch.zeros(0, 3, dtype=F64), steps=3), StateError,
                 r"shape \(0, 3\).*no trajectories", id="empty-batch-lyapunov"),
    pytest.param(lambda: jacobian_eigenvalues(smooth, torch.zeros(0, dtype=F64)), StateError, "is empty",
                 id="empty-eigenvalues"),
    pytest.param(lambda: jacobian(smooth, torch.zeros(0, dtype=F64)), StateError, "is empty", id="empty-jacobian"),
    pytest.param(lambda: LoopedMap(smooth).trajectory(torch.zeros(0, dtype=F64), 2), StateError, "is empty",
                 id="empty-trajectory"),
    pytest.param(lambda: measure(smooth, torch.zeros(0, dtype=F64)), StateError, "is empty", id="empty-measure"),
    pytest.param(lambda: spectral_norm(smooth, torch.tensor([1, 2, 3])), StateError,
                 r"floating dtype.*got torch.int64.*x.float\(\)", id="int-state"),
    pytest.param(lambda: spectral_norm(smooth, torch.tensor([True, False])), StateError,
                 "floating dtype.*torch.bool", id="bool-state"),
    pytest.param(lambda: spectral_norm(smooth, torch.tensor([1 + 1j])), StateError, "floating dtype.*complex",
                 id="complex-state"),
    pytest.param(lambda: spectral_norm(smooth, x3().half()), StateError,
                 r"spectral_norm needs float32 or float64, got torch.float16.*Pass dtype=torch.float32",
                 id="float16-spectral"),
    pytest.param(lambda: jacobian_eigenvalues(smooth, x3().bfloat16()), StateError,
                 "jacobian_eigenvalues needs float32 or float64, got torch.bfloat16", id="bfloat16-eigenvalues"),
    pytest.param(lambda: lyapunov_spectrum(smooth, x3(), dtype=torch.float16), StateError,
                 "lyapunov_spectrum needs float32 or float64", id="float16-dtype-lyapunov"),
    pytest.param(lambda: measure(smooth, x3().half()), StateError, "float32 or float64", id="float16-measure"),
    pytest.param(lambda: spectral_norm(smooth, [0.1, 0.2]), StateError, r"torch.Tensor, got list.*torch.as_tensor",
                 id="list-state"),
    pytest.param(lambda: spectral_norm(smooth, np.ones(3)), StateError, "torch.Tensor, got ndarray",
                 id="numpy-state"),
    pytest.param(lambda: lyapunov_spectrum(smooth, 0.3), StateError, "torch.Tensor, got float", id="float-state"),
    pytest.param(lambda: spectral_norm(smooth, torch.tensor([math.nan, 1.0], dtype=F64)), StateError,
                 "NaN or Inf", id="nan-state"),
    pytest.param(lambda: lyapunov_spectrum(smooth, torch.tensor([math.inf, 1.0], dtype=F64)), StateError,
                 "NaN or Inf", id="inf-state"),
    pytest.param(lambda: spectral_norm(smooth, x3().to_sparse()), StateError, r"dense tensor.*x.to_dense\(\)",
                 id="sparse-state"),
    pytest.param(lambda: spectral_norm(smooth, torch.empty(3, device="meta")), StateError,
                 "'meta' device.*pass a real tensor", id="meta-state"),
    pytest.param(lambda: spectral_norm(smooth), StateError, "No initial state: pass x0", id="no-state"),
    pytest.param(lambda: spectral_norm(smooth, x3(), batch_dims=2), StateError,
                 r"batch_dims=2, but the state has only 1 dimension", id="batch-dims-above-state-dims"),
    pytest.param(lambda: spectral_norm(LoopedMap(smooth, state_shape=(4,)), x3()), StateError,
                 r"Expected a state of shape .*4\], got \(3,\)", id="state-shape-mismatch"),
    # vectors of the products, and states of the dynamics helpers
    pytest.param(lambda: jvp(smooth, x3(), torch.ones(4)), StateError,
                 r"v must have shape \(3,\).*got \(4,\) — reshape it", id="jvp-shape"),
    pytest.param(lambda: vjp(smooth, x3(), torch.ones(4)), StateError, r"u must have shape \(3,\)", id="vjp-shape"),
    pytest.param(lambda: jacobian_matmat(smooth, x3(), torch.ones(3)), StateError, r"V must have shape \[k, 3\]",
                 id="matmat-shape"),
    pytest.param(lambda: jvp(smooth, torch.tensor([1, 2]), torch.tensor([1, 2])), StateError,
                 r"x must be a floating torch.Tensor.*x.float\(\)", id="jvp-int-state"),
    pytest.param(lambda: jvp(smooth, x3(), torch.ones(3, dtype=torch.complex128)), StateError,
                 r"v must be a real tensor", id="jvp-complex-vector"),
    pytest.param(lambda: JacobianOperator(smooth, x3()).matvec(torch.ones(4)), StateError,
                 r"v must have shape \(3,\)", id="operator-matvec-shape"),
    pytest.param(lambda: pseudo_energy([1.0, 2.0], torch.ones(2)), StateError, "states must be a torch.Tensor",
                 id="energy-list-states"),
    pytest.param(lambda: pseudo_energy(x3(), torch.ones(4)), StateError, "drive Y must have the shape of the states",
                 id="energy-drive-shape"),
]


@pytest.mark.parametrize("call, error, match", STATE_CASES)
def test_bad_states_are_refused(call, error, match):
    with pytest.raises(error, match=match):
        call()


# ------------------------------------------------------------------------------------------------ bad arguments
ARGUMENT_CASES = [
    pytest.param(lambda: jacobian_eigenvalues(smooth, x3(), k=0), "k must be a positive int or None.*pass k=None",
                 id="eig-k-zero"),
    pytest.param(lambda: jacobian_eigenvalues(smooth, x3(), k=-1), "k must be a positive int", id="eig-k-negative"),
    pytest.param(lambda: jacobian_eigenvalues(smooth, x3(), k=4), "k=4 is larger than the state size D=3.*k<=3",
                 id="eig-k-above-size"),
    pytest.param(lambda: jacobian_eigenvalues(smooth, x3(), k=1.5), "k must be a positive int.*1.5",
                 id="eig-k-float"),
    pytest.param(lambda: jacobian_eigenvalues(smooth, x3(), k=True), "k must be a positive int.*True",
                 id="eig-k-bool"),
    pytest.param(lambda: jacobian_eigenvalues(smooth, x3(), method="arnoldi"), "pass k=",
                 id="eig-arnoldi-without-k"),
    pytest.param(lambda: lyapunov_spectrum(smooth, x3(), k=0), "k must be a positive int, got 0.*pass an int >= 1",
                 id="lyapunov-k-zero"),
    pytest.param(lambda: lyapunov_spectrum(smooth, x3(), k=4), "k=4 tangent vectors cannot exceed.*Use k<=3",
                 id="lyapunov-k-above-size"),
    pytest.param(lambda: lyapunov_spectrum(smooth, x3(), k=2.0), "k must be a positive int, got 2.0",
                 id="lyapunov-k-float"),
    pytest.param(lambda: lyapunov_spectrum(smooth, x3(), steps=0), "steps must be a positive int, got 0",
                 id="steps-zero"),
    pytest.param(lambda: lyapunov_spectrum(smooth, x3(), steps=-3), "steps must be a positive int, got -3",
                 id="steps-negative"),
    pytest.param(lambda: lyapunov_spectrum(smooth, x3(), steps=2.5), "steps must be a positive int, got 2.5",
                 id="steps-float"),
    pytest.param(lambda: lyapunov_spectrum(smooth, x3(), steps=True), "steps must be a positive int, got True",
                 id="steps-bool"),
    pytest.param(lambda: LoopedMap(smooth).trajectory(x3(), 0), "steps must be a positive int.*pass an int >= 1",
                 id="trajectory-steps-zero"),
    pytest.param(lambda: LoopedMap(smooth).trajectory(x3(), 2, every=0), "every must be a positive int",
                 id="trajectory-every-zero"),
    pytest.param(lambda: LoopedMap(smooth).trajectory(x3(), 2, on_nonfinite="boom"),
                 "on_nonfinite must be 'warn', 'raise' or 'ignore'", id="trajectory-on-nonfinite"),
    pytest.param(lambda: lyapunov_spectrum(smooth, x3(), transient=-1), "transient must be a non-negative int",
                 id="transient-negative"),
    pytest.param(lambda: lyapunov_spectrum(smooth, x3(), reorth_every=0), "reorth_every must be a positive int",
                 id="reorth-every-zero"),
    pytest.param(lambda: spectral_norm(smooth, x3(), tol=-1.0), r"tol must be a finite number >= 0, got -1.0.*tol=",
                 id="spectral-tol-negative"),
    pytest.param(lambda: spectral_norm(smooth, x3(), tol=math.nan), "tol must be a finite number >= 0, got nan",
                 id="spectral-tol-nan"),
    pytest.param(lambda: spectral_norm(smooth, x3(), tol="1e-3"), "tol must be a finite number", id="spectral-tol-str"),
    pytest.param(lambda: jacobian_eigenvalues(smooth, x30(), k=2, method="arnoldi", tol=-1e-6),
                 "tol must be a finite number >= 0", id="eig-tol-negative"),
    pytest.param(lambda: jacobian_eigenvalues(smooth, x30(), k=2, method="arnoldi", tol=math.nan),
                 "tol must be a finite number >= 0, got nan", id="eig-tol-nan"),
    pytest.param(lambda: spectral_norm(smooth, x3(), max_iter=0), "max_iter must be a positive int",
                 id="max-iter-zero"),
    pytest.param(lambda: spectral_norm(smooth, x3(), max_iter=True), "max_iter must be a positive int, got True",
                 id="max-iter-bool"),
    pytest.param(lambda: jacobian_eigenvalues(smooth, x30(), k=2, method="arnoldi", max_restarts=-1),
                 "max_restarts must be a non-negative int.*pass an int >= 0", id="max-restarts-negative"),
    pytest.param(lambda: jacobian_eigenvalues(smooth, x30(), k=2, method="arnoldi", max_restarts=1.5),
                 "max_restarts must be a non-negative int", id="max-restarts-float"),
    pytest.param(lambda: jacobian_eigenvalues(smooth, x30(), k=2, method="arnoldi", krylov_dim=0),
                 "krylov_dim must be None or a positive int.*krylov_dim=None", id="krylov-dim-zero"),
    pytest.param(lambda: jacobian_eigenvalues(smooth, x30(), k=2, method="arnoldi", krylov_dim=2),
                 "krylov_dim=2 must exceed k=2.*pass krylov_dim=22", id="krylov-dim-not-above-k"),
    pytest.param(lambda: jacobian_eigenvalues(smooth, x3(), k=1, dense_limit=-1),
                 "dense_limit must be a non-negative int", id="dense-limit-negative"),
    pytest.param(lambda: spectral_norm(smooth, x3(), seed="a"), "seed must be an int, got 'a'.*seed=0",
                 id="seed-str-spectral"),
    pytest.param(lambda: spectral_norm(smooth, x3(), seed=None), "seed must be an int, got None",
                 id="seed-none-spectral"),
    pytest.param(lambda: jacobian_eigenvalues(smooth, x30(), k=2, method="arnoldi", seed=0.5),
                 "seed must be an int, got 0.5", id="seed-float-eig"),
    pytest.param(lambda: lyapunov_spectrum(smooth, x3(), seed=True), "seed must be an int, got True",
                 id="seed-bool-lyapunov"),
    pytest.param(lambda: measure(smooth, x3(), seed="x"), "seed must be an int, got 'x'", id="seed-str-measure"),
    pytest.param(lambda: spectral_norm(smooth, x3(), v0=torch.ones(5)),
                 r"v0 must have the state's shape \(3,\), got \(5,\).*v0=result.right_vector", id="v0-shape"),
    pytest.param(lambda: spectral_norm(smooth, x3(), v0=torch.zeros(3)), "v0 must be finite and non-zero.*v0=None",
                 id="v0-zero"),
    pytest.param(lambda: spectral_norm(smooth, x3(), v0=torch.full((3,), math.nan)), "v0 must be finite",
                 id="v0-nan"),
    pytest.param(lambda: spectral_norm(smooth, x3(), v0=[1.0, 0.0, 0.0]), "v0 must be a torch.Tensor",
                 id="v0-list"),
    pytest.param(lambda: lyapunov_spectrum(smooth, x3(), k=2, tangents=torch.ones(3)),
                 r"tangents must have shape \[2, 3\].*final_tangents", id="tangents-shape"),
    pytest.param(lambda: lyapunov_spectrum(smooth, x3(), k=1, tangents=torch.zeros(1, 3)),
                 "linearly independent", id="tangents-zero"),
    pytest.param(lambda: lyapunov_spectrum(smooth, x3(), k=2, tangents=torch.ones(2, 3)),
                 "k=2 linearly independent vectors", id="tangents-dependent"),
    pytest.param(lambda: lyapunov_spectrum(smooth, x3(), tangents=torch.full((1, 3), math.nan)),
                 "tangents contain NaN or Inf", id="tangents-nan"),
    pytest.param(lambda: lyapunov_spectrum(smooth, x3(), tangents=torch.ones(1, 3, dtype=torch.complex128)),
                 "tangents must be real", id="tangents-complex"),
    pytest.param(lambda: lyapunov_spectrum(smooth, x3(), method="two_trajectory", perturbation=0.0),
                 "perturbation must be a finite number > 0, got 0.0", id="perturbation-zero"),
    pytest.param(lambda: lyapunov_spectrum(smooth, x3(), method="two_trajectory", perturbation=-1e-6),
                 "perturbation must be a finite number > 0", id="perturbation-negative"),
    pytest.param(lambda: lyapunov_spectrum(smooth, x3(), method="two_trajectory", perturbation=math.nan),
                 "perturbation must be a finite number > 0, got nan", id="perturbation-nan"),
    pytest.param(lambda: lyapunov_spectrum(smooth, x3(), k=2, method="two_trajectory"),
                 "largest exponent only: use k=1", id="two-trajectory-k2"),
    pytest.param(lambda: lyapunov_spectrum(smooth, x3(), k=2, chunk_size=0),
                 "chunk_size must be None or a positive int, got 0", id="lyapunov-chunk-size-zero"),
    pytest.param(lambda: jacobian(smooth, x3(), chunk_size=-1), "chunk_size must be a positive int, got -1",
                 id="jacobian-chunk-size-negative"),
    pytest.param(lambda: jacobian_matmat(smooth, x3(), torch.eye(3, dtype=F64), chunk_size=0),
                 "chunk_size must be None or a positive int", id="matmat-chunk-size-zero"),
    pytest.param(lambda: jacobian(smooth, x3(), max_bytes=-1), "max_bytes must be a number of bytes >= 0",
                 id="max-bytes-negative"),
    pytest.param(lambda: jacobian(smooth, x3(), max_bytes="1GB"), "max_bytes must be a number of bytes.*'1GB'",
                 id="max-bytes-str"),
    pytest.param(lambda: lyapunov_spectrum(smooth, x3(), dtype="float64"),
                 "dtype must be a floating torch.dtype, got 'float64' — pass dtype=torch.float64",
                 id="dtype-str-lyapunov"),
    pytest.param(lambda: lyapunov_spectrum(smooth, x3(), dtype=torch.int64), "dtype must be a floating torch.dtype",
                 id="dtype-int-lyapunov"),
    pytest.param(lambda: LoopedMap(smooth).to("float64"), "dtype must be a floating torch.dtype.*torch.float64",
                 id="to-dtype-str"),
    pytest.param(lambda: LoopedMap(smooth).to(device="nope"), "device must be a torch.device.*device='cpu'",
                 id="to-device-bad"),
    pytest.param(lambda: LoopedMap(smooth).power(0), "power needs a positive int", id="power-zero"),
    pytest.param(lambda: spectral_norm(smooth, x3(), method="svd"), "method must be 'lanczos' or 'power'",
                 id="spectral-method"),
    pytest.param(lambda: jacobian_eigenvalues(smooth, x3(), method="qr"), "method must be 'auto', 'dense' or 'arnoldi'",
                 id="eig-method"),
    pytest.param(lambda: jacobian(smooth, x3(), method="x"), "method must be 'rev' or 'fwd'", id="jacobian-method"),
    pytest.param(lambda: lyapunov_spectrum(smooth, x3(), method="x"), "method must be 'qr' or 'two_trajectory'",
                 id="lyapunov-method"),
    pytest.param(lambda: lyapunov_spectrum(smooth, x3(), method="two-trajectory"),
                 r"got 'two-trajectory' \(did you mean 'two_trajectory'\?\) — pass one of them",
                 id="lyapunov-method-misspelt"),
    pytest.param(lambda: spectral_norm(smooth, x3(), method=["power"]), r"method must be 'lanczos' or 'power', got "
                 r"\['power'\] — pass one of them", id="spectral-method-list"),
    pytest.param(lambda: LoopedMap(smooth, batch_dims=-1), "batch_dims must be a non-negative int.*pass 0",
                 id="batch-dims-negative"),
    pytest.param(lambda: spectral_norm(smooth, x3(), batch_dims=True), "batch_dims must be a non-negative int, got True",
                 id="batch-dims-bool"),
    pytest.param(lambda: LoopedMap(smooth, batch_dims=1.0), "batch_dims must be a non-negative int, got 1.0",
                 id="batch-dims-float"),
    pytest.param(lambda: as_looped_map(LoopedMap(smooth), batch_dims=-2), "batch_dims must be a non-negative int",
                 id="as-looped-map-batch-dims"),
    pytest.param(lambda: LoopedMap(smooth, state_shape="abc"), r"state_shape must be a tuple.*state_shape=\(81, 128\)",
                 id="state-shape-str"),
    pytest.param(lambda: LoopedMap(smooth, state_shape=(-1,)), "state_shape must be a tuple of non-negative ints",
                 id="state-shape-negative"),
    # measure
    pytest.param(lambda: measure(smooth, x3(), loops=0), "loops must be a positive int, got 0", id="measure-loops-0"),
    pytest.param(lambda: measure(smooth, x3(), loops=-1), "loops must be a positive int", id="measure-loops-negative"),
    pytest.param(lambda: measure(smooth, x3(), loops=2.0), "loops must be a positive int, got 2.0",
                 id="measure-loops-float"),
    pytest.param(lambda: measure(smooth, x3(), diagnostics=[]), r"diagnostics=\[\] selects nothing.*pass None",
                 id="measure-diagnostics-empty"),
    pytest.param(lambda: measure(smooth, x3(), diagnostics=["nope"]), r"Unknown diagnostics \['nope'\]; choose from",
                 id="measure-diagnostics-unknown"),
    pytest.param(lambda: measure(smooth, x3(), diagnostics=3), "diagnostics must be None, a name or a list of names",
                 id="measure-diagnostics-int"),
    pytest.param(lambda: measure(smooth, x3(), diagnostics=[None]), "diagnostics must be None, a name or a list",
                 id="measure-diagnostics-none-item"),
    pytest.param(lambda: measure(smooth, x3(), k=0), "k must be a positive int, got 0", id="measure-k-zero"),
    pytest.param(lambda: measure(smooth, x3(), eigen_k=0), "eigen_k must be a positive int, got 0",
                 id="measure-eigen-k-zero"),
    pytest.param(lambda: measure(smooth, x3(), spectral_samples=0), "spectral_samples must be a positive int",
                 id="measure-spectral-samples-zero"),
    pytest.param(lambda: measure(smooth, x3(), eigen_restarts=-1), "eigen_restarts must be a non-negative int",
                 id="measure-eigen-restarts-negative"),
    pytest.param(lambda: measure(smooth, x3(), options="x"), "options must be a dict.*options=",
                 id="measure-options-str"),
    pytest.param(lambda: measure(smooth, x3(), dtype="float64"), "dtype must be a floating torch.dtype",
                 id="measure-dtype-str"),
    pytest.param(lambda: measure(batched(), torch.rand(2, 3, dtype=F64)), r"one trajectory, got a batch of 2.*x0\[i:i\+1\]",
                 id="measure-batch-of-two"),
    pytest.param(lambda: measure(LoopedMap(smooth, batch_dims=2), torch.rand(1, 1, 3, dtype=F64)),
                 "at most one batch dimension", id="measure-batch-dims-2"),
    pytest.param(lambda: pseudo_energy(x3(), x3(), batch_dims=-1), r"batch_dims must be an int in \[0, 1\]",
                 id="energy-batch-dims-negative"),
    pytest.param(lambda: pseudo_energy(x3(), x3(), batch_dims=5), r"batch_dims must be an int in \[0, 1\].*got 5",
                 id="energy-batch-dims-too-large"),
    pytest.param(lambda: oscillation_measures(torch.zeros(0, dtype=torch.complex64)),
                 "at least one eigenvalue", id="oscillation-empty"),
    pytest.param(lambda: oscillation_measures("abc"), "eigenvalues must be a tensor of numbers",
                 id="oscillation-str"),
    pytest.param(lambda: oscillation_measures(torch.tensor([1 + 1j]), imag_tol=-1),
                 "imag_tol must be a finite number >= 0", id="oscillation-imag-tol-negative"),
    pytest.param(lambda: kaplan_yorke_dimension(torch.zeros(0)), "at least one exponent",
                 id="kaplan-yorke-empty"),
]


@pytest.mark.parametrize("call, match", ARGUMENT_CASES)
def test_bad_arguments_are_refused(call, match):
    with pytest.raises(ArgumentError, match=match):
        call()


def test_dense_jacobians_over_the_memory_budget_name_the_bytes_and_the_way_out():
    with pytest.raises(MemoryBudgetError, match=r"3.0 GiB, over the budget of 1.0 GiB.*max_bytes=3200000000") as info:
        jacobian(smooth, torch.zeros(20000, dtype=F64))
    assert (info.value.required_bytes, info.value.budget_bytes) == (3_200_000_000, 1 << 30)
    with pytest.raises(MemoryBudgetError, match="jacobian_eigenvalues.*matrix-free"):
        jacobian_eigenvalues(smooth, torch.zeros(20000, dtype=F64))  # k=None: all eigenvalues, dense


# ------------------------------------------------------------------------------------------------ bad steps
def raising(x):
    return 1 / 0


STEP_CASES = [
    pytest.param(lambda x: (x, x), StepOutputError, r"returned a tuple of 2 items.*lambda x: f\(x\)\[0\]",
                 id="returns-tuple"),
    pytest.param(lambda x: [x], StepOutputError, "returned a list of 1 items", id="returns-list"),
    pytest.param(lambda x: None, StepOutputError, "returned NoneType; it must return a torch.Tensor",
                 id="returns-none"),
    pytest.param(lambda x: x.numpy() * 2, StepOutputError, "returned ndarray", id="returns-numpy"),
    pytest.param(lambda x: x[:2], StepOutputError, r"changed the state's shape: expected \(3,\), got \(2,\)",
                 id="returns-wrong-shape"),
    pytest.param(lambda x: x + torch.zeros(2, 3, dtype=F64), StepOutputError, r"expected \(3,\), got \(2, 3\)",
                 id="returns-broadcast-shape"),
    pytest.param(lambda x: x.sum(), StepOutputError, r"got \(\)", id="returns-scalar"),
    pytest.param(lambda x: x.float(), StepOutputError, "returned torch.float32 for a torch.float64 state",
                 id="returns-other-dtype"),
    pytest.param(lambda x: x.long(), StepOutputError, "returned torch.int64", id="returns-int"),
    pytest.param(lambda x: x.to("meta"), StepOutputError, "moved the state from cpu to meta; keep it on one device",
                 id="returns-other-device"),
    pytest.param(raising, StepError, r"raised ZeroDivisionError \(loop 1\) on a state of shape \(3,\).*fix the step",
                 id="raises"),
    pytest.param(lambda x, y: x, StepError, "raised TypeError.*missing 1 required positional argument",
                 id="wrong-signature"),
    pytest.param(3, StepError, "callable or an nn.Module as its step, got int — pass a function", id="not-callable"),
    pytest.param(None, StepError, "got NoneType", id="step-none"),
    pytest.param(LoopedMap(smooth), None, None, id="looped-map-of-looped-map"),  # accepted: used as is
]


@pytest.mark.parametrize("step, error, match", STEP_CASES)
@pytest.mark.parametrize("entry", ["spectral_norm", "lyapunov_spectrum", "trajectory", "measure"])
def test_bad_steps_are_named_at_every_entry_point(step, error, match, entry):
    def call():
        if entry == "measure":  # a one-trajectory map gets measure's batch wrapper, which must not hide the error
            return torch.tensor(jacobiscope.measure(step, x3(), loops=3, diagnostics=["lyapunov"]).lyapunov[
                "exponents"])
        if entry == "spectral_norm":
            return spectral_norm(step, x3()).value
        if entry == "lyapunov_spectrum":
            return lyapunov_spectrum(step, x3(), steps=3).exponents
        return as_looped_map(step).trajectory(x3(), 2)

    if error is None:
        assert torch.isfinite(call()).all()
        return
    with pytest.raises(error, match=match) as info:
        call()
    assert isinstance(info.value, JacobiscopeError)


def test_a_raising_step_keeps_its_own_exception_as_the_cause():
    with pytest.raises(StepError) as info:
        spectral_norm(raising, x3())
    assert isinstance(info.value.__cause__, ZeroDivisionError)


def test_a_looped_map_cannot_wrap_a_looped_map():
    with pytest.raises(StepError, match=r"already a LoopedMap — use it directly.*as_looped_map"):
        LoopedMap(LoopedMap(smooth))


def test_a_step_that_overflows_is_flagged_not_silent():
    with pytest.warns(NonFiniteWarning, match="NaN/Inf"):
        value = spectral_norm(lambda x: x * math.nan, x3()).value
    assert math.isnan(float(value))


# ------------------------------------------------------------------------------------------------ in-place steps
@pytest.mark.parametrize("run", [
    pytest.param(lambda m, x: m.trajectory(x, 3), id="trajectory"),
    pytest.param(lambda m, x: spectral_norm(m, x), id="spectral_norm"),
    pytest.param(lambda m, x: lyapunov_spectrum(m, x, steps=5), id="lyapunov_spectrum"),
    pytest.param(lambda m, x: jacobian_eigenvalues(m, x), id="jacobian_eigenvalues"),
    pytest.param(lambda m, x: jacobian(m, x), id="jacobian"),
    pytest.param(lambda m, x: jacobiscope.measure(m, x, loops=3), id="measure"),
])
def test_an_in_place_step_is_refused_and_the_callers_state_is_untouched(run):
    x0 = x3()
    with pytest.raises(StepError, match=r"modified its input state in place.*return a new tensor"):
        run(LoopedMap(inplace), x0)
    assert torch.equal(x0, x3())


@pytest.mark.parametrize("step", [
    pytest.param(lambda x: x.data.mul_(0.5), id="through-.data"),  # bypasses the version counter
    pytest.param(lambda x: (x.clamp_(max=0.25), x + 1)[1], id="in-place-then-new-tensor"),
    pytest.param(nn.Sequential(nn.ReLU(inplace=True), nn.Linear(3, 3).double()), id="relu-inplace-on-input"),
])
def test_in_place_variants_are_caught(step):
    x0 = x3()
    with pytest.raises(StepError, match="in place"):
        LoopedMap(step).trajectory(x0, 2)
    assert torch.equal(x0, x3())


def test_steps_that_return_their_input_unchanged_are_still_fine():
    # The identity and a transpose view return (a view of) their input without modifying it: legitimate maps.
    assert torch.equal(LoopedMap(lambda x: x).trajectory(x3(), 2)[-1], x3())
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=F64)
    assert float(spectral_norm(lambda s: s.t(), x).value) == pytest.approx(1.0)
    layer = nn.Sequential(nn.Linear(3, 3), nn.ReLU(inplace=True)).double()  # in place on an intermediate: fine
    assert torch.isfinite(spectral_norm(layer, x3()).value)


# ------------------------------------------------------------------------------------------------ detaching steps
@pytest.mark.parametrize("run", [
    pytest.param(lambda s: spectral_norm(s, x3()), id="spectral_norm"),
    pytest.param(lambda s: spectral_norm(s, 100 * x3().float()), id="spectral_norm-float32"),
    pytest.param(lambda s: jacobian_eigenvalues(s, x3()), id="eigenvalues-dense"),
    pytest.param(lambda s: jacobian_eigenvalues(s, x3(), k=1, method="arnoldi"), id="eigenvalues-arnoldi"),
    pytest.param(lambda s: lyapunov_spectrum(s, x3(), steps=5), id="lyapunov_spectrum"),
    pytest.param(lambda s: jacobian(s, x3(), method="fwd"), id="jacobian-fwd"),
    pytest.param(lambda s: jacobiscope.measure(s, x3(), loops=3), id="measure"),
])
def test_a_step_that_detaches_the_state_is_refused(run):
    with pytest.raises(StepError, match=r"cuts the autograd graph.*Jacobian-vector product is exactly zero.*detach"):
        run(detaching)


@pytest.mark.parametrize("step", [
    pytest.param(lambda x: torch.from_numpy(x.numpy() * 2), id="numpy-round-trip"),
    pytest.param(lambda x: x * 0 + x[0].item(), id="item"),
    pytest.param(lambda x: torch.tensor(x.tolist(), dtype=F64) * 2, id="torch.tensor-copy"),
])
def test_other_ways_of_leaving_autograd_are_refused(step):
    with pytest.raises(StepError, match="cuts the autograd graph"):
        spectral_norm(step, x3())


@pytest.mark.parametrize("run", [
    pytest.param(lambda: spectral_norm(step_under_no_grad, x3()), id="spectral_norm"),
    pytest.param(lambda: jacobian(step_under_no_grad, x3()), id="jacobian-rev"),
    pytest.param(lambda: jacobian_eigenvalues(step_under_no_grad, x3()), id="eigenvalues-dense"),
])
def test_a_step_under_no_grad_is_refused_where_reverse_mode_is_used(run):
    # Forward AD runs through no_grad, reverse mode does not: vjp-based results would read 0.
    with pytest.raises(StepError, match=r"reverse-mode and forward-mode derivatives.*disagree.*no_grad"):
        run()


def test_a_step_under_no_grad_still_works_where_only_jvps_are_used():
    exponent = lyapunov_spectrum(step_under_no_grad, torch.zeros(3, dtype=F64), steps=5).exponents
    assert float(exponent[0]) == pytest.approx(math.log(1.5), abs=1e-12)  # J = 0.5 + cos(0) at the fixed point 0


def test_dropout_in_training_mode_is_refused_for_reverse_products():
    torch.manual_seed(0)  # the masks come from the global generator; 64 entries make equal masks impossible
    with pytest.warns(RuntimeWarning, match="dropout"):
        m = LoopedMap(nn.Dropout(0.5))
    with pytest.raises(StepError, match=r"is random \(dropout in training mode\).*model.eval\(\)"):
        spectral_norm(m, torch.rand(64, dtype=F64, generator=torch.Generator().manual_seed(0)))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_a_zero_derivative_at_a_critical_point_is_not_mistaken_for_a_detached_step(dtype):
    # The logistic map 4x(1 - x) has F'(0.5) = 0: its output moves at second order only.
    value = spectral_norm(lambda x: 4.0 * x * (1.0 - x), torch.full((3,), 0.5, dtype=dtype)).value
    assert float(value) == 0.0


def test_a_constant_step_keeps_its_zero_jacobian():
    # Genuinely constant maps are not "detached": their Jacobian is 0 and that is the answer.
    assert float(spectral_norm(lambda x: torch.ones_like(x), x3()).value) == 0.0
    assert torch.equal(jacobian(lambda x: x * 0 + 1, x3()), torch.zeros(3, 3, dtype=F64))
    assert torch.equal(jacobian_eigenvalues(lambda x: torch.ones_like(x), x3()).values.abs(), torch.zeros(3, dtype=F64))


# ------------------------------------------------------------------------------------------------ batch mixing
def random_batch(rows=3, size=2):
    return torch.rand(rows, size, dtype=F64, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("run", [
    pytest.param(lambda m: spectral_norm(m, random_batch()), id="spectral_norm"),
    pytest.param(lambda m: jacobian_eigenvalues(m, random_batch()), id="eigenvalues-dense"),
    pytest.param(lambda m: jacobian_eigenvalues(m, random_batch(size=4), k=1, method="arnoldi"),
                 id="eigenvalues-arnoldi"),
    pytest.param(lambda m: lyapunov_spectrum(m, random_batch(), steps=5), id="lyapunov-qr"),
    pytest.param(lambda m: lyapunov_spectrum(m, random_batch(), steps=5, method="two_trajectory"),
                 id="lyapunov-two-trajectory"),
    pytest.param(lambda m: jacobian(m, random_batch()), id="jacobian"),
])
def test_a_step_that_mixes_the_batch_is_refused(run):
    with pytest.raises(StepError, match=r"mixes the trajectories of the batch.*batch_dims=1 declares them independent"
                                        r".*pass one trajectory at a time"):
        run(LoopedMap(mixing, batch_dims=1))


def test_batch_norm_in_training_mode_mixes_the_batch():
    with pytest.warns(RuntimeWarning, match="BatchNorm1d is in training mode: every step updates its running"):
        looped = LoopedMap(nn.BatchNorm1d(4).double(), batch_dims=1)
    with pytest.raises(StepError, match="mixes the trajectories"):
        lyapunov_spectrum(looped, random_batch(5, 4), steps=3)


def test_independent_batched_maps_pass_the_mixing_check():
    m = LoopedMap(nn.Sequential(nn.Linear(4, 4), nn.Tanh()).double().requires_grad_(False), batch_dims=1)
    x = random_batch(5, 4)
    together = spectral_norm(m, x).value
    alone = torch.stack([spectral_norm(m.module, x[i]).value for i in range(5)])
    assert torch.allclose(together, alone, atol=1e-8)
    assert torch.isfinite(lyapunov_spectrum(LoopedMap(nn.BatchNorm1d(4).double().eval(), batch_dims=1),
                                            random_batch(5, 4), steps=3).exponents).all()


def test_measure_sees_one_trajectory_so_a_batch_of_one_is_measured_as_is():
    # One trajectory cannot be mixed with others: x + x.mean(0) on a batch of one is 2x, and measure says so.
    row = jacobiscope.measure(LoopedMap(mixing, batch_dims=1), torch.ones(1, 3, dtype=F64), loops=3,
                              diagnostics=["lyapunov"])
    assert row.lyapunov["exponents"][0] == pytest.approx(math.log(2.0))


# ------------------------------------------------------------------------------------------------ weight graphs
class _SavedBytes:
    """Live bytes held by autograd graphs (saved tensors) while a call runs, and their peak.

    Every tensor autograd saves for a backward passes through the pack hook; the wrapper's finalizer runs when the
    graph holding it is freed. So ``peak`` is the peak memory of the graphs recorded, precisely the cost of keeping
    "every product's autograd graph" when a map closes over weights that require grad.
    """

    def __init__(self):
        self.live = self.peak = 0

    def pack(self, tensor):
        tracker = self

        class Held:
            def __init__(self):
                self.tensor = tensor
                self.bytes = tensor.untyped_storage().nbytes()
                tracker.live += self.bytes
                tracker.peak = max(tracker.peak, tracker.live)

            def __del__(self):
                tracker.live -= self.bytes

        return Held()

    def run(self, call):
        with torch.autograd.graph.saved_tensors_hooks(self.pack, lambda held: held.tensor):
            return call()


def _mlp(grad: bool):
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(16, 256), nn.Tanh(), nn.Linear(256, 16)).double()
    return module.requires_grad_(grad)


@pytest.mark.parametrize("as_map", [
    pytest.param(lambda module: LoopedMap(module, batch_dims=1), id="module-map"),
    pytest.param(lambda module: LoopedMap(lambda x: x + 0.1 * module(x), batch_dims=1), id="closure-over-module"),
])
@pytest.mark.parametrize("run", [
    pytest.param(lambda m, x: jacobian_eigenvalues(m, x, k=2, method="arnoldi", tol=1e-8).values, id="arnoldi"),
    pytest.param(lambda m, x: lyapunov_spectrum(m, x, steps=20, k=3).exponents, id="lyapunov"),
    pytest.param(lambda m, x: jacobian(m, x, method="fwd"), id="jacobian-fwd"),
])
def test_weights_that_require_grad_record_no_graph_in_the_diagnostics(as_map, run):
    x = torch.randn(8, 16, dtype=F64, generator=torch.Generator().manual_seed(1))
    frozen, trained = _SavedBytes(), _SavedBytes()
    reference = frozen.run(lambda: run(as_map(_mlp(grad=False)), x))
    module = _mlp(grad=True)
    result = trained.run(lambda: run(as_map(module), x))
    # Before the fix the Arnoldi basis chained every jvp's graph: 134 MB here for a 64 KB Jacobian budget.
    assert trained.peak <= frozen.peak + 64 * 1024, (trained.peak, frozen.peak)
    assert result.grad_fn is None and not result.requires_grad
    assert torch.allclose(result, reference)
    assert all(p.grad is None for p in module.parameters())


def test_the_saved_bytes_probe_sees_a_recorded_graph():
    # The probe is not vacuous: a jvp in grad mode through weights that require grad does record one.
    module = _mlp(grad=True)
    probe = _SavedBytes()
    x = torch.randn(8, 16, dtype=F64)
    kept = probe.run(lambda: jvp(lambda s: s + 0.1 * module(s), x, torch.ones_like(x)))
    assert kept.grad_fn is not None and probe.live > 0


@pytest.mark.parametrize("run", [
    pytest.param(lambda m, x: spectral_norm(m, x), id="spectral_norm"),
    pytest.param(lambda m, x: jacobian_eigenvalues(m, x), id="eigenvalues-dense"),
])
def test_reverse_mode_diagnostics_return_results_without_a_graph(run):
    module = _mlp(grad=True)
    m = LoopedMap(lambda s: s + 0.1 * module(s), batch_dims=1)
    result = run(m, torch.randn(2, 16, dtype=F64, generator=torch.Generator().manual_seed(2)))
    tensors = [value for value in vars(result).values() if isinstance(value, torch.Tensor)]
    assert tensors and all(tensor.grad_fn is None for tensor in tensors)
    assert all(p.grad is None for p in module.parameters())


# ------------------------------------------------------------------------------------------------ kept as they were
def test_states_that_require_grad_are_measured_like_plain_ones():
    x = x3().requires_grad_()
    assert float(spectral_norm(smooth, x).value) == pytest.approx(float(spectral_norm(smooth, x3()).value))


def test_pseudo_energy_of_a_map_without_a_drive_says_how_to_give_one():
    with pytest.raises(AttributeError, match="exposes no drive.*Pass drive=..."):
        pseudo_energy(x3(), LoopedMap(smooth))


def test_clusters_of_an_empty_feature_dimension_are_refused():
    with pytest.raises(StateError, match="at least one token and one feature"):
        token_order_parameters(torch.zeros(3, 0))


def test_integer_eigenvalues_and_exponents_are_read_as_numbers():
    assert float(oscillation_measures(torch.tensor([2, -1])).spectral_radius) == 2.0
    assert float(kaplan_yorke_dimension(torch.tensor([1, -2]))) == pytest.approx(1.5)


def test_no_engine_error_escapes_as_a_bare_builtin():
    # Every check above raises a JacobiscopeError, which still subclasses the builtin a caller would catch.
    assert issubclass(StepError, TypeError) and issubclass(StepOutputError, StepError)
    assert issubclass(ArgumentError, ValueError) and issubclass(StateError, ValueError)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        spectral_norm(smooth, x3())  # a good call warns about nothing
