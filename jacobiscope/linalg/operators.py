"""Matrix-free Jacobian products of a looped map at a state: ``J v`` (jvp), ``J^T u`` (vjp), and blocks of them.

Vectors are shaped like the state, ``[*batch, *state]``; a block of ``k`` vectors is ``[k, *batch, *state]``.
The Jacobian of a batched map is block diagonal (trajectories are independent), so one product applies every
trajectory's own Jacobian to that trajectory's slice at once.
"""
from __future__ import annotations

import contextlib
import math
import weakref

import torch
from torch.autograd import forward_ad
from torch.func import vjp as _func_vjp, jvp as _func_jvp, vmap

from ..errors import StateError, StepError
from ..maps import LoopedMap, as_looped_map, check_independent_trajectories
from ._linearized import ProductPolicy
from ._reverse_products import (needs_reverse_products, reverse_jvp_block, reverse_vjp_function,
                                use_reverse_products, uses_reverse_products)

__all__ = ["JacobianOperator", "jvp", "vjp", "jacobian_matmat", "forward_ad_context", "linearize_reverse"]


@contextlib.contextmanager
def forward_ad_context():
    """Run forward-mode AD through ``scaled_dot_product_attention``.

    The fused SDPA kernels (flash / memory-efficient, CPU and CUDA) have no forward-AD formula; the math
    backend does. Outside jvp-based code nothing is changed.
    """
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:  # pragma: no cover - torch < 2.3
        yield
        return
    with sdpa_kernel([SDPBackend.MATH]):
        yield


def _translate_forward_ad_error(error: Exception, looped_map: LoopedMap) -> Exception:
    text = str(error)
    if "randomness" in text:
        return StepError(
            f"The step of '{looped_map.name}' draws random numbers (dropout in training mode?), so it has no "
            "well-defined Jacobian and vmap refuses it. Call model.eval() before building the map."
        )
    if "autograd.Function" in text:
        return NotImplementedError(
            f"A custom torch.autograd.Function inside '{looped_map.name}' has no forward-mode derivative (no jvp / "
            f"setup_context for functorch; bloom's GeLUFunction, yoso's kernels): {text.splitlines()[0][:200]}. "
            "Diagnostics and training penalties fall back to double backward for such steps, but not inside a "
            "torch.func transform (torch.func.grad over the weights): take the gradient with loss.backward(), or "
            "replace the Function by plain torch ops (many such models have a config switch for it)."
        )
    if "forward AD" in text or "forward-mode" in text:
        return NotImplementedError(
            f"Forward-mode AD (jvp) does not pass through an operation inside '{looped_map.name}': {text.splitlines()[0]}. "
            "Switch the model to eager attention (model.set_attn_implementation('eager')) and rebuild the map, "
            "or use the vjp-based methods (jacobian(..., method='rev'))."
        )
    return error


class JacobianOperator:
    """The Jacobian ``J = dF/dX`` of a looped map at one state, as a matrix-free operator.

    Example::

        >>> import torch, jacobiscope
        >>> A = torch.tensor([[0.5, 1.0], [0.0, 2.0]], dtype=torch.float64)
        >>> op = jacobiscope.JacobianOperator(lambda x: A @ x, torch.ones(2, dtype=torch.float64))
        >>> op.matvec(torch.tensor([0.0, 1.0], dtype=torch.float64))
        tensor([1., 2.], dtype=torch.float64)

    Signature: ``JacobianOperator(step, x, *, batch_dims=None, linearize=None, owner=None)``. ``step`` is a
    `LoopedMap` or a callable. ``linearize``: record the step's jvp once and split it at ``x`` so that each product
    runs only its part linear in the vector (``True``), never (``False``), or once the eager products have cost what
    a recording costs (``None``; see `jacobiscope.linalg._linearized`). ``owner`` keys recorded graphs (default: the
    map's module or function).

    Methods: ``matvec(v) = J v``; ``rmatvec(u) = J^T u``; ``matmat(V)`` and ``rmatmat(U)`` for blocks
    ``[k, *batch, *state]`` (vmapped, optional ``chunk_size``); ``output`` is ``F(x)``. The vjp's linearization is
    built once on first use and reused, so repeated ``rmatvec`` calls do not rerun the forward.
    """

    def __init__(self, step, x: torch.Tensor, *, batch_dims: int | None = None, linearize: bool | None = None,
                 owner=None):
        self.map = as_looped_map(step, batch_dims=batch_dims)
        self.x = x
        self._vjp_fn = None
        self._output = None
        if owner is None:
            owner = self.map.module if self.map.module is not None else self.map._function
        # jvps from a recorded graph split at x when that pays (`_linearized`): ~1.2 forwards each, not ~4.7
        self._products = ProductPolicy(self.map, x, owner=owner, linearize=linearize)

    @property
    def product_path(self) -> str:
        """How the jvps run now: ``"eager"`` or ``"linearized"`` (a recorded graph split at ``x``)."""
        return self._products.path

    @property
    def state_size(self) -> int:
        return self.map.state_size(self.x)

    @property
    def batch_shape(self) -> torch.Size:
        return self.map.batch_shape(self.x)

    @property
    def output(self) -> torch.Tensor:
        """``F(x)``."""
        if self._output is None:
            self._linearize_reverse()
        return self._output

    def _linearize_reverse(self):
        if self._vjp_fn is None:
            # The same (math) attention kernel as the jvps, so J and J^T are transposes of each other to rounding;
            # the fused kernels' backward differs from the math path at ~1e-8, which stalls Lanczos in float64.
            # torch.func.vjp differentiates with respect to x whatever the grad mode, so the caller's mode is kept:
            # under no_grad (the diagnostics) weights that require grad record no graph of their own.
            self._output, self._vjp_fn = linearize_reverse(self.map, self.x)

    def _check(self, v: torch.Tensor, name: str, block: bool) -> None:
        expected = self.x.shape
        got = v.shape[1:] if block else v.shape
        if got != expected:
            shape = f"[k, {', '.join(map(str, expected))}]" if block else str(tuple(expected))
            raise StateError(f"{name} must have shape {shape} (the state's shape), got {tuple(v.shape)}.")

    def matvec(self, v: torch.Tensor) -> torch.Tensor:
        """``J v``."""
        self._check(v, "v", block=False)
        return self._products.matvec(v.to(self.x.dtype))

    def rmatvec(self, u: torch.Tensor) -> torch.Tensor:
        """``J^T u``."""
        self._check(u, "u", block=False)
        self._linearize_reverse()
        with forward_ad_context():
            (result,) = self._vjp_fn(u.to(self._output.dtype))
        return result

    def matmat(self, V: torch.Tensor, *, chunk_size: int | None = None) -> torch.Tensor:
        """``J V`` for a block ``V`` of shape ``[k, *batch, *state]``."""
        self._check(V, "V", block=True)
        if V.shape[0] == 1 or self._products.path == "linearized" or self._products.mode is True:
            return self._products.matmat(V.to(self.x.dtype))  # one vector: dual numbers beat vmap when eager
        return jacobian_matmat(self.map, self.x, V, chunk_size=chunk_size)

    def rmatmat(self, U: torch.Tensor, *, chunk_size: int | None = None) -> torch.Tensor:
        """``J^T U`` for a block ``U`` of shape ``[k, *batch, *state]``."""
        self._check(U, "U", block=True)
        self._linearize_reverse()
        if uses_reverse_products(self.map):
            return self._vjp_fn(U.to(self._output.dtype))[0]
        chunk_size = chunk_size if chunk_size is not None else _fitting_chunk(self.map, self.x, U.shape[0])
        with forward_ad_context():
            return vmap(lambda u: self._vjp_fn(u)[0], chunk_size=chunk_size)(U)

    def __repr__(self) -> str:
        return f"JacobianOperator(map={self.map.name!r}, state_size={self.state_size}, batch={tuple(self.batch_shape)})"


def jvp(step, x: torch.Tensor, v: torch.Tensor, *, return_output: bool = False, composable: bool = False):
    """``J(x) v``: the Jacobian-vector product of one loop, by forward-mode AD (never forming ``J``).

    Example::

        >>> import torch, jacobiscope
        >>> jacobiscope.linalg.jvp(lambda x: x ** 2, torch.tensor([3.0]), torch.tensor([1.0]))
        tensor([6.])

    Returns ``J v`` shaped like the state, or ``(F(x), J v)`` with ``return_output=True``.

    Dual numbers (``torch.autograd.forward_ad``) are used directly: measured on a MiniLM layer they cost 4x a
    forward against 7x for ``torch.func.jvp``. Inside a ``torch.func`` transform (``composable=True``, e.g. to
    differentiate a Jacobian penalty with respect to the weights) ``torch.func.jvp`` is used instead. A step that
    forward mode cannot enter (a custom autograd.Function without jvp) is differentiated by double backward
    (`jacobiscope.linalg._reverse_products`); with ``composable=True`` its product keeps its graph to the weights.
    """
    looped_map = as_looped_map(step)
    _check_product_arguments(x, v, "v", block=False)
    v = v.to(x.dtype)
    if uses_reverse_products(looped_map):
        try:
            output, tangent = reverse_jvp_block(looped_map.step, x, v, differentiable=composable)
        except NotImplementedError as error:  # inside a torch.func transform: double backward cannot run there
            raise _translate_forward_ad_error(error, looped_map) from error
        return (output, tangent) if return_output else tangent
    try:
        with forward_ad_context():
            if composable:
                output, tangent = _func_jvp(looped_map.step, (x,), (v,))
            else:
                with forward_ad.dual_level():
                    dual_output = looped_map.step(forward_ad.make_dual(x, v))
                    output, tangent = forward_ad.unpack_dual(dual_output)
                    if tangent is None:  # the output does not depend on the state
                        tangent = torch.zeros_like(output)
    except (NotImplementedError, RuntimeError) as error:
        if not needs_reverse_products(error) or (composable and torch._C._are_functorch_transforms_active()):
            raise _translate_forward_ad_error(error, looped_map) from error
        use_reverse_products(looped_map)
        output, tangent = reverse_jvp_block(looped_map.step, x, v, differentiable=composable)
    return (output, tangent) if return_output else tangent


def jvp_function(step, x: torch.Tensor, v: torch.Tensor):
    """``(F(x), J v)`` composably (``torch.func.jvp``): the function that `_linearized` records."""
    return _func_jvp(step, (x,), (v,))


def vjp(step, x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """``J(x)^T u``: the vector-Jacobian product of one loop, by reverse-mode AD.

    Example::

        >>> import torch, jacobiscope
        >>> jacobiscope.linalg.vjp(lambda x: x.flip(0), torch.tensor([1.0, 2.0]), torch.tensor([1.0, 0.0]))
        tensor([0., 1.])
    """
    looped_map = as_looped_map(step)
    _check_product_arguments(x, u, "u", block=False)
    with torch.enable_grad():
        _, vjp_fn = linearize_reverse(looped_map, x)
        return vjp_fn(u.to(x.dtype))[0]


def linearize_reverse(looped_map: LoopedMap, x: torch.Tensor):
    """``(F(x), vjp_fn)``: ``torch.func.vjp`` of the step, or plain autograd where ``torch.func`` refuses it."""
    if not uses_reverse_products(looped_map):
        try:
            with forward_ad_context():
                return _func_vjp(looped_map.step, x)
        except (NotImplementedError, RuntimeError) as error:
            if not needs_reverse_products(error):
                raise
            use_reverse_products(looped_map)
    with forward_ad_context():
        return reverse_vjp_function(looped_map.step, x)


def jacobian_matmat(step, x: torch.Tensor, V: torch.Tensor, *, chunk_size: int | None = None, return_output: bool = False):
    """``J(x) V`` for a block of ``k`` tangent vectors ``V: [k, *batch, *state]``: ``k`` jvps under ``vmap``
    (``chunk_size`` at a time; None: all at once where they fit in memory, else as many as fit).

    Example::

        >>> import torch, jacobiscope
        >>> V = torch.eye(2).reshape(2, 2)
        >>> jacobiscope.linalg.jacobian_matmat(lambda x: 3 * x, torch.zeros(2), V)
        tensor([[3., 0.],
                [0., 3.]])

    With ``return_output=True`` also returns ``F(x)``: inside ``vmap`` the primal is computed once, so the
    step comes for free with the tangents.
    """
    looped_map = as_looped_map(step)
    _check_product_arguments(x, V, "V", block=True)
    if chunk_size is not None and (isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1):
        from ..errors import ArgumentError

        raise ArgumentError(f"chunk_size must be None or a positive int, got {chunk_size!r} — pass chunk_size=None "
                            "(all at once) or an int >= 1.")
    V = V.to(x.dtype)
    chunk_size = chunk_size if chunk_size is not None else _fitting_chunk(looped_map, x, V.shape[0])

    def one(v):
        return _func_jvp(looped_map.step, (x,), (v,))

    if not uses_reverse_products(looped_map):
        try:
            with forward_ad_context():
                outputs, tangents = vmap(one, chunk_size=chunk_size)(V)
            return (outputs[0], tangents) if return_output else tangents
        except (NotImplementedError, RuntimeError) as error:
            if not needs_reverse_products(error):
                raise _translate_forward_ad_error(error, looped_map) from error
            use_reverse_products(looped_map)
    with forward_ad_context():
        output, tangents = reverse_jvp_block(looped_map.step, x, V)
    return (output, tangents) if return_output else tangents


def _fitting_chunk(looped_map, x, count: int) -> int | None:
    """None (all ``count`` products in one vmap call) where they fit in memory at once, else how many do."""
    from ._product_memory import products_at_once

    fitting = products_at_once(looped_map, x, count)
    return None if fitting >= count else fitting


def _check_product_arguments(x, v, name: str, block: bool) -> None:
    """Shape and type checks of a product's state and vectors: cheap (no host sync), so the hot loops keep them.

    Without them a wrong shape surfaces as torch's "forward gradient that has a different size" from deep in
    forward-mode AD.
    """
    if not isinstance(x, torch.Tensor) or not x.dtype.is_floating_point:
        got = x.dtype if isinstance(x, torch.Tensor) else type(x).__name__
        raise StateError(f"x must be a floating torch.Tensor (the state), got {got} — pass x.float() or x.double().")
    if not isinstance(v, torch.Tensor):
        raise StateError(f"{name} must be a torch.Tensor shaped like the state, got {type(v).__name__} — wrap it "
                         "with torch.as_tensor(...).")
    got = tuple(v.shape[1:]) if block else tuple(v.shape)
    if (block and v.dim() == 0) or got != tuple(x.shape):
        shape = f"[k, {', '.join(map(str, x.shape))}]" if block else str(tuple(x.shape))
        raise StateError(f"{name} must have shape {shape} (the state's shape), got {tuple(v.shape)} — reshape it "
                         f"to {shape}.")
    if not (v.dtype.is_floating_point or v.dtype in (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)):
        raise StateError(f"{name} must be a real tensor, got {v.dtype} — pass {name}.real or a float tensor.")


def check_map_at(looped_map: LoopedMap, x: torch.Tensor, what: str, *, derivatives: bool = True,
                 reverse: bool = False) -> torch.Tensor:
    """The checks every diagnostic entry point runs once at its state ``x``; returns ``F(x)``.

    One step on a copy of ``x`` (shape, dtype, device of the output; no in-place modification; an exception of the
    step named with its state), for a batched map one more forward (trajectories independent), and with
    ``derivatives`` one jvp (the step does not cut the autograd graph), with ``reverse`` one vjp too (reverse mode
    agrees with forward mode: ``torch.no_grad()`` inside a step stops vjps but not jvps). Each is what a silently
    wrong number would otherwise cost: a repeated trajectory, per-row exponents of a coupled system, a spectral
    norm of 0.
    """
    out = looped_map.checked_step(x)
    check_independent_trajectories(looped_map, x, out, what)
    if derivatives and not _derivatives_checked(looped_map, x, reverse):
        check_state_dependence(looped_map, x, out, what, reverse=reverse)
        _remember_derivatives_checked(looped_map, x, reverse)
    return out


# Maps whose derivatives passed the checks (a jvp that moves, reverse = forward mode), per owner (held weakly) and
# call: a graph cut or a no_grad block is in the step's code, not in one state, so a Krylov solver called at many
# loops of one map (the spectral norm at three loops, then the eigenvalues) pays the jvp and vjp of the checks once.
_DERIVATIVES_CHECKED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _derivative_check_key(looped_map, x, reverse: bool):
    owner = looped_map.module if looped_map.module is not None else looped_map._function
    call = (type(looped_map), looped_map._power, looped_map.batch_dims, tuple(x.shape), x.dtype, x.device)
    return owner, call, reverse


def _derivatives_checked(looped_map, x, reverse: bool) -> bool:
    owner, call, reverse = _derivative_check_key(looped_map, x, reverse)
    try:
        passed = _DERIVATIVES_CHECKED.get(owner, ())
    except TypeError:  # an owner that cannot be weakly referenced: check every time
        return False
    return (call, reverse) in passed or (reverse is False and (call, True) in passed)


def _remember_derivatives_checked(looped_map, x, reverse: bool) -> None:
    owner, call, reverse = _derivative_check_key(looped_map, x, reverse)
    try:
        _DERIVATIVES_CHECKED.setdefault(owner, set()).add((call, reverse))
    except TypeError:
        pass


def check_state_dependence(looped_map: LoopedMap, x: torch.Tensor, out: torch.Tensor, what: str, *,
                           reverse: bool = False) -> None:
    """Raise `StepError` when the step's jvp is exactly zero although its output moves with the state.

    That is a step that cuts the autograd graph (``x.detach()``, ``x.item()``, a round trip through numpy or a
    ``torch.tensor(...)`` copy): every derivative would be 0 and, e.g., a spectral norm of 0 would look like a
    strongly contracting map. A genuinely constant (or piecewise-constant) step, or one at a critical point, keeps
    its zero Jacobian. One jvp, plus two forwards only when the jvp is zero.
    """
    generator = torch.Generator(device="cpu").manual_seed(0)
    direction = torch.randn(x.shape, generator=generator, dtype=torch.float64).to(device=x.device, dtype=x.dtype)
    direction = direction / direction.norm().clamp_min(torch.finfo(x.dtype).tiny)
    with torch.no_grad():
        tangent = jvp(looped_map, x, direction)  # numpy() / item() on a dual tensor drop the tangent silently
        if bool((tangent != 0).any()):  # NaN counts as non-zero: overflow is flagged by the solvers themselves
            if reverse:
                _check_reverse_matches_forward(looped_map, x, direction, tangent, what)
            return
        scale = math.sqrt(torch.finfo(x.dtype).eps) * max(1.0, float(x.detach().abs().max()))
        change = _output_change(looped_map, x, out, direction, scale)
        # A true zero derivative moves the output at second order (the logistic map at its critical point: 4x
        # the step for 2x the step) or not at all; a cut graph hides a first-order move (2x for 2x).
        # Changes within rounding of F(x) say nothing either way.
        floor = 64 * torch.finfo(x.dtype).eps * (1.0 + float(torch.nan_to_num(out.detach().abs(), posinf=0).max()))
        linear = change > floor and 1.5 <= _output_change(looped_map, x, out, direction, 2 * scale) / change <= 2.5
    if linear:
        raise StepError(
            f"{what}: the step of '{looped_map.name}' cuts the autograd graph — its output moves with the state "
            f"(by {change:.2e} for a step of {scale:.1e}) but its Jacobian-vector product is exactly zero, so every "
            "derivative would read 0. Remove .detach() / .item() / .numpy() / torch.tensor(x) / torch.no_grad() "
            "from the step and keep it in differentiable torch operations."
        )


def _output_change(looped_map, x, out, direction, scale) -> float:
    """``max |F(x + scale * direction) - F(x)|`` over the finite entries."""
    moved = looped_map.step(x.detach() + scale * direction)
    change = (moved - out.detach()).abs()
    return float(torch.where(torch.isfinite(change), change, torch.zeros_like(change)).max())


def _check_reverse_matches_forward(looped_map, x, v, jv, what: str) -> None:
    """The dot-product test ``<u, J v> = <J^T u, v>``: reverse mode must see the Jacobian forward mode sees.

    Forward-mode AD runs through ``torch.no_grad()`` blocks, reverse mode does not, so a step that computes under
    no_grad has a true jvp and a zero vjp: spectral_norm (Lanczos on ``J^T J``) and jacobian(method="rev") would
    read 0. One vjp.
    """
    generator = torch.Generator(device="cpu").manual_seed(1)
    u = torch.randn(x.shape, generator=generator, dtype=torch.float64).to(device=x.device, dtype=x.dtype)
    u = u / u.norm().clamp_min(torch.finfo(x.dtype).tiny)
    _, vjp_fn = linearize_reverse(looped_map, x.detach())
    (jtu,) = vjp_fn(u)
    forward, backward = float((u.double() * jv.double()).sum()), float((jtu.double() * v.double()).sum())
    scale = float(jv.norm()) + float(jtu.norm())
    if not (math.isfinite(forward) and math.isfinite(backward)):
        return  # overflow: the solvers flag it per trajectory
    if abs(forward - backward) > 1e-3 * scale:
        raise StepError(
            f"{what}: reverse-mode and forward-mode derivatives of the step of '{looped_map.name}' disagree "
            f"(<u, Jv> = {forward:.3e}, <J^T u, v> = {backward:.3e}) — the step hides part of its computation from "
            "backward (torch.no_grad() or .detach() on one path, a custom autograd.Function with an inconsistent "
            "backward) or is random (dropout in training mode). Remove the no_grad block (call model.eval() for "
            "dropout), or use the jvp-based calls (lyapunov_spectrum, jacobian(..., method='fwd'))."
        )
