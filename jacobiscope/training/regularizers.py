"""Regularizers on what a looped model's dynamics depend on: weight spectra, the Jacobian of the loop, and the
energy-admitting structure of attention.

- `SpectralRegularizer` / `spectral_penalty`: ``R_spec = sum_W (sigma_max(W)^2 - 1)^2 + sum_b ||b||_2^4`` over the
  linear maps of the looped blocks (fused QKV projections split into W_Q, W_K, W_V), with ``sigma_max`` from a
  persistent power iteration (one iteration per call, vectors kept between calls) or exactly.
- `jacobian_spectral_penalty` / `JacobianRegularizer`: ``(||dF/dX||_2 - target)^2`` at sampled states of the
  looped map, by power iteration on ``J^T J`` (jvp / vjp) and one differentiable jvp, so gradients reach the weights.
- `energy_penalty`: distance of the attention weights from the E-single / E-multi energy-admitting constraints.

All penalties are plain differentiable scalars: add them to a loss, or let `SpectralRegTrainer` do it.
"""
from __future__ import annotations

import fnmatch
import math
import os
import zlib
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

import torch
from torch import nn

from ..errors import ArgumentError, StateError
from ..linalg.operators import JacobianOperator, jvp
from ..maps import LoopedMap, as_looped_map
from .._validation import nonnegative_int, positive_int

__all__ = [
    "LinearTarget",
    "SpectralPenalty",
    "SpectralRegularizer",
    "spectral_penalty",
    "spectral_targets",
    "JacobianPenalty",
    "JacobianRegularizer",
    "jacobian_spectral_penalty",
    "AttentionWeights",
    "attention_weights",
    "energy_penalty",
]

_HALF = (torch.float16, torch.bfloat16)
# Leaf names of fused query/key/value projections: GPT-2 (Conv1D c_attn), AKOrN / ViT-style qkv, Phi-3, MPT/ModernBERT.
DEFAULT_FUSED = ("c_attn", "qkv", "qkv_proj", "Wqkv")
_PART_NAMES = {2: ("k", "v"), 3: ("q", "k", "v")}
STATE_FORMAT = "jacobiscope-spectral-reg"


# ====================================================================== targets
def _conv1d_class():
    try:
        from transformers.pytorch_utils import Conv1D
    except ImportError:  # pragma: no cover - transformers is a dependency
        return ()
    return Conv1D


def _is_linear(module: nn.Module) -> bool:
    conv1d = _conv1d_class()
    if isinstance(module, nn.Linear) or (conv1d and isinstance(module, conv1d)):
        weight = getattr(module, "weight", None)
        return isinstance(weight, torch.Tensor) and weight.dim() == 2
    return False


@dataclass(frozen=True)
class LinearTarget:
    """One linear map ``x -> W x + b`` the spectral regularizer acts on (a module, or one part of a fused one).

    Example::

        >>> import torch
        >>> from jacobiscope.training import LinearTarget
        >>> qkv = torch.nn.Linear(4, 12)
        >>> LinearTarget("qkv[k]", qkv, part=1, parts=3).weight().shape
        torch.Size([4, 4])

    Attributes:
        name: qualified module name, with ``[q]``/``[k]``/``[v]`` for the parts of a fused projection.
        module: the ``nn.Linear`` or transformers ``Conv1D`` holding the weight (live: gradients reach it).
        part, parts: which of ``parts`` equal slices of the output dimension this target is (``parts=1``: all).
        transposed: the module stores ``[in, out]`` (``Conv1D``); `weight` always returns ``[out, in]``.
    """

    name: str
    module: nn.Module
    part: int = 0
    parts: int = 1
    transposed: bool = False

    def weight(self) -> torch.Tensor:
        """The matrix ``W`` as ``[out, in]`` (a differentiable view of the module's weight)."""
        weight = self.module.weight
        if self.transposed:
            weight = weight.t()
        if self.parts > 1:
            rows = weight.shape[0] // self.parts
            weight = weight[self.part * rows : (self.part + 1) * rows]
        return weight

    def bias(self) -> torch.Tensor | None:
        """The bias slice matching `weight`, or ``None``."""
        bias = getattr(self.module, "bias", None)
        if bias is None:
            return None
        if self.parts > 1:
            size = bias.shape[0] // self.parts
            bias = bias[self.part * size : (self.part + 1) * size]
        return bias


def _auto_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The linear maps of the looped blocks: the submodules a looped model declares in ``_looped_modules``, or the
    blocks an HF model repeats (found by `jacobiscope.adapters.find_blocks`)."""
    named = list(model.named_modules())
    prefixes = _declared(model, "_looped_modules")
    if prefixes is None:
        from ..adapters.spec import find_blocks

        path, _, _ = find_blocks(model)
        prefixes = (path,)
    found = [(name, module) for name, module in named if _is_linear(module)
             and any(name == p or name.startswith(p + ".") for p in prefixes)]
    if not found:
        raise ArgumentError(
            f"No nn.Linear / Conv1D found in the looped blocks of {type(model).__name__} (looked under "
            f"{list(prefixes)}). Pass modules=[...] (module names or glob patterns) to choose the weights."
        )
    return found


def _declared(model: nn.Module, attribute: str) -> tuple[str, ...] | None:
    """A model's declaration of its looped submodules (``_looped_modules`` / ``_looped_attention``), or None."""
    value = getattr(model, attribute, None)
    if value is None:
        return None
    return (value,) if isinstance(value, str) else tuple(value)


def _select(model: nn.Module, modules) -> list[tuple[str, nn.Module]]:
    if modules is None:
        return _auto_modules(model)
    if isinstance(modules, (str, nn.Module)):
        modules = [modules]
    named = list(model.named_modules())
    names_of = {id(module): name for name, module in named}
    linear = [(name, module) for name, module in named if _is_linear(module)]
    chosen: dict[int, tuple[str, nn.Module]] = {}
    for item in modules:
        if isinstance(item, nn.Module):
            base = names_of.get(id(item), type(item).__name__)
            inside = [(f"{base}.{n}" if n else base, m) for n, m in item.named_modules() if _is_linear(m)]
            if not inside:
                raise ArgumentError(f"The module {base} ({type(item).__name__}) holds no nn.Linear / Conv1D.")
            hits = [(names_of.get(id(m), n), m) for n, m in inside]
        elif isinstance(item, str):
            hits = [(n, m) for n, m in linear if fnmatch.fnmatchcase(n, item) or n.startswith(item + ".")]
            if not hits:
                examples = ", ".join(n for n, _ in linear[:8]) or "none"
                raise ArgumentError(
                    f"The pattern {item!r} matches no nn.Linear / Conv1D of {type(model).__name__} (names are "
                    f"matched as globs or as a container prefix). Linear modules are e.g.: {examples}."
                )
        else:
            raise TypeError(f"modules must hold module names (str) or nn.Module objects, got {type(item).__name__}.")
        for name, module in hits:
            chosen.setdefault(id(module), (name, module))
    return list(chosen.values())


def spectral_targets(model: nn.Module, modules=None, *, fused: Iterable[str] | None = None) -> list[LinearTarget]:
    """The linear maps a spectral regularizer acts on, with fused QKV projections split.

    Example::

        >>> import transformers
        >>> from jacobiscope.training import spectral_targets
        >>> gpt2 = transformers.GPT2Model(transformers.GPT2Config(n_embd=16, n_layer=1, n_head=2))
        >>> [t.name for t in spectral_targets(gpt2)][:4]
        ['h.0.attn.c_attn[q]', 'h.0.attn.c_attn[k]', 'h.0.attn.c_attn[v]', 'h.0.attn.c_proj']

    Arguments:
        model: the model (unwrapped: not DDP / DeepSpeed).
        modules: ``None`` (default): the linear maps of the looped blocks — for `ItrSAForSudoku` the looped
            attention's ``nn.Linear`` layers (and the looped MLP's when ``mlp_ratio > 0``), for `AKOrNForSudoku`
            the coupling attention's, for a Hugging Face model every ``nn.Linear`` / ``Conv1D`` of the blocks
            `jacobiscope.adapters.find_blocks` finds. Or a list of module names / glob patterns (``"*.attn.*"``; a
            container's name selects the linear maps inside it) and/or ``nn.Module`` objects.
        fused: leaf names of fused query/key/value projections, split into equal parts of the output dimension
            (default ``c_attn``, ``qkv``, ``qkv_proj``, ``Wqkv``; ``()`` to keep them whole). A fused weight must
            have 3x (Q, K, V) or 2x (K, V: GPT-2 cross-attention) as many outputs as inputs.

    Returns:
        A list of `LinearTarget`, in module order.
    """
    fused = DEFAULT_FUSED if fused is None else tuple(fused)
    conv1d = _conv1d_class()
    targets = []
    for name, module in _select(model, modules):
        transposed = bool(conv1d) and isinstance(module, conv1d)
        out_features, in_features = (module.weight.shape[1], module.weight.shape[0]) if transposed else module.weight.shape
        if name.rsplit(".", 1)[-1] in fused:
            parts = out_features // in_features if out_features % in_features == 0 else 0
            if parts not in _PART_NAMES:
                raise ArgumentError(
                    f"Cannot split the fused projection {name} ({out_features} outputs, {in_features} inputs) into "
                    "equal Q/K/V parts: expected 3x (or 2x for K/V) as many outputs as inputs (grouped-query fused "
                    "projections differ). Pass fused=() to keep it whole, or modules=[...] to leave it out."
                )
            for index, part in enumerate(_PART_NAMES[parts]):
                targets.append(LinearTarget(f"{name}[{part}]", module, index, parts, transposed))
        else:
            targets.append(LinearTarget(name, module, 0, 1, transposed))
    return targets


# ====================================================================== weight spectral regularizer
@dataclass
class SpectralPenalty:
    """What `SpectralRegularizer` returns.

    Attributes:
        penalty: ``sum_W (sigma_max(W)^2 - 1)^2 + sum_b ||b||_2^4``, a differentiable scalar.
        weight_term: the first sum alone; bias_term: the second.
        sigmas: ``{target name: sigma_max}`` (detached; power-iteration estimates unless exact).
    """

    penalty: torch.Tensor
    weight_term: torch.Tensor
    bias_term: torch.Tensor
    sigmas: dict[str, torch.Tensor] = field(default_factory=dict)

    @property
    def sigma_max(self) -> float:
        """The largest ``sigma_max(W)`` over the targets."""
        return max((float(s) for s in self.sigmas.values()), default=float("nan"))


def _compute_dtype(tensor: torch.Tensor) -> torch.dtype:
    # Power iteration and the penalty in half precision lose the ~1e-3 differences the penalty is about.
    return torch.float32 if tensor.dtype in _HALF else tensor.dtype


def _normalize(vector: torch.Tensor, eps: float) -> torch.Tensor:
    return vector / vector.norm().clamp_min(eps)


class SpectralRegularizer:
    """The weight spectral penalty ``R_spec = sum_W (sigma_max(W)^2 - 1)^2 + sum_b ||b||_2^4``, with persistent
    power iteration.

    Example::

        >>> import torch
        >>> from jacobiscope.models import ItrSAConfig, ItrSAForSudoku
        >>> from jacobiscope.training import SpectralRegularizer
        >>> model = ItrSAForSudoku(ItrSAConfig(hidden_size=16, num_heads=2, loops=2))
        >>> regularizer = SpectralRegularizer(model)
        >>> [t.name for t in regularizer.targets]
        ['attention.query', 'attention.key', 'attention.value', 'attention.output']
        >>> result = regularizer()           # one power iteration per call, vectors kept for the next
        >>> result.penalty.backward()        # gradients reach the weights
        >>> model.attention.query.weight.grad.shape
        torch.Size([16, 16])

    Signature: ``SpectralRegularizer(model, modules=None, *, exact=False, power_iterations=1, init_iterations=10,
    include_biases=True, fused=None, seed=0, eps=1e-12)``

    Arguments:
        model: the (unwrapped) model whose weights are regularized.
        modules, fused: which linear maps, see `spectral_targets` (default: the looped blocks' linear maps, fused
            QKV projections split into W_Q, W_K, W_V).
        exact: compute ``sigma_max`` with ``torch.linalg.matrix_norm(W, 2)`` (an SVD per weight) instead of power
            iteration.
        power_iterations: power iterations per call (1: as ``torch.nn.utils.parametrizations.spectral_norm``; the
            vectors persist, so the estimate converges across training steps while the weights move slowly).
        init_iterations: iterations run when a target's vectors are first created (a warm start).
        include_biases: add ``sum_b ||b||_2^4`` over the targets' biases (split like the weights).
        seed: seed of the initial vectors (derived per target name, so every process starts from the same ones).

    Calling it returns a `SpectralPenalty`; ``update=False`` reuses the vectors without iterating. The power
    iteration runs without gradient, then ``sigma = u^T W v`` is differentiated with ``u, v`` fixed, which is the
    exact gradient ``u v^T`` of ``sigma_max`` once the vectors have converged. Half-precision weights are handled in
    float32. `state_dict` / `load_state_dict` (and `save` / `load`, a safetensors file) carry the vectors, so a
    resumed run continues the same iteration.
    """

    def __init__(self, model: nn.Module, modules=None, *, exact: bool = False, power_iterations: int = 1,
                 init_iterations: int = 10, include_biases: bool = True, fused: Iterable[str] | None = None,
                 seed: int = 0, eps: float = 1e-12):
        for value, name in ((power_iterations, "power_iterations"), (init_iterations, "init_iterations")):
            nonnegative_int(value, name)
        if power_iterations == 0 and not exact:
            raise ArgumentError("power_iterations must be >= 1 (or pass exact=True).")
        self.targets = spectral_targets(model, modules, fused=fused)
        self.exact = bool(exact)
        self.power_iterations = power_iterations
        self.init_iterations = init_iterations
        self.include_biases = bool(include_biases)
        self.seed = int(seed)
        self.eps = float(eps)
        self._vectors: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        self.calls = 0

    # ------------------------------------------------------------------ power iteration
    def _iterate(self, weight: torch.Tensor, u: torch.Tensor, v: torch.Tensor, count: int):
        for _ in range(count):
            v = _normalize(weight.t() @ u, self.eps)
            u = _normalize(weight @ v, self.eps)
        return u, v

    def _vectors_for(self, target: LinearTarget, weight: torch.Tensor):
        out_features, in_features = weight.shape
        stored = self._vectors.get(target.name)
        if stored is not None and stored[0].shape == (out_features,) and stored[1].shape == (in_features,):
            u, v = stored
            return u.to(device=weight.device, dtype=weight.dtype), v.to(device=weight.device, dtype=weight.dtype), False
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + zlib.crc32(target.name.encode()))
        u = torch.randn(out_features, generator=generator, dtype=torch.float64)
        v = torch.randn(in_features, generator=generator, dtype=torch.float64)
        u = _normalize(u.to(device=weight.device, dtype=weight.dtype), self.eps)
        v = _normalize(v.to(device=weight.device, dtype=weight.dtype), self.eps)
        return u, v, True

    def __call__(self, *, update: bool = True) -> SpectralPenalty:
        weight_terms, bias_terms, sigmas = [], [], {}
        for target in self.targets:
            weight = target.weight()
            weight = weight.to(_compute_dtype(weight))
            if self.exact:
                sigma = torch.linalg.matrix_norm(weight, 2)
            else:
                with torch.no_grad():
                    frozen = weight.detach()
                    u, v, fresh = self._vectors_for(target, frozen)
                    count = (self.init_iterations if fresh else 0) + (self.power_iterations if update or fresh else 0)
                    u, v = self._iterate(frozen, u, v, count)
                    self._vectors[target.name] = (u, v)
                sigma = torch.dot(u, weight @ v)
            sigmas[target.name] = sigma.detach()
            weight_terms.append((sigma.square() - 1).square())
            if self.include_biases:
                bias = target.bias()
                if bias is not None:
                    bias = bias.to(_compute_dtype(bias))
                    bias_terms.append(bias.square().sum().square())
        if update:
            self.calls += 1
        if not weight_terms:
            raise ArgumentError("The spectral regularizer has no target weights.")
        weight_term = torch.stack(weight_terms).sum()
        bias_term = torch.stack(bias_terms).sum() if bias_terms else torch.zeros_like(weight_term)
        return SpectralPenalty(weight_term + bias_term, weight_term, bias_term, sigmas)

    def sigmas(self, exact: bool = False) -> dict[str, float]:
        """``{target: sigma_max}``: the current power-iteration estimates (``u^T W v``), or exact values."""
        with torch.no_grad():
            result = {}
            for target in self.targets:
                weight = target.weight().detach()
                weight = weight.to(_compute_dtype(weight))
                if exact or target.name not in self._vectors:
                    result[target.name] = float(torch.linalg.matrix_norm(weight, 2))
                else:
                    u, v = self._vectors[target.name]
                    result[target.name] = float(torch.dot(u.to(weight), weight @ v.to(weight)))
            return result

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, torch.Tensor]:
        """The power-iteration vectors: ``{"<target>.u": u, "<target>.v": v}`` (detached copies)."""
        state = {}
        for name, (u, v) in self._vectors.items():
            state[f"{name}.u"] = u.detach().clone()
            state[f"{name}.v"] = v.detach().clone()
        return state

    def load_state_dict(self, state: Mapping[str, torch.Tensor], strict: bool = True) -> None:
        """Restore vectors saved by `state_dict`. With ``strict``, every target must be present with its shapes."""
        shapes = {t.name: tuple(reversed(t.weight().shape)) for t in self.targets}  # (in, out)
        loaded = {}
        for name, (in_features, out_features) in shapes.items():
            u, v = state.get(f"{name}.u"), state.get(f"{name}.v")
            if u is None or v is None:
                if strict:
                    raise KeyError(
                        f"The saved spectral-regularizer state has no vectors for {name!r} (it has "
                        f"{sorted({k.rsplit('.', 1)[0] for k in state})[:6]}): the model or the target modules differ."
                    )
                continue
            if tuple(u.shape) != (out_features,) or tuple(v.shape) != (in_features,):
                raise StateError(
                    f"Saved vectors for {name!r} have shapes {tuple(u.shape)} / {tuple(v.shape)}, but the weight is "
                    f"[{out_features}, {in_features}]: the checkpoint belongs to a different model size."
                )
            loaded[name] = (u.detach().clone(), v.detach().clone())
        unknown = {k.rsplit(".", 1)[0] for k in state} - set(shapes)
        if strict and unknown:
            raise KeyError(f"The saved state has vectors for unknown targets {sorted(unknown)[:6]}.")
        self._vectors.update(loaded)

    def save(self, path, metadata: Mapping[str, str] | None = None) -> None:
        """Write the vectors to a safetensors file (atomically: a temporary file, then a rename)."""
        from safetensors.torch import save_file

        path = os.fspath(path)
        state = {k: v.contiguous().cpu() for k, v in self.state_dict().items()}
        meta = {"format": STATE_FORMAT, "version": "1", "calls": str(self.calls), **dict(metadata or {})}
        temporary = path + ".tmp"
        save_file(state, temporary, metadata=meta)
        os.replace(temporary, path)

    def load(self, path, strict: bool = True) -> dict[str, str]:
        """Read vectors written by `save`; returns the file's metadata."""
        from safetensors import safe_open

        with safe_open(os.fspath(path), framework="pt") as handle:
            metadata = handle.metadata() or {}
            state = {key: handle.get_tensor(key) for key in handle.keys()}
        if metadata.get("format") != STATE_FORMAT:
            raise StateError(f"{path} is not a jacobiscope spectral-regularizer state (metadata {metadata}).")
        self.load_state_dict(state, strict=strict)
        self.calls = int(metadata.get("calls", self.calls))
        return metadata

    def __repr__(self) -> str:
        mode = "exact" if self.exact else f"power x{self.power_iterations}"
        return f"SpectralRegularizer({len(self.targets)} weights, {mode}, biases={self.include_biases})"


def spectral_penalty(model: nn.Module, modules=None, *, include_biases: bool = True,
                     fused: Iterable[str] | None = None) -> torch.Tensor:
    """``R_spec = sum_W (sigma_max(W)^2 - 1)^2 + sum_b ||b||_2^4``, exactly (an SVD per weight), differentiable.

    Example::

        >>> import torch
        >>> from jacobiscope.training import spectral_penalty
        >>> layer = torch.nn.Linear(3, 3, bias=False)
        >>> with torch.no_grad():
        ...     _ = layer.weight.copy_(2 * torch.eye(3))
        >>> spectral_penalty(torch.nn.Sequential(layer), modules=["0"]).item()   # (2^2 - 1)^2
        9.0

    Arguments:
        model: the model; modules, fused: see `spectral_targets` (default: the looped blocks' linear maps).
        include_biases: add the bias term.

    Returns:
        The penalty alone, a scalar tensor. For training, `SpectralRegularizer` (persistent power iteration)
        costs two matrix-vector products per weight instead of an SVD.
    """
    return SpectralRegularizer(model, modules, exact=True, include_biases=include_biases, fused=fused)().penalty


# ====================================================================== Jacobian spectral regularizer
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
            (default: ``model.config.loops`` for models with ``loop_map``, 0 — the hidden state entering the
            block — for Hugging Face blocks).
        layers: Hugging Face models: the block indices to draw one from at each call (default: all).
        mode, eta: Hugging Face models: ``"block"`` (the whole layer) or ``"attention"`` (the ItrSA form), as
            `jacobiscope.looped_block`.
        map_fn: ``map_fn(model, inputs) -> LoopedMap`` (with ``x0``), replacing the defaults; build it on the model
            you are given, so its parameters are the live ones.
        seed: draws (loop, layer, start vector) depend only on ``seed`` and ``step``, never on the global RNG, so
            a resumed or accumulated run draws the same.

    Models with ``loop_map(input_ids)`` (the reference Sudoku models) use it; other models go through the
    adapters (dropout off while the map is captured and evaluated, the model's mode restored afterwards).
    """

    def __init__(self, target: float = 1.0, *, one_sided: bool = False, iterations: int = 4, samples: int = 4,
                 max_loops: int | None = None, layers: list[int] | None = None, mode: str = "block",
                 eta: float | None = None, map_fn: Callable | None = None, seed: int = 0):
        positive_int(samples, "samples")
        if max_loops is not None and (isinstance(max_loops, bool) or not isinstance(max_loops, int) or max_loops < 0):
            raise ArgumentError(f"max_loops must be a non-negative int or None, got {max_loops!r}.")
        if mode not in ("block", "attention"):
            raise ArgumentError(f"mode must be 'block' or 'attention', got {mode!r}.")
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
            looped = model.loop_map(sub["input_ids"])
            max_loops = self.max_loops if self.max_loops is not None else int(getattr(model.config, "loops", 0))
            return self._penalty(looped, max_loops, generator, meta)
        return self._hf_penalty(model, sub, generator, meta)

    def _hf_penalty(self, model, sub, generator, meta):
        from ..adapters.inputs import prepare_inputs
        from ..adapters.looped import build_maps, prepared
        from ..adapters.spec import find_blocks

        _, blocks, _ = find_blocks(model)
        layers = list(range(len(blocks))) if self.layers is None else list(self.layers)
        if not layers:
            raise ArgumentError("layers is empty: give at least one block index.")
        layer = layers[int(torch.randint(len(layers), (1,), generator=generator))]
        meta["layer"] = layer
        parameter = next(model.parameters())
        with prepared(model) as state:
            # dtype=the model's own: build_maps would otherwise copy a half-precision block to float32, and the
            # gradient must reach the live weights (jacobian_spectral_penalty casts differentiably instead).
            looped = build_maps(state, prepare_inputs(model, sub), [layer], self.mode, self.eta, parameter.dtype)[0]
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


# ====================================================================== energy regularizers
@dataclass
class AttentionWeights:
    """One attention's weights in the row-vector convention ``q = x A_Q``, ``k = x A_K``, output
    ``sum_h softmax(q_h k_h^T) x VO^h``.

    Attributes:
        name: the attention module's name.
        query, key: ``A_Q``, ``A_K`` of shape ``[d, heads * head_dim]`` (head ``h`` is column block ``h``; grouped
            key heads are repeated to match the query heads).
        value_output: ``[heads, d, d]``, the value map of each head followed by its slice of the output projection,
            ``VO^h = A_V[:, h] A_O[h, :]`` (identity output projection when the attention has none).
        heads: number of heads.
    """

    name: str
    query: torch.Tensor
    key: torch.Tensor
    value_output: torch.Tensor
    heads: int

    def head(self, matrix: torch.Tensor, h: int) -> torch.Tensor:
        size = matrix.shape[1] // self.heads
        return matrix[:, h * size : (h + 1) * size]


def _value_output(value: torch.Tensor, output: torch.Tensor | None, heads: int) -> torch.Tensor:
    """``[heads, d, d]`` from ``A_V [d, heads * dv]`` and ``A_O [heads * dv, d]``."""
    d, width = value.shape
    size = width // heads
    value_heads = value.reshape(d, heads, size).permute(1, 0, 2)  # [H, d, dv]
    if output is None:
        if width != d:
            raise ArgumentError(f"An attention without output projection needs a square value map, got {tuple(value.shape)}.")
        output = torch.eye(d, dtype=value.dtype, device=value.device)
    output_heads = output.reshape(heads, size, output.shape[1])  # [H, dv, d]
    return value_heads @ output_heads


def _matrix(module: nn.Module) -> torch.Tensor:
    """``A`` with ``y = x A`` for an nn.Linear (``weight.T``) or a Conv1D (``weight``)."""
    conv1d = _conv1d_class()
    return module.weight if conv1d and isinstance(module, conv1d) else module.weight.t()


def _heads_of(model, attention, width) -> tuple[int, int]:
    config = getattr(model, "config", None)
    for owner, names in ((attention, ("num_heads", "num_attention_heads", "n_heads", "n_head")),
                         (config, ("num_attention_heads", "n_head", "num_heads", "n_heads"))):
        for name in names:
            value = getattr(owner, name, None)
            if isinstance(value, int) and value > 0:
                head_dim = getattr(attention, "head_dim", None) or width // value
                return width // head_dim, head_dim
    raise ArgumentError(f"Cannot tell the number of heads of {type(attention).__name__}: no num_heads attribute or config field.")


def _repeat_groups(matrix: torch.Tensor, head_dim: int, heads: int) -> torch.Tensor:
    groups = matrix.shape[1] // head_dim
    if groups == heads:
        return matrix
    if heads % groups:
        raise ArgumentError(f"{heads} query heads cannot share {groups} key/value heads evenly.")
    d = matrix.shape[0]
    return matrix.reshape(d, groups, 1, head_dim).expand(d, groups, heads // groups, head_dim).reshape(d, heads * head_dim)


_QKV_NAMES = (("q_proj", "k_proj", "v_proj"), ("query", "key", "value"), ("q_lin", "k_lin", "v_lin"))
_OUT_NAMES = ("o_proj", "out_proj", "c_proj", "output", "out_lin", "dense")


def _hf_attention(model, name: str, attention: nn.Module, output_module: nn.Module | None) -> AttentionWeights:
    children = dict(attention.named_children())
    fused = next((children[n] for n in DEFAULT_FUSED if n in children and _is_linear(children[n])), None)
    if fused is not None:
        combined = _matrix(fused)
        d = combined.shape[0]
        if combined.shape[1] != 3 * d:
            raise ArgumentError(f"The fused projection of {name} has shape {tuple(combined.shape)}; expected [d, 3d] (Q, K, V).")
        query, key, value = combined[:, :d], combined[:, d : 2 * d], combined[:, 2 * d :]
    else:
        names = next((triple for triple in _QKV_NAMES if all(n in children for n in triple)), None)
        if names is None:
            raise ArgumentError(
                f"Cannot find the query/key/value projections of {name} ({type(attention).__name__}; children "
                f"{sorted(children)}): energy regularizers know fused c_attn/qkv and q_proj/k_proj/v_proj-style names."
            )
        query, key, value = (_matrix(children[n]) for n in names)
    if output_module is None:
        output_module = next((children[n] for n in _OUT_NAMES if n in children and _is_linear(children[n])), None)
    output = _matrix(output_module) if output_module is not None else None
    heads, head_dim = _heads_of(model, attention, query.shape[1])
    key, value = _repeat_groups(key, head_dim, heads), _repeat_groups(value, head_dim, heads)
    return AttentionWeights(name, query, key, _value_output(value, output, heads), heads)


def attention_weights(model: nn.Module) -> list[AttentionWeights]:
    """The looped attention(s) of a model as `AttentionWeights` (differentiable views of the live weights).

    Example::

        >>> from jacobiscope.models import ItrSAConfig, ItrSAForSudoku
        >>> from jacobiscope.training import attention_weights
        >>> [w] = attention_weights(ItrSAForSudoku(ItrSAConfig(hidden_size=16, num_heads=2, loops=2)))
        >>> w.name, w.heads, tuple(w.value_output.shape)
        ('attention', 2, (2, 16, 16))

    A model that declares ``_looped_attention`` (submodule names, like transformers' ``_no_split_modules``) is read
    there: through the submodule's ``energy_weights()`` when it has one (`ItrSAForSudoku`: standard, ``e_single``,
    ``e_multi``), else by its projections' names (`AKOrNForSudoku`: fused qkv + output). Hugging Face blocks found by
    the adapters are read the same way (fused ``c_attn``/``qkv`` or ``q_proj``/``k_proj``/``v_proj``-style
    projections, grouped key/value heads repeated).
    """
    declared = _declared(model, "_looped_attention")
    if declared is not None:
        found = []
        for name in declared:
            attention = model.get_submodule(name)
            if callable(getattr(attention, "energy_weights", None)):
                maps = attention.energy_weights()
                found.append(AttentionWeights(name, maps["query"], maps["key"], maps["value_output"], maps["heads"]))
            else:
                found.append(_hf_attention(model, name, attention, None))
        return found
    from ..adapters.spec import find_blocks

    path, blocks, spec = find_blocks(model)
    if spec is None or spec.attention is None:
        raise ArgumentError(
            f"No adapter spec names the attention of {type(model).__name__}'s blocks; register one with "
            "jacobiscope.register_adapter(model_type, attention=..., attention_output=...)."
        )
    found = []
    for index, block in enumerate(blocks):
        attention = block.get_submodule(spec.attention)
        output = block.get_submodule(spec.attention_output) if spec.attention_output else None
        found.append(_hf_attention(model, f"{path}.{index}.{spec.attention}", attention, output))
    return found


def _sym(matrix):
    return 0.5 * (matrix + matrix.transpose(-1, -2))


def _skew(matrix):
    return 0.5 * (matrix - matrix.transpose(-1, -2))


def energy_penalty(model: nn.Module, kind: str = "e_single") -> torch.Tensor:
    """Distance of the looped attention's weights from an energy-admitting constraint (0 exactly on it).

    Example::

        >>> from jacobiscope.models import ItrSAConfig, ItrSAForSudoku
        >>> from jacobiscope.training import energy_penalty
        >>> constrained = ItrSAForSudoku(ItrSAConfig(hidden_size=16, num_heads=1, loops=2, attention="e_single"))
        >>> energy_penalty(constrained, "e_single").item()
        0.0
        >>> free = ItrSAForSudoku(ItrSAConfig(hidden_size=16, num_heads=2, loops=2))
        >>> energy_penalty(free, "e_multi").item() > 0
        True

    Arguments:
        model: the model (`attention_weights` finds its attention(s); summed over them).
        kind: ``"e_single"`` or ``"e_multi"``.

    Returns:
        A differentiable scalar. Definitions (row-vector convention ``q = x A_Q``; ``VO^h = A_V^h A_O^h`` the value
        map of head ``h`` through its slice of the output projection; ``sym(M) = (M + M^T)/2``,
        ``skew(M) = (M - M^T)/2``; squared Frobenius norms):

        - ``e_single``: ``|| sum_h VO^h - sym(A_K A_Q^T) ||^2`` — the single-head energy condition (Tomihari &
          Karakida, Prop. 4.1 per the notes: ``W_V`` equal to the symmetric part of ``W_K W_Q^T``), applied to the
          whole attention read as one head (``A_Q A_K^T = sum_h`` of the heads' QK matrices). It is zero for
          `ItrSAForSudoku` with ``attention="e_single"``, whose value map is built that way.
        - ``e_multi``: ``sum_h ||skew(A_Q^h A_K^{h T})||^2 + ||skew(VO^h)||^2`` — each head's QK matrix (rank
          ``head_dim``, low-rank by construction) symmetric and each head's value map symmetric. It is zero for
          ``attention="e_multi"`` (keys tied to queries, symmetric value maps) up to rounding.

    Biases are left out (the conditions are on the bilinear forms). The paper found these constraints hurt Sudoku
    accuracy; the regularizers let you measure that trade-off.
    """
    if kind not in ("e_single", "e_multi"):
        raise ArgumentError(f"kind must be 'e_single' or 'e_multi', got {kind!r}.")
    terms = []
    for weights in attention_weights(model):
        query, key, value_output = (t.to(_compute_dtype(t)) for t in (weights.query, weights.key, weights.value_output))
        if kind == "e_single":
            target = _sym(key @ query.t())
            terms.append((value_output.sum(0) - target).square().sum())
        else:
            size = query.shape[1] // weights.heads
            d = query.shape[0]
            q_heads = query.reshape(d, weights.heads, size).permute(1, 0, 2)  # [H, d, dh]
            k_heads = key.reshape(d, weights.heads, size).permute(1, 0, 2)
            qk = q_heads @ k_heads.transpose(1, 2)  # [H, d, d]
            terms.append(_skew(qk).square().sum() + _skew(value_output).square().sum())
    return torch.stack(terms).sum()
