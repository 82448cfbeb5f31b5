"""Jacobian products by plain reverse-mode autograd, for steps that forward mode and ``torch.func`` cannot enter.

A custom ``torch.autograd.Function`` written the old way (``forward(ctx, ...)`` without ``setup_context``, no
``jvp``) has a backward but no forward-mode derivative, and ``torch.func`` refuses it outright. transformers' Bloom
(its ``GeLUFunction``), YOSO, SEW-D and RecurrentGemma and many remote-code models carry one; a step that calls
autograd itself (``requires_grad_()``, as MRA's CPU fallback does) is refused by ``torch.func`` the same way. Its backward is still there, so
the products come from it:

- ``J^T u`` is one backward;
- ``J v`` is the double-backward trick: ``g(u) = J^T u`` is linear in ``u``, so ``J v = d<g(u), v>/du``, one more
  backward through the first one (exact, not a finite difference);
- a block ``J V`` replays that second backward once per column, batched (``is_grads_batched``) where torch can.

Example::

    >>> import torch
    >>> from jacobiscope.linalg._reverse_products import reverse_jvp_block
    >>> A = torch.tensor([[1.0, 2.0], [0.0, 3.0]], dtype=torch.float64)
    >>> output, JV = reverse_jvp_block(lambda x: A @ x, torch.ones(2, dtype=torch.float64),
    ...                                torch.eye(2, dtype=torch.float64))
    >>> JV.T.tolist()  # the columns J e_i
    [[1.0, 2.0], [0.0, 3.0]]

A step that needs these costs about three forwards per product instead of about two; `needs_reverse_products`
tells the errors that call for them from every other failure.
"""
from __future__ import annotations

import warnings

import torch

__all__ = ["DERIVATIVES_KEY", "REVERSE", "needs_reverse_products", "uses_reverse_products", "use_reverse_products",
           "reverse_jvp_block", "reverse_vjp_function"]

#: Where a map records how its derivatives are taken: ``looped.info.derivatives`` (``meta[DERIVATIVES_KEY]`` too).
DERIVATIVES_KEY = "derivatives"
REVERSE = "double backward (a custom autograd.Function without forward-mode support)"

_REFUSALS = ("must implement the jvp function", "must override the setup_context",
             "setup_context staticmethod", "autograd.Function with functorch")


def needs_reverse_products(error: BaseException) -> bool:
    """Whether ``error`` is forward mode or ``torch.func`` refusing a custom ``autograd.Function``."""
    text = str(error)
    if "You tried to vmap over" in text and "vmap support" in text:  # a new-style Function without a vmap rule
        return True
    if "requires_grad_()" in text and "functorch transform" in text:  # autograd APIs inside the step (MRA on CPU)
        return True
    return "autograd.Function" in text and any(refusal in text for refusal in _REFUSALS)


def uses_reverse_products(looped_map) -> bool:
    info = getattr(looped_map, "info", None)
    if info is not None and hasattr(info, DERIVATIVES_KEY):
        return getattr(info, DERIVATIVES_KEY) == REVERSE
    meta = getattr(looped_map, "meta", None)  # a map-like object of the user's, with a plain dict
    return isinstance(meta, dict) and meta.get(DERIVATIVES_KEY) == REVERSE


def use_reverse_products(looped_map) -> None:
    """Mark ``looped_map`` (once, with a warning): its products go through `reverse_jvp_block` from now on."""
    if uses_reverse_products(looped_map):
        return
    from ..errors import SlowDerivativesWarning

    if hasattr(getattr(looped_map, "info", None), DERIVATIVES_KEY):
        looped_map.info.derivatives = REVERSE
    else:
        looped_map.meta[DERIVATIVES_KEY] = REVERSE
    warnings.warn(
        f"The step of '{looped_map.name}' contains a custom torch.autograd.Function without forward-mode support, "
        "so jacobiscope takes its Jacobian-vector products by double backward through its own backward (exact, "
        "but slower than forward mode). Replace the Function by plain torch operations to run at full "
        "speed.", SlowDerivativesWarning, stacklevel=3)


def _linearized(step, x: torch.Tensor):
    """``(F(x), J^T u as a differentiable function of a fresh u)`` — the graph the products backward through."""
    with torch.enable_grad():
        state = x.detach().requires_grad_(True)
        output = step(state)
        if not isinstance(output, torch.Tensor) or not output.requires_grad:
            return output, None, None, state
        cotangent = torch.zeros_like(output, requires_grad=True)
        (pulled,) = torch.autograd.grad(output, state, cotangent, create_graph=True, allow_unused=True)
    return output, pulled, cotangent, state


def reverse_jvp_block(step, x: torch.Tensor, frame: torch.Tensor, *, differentiable: bool = False):
    """``(F(x), J frame)`` for ``frame [k, *x.shape]`` (or one vector shaped like ``x``) by double backward.

    With ``differentiable`` the products keep their graph to the step's weights (a Jacobian penalty in training:
    its gradient then backpropagates through both backward passes)."""
    if differentiable and torch._C._are_functorch_transforms_active():
        raise NotImplementedError("double backward cannot run inside a torch.func transform (autograd.Function "
                                  "with functorch must override the setup_context staticmethod)")
    block = frame.dim() == x.dim() + 1
    output, pulled, cotangent, _ = _linearized(step, x)
    output = output if differentiable else output.detach()
    tangent_shape = (frame.shape[0], *output.shape) if block else output.shape
    if pulled is None or not pulled.requires_grad:  # F does not depend on x, or J does not depend on u (J = 0)
        return output, torch.zeros(tangent_shape, dtype=output.dtype, device=output.device)
    frame = frame.to(pulled.dtype)
    with torch.enable_grad():
        if not block:
            (tangent,) = torch.autograd.grad(pulled, cotangent, frame, allow_unused=True, create_graph=differentiable)
        elif frame.shape[0] == 1:
            (tangent,) = torch.autograd.grad(pulled, cotangent, frame[0], allow_unused=True,
                                             create_graph=differentiable)
            tangent = None if tangent is None else tangent.unsqueeze(0)
        else:
            tangent = _batched_second_backward(pulled, cotangent, frame, differentiable)
    if tangent is None:
        return output, torch.zeros(tangent_shape, dtype=output.dtype, device=output.device)
    return output, tangent if differentiable else tangent.detach()


def _batched_second_backward(pulled, cotangent, frame, differentiable=False):
    try:
        (tangents,) = torch.autograd.grad(pulled, cotangent, frame, retain_graph=True, is_grads_batched=True,
                                          allow_unused=True, create_graph=differentiable)
        return tangents
    except RuntimeError:  # an operation in the graph has no batching rule: one backward per column
        columns = [torch.autograd.grad(pulled, cotangent, column, retain_graph=True, allow_unused=True,
                                       create_graph=differentiable)[0] for column in frame]
        if any(column is None for column in columns):
            return None
        return torch.stack(columns)


def reverse_vjp_function(step, x: torch.Tensor):
    """``(F(x), vjp_fn)`` like ``torch.func.vjp``, by plain autograd: ``vjp_fn(u)`` returns ``(J^T u,)`` and
    accepts a block ``[k, *output.shape]`` too (one backward per row, batched where torch can)."""
    with torch.enable_grad():
        state = x.detach().requires_grad_(True)
        output = step(state)

    def vjp_fn(cotangent):
        if not output.requires_grad:
            shape = (cotangent.shape[0], *state.shape) if cotangent.dim() == output.dim() + 1 else state.shape
            return (torch.zeros(shape, dtype=state.dtype, device=state.device),)
        cotangent = cotangent.to(output.dtype)
        batched = cotangent.dim() == output.dim() + 1
        with torch.enable_grad():
            try:
                (result,) = torch.autograd.grad(output, state, cotangent, retain_graph=True,
                                                is_grads_batched=batched, allow_unused=True)
            except RuntimeError:
                if not batched:
                    raise
                result = torch.stack([torch.autograd.grad(output, state, row, retain_graph=True,
                                                          allow_unused=True)[0] for row in cotangent])
        if result is None:
            result = torch.zeros((cotangent.shape[0], *state.shape) if batched else state.shape, dtype=state.dtype,
                                 device=state.device)
        return (result.detach(),)

    return output.detach(), vjp_fn
