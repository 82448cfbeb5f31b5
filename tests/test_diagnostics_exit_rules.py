"""Whole-input exit rules replayed offline: a trajectory built so that each rule must fire at a known loop (the
state's change, successive-readout KL, entropy, confidence, an Ouro-style exit gate), the quality at exit, and
the matched-compute trade-off with its Pareto front checked on hand-made points."""
import math
from types import SimpleNamespace

import pytest
import torch

import jacobiscope
from jacobiscope.diagnostics._exit_rules import best_rule_by_compute, exit_rule_tradeoffs

F64 = torch.float64


def sharpening_map():
    """x -> 2 x on one coordinate, readout logits [x, 0] for one position: the state doubles (relative change 1 every
    loop), the readout sharpens toward class 0; quality = 1 once p(class 0) > 0.9 (x > ln 9 = 2.197)."""
    looped = jacobiscope.LoopedMap(lambda x: 2.0 * x)
    looped.info.readout = lambda x: torch.stack([x.reshape(-1)[0], torch.zeros((), dtype=x.dtype)]).reshape(1, 2)
    looped.info.quality = lambda x: float(float(x.reshape(-1)[0]) > math.log(9))
    return looped


def test_each_rule_fires_at_the_loop_its_signal_crosses():
    row = jacobiscope.measure(sharpening_map(), torch.tensor([0.25], dtype=F64), loops=6, diagnostics=["halting"])
    result = row.results["halting"]
    x = [0.25 * 2 ** t for t in range(7)]
    p0 = [1 / (1 + math.exp(-v)) for v in x]                 # p(class 0) at each loop
    confidence = [max(p, 1 - p) for p in p0]
    entropy = [-(p * math.log(p) + (1 - p) * math.log(1 - p)) for p in p0]
    assert result.quality == [float(v > math.log(9)) for v in x]
    first = {(e["rule"], e["threshold"]): e for e in result.sequence_rules}
    # confidence >= 0.9 first at loop 4 (x = 4: p = 0.982; loop 3, x = 2: p = 0.881), where the quality is 1
    assert next(t for t in range(1, 7) if confidence[t] >= 0.9) == 4
    assert first[("confidence", 0.9)]["exit"] == 4 and first[("confidence", 0.9)]["quality"] == 1.0
    assert first[("entropy", 0.1)]["exit"] == next(t for t in range(1, 7) if entropy[t] < 0.1)
    # the state never settles (relative change 1 every loop): the residual rule runs every loop
    assert all(e["exit"] == 6 for e in result.sequence_rules if e["rule"] == "residual")
    assert all(e["agreement"] == 1.0 for e in result.sequence_rules)   # class 0 from loop 1 on


def test_an_exit_gate_fires_when_its_cumulative_probability_reaches_the_threshold():
    """lambda = 0.5 every loop: 1 - 0.5^t >= 0.9 first at t = 4, >= 0.99 at t = 7 (Ouro's exit rule)."""
    looped = sharpening_map()
    looped.meta["gate"] = lambda x: torch.full((1,), 0.5, dtype=F64)   # as a family recurrence sets it
    result = jacobiscope.measure(looped, torch.tensor([0.25], dtype=F64), loops=10,
                                 diagnostics=["halting"]).results["halting"]
    gate = {e["threshold"]: e["exit"] for e in result.sequence_rules if e["rule"] == "gate"}
    assert gate[0.9] == 4 and gate[0.99] == 7 and gate[0.5] == 1


def _result(quality, rules):
    return SimpleNamespace(quality=quality, sequence_rules=[
        {"rule": rule, "threshold": threshold, "exit": exit_, "quality": quality[exit_], "agreement": 1.0}
        for rule, threshold, exit_ in rules])


def test_tradeoffs_average_over_inputs_and_mark_the_pareto_front():
    a = _result([0, 0, 1, 1, 1], [("kl", 0.1, 1), ("kl", 0.01, 2), ("entropy", 0.5, 4)])
    b = _result([0, 1, 1, 1, 1], [("kl", 0.1, 1), ("kl", 0.01, 3), ("entropy", 0.5, 2)])
    rows = {(r["rule"], r["threshold"]): r for r in exit_rule_tradeoffs([a, b])}
    assert rows[("kl", 0.1)]["mean_loops"] == 1 and rows[("kl", 0.1)]["score"] == 0.5
    assert rows[("kl", 0.01)]["mean_loops"] == 2.5 and rows[("kl", 0.01)]["score"] == 1.0
    assert rows[("fixed", 2.0)]["score"] == 1.0 and rows[("fixed", 1.0)]["score"] == 0.5
    # fixed depth 2 (2 loops, 100%) dominates kl@0.01 (2.5 loops, 100%) and entropy (3 loops, 100%)
    assert rows[("fixed", 2.0)]["on_front"] and not rows[("kl", 0.01)]["on_front"]
    assert not rows[("entropy", 0.5)]["on_front"]
    assert rows[("kl", 0.1)]["on_front"] and rows[("fixed", 1.0)]["on_front"]   # equal points: neither dominates
    best = best_rule_by_compute(exit_rule_tradeoffs([a, b]), [1, 2, 4])
    assert [(b_["rule"], b_["score"]) for b_ in best] == [("fixed", 0.5), ("fixed", 1.0), ("fixed", 1.0)]
    assert exit_rule_tradeoffs([]) == [] and exit_rule_tradeoffs([None]) == []


def test_the_report_draws_the_matched_compute_panel(tmp_path):
    pytest.importorskip("matplotlib")
    rows = [jacobiscope.measure(sharpening_map(), torch.tensor([x0], dtype=F64), loops=8, diagnostics=["halting"])
            for x0 in (0.1, 0.25, 0.6)]
    figure = jacobiscope.Report(rows).plot()["halting"]
    titles = [ax.get_title() for ax in figure.axes]
    assert "exit rules at matched compute (ringed: Pareto front)" in titles
    panel = figure.axes[titles.index("exit rules at matched compute (ringed: Pareto front)")]
    assert {line.get_label() for line in panel.get_lines()} >= {"confidence", "entropy", "fixed", "kl", "residual"}
