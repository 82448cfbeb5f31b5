"""The loop lens: what the model says at every loop (its own readout) next to what its dynamics do at that loop.

Example::

    >>> import torch
    >>> from jacobiscope.diagnostics._loop_lens import readout_statistics
    >>> logits = torch.tensor([[[2.0, 0.0]], [[0.0, 2.0]], [[0.0, 3.0]]], dtype=torch.float64)  # [loops+1, P, V]
    >>> stats = readout_statistics(logits, top_k=1)
    >>> stats["flip_loop"].tolist(), stats["top_ids"][:, 0, 0].tolist(), float(stats["kl_final"][2, 0])
    ([1], [0, 1, 1], 0.0)

The numbers shared by `jacobiscope.loop_lens` (any model with a readout, any loop count) and the registered
diagnostic ``"loop_lens"`` (the measured trajectory of an `analyze` row): per loop ``t`` and output position, the
readout's entropy, ``KL(p_final || p_t)``, ``KL(p_{t-1} || p_t)``, top-k tokens, and the loop where the argmax last
changes; per loop, ``||J||_2`` at ``X_t`` (Lanczos, matrix-free), the one-step expansion rate ``log ||J_t v_t||`` of
a unit tangent ``v_t`` propagated along the trajectory (``v_{t+1} = J_t v_t / ||J_t v_t||``: its running mean is
the top finite-time Lyapunov exponent), and the spectral radius ``|lambda_max(J_t)|``.
"""
from __future__ import annotations

import logging
import math
import warnings
from dataclasses import dataclass, field

import torch

from .._values import _finite_or_nan
from ..errors import ConvergenceWarning
from ._base import Diagnostic, MeasureContext, Option
from ._result import DiagnosticResult

logger = logging.getLogger(__name__)

__all__ = ["LoopLensMeasurement", "LoopLensDiagnostic", "readout_statistics", "loop_dynamics", "first_expansive"]


def readout_statistics(logits: torch.Tensor, top_k: int = 5) -> dict:
    """Per loop and output position, from logits ``[loops + 1, P, V]`` (float64 advised): ``entropy``,
    ``kl_final`` (``KL(p_last || p_t)``), ``kl_prev`` (``KL(p_{t-1} || p_t)``, NaN at loop 0), ``top_ids`` and
    ``top_probs`` ``[loops + 1, P, k]``, ``argmax`` ``[loops + 1, P]``; per position ``flip_loop``: the last loop
    whose argmax differs from the loop before (0: the answer never changes). Nats throughout."""
    log_p = torch.log_softmax(logits, dim=-1)
    p = log_p.exp()
    # 0 * log 0 is 0: a saturated softmax (p = 0 where log_p = -inf) must not give NaN.
    entropy = -torch.where(p > 0, p * log_p, torch.zeros_like(p)).sum(-1)

    def kl(reference_log, log_q):
        reference = reference_log.exp()
        return torch.where(reference > 0, reference * (reference_log - log_q), torch.zeros_like(reference)).sum(-1)

    kl_final = kl(log_p[-1:].expand_as(log_p), log_p)
    kl_prev = torch.full_like(entropy, math.nan)
    if len(logits) > 1:
        kl_prev[1:] = kl(log_p[:-1], log_p[1:])
    k = max(1, min(int(top_k), logits.shape[-1]))
    top_probs, top_ids = p.topk(k, dim=-1)
    argmax = top_ids[..., 0]
    changed = argmax[1:] != argmax[:-1]  # [loops, P]
    loops = torch.arange(1, len(logits), device=logits.device).unsqueeze(-1).expand_as(changed)
    flip_loop = torch.where(changed, loops, torch.zeros_like(loops)).amax(0) if len(logits) > 1 else (
        torch.zeros(logits.shape[1], dtype=torch.long))
    return {"entropy": entropy, "kl_final": kl_final, "kl_prev": kl_prev, "top_ids": top_ids, "top_probs": top_probs,
            "argmax": argmax, "flip_loop": flip_loop}


def _first(value: torch.Tensor) -> float:
    return float(value.detach().reshape(-1)[0])


def loop_dynamics(looped, states, *, jacobian_every: int = 1, radius: bool = True, seed: int = 0,
                  tol: float = 1e-3, max_iter: int = 100) -> dict:
    """Per loop ``t`` of ``states`` (each in the map's own layout, one trajectory): ``spectral_norm`` (``||J_t||_2``
    at every ``jacobian_every``-th loop and the last, NaN between), ``spectral_radius`` (same loops; NaN when
    ``radius`` is False), ``expansion_rate`` (``log ||J_t v_t||`` of the propagated unit tangent, every loop).

    Costs per loop one jvp, plus at the sampled loops a Lanczos run (``2 x iterations`` products) and an eigenvalue
    estimate (dense for a small state, Arnoldi otherwise)."""
    from ..linalg import jacobian_eigenvalues, jvp, spectral_norm

    count = len(states)
    sampled = set(range(0, count, max(1, int(jacobian_every)))) | {count - 1}
    norms, radii, rates = [math.nan] * count, [math.nan] * count, [math.nan] * count
    generator = torch.Generator().manual_seed(int(seed))
    tangent = torch.randn(states[0].shape, generator=generator, dtype=torch.float64).to(states[0])
    tangent, start = tangent / tangent.norm(), None
    for t in range(count):
        x = states[t]
        if not bool(torch.isfinite(x).all()):
            break  # past a NaN/Inf state nothing is measured (the lens's own finite check says where)
        with torch.no_grad():
            pushed = jvp(looped, x, tangent)
        growth = float(pushed.norm())
        rates[t] = math.log(growth) if growth > 0 and math.isfinite(growth) else (-math.inf if growth == 0 else math.nan)
        if growth > 0 and math.isfinite(growth):
            tangent = pushed / growth
        if t in sampled:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)  # tol 1e-3: a lens estimate, not a proof
                # warm start from the last sampled loop's top singular vector: nearby states share it, so Lanczos
                # needs fewer products
                found = spectral_norm(looped, x, tol=tol, max_iter=max_iter, seed=seed, v0=start)
                norms[t], start = _first(found.value), found.right_vector
                if radius:
                    values = jacobian_eigenvalues(looped, x, k=1, seed=seed).values
                    radii[t] = float(values.abs().reshape(-1).max()) if values.numel() else math.nan
    logger.debug("loop lens dynamics: %d loops, ||J|| at %d of them", count, len(sampled))
    return {"spectral_norm": norms, "spectral_radius": radii, "expansion_rate": rates}


EXPANSIVE_WINDOW = 3


def first_expansive(rates, window: int = EXPANSIVE_WINDOW) -> int | None:
    """The first loop ``k`` from which a carried perturbation grows: loop ``k`` stretches it (rate above 0) and so do
    the next ``window`` loops on average (the mean rate over ``k .. k + window - 1`` is above 0; None: never).

    Smoothed because one loop's rate is noisy: a single stretching step inside a contracting run (or the first step
    of a random tangent, not yet aligned with the growing direction) is not "the map became expansive". The window
    shrinks at the end of the trajectory, so the last loops are judged on what is measured.

    >>> first_expansive([-0.5, 0.2, -0.5, 0.3, 0.4, 0.1])
    3
    """
    values = [float(rate) if isinstance(rate, (int, float)) else float("nan") for rate in rates]
    window = max(1, int(window))
    for start in range(len(values)):
        chunk = [v for v in values[start:start + window] if v == v]
        if values[start] > 0 and sum(chunk) / len(chunk) > 0:
            return start
    return None


@dataclass
class LoopLensMeasurement(DiagnosticResult):
    """The loop lens of one trajectory, per loop ``t = 0..`` the last finite loop (means over output positions).

    Attributes:
        entropy, kl_final, kl_prev: the readout's mean entropy, ``KL(p_last || p_t)``, ``KL(p_{t-1} || p_t)``
            (nats; ``kl_prev[0]`` None).
        agreement: share of positions whose argmax at ``t`` is the last loop's.
        gate: the mean exit-gate probability per loop (a map whose info exposes a ``gate``), else empty.
        spectral_norm, spectral_radius: ``||J_t||_2`` and ``|lambda_max(J_t)|`` at every ``lens_every``-th loop
            and the last (None between: not measured).
        expansion_rate: ``log ||J_t v_t||`` of the propagated unit tangent (> 0: the map stretches it at ``t``).
        step_size: ``||X_{t+1} - X_t|| / ||X_t||``, ``t = 0..loops - 1``.
        flip_loop: the last loop at which any position's argmax changes (0: never).
        expansive_loop: the first loop with a rate above 0 whose mean rate over it and the next 2 loops is too
            (``first_expansive``; None: never).
    """

    entropy: list = field(default_factory=list)
    kl_final: list = field(default_factory=list)
    kl_prev: list = field(default_factory=list)
    agreement: list = field(default_factory=list)
    gate: list = field(default_factory=list)
    spectral_norm: list = field(default_factory=list)
    spectral_radius: list = field(default_factory=list)
    expansion_rate: list = field(default_factory=list)
    step_size: list = field(default_factory=list)
    flip_loop: int = 0
    expansive_loop: int | None = None

    headers = ("answer flips at", "first expansive")
    glossary = {"answer flips at": ("loop", "the last loop at which the readout's argmax changes at any position "
                                            "(0: the answer never changes along the loop)."),
                "first expansive": ("loop", "the first loop at which a tangent propagated along the trajectory grows "
                                           "(one-step expansion rate > 0; - never).")}
    panels = 2
    figure_size = (11.0, 4.2)

    def columns(self) -> dict:
        return {"answer flips at": self.flip_loop,
                "first expansive": "-" if self.expansive_loop is None else self.expansive_loop}

    def scalars(self) -> dict:
        finite = [v for v in self.spectral_norm if isinstance(v, (int, float)) and math.isfinite(v)]
        return {"flip_loop": self.flip_loop, "expansive_loop": self.expansive_loop,
                "final_kl_prev": self.kl_prev[-1] if self.kl_prev else None,
                "max_spectral_norm": max(finite) if finite else None}

    @classmethod
    def draw(cls, axes, entries) -> None:
        """Left: KL to the last loop against the loop, the flip loop dashed. Right: ``||J_t||_2`` (dots) and the
        one-step growth ``exp(rate)`` (line) against the loop, the 1 line dotted."""
        from .._figures import legend

        said, done = axes
        for _, result, label, color in entries:
            if result is None:
                continue
            said.plot(range(len(result.kl_final)), _finite_or_nan(result.kl_final), color=color, label=label)
            said.axvline(result.flip_loop, color=color, ls="--", lw=1)
            growth = [math.exp(r) if isinstance(r, (int, float)) and math.isfinite(r) else math.nan
                      for r in result.expansion_rate]
            done.plot(range(len(growth)), growth, color=color, label=label)
            done.plot(range(len(result.spectral_norm)), _finite_or_nan(result.spectral_norm), "o", ms=3,
                      color=color)
        done.axhline(1.0, color="0.5", ls=":", lw=1)
        said.set_xlabel("loop t")
        said.set_ylabel("KL(p_last || p_t) (nats)")
        said.set_title("what the model says: divergence from the last loop (dashed: last flip)")
        done.set_xlabel("loop t")
        done.set_ylabel("growth per loop")
        done.set_title("what its dynamics do: ||J_t||_2 (dots), tangent growth (line)")
        legend(done, len(entries))


class LoopLensDiagnostic(Diagnostic):
    """The loop lens on the measured trajectory: the readout's entropy, KL to the last and previous loop, answer
    flips and exit gate per loop, aligned with ``||J||_2``, the one-step expansion rate and the spectral radius.
    Needs a readout (``looped.info.readout``)."""

    name = "loop_lens"
    description = "the readout at every loop (KL, entropy, flips) next to ||J||_2 and the expansion rate"
    result_type = LoopLensMeasurement
    default = False
    options = {
        "lens_every": Option("count", 1, maximum=100_000, doc="||J||_2 and the spectral radius at every N-th loop"),
        "lens_radius": Option("flag", True, doc="estimate the spectral radius |lambda_max(J)| at the sampled loops"),
    }

    def cost(self, state_size, loops, options):
        sampled = loops // max(1, int(options.get("lens_every", 1))) + 1
        return {"forward": 0.2 * (loops + 1), "jvp": loops + 1 + 40 * sampled, "vjp": 40 * sampled}

    def compute(self, context: MeasureContext):
        from ._loop_depth import readout_logits

        info = context.looped.info
        if not callable(info.readout):
            context.flags.append("loop_lens needs a readout (looped.info.readout: state -> logits)")
            return None
        states = context.states[: context.last_finite + 1]
        own = (lambda state: state) if info.unbatched_original else (lambda state: state.unsqueeze(0))
        with torch.no_grad():
            logits = [readout_logits(info.readout, own(state), t) for t, state in enumerate(states)]
            gate = gate_function(context.looped)
            gates = [float(torch.as_tensor(gate(own(state)), dtype=torch.float64).mean()) for state in states] if (
                gate is not None) else []
        stats = readout_statistics(torch.stack([value.reshape(-1, value.shape[-1]) for value in logits]), 1)
        dynamics = loop_dynamics(context.looped, [states[t: t + 1] for t in range(len(states))],
                                 jacobian_every=context.options.get("lens_every", 1),
                                 radius=context.options.get("lens_radius", True), seed=context.options.get("seed", 0))
        agreement = (stats["argmax"] == stats["argmax"][-1]).to(torch.float64).mean(-1)
        return LoopLensMeasurement(
            entropy=stats["entropy"].mean(-1).tolist(), kl_final=stats["kl_final"].mean(-1).tolist(),
            kl_prev=_said(stats["kl_prev"].mean(-1).tolist()), agreement=agreement.tolist(), gate=gates,
            spectral_norm=_said(dynamics["spectral_norm"]), spectral_radius=_said(dynamics["spectral_radius"]),
            expansion_rate=_said(dynamics["expansion_rate"]), step_size=list(context.step_size[: len(states) - 1]),
            flip_loop=int(stats["flip_loop"].max()), expansive_loop=first_expansive(dynamics["expansion_rate"]))


def _said(values) -> list:
    """NaN (not measured: loop 0's previous loop, a loop between the sampled ones) as None, which a report's JSON
    keeps as null and reads back equal (NaN != NaN)."""
    return [None if isinstance(value, float) and math.isnan(value) else value for value in values]


def gate_function(looped):
    """The map's exit gate, ``state -> probability of exiting`` (per output position, or one number), where its
    info exposes one: a ``gate`` entry of its meta extras (what a family recurrence with an early-exit gate sets),
    or a ``gate`` attribute of its `MapInfo`; None otherwise."""
    gate = getattr(getattr(looped, "info", None), "gate", None)
    if gate is None:
        meta = getattr(looped, "meta", None)
        gate = meta.get("gate") if meta is not None and hasattr(meta, "get") else None
    return gate if callable(gate) else None
