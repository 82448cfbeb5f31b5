"""What a looped map is made of: its normalization, its step size and the drive inside it, read from the map.

Example::

    >>> import jacobiscope
    >>> from jacobiscope.dynamics._anatomy import read_anatomy
    >>> anatomy = read_anatomy(jacobiscope.systems.self_attention_map(tokens=4, dim=8, heads=2), "example")
    >>> anatomy.family, anatomy.form, sorted(anatomy.parts)
    ('self-attention', 'normalized-attention', ['attention', 'injection'])

Two forms are recognized, each by what the step module exposes (never by a class name):

- ``normalized-attention``, the ItrSA form ``F(X) = Norm(X + eta * Y(X))``: the ItrSA reference model's loop
  (``ItrSAForSudoku.loop_map``), `jacobiscope.systems.self_attention_map`, and attention-mode maps of Hugging Face
  models (`jacobiscope.adapters.LoopedAttention`, or any step module with ``drive``, an ``nn.Module`` ``norm`` and a
  number ``eta``).
- ``oscillator``, AKOrN's ``F(x) = normalize(x + gamma * G(x))`` with ``G(x) = Omega x + y - <y, x> x`` and
  ``normalize`` onto unit spheres of ``oscillator_dim`` channels (``AKOrNForSudoku.loop_map``).

The functions of an anatomy take the loop module first, so that `loop_function` can call them with the map's
own parameters (``LoopedMap.with_params`` overrides included).
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from ..errors import ArgumentError
from ..maps import LoopedMap

__all__ = ["LoopAnatomy", "NormCandidate", "LoopFunction", "read_anatomy", "loop_function", "call_on_loop",
           "matching_norm", "per_trajectory_min"]

# Reading a norm is checked by recomputing the step: a wrong kind or gain is off by O(1), rounding by ~1e-7
# (a float64 map whose norm computes in float32, as Llama's RMSNorm does).
_MATCH_RTOL = 1e-4


@dataclass(frozen=True)
class NormCandidate:
    """One reading of a normalization: ``kind`` (``"rmsnorm"``, ``"layernorm"``, ``"sphere"`` or ``"none"``), the
    elementwise ``gain`` (``None``: 1), ``bias``, ``eps`` (``None``: the dtype's machine epsilon, as
    ``torch.nn.RMSNorm``) and, for ``"sphere"``, the ``group`` size of one oscillator."""

    kind: str
    gain: torch.Tensor | None = None
    bias: torch.Tensor | None = None
    eps: float | None = 0.0
    group: int | None = None

    def scale(self, z: torch.Tensor) -> torch.Tensor:
        """The denominator the norm divides each token (oscillator) by: ``[..., tokens]`` (``[..., groups]``)."""
        eps = torch.finfo(z.dtype).eps if self.eps is None else self.eps
        if self.kind == "rmsnorm":
            return torch.sqrt(z.pow(2).mean(-1) + eps)
        if self.kind == "layernorm":
            return torch.sqrt((z - z.mean(-1, keepdim=True)).pow(2).mean(-1) + eps)
        if self.kind == "sphere":
            return z.reshape(*z.shape[:-1], -1, self.group).norm(dim=-1)
        return torch.ones_like(z[..., 0])

    def apply(self, z: torch.Tensor) -> torch.Tensor:
        """``Norm(z)`` as this reading computes it."""
        if self.kind == "none":
            return z
        if self.kind == "sphere":
            groups = z.reshape(*z.shape[:-1], -1, self.group)
            return (groups / groups.norm(dim=-1, keepdim=True).clamp_min(1e-12)).reshape(z.shape)
        centered = z - z.mean(-1, keepdim=True) if self.kind == "layernorm" else z
        out = centered / self.scale(z).unsqueeze(-1)
        if self.gain is not None:
            out = out * self.gain
        return out + self.bias if self.bias is not None else out

    def max_gain(self, like: torch.Tensor) -> torch.Tensor:
        """``max_j |gamma_j|`` (1 without a gain), in the dtype and on the device of ``like``."""
        if self.gain is None or self.kind in ("none", "sphere"):
            return torch.ones((), dtype=like.dtype, device=like.device)
        return self.gain.detach().abs().max().to(dtype=like.dtype, device=like.device)


@dataclass(frozen=True)
class LoopAnatomy:
    """The parts of one loop. ``inner(loop, x)`` is the map inside the residual (``Y`` for the ItrSA form, ``G`` for
    AKOrN), ``pre_norm(loop, x) = x + eta * inner``, ``drive(loop, x)`` the pseudo-energy drive, ``parts`` name ->
    ``(loop, x) -> tensor`` summing to the drive (``None`` when it is not a sum), ``eta(loop)`` the step size,
    ``norms(loop)`` the readings of the normalization to try, and ``injection`` what the injection part is."""

    family: str
    form: str
    inner: Callable
    pre_norm: Callable
    drive: Callable
    parts: dict | None
    eta: Callable
    norms: Callable
    injection: str
    parts_refusal: str = ""


class LoopFunction(nn.Module):
    """``x -> function(loop, x)``, with the loop's parameters reachable under the prefix ``loop.``."""

    def __init__(self, loop: nn.Module, function: Callable):
        super().__init__()
        self.loop = loop
        self.function = function
        self.training = False  # this wrapper only: the model's own modules keep the mode they were given

    def forward(self, *args):
        return self.function(self.loop, *args)

    def drive(self, x: torch.Tensor) -> torch.Tensor:
        """The loop's own drive, so that a sub-map keeps the pseudo-energy of the map it came from."""
        return self.loop.drive(x)


def loop_function(looped_map: LoopedMap, function: Callable, name: str, *, keep_drive: bool = False) -> LoopedMap:
    """``x -> function(loop, x)`` as a `LoopedMap` computing with ``looped_map``'s parameters, batch dims, state
    shape, ``x0``, dtype and device."""
    wrapper = LoopFunction(looped_map.module, function)
    new = LoopedMap(wrapper, batch_dims=looped_map.batch_dims, state_shape=looped_map.state_shape,
                    drive=wrapper.drive if keep_drive else None, x0=looped_map.x0, name=name)
    new = new.with_params(_prefixed(looped_map.params))
    for attribute in ("_dtype", "_device"):  # a map cast with `to` casts the states it is given: so must its parts
        if hasattr(looped_map, attribute):
            setattr(new, attribute, getattr(looped_map, attribute))
    # Its own info and extras (a part of the loop reads out nothing: no readout, no quality score).
    new.copy_info_from(looped_map)
    new.info.readout = new.info.quality = None
    return new


def call_on_loop(looped_map: LoopedMap, function: Callable, *args):
    """``function(loop, *args)`` with the loop's parameters replaced by the map's (``with_params`` overrides)."""
    return torch.func.functional_call(LoopFunction(looped_map.module, function), _prefixed(looped_map.params), args)


def _prefixed(params: dict) -> dict:
    return {f"loop.{name}": tensor for name, tensor in params.items()}


def read_anatomy(looped_map: LoopedMap, what: str) -> LoopAnatomy:
    """The `LoopAnatomy` of a map, or `ArgumentError` naming what the map is and how to get one that has it."""
    if not isinstance(looped_map, LoopedMap):
        raise ArgumentError(f"{what} needs a jacobiscope.LoopedMap, got {type(looped_map).__name__} — pass e.g. "
                            "model.loop_map(puzzles) or jacobiscope.looped_block(model, inputs, layer, "
                            "mode='attention').")
    if looped_map.info.power != 1:
        raise ArgumentError(f"{what}: '{looped_map.name}' is a composed map F^p (LoopedMap.power); a composition has "
                            "no single normalization or drive — pass the one-loop map it was made from.")
    loop = looped_map.module
    for recognize in (_akorn_loop, _itrsa_loop, _self_attention, _attention_mode):
        anatomy = recognize(loop) if loop is not None else None
        if anatomy is not None:
            return anatomy
    raise ArgumentError(_not_recognized(looped_map, what))


def _not_recognized(looped_map: LoopedMap, what: str) -> str:
    if looped_map.info.mode == "block":
        kind = "a block-mode map (the whole layer, whose residual stream is not normalized after the attention)"
        fix = ("build the attention-mode map of the same layer: jacobiscope.looped_block(model, inputs, layer, "
               "mode='attention')")
    elif looped_map.module is None:
        kind = "built from a plain callable, so its norm, step size and drive cannot be read"
        fix = ("build the map from an nn.Module whose forward is norm(x + eta * drive(x)) and which exposes drive(x), "
               "norm and eta (as jacobiscope.systems.LoopedSelfAttention does)")
    else:
        kind = f"a {type(looped_map.module).__name__} step, which exposes no drive, norm and eta"
        fix = ("use a model's loop_map(...), jacobiscope.systems.self_attention_map, or jacobiscope.looped_block(..., "
               "mode='attention'); for your own module expose drive(x), norm (an nn.Module) and eta, with forward "
               "= norm(x + eta * drive(x))")
    return (f"{what} needs a looped map of the normalized-attention form X -> Norm(X + eta * Y(X)) (or AKOrN's "
            f"oscillator update); '{looped_map.name}' is {kind} — {fix}.")


def _has(obj, *names: str) -> bool:
    return obj is not None and all(hasattr(obj, name) for name in names)


# ---------------------------------------------------------------------------------------------- ItrSA model loop
def _itrsa_loop(loop: nn.Module) -> LoopAnatomy | None:
    model = getattr(loop, "model", None)
    if not (_has(model, "norm", "attention", "injection", "drive", "step") and hasattr(loop, "input_ids")
            and hasattr(getattr(model, "config", None), "eta")):
        return None
    parts = {"attention": _itrsa_attention}
    if getattr(model, "mlp", None) is not None:
        parts["mlp"] = _itrsa_mlp
    parts["injection"] = _itrsa_injection
    return LoopAnatomy(
        family="itrsa-loop", form="normalized-attention", inner=_drive, pre_norm=_itrsa_pre_norm, drive=_drive,
        parts=parts, eta=_itrsa_eta, norms=lambda loop: _module_norms(loop.model.norm),
        injection="C = embed(puzzle digits) + row/column/box position embeddings, the same at every loop; "
                  "attention = MSA(X); mlp (config.mlp_ratio > 0) = the per-cell MLP")


def _drive(loop, x):
    return loop.drive(x)


def _itrsa_eta(loop):
    return loop.model.config.eta


def _itrsa_pre_norm(loop, x):
    return x + loop.model.config.eta * loop.drive(x)


def _itrsa_attention(loop, x):
    return loop.model.attention(x)


def _itrsa_mlp(loop, x):
    return loop.model.mlp(x)


def _itrsa_injection(loop, x):
    return loop.model.injection(loop.input_ids).expand_as(x)


# ---------------------------------------------------------------------------------------------- AKOrN model loop
def _akorn_loop(loop: nn.Module) -> LoopAnatomy | None:
    model = getattr(loop, "model", None)
    if not (_has(model, "coupling", "gamma", "omega", "rotation", "normalize", "drive", "injection")
            and hasattr(loop, "input_ids") and hasattr(getattr(model, "config", None), "oscillator_dim")):
        return None
    additive = getattr(model, "drive_gain", None) is None
    return LoopAnatomy(
        family="akorn-loop", form="oscillator", inner=_akorn_direction, pre_norm=_akorn_pre_norm, drive=_drive,
        parts={"attention": _akorn_coupling, "injection": _akorn_injection} if additive else None,
        eta=lambda loop: loop.model.gamma,
        norms=lambda loop: [NormCandidate("sphere", group=int(loop.model.config.oscillator_dim))],
        injection="c = embed(puzzle digits) + row/column/box unit embeddings (the conditioning), the same at every "
                  "loop; attention = the coupling J(x) (self-attention with 2-D rotary positions). The rotation "
                  "Omega x is no part of the drive y = J(x) + c, as in AKOrN's logged energy",
        parts_refusal="" if additive else (
            "this AKOrN normalizes its drive per oscillator (config.oscillator_norm=True), so y is not the sum "
            "J(x) + c and its pseudo-energy does not split — use jacobiscope.pseudo_energy(states, map) for the "
            "total, or a model with oscillator_norm=False"),
    )


def _akorn_direction(loop, x):
    """``G(x) = Omega x + y - <y, x> x`` per oscillator: the update direction inside AKOrN's normalization."""
    size = int(loop.model.config.oscillator_dim)
    y = loop.drive(x)
    groups_x = x.reshape(*x.shape[:-1], -1, size)
    groups_y = y.reshape(*y.shape[:-1], -1, size)
    tangent = groups_y - (groups_y * groups_x).sum(-1, keepdim=True) * groups_x
    return loop.model.rotation(x) + tangent.reshape(x.shape)


def _akorn_pre_norm(loop, x):
    return x + loop.model.gamma * _akorn_direction(loop, x)


def _akorn_coupling(loop, x):
    return loop.model.coupling(x)


def _akorn_injection(loop, x):
    return loop.model.injection(loop.input_ids).expand_as(x)


# ---------------------------------------------------------------------------- jacobiscope.systems self-attention
def _self_attention(loop: nn.Module) -> LoopAnatomy | None:
    if not (isinstance(getattr(loop, "norm", None), str)
            and _has(loop, "normalize", "gain", "eps", "eta", "attention", "drive", "injection")):
        return None
    return LoopAnatomy(
        family="self-attention", form="normalized-attention", inner=_drive, pre_norm=_eta_pre_norm, drive=_drive,
        parts={"attention": _own_attention, "injection": _own_injection}, eta=lambda loop: loop.eta,
        norms=lambda loop: [NormCandidate(loop.norm, gain=loop.gain, eps=loop.eps)],
        injection="C = the map's injection buffer (zero unless built with injection=True); attention = MSA(X)")


def _eta_pre_norm(loop, x):
    return x + loop.eta * loop.drive(x)


def _own_attention(loop, x):
    return loop.attention(x)


def _own_injection(loop, x):
    return loop.injection.expand_as(x)


# -------------------------------------------------------------------- attention mode of Hugging Face blocks
def _attention_mode(loop: nn.Module) -> LoopAnatomy | None:
    eta = getattr(loop, "eta", None)
    if not (isinstance(getattr(loop, "norm", None), nn.Module) and callable(getattr(loop, "drive", None))
            and isinstance(eta, numbers.Real) and not isinstance(eta, bool)):
        return None
    return LoopAnatomy(
        family="attention-mode", form="normalized-attention", inner=_drive, pre_norm=_eta_pre_norm, drive=_drive,
        parts={"attention": _drive, "injection": _no_injection}, eta=lambda loop: loop.eta,
        norms=lambda loop: _module_norms(loop.norm),
        injection="no injection: the drive is the block's attention (with its output projection), so the "
                  "injection part is zero")


def _no_injection(loop, x):
    return torch.zeros_like(x)


def _module_norms(norm: nn.Module) -> list[NormCandidate]:
    """The readings of a norm module to try, most specific first.

    ItrSA's norm names its kind; ``torch.nn.LayerNorm`` / ``RMSNorm`` are what they say; any other module (the
    RMSNorm classes of Hugging Face families, with ``weight`` or ``1 + weight`` as gain) is tried as a LayerNorm
    first — if its tokens have zero mean both readings match, and the LayerNorm one gives the larger, still valid,
    bound — then as an RMSNorm. The reading is accepted only if it reproduces the step (`matching_norm`).
    """
    kind = getattr(norm, "kind", None)
    if kind == "none":
        return [NormCandidate("none")]
    if isinstance(kind, str):
        kinds = [kind]
    elif isinstance(norm, nn.LayerNorm):
        kinds = ["layernorm"]
    elif isinstance(norm, getattr(nn, "RMSNorm", ())):
        kinds = ["rmsnorm"]
    else:
        kinds = ["layernorm", "rmsnorm"]
    weight = getattr(norm, "weight", None)
    weight = weight if isinstance(weight, torch.Tensor) else None
    bias = getattr(norm, "bias", None)
    bias = bias if isinstance(bias, torch.Tensor) else None
    gains = [weight] if weight is None else [weight, 1 + weight]
    eps = next((float(value) for value in (getattr(norm, name, None) for name in ("eps", "variance_epsilon", "epsilon"))
                if isinstance(value, numbers.Real) and not isinstance(value, bool)), None)
    return [NormCandidate(kind, gain=gain, bias=bias, eps=eps) for kind in kinds for gain in gains]


def matching_norm(looped_map: LoopedMap, anatomy: LoopAnatomy, x: torch.Tensor, z: torch.Tensor, out: torch.Tensor,
                  what: str) -> NormCandidate:
    """The first reading of the norm that turns the pre-norm state ``z`` into the step's output ``out``."""
    candidates = call_on_loop(looped_map, lambda loop, _: anatomy.norms(loop), x)
    scale = 1.0 + float(out.detach().abs().max())
    errors = []
    for candidate in candidates:
        error = float((candidate.apply(z) - out).abs().max())
        if error <= _MATCH_RTOL * scale:
            return candidate
        errors.append(f"{candidate.kind} ({error:.1e})")
    norm = getattr(looped_map.module, "norm", None)
    raise ArgumentError(
        f"{what}: the step of '{looped_map.name}' is not Norm(X + eta * Y(X)) with its norm read as "
        f"{' or '.join(errors)} (max deviation from the step) — its norm ({type(norm).__name__}) must be an RMSNorm "
        "or a LayerNorm with an elementwise gain over the last dimension, applied once after the residual. Use the "
        "attention mode of a family whose norm is one of those, or a map whose forward is norm(x + eta * drive(x)).")


def per_trajectory_min(values: torch.Tensor, batch_dims: int) -> torch.Tensor:
    """The minimum over everything but the leading ``batch_dims`` dimensions."""
    batch_shape = values.shape[:batch_dims]
    return values.reshape(*batch_shape, -1).min(-1).values
