"""The weight spectral penalty: `SpectralRegularizer` (persistent power iteration, resumable) and `spectral_penalty`."""
from __future__ import annotations

import os
import zlib
from dataclasses import dataclass, field
from typing import Iterable, Mapping

import torch
from torch import nn

from ..errors import ArgumentError, StateError
from .._validation import nonnegative_int
from ._model_parts import _compute_dtype
from ._targets import LinearTarget, spectral_targets

__all__ = ["SpectralPenalty", "SpectralRegularizer", "spectral_penalty"]

STATE_FORMAT = "jacobiscope-spectral-reg"


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
