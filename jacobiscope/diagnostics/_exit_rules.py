"""Published exit rules replayed offline on one stored trajectory: when each would stop, and what the model says
and scores there — so rules are compared at matched compute (accuracy against mean loops spent).

Example::

    >>> import torch
    >>> from jacobiscope.diagnostics._exit_rules import exit_signals, replay_rule
    >>> states = torch.tensor([[1.0], [0.5], [0.3], [0.29], [0.289]], dtype=torch.float64)   # settles
    >>> signals = exit_signals(states, logits=None, gates=None)
    >>> [round(v, 3) for v in signals["residual"]]         # ||x_t - x_{t-1}|| / ||x_{t-1}||, t = 1..4
    [0.5, 0.4, 0.033, 0.003]
    >>> replay_rule(signals["residual"], 0.05, below=True)   # the first loop whose change is below 0.05
    3

The rules, each read at loops ``t = 1..L`` (the exit is the first loop that meets it, else ``L``):

- ``residual``: the relative state change ``||x_t - x_{t-1}|| / ||x_{t-1}||`` below the threshold (fixed-point
  halting: the residual ``||F(x) - x||`` of the state the loop just left);
- ``kl``: the mean KL between successive readouts ``KL(p_t || p_{t-1})`` below the threshold (Huginn's criterion);
- ``entropy``: the mean entropy of ``p_t`` below the threshold;
- ``confidence``: the mean largest probability of ``p_t`` at or above the threshold;
- ``gate``: the model's own exit gate (Ouro's learned exit: the cumulative exit probability
  ``1 - prod_{k<=t} (1 - lambda_k)``, averaged over positions) at or above the threshold; a map whose gate is a
  halting head (TRM's Q-head) is read the same way.

Means are over the readout's positions. Each rule's replay gives the exit loop; the diagnostic adds the model's
quality score and the readout's agreement with the last loop there.
"""
from __future__ import annotations

import math

import torch

__all__ = ["RULE_THRESHOLDS", "exit_signals", "replay_rule", "BELOW", "exit_rule_tradeoffs", "best_rule_by_compute"]

#: each rule's default threshold range (from permissive to strict)
RULE_THRESHOLDS = {
    "residual": (1e-1, 3e-2, 1e-2, 3e-3, 1e-3, 1e-4),
    "kl": (1e-1, 3e-2, 1e-2, 1e-3, 1e-4, 1e-5),
    "entropy": (1.0, 0.5, 0.2, 0.1, 0.05, 0.01),
    "confidence": (0.5, 0.7, 0.8, 0.9, 0.95, 0.99),
    "gate": (0.3, 0.5, 0.7, 0.9, 0.95, 0.99),
}
#: True: the rule exits when its signal falls below the threshold; False: when it reaches it
BELOW = {"residual": True, "kl": True, "entropy": True, "confidence": False, "gate": False}


def exit_signals(states: torch.Tensor, logits: torch.Tensor | None, gates: torch.Tensor | None) -> dict:
    """Each rule's signal at loops ``1..L`` (lists of ``L`` floats) from a trajectory ``[L + 1, *state]``, its
    readout logits ``[L + 1, positions, classes]`` (None: no readout rules) and its gate ``[L + 1, positions]``
    (exit probabilities; None: no gate rule)."""
    flat = states.reshape(states.shape[0], -1).to(torch.float64)
    change = (flat[1:] - flat[:-1]).norm(dim=-1) / flat[:-1].norm(dim=-1).clamp_min(1e-30)
    signals = {"residual": change.tolist()}
    if logits is not None:
        log_p = torch.log_softmax(logits.to(torch.float64), dim=-1)
        p = log_p.exp()
        kl = (p[1:] * (log_p[1:] - log_p[:-1])).sum(-1).mean(-1)
        entropy = -(p * log_p).sum(-1).mean(-1)
        confidence = p.max(-1).values.mean(-1)
        signals.update(kl=kl.tolist(), entropy=entropy[1:].tolist(), confidence=confidence[1:].tolist())
    if gates is not None:
        lam = gates.to(torch.float64).clamp(0.0, 1.0)[1:]
        # Ouro: the probability of having exited by loop t is 1 - prod_{k <= t} (1 - lambda_k), per position
        exited = 1.0 - torch.cumprod(1.0 - lam, dim=0)
        signals["gate"] = exited.reshape(exited.shape[0], -1).mean(-1).tolist()
    return {name: [value if math.isfinite(value) else math.nan for value in values]
            for name, values in signals.items()}


def replay_rule(signal: list, threshold: float, *, below: bool) -> int:
    """The exit loop (1-based: ``signal[t - 1]`` is loop ``t``): the first that meets the threshold, else the last.
    A NaN never meets it."""
    for t, value in enumerate(signal, 1):
        if (value < threshold) if below else (value >= threshold):
            return t
    return len(signal)


def exit_rule_tradeoffs(results: list) -> list[dict]:
    """Aggregate halting results (one per input) into one point per (rule, threshold) — ``mean_loops``, ``score``
    (the mean quality at exit, or the mean agreement with the last loop when there is no quality), ``on_front``
    (no other point spends fewer or equal loops for a higher or equal score, one of them strictly) — plus the
    fixed-depth baseline (rule ``"fixed"``, threshold = the loop count). Inputs must share their loop count."""
    results = [r for r in results if r is not None and getattr(r, "sequence_rules", None)]
    if not results:
        return []
    by_quality = all(r.quality for r in results)
    points: dict = {}
    for result in results:
        for entry in result.sequence_rules:
            value = entry["quality"] if by_quality else entry["agreement"]
            points.setdefault((entry["rule"], entry["threshold"]), []).append((entry["exit"], value))
    if by_quality:
        loops = min(len(r.quality) for r in results)
        for t in range(1, loops):
            points[("fixed", float(t))] = [(t, r.quality[t]) for r in results]
    rows = []
    for (rule, threshold), pairs in points.items():
        values = [v for _, v in pairs if v is not None and math.isfinite(v)]
        rows.append({"rule": rule, "threshold": threshold, "mean_loops": sum(e for e, _ in pairs) / len(pairs),
                     "score": sum(values) / len(values) if values else math.nan, "inputs": len(pairs)})
    for row in rows:
        row["on_front"] = math.isfinite(row["score"]) and not any(
            other is not row and math.isfinite(other["score"]) and other["mean_loops"] <= row["mean_loops"]
            and other["score"] >= row["score"] and (other["mean_loops"] < row["mean_loops"]
                                                     or other["score"] > row["score"]) for other in rows)
    return sorted(rows, key=lambda r: (r["rule"], r["mean_loops"]))


def best_rule_by_compute(tradeoffs: list, budgets) -> list[dict]:
    """For each compute budget (mean loops), the rule and threshold with the highest score within it."""
    out = []
    for budget in budgets:
        within = [r for r in tradeoffs if r["mean_loops"] <= budget + 1e-9 and math.isfinite(r["score"])]
        if within:
            best = max(within, key=lambda r: (r["score"], -r["mean_loops"]))
            out.append({"budget": budget, **{k: best[k] for k in ("rule", "threshold", "mean_loops", "score")}})
    return out
