"""Per-token convergence along the loop, and offline replay of exit rules (how many loops an early exit saves, and
how often it agrees with the full run)."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .._values import _finite_or_nan

from ._base import Diagnostic, MeasureContext, Option, token_rows
from ._result import DiagnosticResult


@dataclass
class HaltingMeasurement(DiagnosticResult):
    """Per-token relative change ``||x_{t+1,i} - x_{t,i}|| / ||x_{t,i}||`` along the loop (its ``median`` and
    ``max`` over tokens per loop), and one replay per threshold: each token exits at the first loop whose change is
    below the threshold (the full count otherwise); ``mean_exit`` (loops), ``loops_saved`` (share of the loops not
    run), ``agreement`` (share of tokens whose output at exit equals the output after all loops: the readout's
    argmax when the map has one, else the state within ``halting_agree_rtol`` of the final one). ``tokens``: how
    many a state holds, read as every diagnostic reads them (`token_rows`: the last axis is the features, so
    ``[T, H]`` and a model's own ``[1, T, H]`` both hold ``T``).

    Exit rules for the whole input (`jacobiscope.diagnostics._exit_rules`: residual, KL between successive
    readouts, entropy, confidence, the model's own exit gate), each over its threshold range: ``sequence_rules``,
    one ``{rule, threshold, exit, quality, agreement}`` per rule and threshold (the exit loop, the map's quality
    score there, the share of readout positions agreeing with the last loop); ``quality``: the score at every loop
    (the fixed-depth baseline). Across inputs, `exit_rule_tradeoffs` gives accuracy against mean loops spent."""

    tokens: int
    median_change: list
    max_change: list
    rules: list = field(default_factory=list)
    agreement_by: str = "state"
    quality: list = field(default_factory=list)
    sequence_rules: list = field(default_factory=list)

    glossary = {"agrees": ("% of tokens", "share of tokens whose output at their exit equals the output after all "
                                          "loops (first halting threshold).")}
    panels = 3
    figure_size = (15.0, 4.2)

    def columns(self) -> dict:
        if not self.rules:
            return {}
        rule = self.rules[0]
        return {f"exit@{rule['threshold']:g} saves": f"{100 * rule['loops_saved']:.0f}%",
                "agrees": f"{100 * rule['agreement']:.0f}%"}

    def scalars(self) -> dict:
        rule = self.rules[0] if self.rules else {}
        return {"tokens": self.tokens, "threshold": rule.get("threshold"), "loops_saved": rule.get("loops_saved"),
                "agreement": rule.get("agreement"), "agreement_by": self.agreement_by}

    @classmethod
    def draw(cls, axes, entries) -> None:
        """Left: the median (solid) and largest (dashed) per-token relative change against the loop. Right: loops
        saved against agreement, one point per exit threshold."""
        from .._figures import legend

        change, trade, matched = axes
        for _, result, label, color in entries:
            if result is None:
                continue
            loops = range(1, len(result.median_change) + 1)
            change.plot(loops, _finite_or_nan(result.median_change), color=color, label=label)
            change.plot(loops, _finite_or_nan(result.max_change), color=color, ls="--", lw=1)
            trade.plot([r["loops_saved"] for r in result.rules], [r["agreement"] for r in result.rules], "o-",
                       color=color, label=label)
        change.set_yscale("log")
        change.set_xlabel("loop t")
        change.set_ylabel("relative change per token")
        change.set_title("token convergence: median (solid), max (dashed)")
        trade.set_xlabel("share of loops saved")
        trade.set_ylabel("agreement with the full run")
        trade.set_title("exit rules: one point per threshold")
        legend(trade, len(entries))
        _draw_matched(matched, [entry.result for entry in entries])


class Halting(Diagnostic):
    """Token convergence and exit-rule replay on the measured trajectory (no extra forwards, unless the map has a
    readout). Thresholds: ``options["halting_thresholds"]`` (default 1e-2, 1e-3, 1e-4)."""

    name = "halting"
    description = "per-token convergence and exit-rule replay: loops saved vs agreement"
    figure_caption = ("Halting: per-token convergence against the loop (left), the per-token exit rules' loops "
                      "saved against agreement with the full run (middle), and the whole-input exit rules at "
                      "matched compute — quality against the mean loops spent, one point per threshold, the Pareto "
                      "front ringed (right).")
    result_type = HaltingMeasurement
    default = False
    options = {
        "halting_thresholds": Option("thresholds", (1e-2, 1e-3, 1e-4), maximum=64,
                                     doc="relative-change thresholds, one exit-rule replay each"),
        "halting_agree_rtol": Option("tolerance", 1e-2, doc="state agreement tolerance when there is no readout"),
    }

    def cost(self, state_size, loops, options):
        return {"forward": 0.05 * (loops + 1)}

    def compute(self, context: MeasureContext):
        states = context.states[: context.last_finite + 1].detach()
        if states.shape[0] < 2:
            return None
        readout = context.looped.info.readout
        # The readout runs once per loop: its logits serve both the token replay (argmax) and the exit rules.
        logits = _logits(readout, states, context.looped.info) if callable(readout) else None
        outputs = logits.argmax(-1) if logits is not None else None
        # One row per token (`token_rows`): a model's own loop keeps its batch axis of one in the state
        # ([1, T, H]); reading the state's first axis as the tokens made 12 tokens one, and the agreement 1 of 12.
        tokens = token_rows(states, None if outputs is None else outputs.shape[1])
        if tokens is None:
            from ..errors import StepOutputError

            raise StepOutputError(f"the map's readout (info.readout) gives {outputs.shape[1]} predictions per state, "
                                  f"but no leading axes of the state {list(states.shape[1:])} hold that many tokens "
                                  "— the readout must give one prediction per token ([..., tokens, classes])")
        change = (tokens[1:] - tokens[:-1]).norm(dim=-1) / tokens[:-1].norm(dim=-1).clamp_min(1e-30)  # [T, n]
        rtol = float(context.options.get("halting_agree_rtol", 1e-2))
        rules = [_replay(float(threshold), change, tokens, outputs, rtol)
                 for threshold in context.options.get("halting_thresholds", (1e-2, 1e-3, 1e-4))]
        quality, sequence = _sequence_rules(context, states, logits)
        return HaltingMeasurement(tokens=int(tokens.shape[1]), median_change=change.median(dim=1).values.tolist(),
                                  max_change=change.max(dim=1).values.tolist(), rules=rules,
                                  agreement_by="readout" if outputs is not None else "state", quality=quality,
                                  sequence_rules=sequence)


def _sequence_rules(context: MeasureContext, states: torch.Tensor, logits) -> tuple[list, list]:
    """The quality per loop and every exit rule's replay over its thresholds (whole-input exits); ``logits``: the
    readout's ``[loops + 1, positions, classes]`` or None."""
    from ._exit_rules import BELOW, RULE_THRESHOLDS, exit_signals, replay_rule
    from ._loop_depth import _score
    from ._loop_lens import gate_function

    info = context.looped.info
    own = (lambda state: state) if info.unbatched_original else (lambda state: state.unsqueeze(0))
    gates = None
    with torch.no_grad():
        gate = gate_function(context.looped)
        if gate is not None:
            gates = torch.stack([torch.as_tensor(gate(own(state)), dtype=torch.float64).reshape(-1)
                                 for state in states])
        quality = [_score(info.quality, own(state), t) for t, state in enumerate(states)] if callable(
            info.quality) else []
    signals = exit_signals(states, logits, gates)
    argmax = logits.argmax(-1) if logits is not None else None
    out = []
    for rule, signal in signals.items():
        for threshold in RULE_THRESHOLDS[rule]:
            exit_loop = replay_rule(signal, threshold, below=BELOW[rule])
            agreement = float((argmax[exit_loop] == argmax[-1]).to(torch.float64).mean()) if argmax is not None \
                else None
            out.append({"rule": rule, "threshold": threshold, "exit": exit_loop,
                        "quality": quality[exit_loop] if quality else None, "agreement": agreement})
    return quality, out


def _draw_matched(ax, results: list) -> None:
    """Accuracy (the quality score, else the agreement with the last loop) against mean loops spent, one line per
    rule over its thresholds, the fixed depths dashed, the points on the Pareto front ringed."""
    from .._figures import legend, no_data
    from ._exit_rules import exit_rule_tradeoffs

    tradeoffs = exit_rule_tradeoffs(results)
    if not tradeoffs:
        no_data(ax, "no whole-input exit rules in this report")
        return
    rules = sorted({row["rule"] for row in tradeoffs})
    for rule in rules:
        points = sorted((r for r in tradeoffs if r["rule"] == rule), key=lambda r: r["mean_loops"])
        ax.plot([p["mean_loops"] for p in points], [p["score"] for p in points], "--" if rule == "fixed" else "o-",
                lw=1, ms=3, label=rule)
    front = [r for r in tradeoffs if r["on_front"]]
    ax.scatter([r["mean_loops"] for r in front], [r["score"] for r in front], s=60, facecolors="none",
               edgecolors="k", lw=0.8)
    ax.set_xlabel("mean loops spent")
    ax.set_ylabel("quality at exit" if all(r.quality for r in results if r is not None) else "agreement")
    ax.set_title("exit rules at matched compute (ringed: Pareto front)")
    legend(ax, len(rules))


def _logits(readout, states: torch.Tensor, info) -> torch.Tensor:
    """The readout's logits at every loop: ``[T+1, positions, classes]`` (one shape along the loop, or refused)."""
    from ._loop_depth import readout_logits

    # The readout takes a state as the map's own step does: with its batch dimension of one, or none (as loop_depth).
    own = (lambda state: state) if info.unbatched_original else (lambda state: state.unsqueeze(0))
    with torch.no_grad():
        values = [readout_logits(readout, own(state), t) for t, state in enumerate(states)]
    shapes = sorted({tuple(value.shape) for value in values})
    if len(shapes) > 1:
        from ..errors import StepOutputError

        raise StepOutputError(f"the map's readout (info.readout) returned logits of different shapes along the loop "
                              f"({shapes}) — it must give the same [..., positions, classes] at every loop")
    logits = torch.stack(values)
    return logits.reshape(logits.shape[0], -1, logits.shape[-1])


def _replay(threshold: float, change: torch.Tensor, tokens: torch.Tensor, outputs, rtol: float) -> dict:
    loops = change.shape[0]
    below = change < threshold
    # Exit after the first loop whose change is below the threshold; tokens that never get there run all loops.
    exits = torch.where(below.any(0), below.to(torch.int64).argmax(0) + 1, torch.full_like(below[0], loops,
                                                                                         dtype=torch.int64))
    columns = torch.arange(tokens.shape[1])
    if outputs is not None:
        agree = outputs[exits, columns] == outputs[-1]
    else:
        final = tokens[-1]
        at_exit = tokens[exits, columns]
        agree = (at_exit - final).norm(dim=-1) <= rtol * final.norm(dim=-1).clamp_min(1e-30)
    mean_exit = float(exits.to(torch.float64).mean())
    return {"threshold": threshold, "mean_exit": mean_exit, "loops_saved": 1.0 - mean_exit / loops,
            "agreement": float(agree.to(torch.float64).mean()), "exits": exits.tolist()}
