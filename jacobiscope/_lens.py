"""`loop_lens`: what a looped model says at every loop, next to what its dynamics do there; `intervene`: the same
after replacing, interpolating or noising the state at one loop (activation patching across loop steps).

Example::

    >>> import torch, transformers, jacobiscope
    >>> config = transformers.AlbertConfig(vocab_size=30, embedding_size=8, hidden_size=16, num_hidden_layers=4,
    ...                                    num_attention_heads=2, intermediate_size=32)
    >>> model = transformers.AlbertForMaskedLM(config).eval()
    >>> ids = torch.tensor([[1, 2, 3, 4]])
    >>> lens = jacobiscope.loop_lens(model, ids, loops=8, jacobian_every=4)
    >>> bool(torch.allclose(lens.logits(4), model(input_ids=ids).logits, atol=1e-4))   # configured depth: 4
    True
    >>> lens.kl_final.shape, lens.spectral_norm.shape
    (torch.Size([1, 9, 4]), torch.Size([1, 9]))

Through the model's own readout (``info.readout`` of its recurrence: the final norm and head of HRM-Text, Dory,
ALBERT; a protocol model's ``readout``), at every loop ``t = 0..loops``, per input and output position: the top-k
tokens and probabilities, the entropy, ``KL(p_loops || p_t)``, ``KL(p_{t-1} || p_t)``, the loop at which the argmax
last changes, and the exit gate's probability where the map exposes one (``looped.meta["gate"]``: state ->
probability); aligned on the same loop, the dynamics: the relative step, ``||J_t||_2`` (matrix-free Lanczos), the
one-step expansion rate of a propagated tangent and the spectral radius. See `LoopLens`.

Cost per loop and input: one step and one readout, one jvp (the expansion rate), and at every ``jacobian_every``-th
loop a Lanczos run (up to 100 jvp + vjp pairs; tol 1e-3) and an eigenvalue estimate (``spectral_radius=False``
skips it); ``dynamics=False`` leaves only the steps and readouts. Memory: the states, ``N (loops + 1)`` states, and
with ``keep_logits=True`` (default) the logits, ``N (loops + 1) T V`` numbers — for a large vocabulary pass
``keep_logits=False`` and `LoopLens.logits` recomputes them from the stored state through the readout.
"""
from __future__ import annotations

import logging
import math
import numbers

import torch

from ._lens_result import LoopLens
from ._lens_run import lens_maps, run_lens
from ._validation import nonnegative_int, seed_int
from .errors import ArgumentError

logger = logging.getLogger(__name__)

__all__ = ["LoopLens", "loop_lens", "intervene"]


def loop_lens(model, inputs=None, loops: int | None = None, *, recurrence: str | None = None, top_k: int = 5,
              jacobian_every: int = 1, spectral_radius: bool = True, dynamics: bool = True, keep_logits: bool = True,
              seed: int = 0) -> LoopLens:
    """Read a looped model out at every loop ``t = 0..loops`` and measure its dynamics there (see the module).

    Example::

        >>> import torch, jacobiscope
        >>> m = jacobiscope.LoopedMap(lambda x: 0.5 * x + 1.0, x0=torch.zeros(1, 3, dtype=torch.float64))
        >>> m.info.readout = lambda x: torch.stack([x.sum(-1), -x.sum(-1)], -1)
        >>> lens = jacobiscope.loop_lens(m, loops=4, spectral_radius=False)
        >>> [round(v, 6) for v in lens.spectral_norm[0].tolist()]
        [0.5, 0.5, 0.5, 0.5, 0.5]

    Arguments:
        model: a looped model (``native_loop`` finds its recurrence; one trajectory per input row) or a
            `LoopedMap` whose info has a readout.
        inputs: the model's inputs (a dict of ``model(**inputs)`` keywords, or ``input_ids``); for a `LoopedMap`
            the initial state, or None for its ``x0``.
        loops: the last loop read out (default: the configured depth); past it the lens keeps looping.
        recurrence: which of the model's recurrences (`list_recurrences`; default its first).
        top_k: how many top tokens per position. jacobian_every: ``||J||_2`` and the spectral radius at every
            N-th loop (and the last). spectral_radius, dynamics: measure them. keep_logits: keep every loop's
            logits (else recomputed on demand). seed: of the Lanczos and tangent start vectors, and of the model's
            forward where it draws random numbers (Huginn's initial state: input row r under seed + r).
    """
    return run_lens(model, inputs, loops, recurrence=recurrence, top_k=top_k, jacobian_every=jacobian_every,
                    spectral_radius=spectral_radius, dynamics=dynamics, keep_logits=keep_logits, seed=seed)


def intervene(model, inputs=None, *, at_loop: int, replace=None, interpolate=None, noise=None,
              from_input: int | None = None, loops: int | None = None, baseline: bool = False, seed: int = 0,
              **lens_options) -> LoopLens:
    """Change the state at loop ``at_loop`` and read the model out at every loop after it: a `LoopLens` of the
    patched run (its ``intervention`` says what was done; ``baseline=True`` also runs the unpatched lens into
    ``lens.baseline``).

    Example::

        >>> import torch, jacobiscope
        >>> m = jacobiscope.LoopedMap(lambda x: 0.5 * x, x0=torch.ones(1, 2, dtype=torch.float64))
        >>> m.info.readout = lambda x: x
        >>> lens = jacobiscope.intervene(m, at_loop=2, replace=torch.tensor([[4.0, 0.0]], dtype=torch.float64),
        ...                              loops=4, dynamics=False)
        >>> lens.state(4).tolist()
        [[1.0, 0.0]]

    Exactly one of:
        replace: a state shaped like ``X_k`` (or a callable ``X_k -> new state``).
        interpolate: ``(other_state, alpha)``: ``X_k <- (1 - alpha) X_k + alpha other_state`` (``alpha = 0``
            leaves the run unchanged, bit for bit).
        noise: ``scale``: ``X_k <- X_k + scale * RMS(X_k) * N(0, 1)`` (seeded by ``seed``; 0 changes nothing).
        from_input: ``j``: every input's ``X_k`` is input ``j``'s own ``X_k`` (its unpatched trajectory) — for a
            map without input injection (ALBERT) the rest of the run is then input ``j``'s.

    ``lens_options``: those of `loop_lens` (``top_k``, ``jacobian_every``, ``dynamics``, ...). The change applies
    to every input of the run.
    """
    chosen = [name for name, value in (("replace", replace), ("interpolate", interpolate), ("noise", noise),
                                       ("from_input", from_input)) if value is not None]
    if len(chosen) != 1:
        raise ArgumentError(f"intervene takes exactly one of replace, interpolate, noise, from_input, got "
                            f"{chosen or 'none'} — pass e.g. noise=0.1")
    at_loop, seed = nonnegative_int(at_loop, "at_loop"), seed_int(seed)
    kind = chosen[0]
    _check_intervention(kind, noise, interpolate)  # before any forward: a NaN scale would only show as a NaN state
    maps = lens_maps(model, inputs, lens_options.get("recurrence"), seed)
    donor = _donor(maps, at_loop, from_input) if kind == "from_input" else None

    def patch_for(index, looped):
        return _patch(kind, replace, interpolate, noise, donor, seed + index)

    lens = run_lens(model, inputs, loops, patch_for=patch_for, patch_loop=at_loop, seed=seed, maps=maps, **lens_options)
    lens.intervention = {"at_loop": at_loop, "kind": kind, "noise": noise, "from_input": from_input,
                         "alpha": interpolate[1] if kind == "interpolate" else None}
    if baseline:
        lens.baseline = run_lens(model, inputs, loops, seed=seed, maps=maps, **lens_options)
    logger.info("intervention %s at loop %d read out over %d loops", kind, at_loop, lens.loops)
    return lens


def _check_intervention(kind: str, noise, interpolate) -> None:
    def finite_number(value):
        return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)

    if kind == "noise" and not (finite_number(noise) and noise >= 0):
        raise ArgumentError(f"noise must be a finite number >= 0 (the scale of the Gaussian kick, in units of the "
                            f"state's RMS), got {noise!r:.60} — pass e.g. noise=0.1")
    if kind == "interpolate":
        if not isinstance(interpolate, (tuple, list)) or len(interpolate) != 2:
            raise ArgumentError(f"interpolate must be (other_state, alpha), got {interpolate!r:.60} — pass e.g. "
                                "interpolate=(lens.state(k, input=1), 0.5)")
        if not finite_number(interpolate[1]):
            raise ArgumentError(f"interpolate's alpha must be a finite number, got {interpolate[1]!r:.60} — pass e.g. "
                                "interpolate=(lens.state(k, input=1), 0.5)")


def _donor(maps, at_loop, from_input):
    """Input ``from_input``'s own (unpatched) state at ``at_loop``, on the maps the patched run uses."""
    from ._lens_run import trajectory

    if isinstance(from_input, bool) or not isinstance(from_input, int) or not 0 <= from_input < len(maps):
        raise ArgumentError(f"from_input must be an input index in 0..{len(maps) - 1}, got {from_input!r} — pass "
                            "the row of inputs whose state to take")
    states = trajectory(maps[from_input][1], at_loop)
    if len(states) <= at_loop:
        raise ArgumentError(f"input {from_input}'s state is NaN/Inf before loop {at_loop} — pick an earlier at_loop")
    return states[at_loop]


def _patch(kind, replace, interpolate, noise, donor, seed):
    """``X_k -> new X_k`` for the chosen intervention, its argument checked against the state when applied."""
    def shaped(value, x, what):
        if not isinstance(value, torch.Tensor) or value.shape != x.shape:
            shown = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
            raise ArgumentError(f"{what} must be a tensor shaped like the state {tuple(x.shape)}, got {shown} — "
                                "pass e.g. lens.state(k, input=j)")
        if not bool(torch.isfinite(value).all()):
            raise ArgumentError(f"{what} contains NaN/Inf — pass a finite state (e.g. lens.state(k, input=j))")
        return value.to(dtype=x.dtype, device=x.device)

    def apply(x):
        if kind == "replace":
            return shaped(replace(x) if callable(replace) else replace, x, "replace")
        if kind == "from_input":
            return shaped(donor, x, "the donor input's state")
        if kind == "interpolate":
            if not isinstance(interpolate, (tuple, list)) or len(interpolate) != 2:
                raise ArgumentError(f"interpolate must be (other_state, alpha), got {interpolate!r:.60} — pass e.g. "
                                    "interpolate=(lens.state(k, input=1), 0.5)")
            other, alpha = shaped(interpolate[0], x, "interpolate's other state"), float(interpolate[1])
            return (1.0 - alpha) * x + alpha * other
        scale = float(noise)
        generator = torch.Generator().manual_seed(seed)
        draw = torch.randn(x.shape, generator=generator, dtype=torch.float64).to(x)
        return x + scale * x.pow(2).mean().sqrt() * draw

    return apply
