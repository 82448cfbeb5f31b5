"""The Jacobian spectral penalty of a looped map: `jacobian_spectral_penalty` and the sampling `JacobianRegularizer`."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Mapping

import torch
from torch import nn

from ..errors import ArgumentError, StateError
from ..linalg.operators import JacobianOperator, jvp
from ..maps import LoopedMap, as_looped_map
from .._validation import did_you_mean, nonnegative_int, positive_int
from ._model_parts import _HALF

__all__ = ["JacobianPenalty", "JacobianRegularizer", "jacobian_spectral_penalty"]


@dataclass
class JacobianPenalty:
    """What `jacobian_spectral_penalty` and `JacobianRegularizer` return.

    Attributes:
        penalty: ``mean over trajectories of (sigma - target)^2`` (one-sided: only ``sigma > target`` counts),
            a differentiable scalar.
        sigma: the estimates of ``||dF/dX||_2`` per trajectory (detached), shape ``batch``.
        vector: the right singular vector estimate (detached), shaped like the state; pass it as ``v0`` to warm-start.
        meta: what was sampled (loop, layer, examples).
    """

    penalty: torch.Tensor
    sigma: torch.Tensor
    vector: torch.Tensor
    meta: dict = field(default_factory=dict)


def jacobian_spectral_penalty(step, x: torch.Tensor | None = None, *, target: float = 1.0, one_sided: bool = False,
                              iterations: int = 4, v0: torch.Tensor | None = None, params: Mapping | None = None,
                              seed: int = 0, batch_dims: int | None = None) -> JacobianPenalty:
    """The Jacobian spectral penalty ``(||dF/dX (x)||_2 - target)^2`` of a looped map, differentiable in the weights.

    Example::

        >>> import torch, jacobiscope
        >>> from jacobiscope.training import jacobian_spectral_penalty
        >>> A = torch.tensor([[3.0, 0.0], [4.0, 5.0]], dtype=torch.float64, requires_grad=True)
        >>> result = jacobian_spectral_penalty(lambda x: A @ x, torch.zeros(2, dtype=torch.float64), iterations=30)
        >>> round(float(result.sigma), 4) == round(float(torch.linalg.matrix_norm(A.detach(), 2)), 4)
        True
        >>> result.penalty.backward()        # d/dA of (sigma_max(A) - 1)^2
        >>> A.grad.shape
        torch.Size([2, 2])

    Arguments:
        step: a `LoopedMap` (built on the live model, e.g. ``model.loop_map(ids)`` or `jacobiscope.looped_block`) or
            a callable; a batched map gives one ``sigma`` per trajectory and the penalty averages them.
        x: the state (default: the map's ``x0``); treated as data (detached), so the penalty acts on the Jacobian
            at this state, not on how the state was reached.
        target: the wanted spectral norm (1: the edge of stability the paper finds best models near).
        one_sided: penalize only ``sigma > target`` (a Lipschitz cap instead of a pull towards ``target``).
        iterations: power iterations on ``J^T J`` before the differentiable step (each one jvp + one vjp).
        v0: start vector shaped like the state (e.g. a previous ``vector``); default random from ``seed``.
        params: optional ``{name: tensor}`` substituted with `LoopedMap.with_params` (e.g. inside
            ``torch.func.grad``).

    Returns:
        `JacobianPenalty`.

    The power iteration runs on a detached copy of the map; then ``sigma = ||J v||`` is computed by one jvp through
    the live parameters (``torch.func.jvp``), with ``v`` fixed. Its gradient ``u^T (dJ) v`` is the exact gradient
    of ``sigma_max`` once ``v`` has converged (as for ``torch.nn.utils.spectral_norm``), at the cost of one jvp and
    its backward. Half-precision maps are evaluated in float32.
    """
    nonnegative_int(iterations, "iterations")
    if not math.isfinite(float(target)):
        raise ArgumentError(f"target must be a finite number, got {target!r}.")
    looped = as_looped_map(step, batch_dims=batch_dims)
    if params is not None:
        looped = looped.with_params(params)
    x = looped.prepare_state(x).detach()
    if looped.module is not None and any(p.dtype in _HALF for p in looped.params.values()):
        # with_params keeps the cast differentiable, so the gradient still reaches the half-precision weights.
        looped = looped.with_params({k: p.float() for k, p in looped.params.items() if p.dtype in _HALF})
    if x.dtype in _HALF:
        x = x.float()
    frozen = looped.detached()
    batch_shape = looped.batch_shape(x)
    batch = int(torch.Size(batch_shape).numel())
    tiny = torch.finfo(x.dtype).tiny

    def unit(vector):
        flat = vector.reshape(batch, -1)
        return (flat / flat.norm(dim=1, keepdim=True).clamp_min(tiny)).reshape(x.shape)

    if v0 is None:
        generator = torch.Generator().manual_seed(int(seed))
        v = torch.randn(x.shape, generator=generator, dtype=torch.float64).to(device=x.device, dtype=x.dtype)
    else:
        if v0.shape != x.shape:
            raise StateError(f"v0 must have the state's shape {tuple(x.shape)}, got {tuple(v0.shape)}.")
        v = v0.detach().to(device=x.device, dtype=x.dtype)
    v = unit(v)
    if iterations:
        # The operator builds the vjp's linearization once and reuses it: each iteration costs a jvp and a backward.
        operator = JacobianOperator(frozen, x)
        with torch.no_grad():
            for _ in range(iterations):
                v = unit(operator.rmatvec(operator.matvec(v)).detach())
    with torch.enable_grad():
        product = jvp(looped, x, v, composable=True)
        sigma = product.reshape(batch, -1).norm(dim=1)
        gap = sigma - float(target)
        if one_sided:
            gap = torch.relu(gap)
        penalty = gap.square().mean()
    return JacobianPenalty(penalty, sigma.detach().reshape(batch_shape), v.detach(),
                           {"iterations": iterations, "target": float(target), "one_sided": bool(one_sided)})


_SKIP_INPUTS = ("labels", "label", "label_ids", "shift_labels", "num_items_in_batch", "return_loss")


class JacobianRegularizer:
    """Samples states of a model's looped map from a training batch and returns `jacobian_spectral_penalty` there.

    Example::

        >>> import torch
        >>> from jacobiscope.models import ItrSAConfig, ItrSAForSudoku
        >>> from jacobiscope.training import JacobianRegularizer
        >>> model = ItrSAForSudoku(ItrSAConfig(hidden_size=16, num_heads=2, loops=2))
        >>> regularizer = JacobianRegularizer(target=1.0, samples=2, iterations=2)
        >>> result = regularizer(model, {"input_ids": torch.zeros(4, 81, dtype=torch.long)}, step=0)
        >>> result.sigma.shape, result.penalty.requires_grad
        (torch.Size([2]), True)

    Signature: ``JacobianRegularizer(target=1.0, *, one_sided=False, iterations=4, samples=4, max_loops=None,
    layers=None, mode="block", eta=None, map_fn=None, seed=0)``

    Arguments:
        target, one_sided, iterations: see `jacobian_spectral_penalty`.
        samples: how many examples of the batch (its first ones) give trajectories.
        max_loops: the state is taken after ``t`` loops, ``t`` drawn uniformly in ``[0, max_loops]`` at each call
            (default: the trained loop count of a model with its own loop, ``looped.info.loops``; 0 — the hidden
            state entering the block — for Hugging Face blocks).
        layers: Hugging Face models: the block indices to draw one from at each call (default: all).
        mode, eta: Hugging Face models: ``"block"`` (the whole layer) or ``"attention"`` (the ItrSA form), as
            `jacobiscope.looped_block`.
        map_fn: ``map_fn(model, inputs) -> LoopedMap`` (with ``x0``), replacing the defaults; build it on the model
            you are given, so its parameters are the live ones.
        seed: draws (loop, layer, start vector) depend only on ``seed`` and ``step``, never on the global RNG, so
            a resumed or accumulated run draws the same.

    Every map comes from `jacobiscope.adapters.map_source` (the whole batch as one map): models with their own
    loop (the reference Sudoku models) give their recurrence, other models a block; dropout is off while the map
    is captured and evaluated, and the model's mode is restored afterwards.
    """

    def __init__(self, target: float = 1.0, *, one_sided: bool = False, iterations: int = 4, samples: int = 4,
                 max_loops: int | None = None, layers: list[int] | None = None, mode: str = "block",
                 eta: float | None = None, map_fn: Callable | None = None, seed: int = 0):
        positive_int(samples, "samples")
        if max_loops is not None and (isinstance(max_loops, bool) or not isinstance(max_loops, int) or max_loops < 0):
            raise ArgumentError(f"max_loops must be a non-negative int or None, got {max_loops!r}.")
        if mode not in ("block", "attention"):
            raise ArgumentError(f"mode must be 'block' or 'attention', got {mode!r}"
                                f"{did_you_mean(mode, ('block', 'attention'))} — pass one of them.")
        self.target, self.one_sided, self.iterations = float(target), bool(one_sided), iterations
        self.samples, self.max_loops, self.layers, self.mode, self.eta = samples, max_loops, layers, mode, eta
        self.map_fn, self.seed = map_fn, int(seed)

    def _generator(self, step: int) -> torch.Generator:
        return torch.Generator().manual_seed(self.seed * 1_000_003 + int(step))

    def __call__(self, model: nn.Module, inputs: Mapping, *, step: int = 0) -> JacobianPenalty:
        generator = self._generator(step)
        meta: dict = {"step": int(step)}
        sub = {k: (v[: self.samples] if isinstance(v, torch.Tensor) and v.dim() > 0 else v)
               for k, v in dict(inputs).items() if k not in _SKIP_INPUTS}
        if self.map_fn is not None:
            looped = self.map_fn(model, sub)
            max_loops = self.max_loops or 0
            return self._penalty(looped, max_loops, generator, meta)
        if hasattr(model, "loop_map"):
            if "input_ids" not in sub:
                raise ArgumentError(f"The batch has no input_ids (keys {sorted(inputs)}): loop_map needs them.")
            return self._loop_penalty(model, sub["input_ids"], generator, meta)
        return self._hf_penalty(model, sub, generator, meta)

    def _loop_penalty(self, model, input_ids, generator, meta):
        """The model's own loop (the reference solvers' recurrence), on the whole batch as one map."""
        from ..adapters._source import map_source

        with map_source(model, input_ids, mode="loop", split=False) as source:
            (looped,) = source[0].maps
            max_loops = self.max_loops if self.max_loops is not None else int(looped.info.loops or 0)
            return self._penalty(looped, max_loops, generator, meta)

    def _hf_penalty(self, model, sub, generator, meta):
        """One block of a Hugging Face model, drawn from ``layers``, on the whole batch as one map."""
        from ..adapters._source import map_source

        parameter = next(model.parameters())
        # dtype=the model's own: the source would otherwise copy a half-precision block to float32, and the
        # gradient must reach the live weights (jacobian_spectral_penalty casts differentiably instead).
        with map_source(model, sub, mode=self.mode, eta=self.eta if self.mode == "attention" else None,
                        dtype=parameter.dtype, max_length=None, split=False) as source:
            layers = list(range(source.plan.blocks)) if self.layers is None else list(self.layers)
            if not layers:
                raise ArgumentError("layers is empty: give at least one block index.")
            layer = layers[int(torch.randint(len(layers), (1,), generator=generator))]
            meta["layer"] = layer
            (looped,) = source.get(0, layers=[layer]).maps
            return self._penalty(looped, self.max_loops or 0, generator, meta)

    def _penalty(self, looped: LoopedMap, max_loops: int, generator, meta) -> JacobianPenalty:
        if not isinstance(looped, LoopedMap):
            looped = as_looped_map(looped)
        loops = int(torch.randint(max_loops + 1, (1,), generator=generator)) if max_loops > 0 else 0
        meta["loop"] = loops
        x = looped.prepare_state(None)
        if loops:
            x = looped.trajectory(x, steps=loops)[-1]
        seed = int(torch.randint(2**31 - 1, (1,), generator=generator))
        result = jacobian_spectral_penalty(looped, x, target=self.target, one_sided=self.one_sided,
                                           iterations=self.iterations, seed=seed)
        result.meta.update(meta)
        return result
