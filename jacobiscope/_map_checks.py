"""Checks and helpers of `jacobiscope.LoopedMap` (a step's output, independent trajectories, memory, precision),
kept apart from the class so `maps` stays one idea per module; every name is re-exported by `jacobiscope.maps`.

Example::

    >>> import torch
    >>> from jacobiscope.maps import LoopedMap, check_step_output
    >>> m = LoopedMap(lambda x: x[:1])
    >>> check_step_output(m, torch.ones(2), torch.ones(1))
    Traceback (most recent call last):
    ...
    jacobiscope.errors.StepOutputError: The step of '<lambda>' (loop 1) changed the state's shape: expected (2,), got (1,). A looped map must return a state of the same shape as its input.
"""
from __future__ import annotations

import math
import os
import warnings

import torch
from torch import nn

from .errors import ArgumentError, NonFiniteWarning, StateError, StepError, StepOutputError
from ._validation import _is_int

_HALF_DTYPES = (torch.float16, torch.bfloat16)


def check_independent_trajectories(looped_map: LoopedMap, x: torch.Tensor, out: torch.Tensor, what: str) -> None:
    """Raise `StepError` when the step of a batched map lets one trajectory move another.

    ``batch_dims`` declares the leading dimensions independent trajectories, and every per-trajectory result
    (block-diagonal Jacobian, one exponent per row) relies on it; a step that mixes rows (``x + x.mean(0)``,
    batch norm in training mode) would give per-row numbers that are silently wrong. One extra forward: perturb
    the first trajectory and check that the others' outputs do not move. ``out`` is ``F(x)``.
    """
    batch = int(looped_map.batch_shape(x).numel())
    if looped_map.batch_dims == 0 or batch < 2:
        return
    flat = x.detach().reshape(batch, -1)
    generator = torch.Generator(device="cpu").manual_seed(0)
    direction = torch.randn(flat.shape[1], generator=generator, dtype=torch.float64).to(device=x.device,
                                                                                        dtype=x.dtype)
    # 1% of the state: large enough that a mean over a few hundred rows shows above the rounding threshold below.
    scale = 1e-2 * max(1.0, float(flat[0].abs().max()))
    moved = flat.clone()
    moved[0] = moved[0] + scale * direction / direction.norm()
    with torch.no_grad():
        other = looped_map.step(moved.reshape(x.shape))
        reference = out.detach()
        if not isinstance(other, torch.Tensor) or other.shape != x.shape:
            return  # check_step_output has already judged the output; a shape-changing second call is not ours
        before, after = reference.reshape(batch, -1), other.reshape(batch, -1)
        rest_before, rest_after = before[1:], after[1:]
        finite = torch.isfinite(rest_before)
        shift = torch.where(finite, (rest_after - rest_before).abs(), torch.zeros_like(rest_before))
        shift = torch.where(finite & ~torch.isfinite(rest_after), torch.full_like(shift, math.inf), shift)
        drift = float(shift.max())
        response = float(torch.nan_to_num((after[0] - before[0]).abs(), nan=0.0, posinf=0.0).max())
        # Independent rows give bitwise-equal outputs on CPU; the slack is for nondeterministic GPU kernels.
        noise = 256 * torch.finfo(x.dtype).eps * (1.0 + float(torch.nan_to_num(rest_before.abs(), posinf=0).max()))
    if drift > max(noise, 1e-3 * response):
        raise StepError(
            f"{what}: the step of '{looped_map.name}' mixes the trajectories of the batch — moving trajectory 0 "
            f"moved the others' outputs by up to {drift:.2e} — but batch_dims={looped_map.batch_dims} declares "
            "them independent (per-trajectory results would be wrong). Fix the step (no mean/norm over the batch "
            "dimension, no dropout: model.eval()), or pass one trajectory at a time."
        )


def check_step_output(looped_map: LoopedMap, x: torch.Tensor, out, t: int = 1) -> None:
    """Raise `StepOutputError` unless ``out`` is a tensor with the shape, dtype and device of ``x``."""
    where = f"The step of '{looped_map.name}' (loop {t})"
    if isinstance(out, (tuple, list)):
        raise StepOutputError(
            f"{where} returned a {type(out).__name__} of {len(out)} items; a LoopedMap step must return one tensor "
            "shaped like its input. If the first item is the new state, wrap it: lambda x: f(x)[0]."
        )
    if not isinstance(out, torch.Tensor):
        raise StepOutputError(f"{where} returned {type(out).__name__}; it must return a torch.Tensor shaped like its input.")
    if out.shape != x.shape:
        raise StepOutputError(
            f"{where} changed the state's shape: expected {tuple(x.shape)}, got {tuple(out.shape)}. "
            "A looped map must return a state of the same shape as its input."
        )
    if out.dtype != x.dtype:
        raise StepOutputError(
            f"{where} returned {out.dtype} for a {x.dtype} state. Build the LoopedMap from the nn.Module so "
            "LoopedMap.to(dtype) can cast its parameters, or cast inside your function."
        )
    if out.device != x.device:
        raise StepOutputError(f"{where} moved the state from {x.device} to {out.device}; keep it on one device.")


def report_nonfinite(looped_map: LoopedMap, t: int, action: str) -> None:
    """Warn (``action="warn"``) or raise `NonFiniteStateError` for a NaN/Inf state first seen at loop ``t``."""
    from .errors import NonFiniteStateError

    message = (
        f"The trajectory of '{looped_map.name}' became NaN/Inf at loop {t}. The map diverges (or overflows) from "
        "this state: try float64 (LoopedMap.to(torch.float64)), a smaller step size, or a normalized map."
    )
    if action == "raise":
        raise NonFiniteStateError(message, step=t)
    warnings.warn(message, NonFiniteWarning, stacklevel=3)


def require_precision(x: torch.Tensor, what: str) -> None:
    """Refuse half precision where rounding would swamp the quantity being measured."""
    if x.dtype in _HALF_DTYPES:
        raise StateError(
            f"{what} needs float32 or float64, got {x.dtype}: half precision rounding (~1e-3) swamps the "
            "measurement. Pass dtype=torch.float32 (or torch.float64 for reference numbers)."
        )


def check_trajectory_memory(x: torch.Tensor, kept: int, what: str, fix: str) -> None:
    """Refuse (`MemoryBudgetError`) keeping ``kept`` states like ``x`` when they cannot fit in the memory of its
    device — before the first loop runs, not after hours, in the allocator."""
    from .errors import MemoryBudgetError

    needed = int(kept) * x.numel() * x.element_size()
    try:
        if x.device.type == "cuda":
            limit = torch.cuda.mem_get_info(x.device)[0]
        else:
            limit = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError, RuntimeError):  # pragma: no cover - unknown platform: no check
        return
    if needed > limit:
        raise MemoryBudgetError(f"the {what} keeps {kept} states of {x.numel()} values ({needed / 1e9:.3g} GB), more "
                                f"than the {limit / 1e9:.3g} GB of memory on {x.device.type} — {fix}", needed, limit)


def _check_batch_dims(batch_dims) -> int:
    # bool is an int subclass, but batch_dims=True is a mistake, not 1; numpy integers are ints
    if not _is_int(batch_dims) or batch_dims < 0:
        raise ArgumentError(f"batch_dims must be a non-negative int, got {batch_dims!r} — pass 0 for a single "
                            "trajectory, 1 for a leading batch dimension.")
    return int(batch_dims)


def _check_state_shape(state_shape) -> torch.Size:
    try:
        shape = torch.Size(state_shape)
    except (TypeError, ValueError, RuntimeError) as error:
        raise ArgumentError(f"state_shape must be a tuple of non-negative ints, got {state_shape!r} — pass e.g. "
                            "state_shape=(81, 128).") from error
    if any(size < 0 for size in shape):
        raise ArgumentError(f"state_shape must be a tuple of non-negative ints, got {state_shape!r} — pass e.g. "
                            "state_shape=(81, 128).")
    return shape


def _same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors of one shape hold the same values, NaN equal to NaN (one host sync)."""
    if a.is_floating_point() or a.is_complex():
        return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())
    return bool((a == b).all())


def _default_name(step) -> str:
    if isinstance(step, nn.Module):
        return type(step).__name__
    return getattr(step, "__qualname__", None) or getattr(step, "__name__", None) or type(step).__name__


def _rebind(function, old_owner, new_owner):
    """Rebind a method bound to ``old_owner`` (or one of its submodules) to its counterpart in ``new_owner``."""
    owner = getattr(function, "__self__", None)
    if owner is None or not isinstance(owner, nn.Module):
        return function
    if owner is old_owner:
        return function.__func__.__get__(new_owner)
    for name, module in old_owner.named_modules():
        if module is owner:
            return function.__func__.__get__(new_owner.get_submodule(name))
    return function


def side_effect_refusal(error: RuntimeError, name: str) -> StepError | None:
    """The `StepError` for a step that ``torch.func`` refused because of a side effect (an in-place write to a
    tensor the step does not return, a random draw), or None for any other error. Raised from inside a
    derivative transform, torch's own words name neither the step nor the fix."""
    text = str(error)
    if "mutate a captured Tensor" in text:
        operation = text.split("in-place operation (", 1)[1].split(")", 1)[0] if "in-place operation (" in text else ""
        return StepError(
            f"The step of '{name}' writes in place to a tensor it does not return{f' ({operation})' if operation else ''}"
            " — a BatchNorm's running statistics in training mode, or a cache the step updates — so its derivatives "
            "are undefined (torch.func refuses the write). Call module.eval() before building the map, or return the "
            "updated tensor instead of writing it.")
    if "randomness" in text and "vmap" in text:
        return StepError(
            f"The step of '{name}' draws random numbers (dropout in training mode?), so it has no well-defined "
            "Jacobian and vmap refuses it. Call model.eval() before building the map.")
    return None


def _warn_if_random(module: nn.Module) -> None:
    """Warn once for a module in training mode whose step is random (dropout) or writes its own buffers (a batch
    norm's running statistics: every call moves them, and derivative transforms refuse the write)."""
    for sub in module.modules():
        if isinstance(sub, nn.modules.dropout._DropoutNd) and sub.p > 0 and sub.training:
            warnings.warn(
                f"{type(module).__name__} has dropout p={sub.p} in training mode: the map is random, so its "
                "Jacobian is that of one random draw. Call module.eval() before building the LoopedMap.",
                RuntimeWarning,
                stacklevel=3,
            )
            return
        if isinstance(sub, nn.modules.batchnorm._BatchNorm) and sub.training and sub.track_running_stats:
            which = "is" if sub is module else f"has a {type(sub).__name__}"
            warnings.warn(
                f"{type(module).__name__} {which} in training mode: every step updates its "
                "running statistics (the module changes as the map runs) and derivatives cannot follow that write. "
                "Call module.eval() before building the LoopedMap.",
                RuntimeWarning,
                stacklevel=3,
            )
            return
