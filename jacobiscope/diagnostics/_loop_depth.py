"""The loop-depth sweep: what the model outputs at every loop of one trajectory, against its trained depth."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from ._base import Diagnostic, MeasureContext
from ._result import DiagnosticResult


@dataclass
class LoopDepthMeasurement(DiagnosticResult):
    """Output along the loop, ``t = 0..`` the last finite loop.

    Attributes:
        reference_loop: the depth the outputs are compared with: the map's trained/configured loop count when it
            says (``info.loops``) and the run reaches it, else the last loop.
        kl: ``KL(p_ref || p_t)`` per loop, nats, averaged over output positions (``p = softmax(readout(X_t))``).
        agreement: share of positions whose argmax at loop ``t`` equals the reference's.
        quality: the map's own score per loop (``info.quality``, higher is better: a Sudoku solver's
            solved-or-not), or empty.
        peak_loop, peak: where the quality (else the agreement) is highest, the first such loop.
        collapse_loop: the first loop after the peak where it falls below half the peak (None: it never does).
    """

    reference_loop: int
    kl: list = field(default_factory=list)
    agreement: list = field(default_factory=list)
    quality: list = field(default_factory=list)
    peak_loop: int = 0
    peak: float = math.nan
    collapse_loop: int | None = None

    glossary = {"peak loop": ("loop", "the loop where the output quality (else the agreement with the trained "
                                      "depth) is highest."),
                "collapse": ("loop", "the first loop after the peak where it falls below half the peak (- never).")}
    panels = 2
    figure_size = (11.0, 4.0)

    def columns(self) -> dict:
        return {"peak loop": self.peak_loop, "collapse": "-" if self.collapse_loop is None else self.collapse_loop}

    @classmethod
    def draw(cls, axes, entries) -> None:
        """Left: the quality (or agreement) against the loop, the reference depth dotted. Right: the KL divergence
        from the output at the reference depth."""
        left, right = axes
        for _, result, label, color in entries:
            if result is None:
                continue
            curve = result.quality or result.agreement
            left.plot(range(len(curve)), curve, label=label, color=color)
            right.plot(range(len(result.kl)), result.kl, label=label, color=color)
            left.axvline(result.reference_loop, color="0.6", ls=":", lw=1)
        left.set_xlabel("loop t")
        left.set_ylabel("quality (or agreement with the trained depth)")
        left.set_title("output quality against the loop count")
        right.set_xlabel("loop t")
        right.set_ylabel("KL(p_ref || p_t) (nats)")
        right.set_title("divergence from the output at the trained depth")
        right.legend(fontsize="x-small")


class LoopDepth(Diagnostic):
    """The outputs at every loop from one trajectory (no extra loops): KL divergence and argmax agreement with the
    trained depth, the map's own quality score, the peak and where it collapses. Needs a readout
    (``looped.info.readout``: state -> logits), which the reference solvers and protocol models provide."""

    name = "loop_depth"
    description = "the readout at every loop: KL to the last, answer flips"
    figure_caption = ("Output quality (or agreement with the trained-depth output) against the loop count (left) "
                      "and the mean KL divergence from the output at the trained depth (right).")
    result_type = LoopDepthMeasurement
    default = False

    def cost(self, state_size, loops, options):
        return {"forward": 0.2 * (loops + 1)}

    def compute(self, context: MeasureContext):
        info = context.looped.info
        readout, quality = info.readout, info.quality
        if not callable(readout):
            context.flags.append("loop_depth needs a readout (looped.info.readout: state -> logits)")
            return None
        states = context.states[: context.last_finite + 1]
        trained = info.loops
        usable = isinstance(trained, int) and not isinstance(trained, bool) and 0 < trained
        reference = trained if usable and trained <= context.last_finite else context.last_finite
        if trained is not None and not usable:
            context.flags.append(f"loop_depth: the map's info.loops is {trained!r} ({type(trained).__name__}), not a "
                                 f"loop count — compared with the last loop {reference} instead; set info.loops to "
                                 "the trained depth (an int >= 1)")
        elif usable and trained > context.last_finite:
            context.flags.append(f"loop_depth: the trained depth info.loops={trained} is beyond the measured loops "
                                 f"(last finite loop {context.last_finite}) — compared with loop {reference}; run "
                                 f"loops >= {trained} to compare with the trained depth")
        # The readout takes a state as the map's own step does: with its batch dimension of one, or none.
        own = (lambda state: state) if info.unbatched_original else (lambda state: state.unsqueeze(0))
        with torch.no_grad():
            logits = [readout_logits(readout, own(state), t) for t, state in enumerate(states)]
            scores = [_score(quality, own(state), t) for t, state in enumerate(states)] if callable(quality) else []
        shapes = sorted({tuple(value.shape) for value in logits})
        if len(shapes) > 1:
            from ..errors import StepOutputError

            raise StepOutputError(f"the map's readout (info.readout) returned logits of different shapes along the "
                                  f"loop ({shapes}) — it must give the same [..., classes] at every loop")
        target = torch.log_softmax(logits[reference], dim=-1)
        kl, agreement = [], []
        for value in logits:
            log_p = torch.log_softmax(value, dim=-1)
            kl.append(float((target.exp() * (target - log_p)).sum(-1).mean()))
            agreement.append(float((value.argmax(-1) == logits[reference].argmax(-1)).to(torch.float64).mean()))
        curve = scores or agreement
        finite = [t for t in range(len(curve)) if math.isfinite(curve[t])]
        if not finite:  # every score NaN/Inf: no peak to name (the NaN/Inf flag says why)
            return LoopDepthMeasurement(reference_loop=reference, kl=kl, agreement=agreement, quality=scores,
                                        peak_loop=0, peak=math.nan, collapse_loop=None)
        peak_loop = max(finite, key=lambda t: (curve[t], -t))  # a NaN score never wins (nor breaks) the comparison
        collapse = next((t for t in range(peak_loop + 1, len(curve)) if curve[t] < 0.5 * curve[peak_loop]), None)
        return LoopDepthMeasurement(reference_loop=reference, kl=kl, agreement=agreement, quality=scores,
                                    peak_loop=peak_loop, peak=curve[peak_loop], collapse_loop=collapse)


def readout_logits(readout, state: torch.Tensor, loop: int) -> torch.Tensor:
    """The map's readout (``info.readout``) at one state, checked: a floating tensor of logits ``[..., classes]``
    (what it raises or returns otherwise is named as the readout's, with the loop)."""
    from ..errors import StepError, StepOutputError

    try:
        value = readout(state)
    except Exception as error:
        raise StepError(f"the map's readout (info.readout) raised {type(error).__name__} at loop {loop}: {error} — "
                        "fix the readout: state -> logits [..., classes]") from error
    if not isinstance(value, torch.Tensor) or not value.is_floating_point() or value.dim() < 1 or value.shape[-1] < 1:
        shown = f"a {value.dtype} tensor of shape {list(value.shape)}" if isinstance(value, torch.Tensor) else (
            f"{type(value).__name__} {value!r}"[:80])
        raise StepOutputError(f"the map's readout (info.readout) returned {shown} at loop {loop}, expected a float "
                              "tensor of logits [..., classes] — return the logits, not predictions or a scalar")
    return value.detach().to(torch.float64)


def _score(quality, state: torch.Tensor, loop: int) -> float:
    """The map's own quality score (``info.quality``) at one state: one real number (NaN/Inf kept, then flagged)."""
    from ..errors import StepError, StepOutputError

    try:
        value = quality(state)
    except Exception as error:
        raise StepError(f"the map's quality score (info.quality) raised {type(error).__name__} at loop {loop}: "
                        f"{error} — fix it: state -> one number, higher is better") from error
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_complex():
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)) and not (
            hasattr(value, "dtype") and getattr(value, "ndim", 1) == 0 and value.dtype.kind in "iuf"):
        if isinstance(value, bool):
            return float(value)  # solved / not solved
        shown = f"a tensor of shape {list(value.shape)}" if isinstance(value, torch.Tensor) else (
            f"{type(value).__name__} {value!r}"[:80])
        raise StepOutputError(f"the map's quality score (info.quality) returned {shown} at loop {loop}, expected "
                              "one number — return a float (or a one-element tensor), higher is better")
    return float(value)
