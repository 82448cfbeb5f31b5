"""jacobiscope.diagnostics: the registry, `measure` on plain callables, and a user's own diagnostic end to end."""
import json
import math

import pytest
import torch
import transformers

import jacobiscope
from jacobiscope.diagnostics import Diagnostic, measure, register_diagnostic, unregister_diagnostic
from jacobiscope.errors import ArgumentError


def test_builtins_are_registered_in_running_order():
    assert jacobiscope.list_diagnostics()[:12] == ["spectral_norm", "eigenvalues", "lyapunov", "clusters", "energy",
                                                  "fixed_points", "attractors", "halting", "loop_depth", "loop_lens",
                                                  "depth_safety", "regime"]
    defaults = [name for name in jacobiscope.list_diagnostics() if jacobiscope.get_diagnostic(name).default]
    assert not {"fixed_points", "attractors", "halting", "loop_depth", "loop_lens", "depth_safety"} & set(defaults)
    with pytest.raises(ArgumentError, match="unknown diagnostic 'entropy'"):
        jacobiscope.get_diagnostic("entropy")
    with pytest.raises(ArgumentError, match="already registered"):
        register_diagnostic(jacobiscope.get_diagnostic("lyapunov"))
    with pytest.raises(TypeError, match="Diagnostic instance"):
        register_diagnostic(lambda context: 1)


def test_measure_on_a_plain_callable_linear_map():
    """Analytic answers: x -> A x + b with A = Q diag(0.8, -0.5, 0.3) Q^T (symmetric, so ||J|| = rho = 0.8), which
    converges to the fixed point (I - A)^-1 b."""
    torch.manual_seed(0)
    q, _ = torch.linalg.qr(torch.randn(3, 3, dtype=torch.float64))
    matrix = q @ torch.diag(torch.tensor([0.8, -0.5, 0.3], dtype=torch.float64)) @ q.T
    offset = torch.ones(3, dtype=torch.float64)
    row = measure(lambda x: matrix @ x + offset, torch.randn(3, dtype=torch.float64), loops=40, k=3, eigen_k=3)
    assert row.lyapunov["exponents"] == pytest.approx([math.log(0.8), math.log(0.5), math.log(0.3)], abs=1e-9)
    assert all(entry["value"] == pytest.approx(0.8, abs=1e-6) for entry in row.spectral_norm)
    moduli = sorted(math.hypot(*pair) for pair in row.eigenvalues)
    assert moduli == pytest.approx([0.3, 0.5, 0.8], abs=1e-6)
    assert row.regime == "converging" and row.state_shape == [3] and len(row.state_norm) == 41
    assert row.timings and set(row.timings) >= {"lyapunov", "regime"}


def test_measure_takes_one_trajectory():
    batched = jacobiscope.LoopedMap(lambda x: 0.5 * x, batch_dims=1)
    with pytest.raises(ArgumentError, match="one trajectory, got a batch of 2"):
        measure(batched, torch.ones(2, 3), loops=2)
    one = measure(batched, torch.ones(1, 3, dtype=torch.float64), loops=3, diagnostics=["lyapunov"])
    assert one.lyapunov["exponents"][0] == pytest.approx(math.log(0.5))
    assert one.spectral_norm == [] and one.eigenvalues is None  # only what was asked (and the verdict)


class MeanStep(Diagnostic):
    """A user's diagnostic, defined outside the package: the mean relative step along the loop."""

    name = "mean_step"

    def cost(self, state_size, loops, options):
        return 0.0

    def compute(self, context):
        steps = context.step_size[: context.last_finite]
        return {"mean": sum(steps) / len(steps), "steps": steps}

    def columns(self, result):
        return {"mean step": result["mean"]}

    def figure(self, rows, labels):
        from matplotlib.figure import Figure

        figure = Figure()
        axes = figure.add_subplot()
        for row, label in zip(rows, labels):
            axes.plot(row.diagnostic(self.name)["steps"], label=label)
        return figure


@pytest.fixture
def mean_step():
    register_diagnostic(MeanStep())
    yield
    unregister_diagnostic("mean_step")


def test_a_registered_diagnostic_reaches_text_json_and_html(mean_step, tmp_path):
    model = transformers.GPT2Model(transformers.GPT2Config(n_embd=16, n_layer=2, n_head=2, vocab_size=50))
    report = jacobiscope.analyze(model, torch.tensor([[1, 2, 3, 4]]), loops=5, progress=False,
                                 diagnostics=["lyapunov", "mean_step"])
    for row in report.rows:
        expected = sum(row.step_size) / len(row.step_size)
        assert row.extra["mean_step"]["mean"] == pytest.approx(expected)
    text = report.summary()
    assert "mean step" in text.splitlines()[0]
    assert f"{report.rows[0].extra['mean_step']['mean']:.4g}" in text
    again = jacobiscope.Report.from_json(report.to_json(tmp_path / "r.json"))
    assert again == report and json.loads((tmp_path / "r.json").read_text())["rows"][0]["results"]["mean_step"]
    html = report.save_html(tmp_path / "r.html").read_text()
    assert "<th>mean step</th>" in html and 'id="figure-mean_step"' in html
    # The default set includes it too once registered (default=True), and describe prices it.
    plans = jacobiscope.describe(model, torch.tensor([[1, 2, 3, 4]]), loops=5)
    assert "mean_step" in plans[0].per_diagnostic_seconds


@pytest.mark.slow
def test_describe_estimates_each_diagnostic_within_a_factor_of_3():
    """describe prices each diagnostic's operation counts with timed operations of the block; analyze then records
    what each one really took. Measured on a small GPT-2 block (the costly diagnostics and the total)."""
    torch.manual_seed(0)
    model = transformers.GPT2Model(transformers.GPT2Config(n_embd=64, n_layer=1, n_head=4, vocab_size=100))
    ids = torch.randint(0, 100, (1, 32))
    [plan] = jacobiscope.describe(model, ids, loops=16)
    # The faster of two runs: a moment of load on a shared machine is not the diagnostic's cost (describe also
    # takes the fastest of its timed operations).
    runs = [jacobiscope.analyze(model, ids, loops=16, progress=False).rows[0].timings for _ in range(2)]
    timings = {name: min(run[name] for run in runs) for name in runs[0]}
    for name in ("spectral_norm", "eigenvalues", "lyapunov"):
        ratio = plan.per_diagnostic_seconds[name] / timings[name]
        assert 1 / 3 <= ratio <= 3, (name, plan.per_diagnostic_seconds[name], timings[name])
    ratio = plan.estimated_seconds / sum(timings.values())
    assert 1 / 3 <= ratio <= 3, (plan.estimated_seconds, timings)


def test_results_are_typed_and_round_trip_through_the_row():
    from dataclasses import dataclass

    from jacobiscope.diagnostics import DiagnosticResult, EigenvaluesMeasurement, LyapunovMeasurement, SpectralNormMeasurement

    matrix = torch.tensor([[0.0, -0.9], [0.9, 0.0]], dtype=torch.float64)  # rotation by pi/2, scaled by 0.9
    row = measure(lambda x: matrix @ x, torch.tensor([1.0, 0.0], dtype=torch.float64), loops=20, k=2, eigen_k=2)
    lyapunov, eigen, norm = (row.diagnostic(name) for name in ("lyapunov", "eigenvalues", "spectral_norm"))
    assert isinstance(lyapunov, LyapunovMeasurement) and lyapunov.max == pytest.approx(math.log(0.9), abs=1e-9)
    assert isinstance(eigen, EigenvaluesMeasurement) and eigen.spectral_radius == pytest.approx(0.9, abs=1e-6)
    assert sorted(v.imag for v in eigen.complex_values) == pytest.approx([-0.9, 0.9], abs=1e-6)
    assert isinstance(norm, SpectralNormMeasurement) and norm.max == pytest.approx(0.9, abs=1e-6)
    assert LyapunovMeasurement.from_dict(json.loads(json.dumps(lyapunov.to_dict()))) == lyapunov
    assert lyapunov["exponents"] == lyapunov.exponents  # the stored form's keys still read
    with pytest.raises(ValueError, match="missing \\['kaplan_yorke'\\]"):
        LyapunovMeasurement.from_dict({"exponents": [], "stderr": [], "history": []})

    @dataclass
    class Peak(DiagnosticResult):
        loop: int
        value: float

    class PeakNorm(Diagnostic):
        name = "peak_norm"
        result_type = Peak

        def compute(self, context):
            loop = max(range(len(context.state_norm)), key=context.state_norm.__getitem__)
            return Peak(loop, context.state_norm[loop])

        def columns(self, result):
            return {"peak at": result.loop}  # typed here too

    register_diagnostic(PeakNorm())
    try:
        growth = torch.tensor([[1.1, 0.0], [0.0, 0.5]], dtype=torch.float64)
        row = measure(lambda x: growth @ x, torch.ones(2, dtype=torch.float64), loops=6,
                      diagnostics=["lyapunov", "peak_norm"])
        assert row.extra["peak_norm"] == {"loop": 6, "value": pytest.approx(math.hypot(1.1 ** 6, 0.5 ** 6))}
        assert row.diagnostic("peak_norm") == Peak(6, row.extra["peak_norm"]["value"])
        report = jacobiscope.Report([row])
        assert "peak at" in report.summary().splitlines()[0]
    finally:
        unregister_diagnostic("peak_norm")


def test_fixed_points_of_an_affine_contraction_and_a_bistable_map():
    """Analytic references: x -> A x + b has one fixed point (I - A)^-1 b with rho(J) = rho(A); x -> tanh(2x) per
    entry, started at its unstable fixed point 0, splits between the two stable points +-x* with
    rho(J) = 2 sech^2(2 x*) there."""
    from jacobiscope.diagnostics import FixedPointsMeasurement

    matrix = torch.tensor([[0.5, 0.2], [-0.1, 0.3]], dtype=torch.float64)
    offset = torch.tensor([1.0, -1.0], dtype=torch.float64)
    row = measure(lambda x: matrix @ x + offset, torch.zeros(2, dtype=torch.float64), loops=80,
                  diagnostics=["fixed_points", "lyapunov"], options={"basin_starts": 6, "basin_noise": 0.5})
    found = row.diagnostic("fixed_points")
    assert isinstance(found, FixedPointsMeasurement) and found.count == 1
    (basin,) = found.basins
    assert basin["fraction"] == 1.0 and basin["settled"] and basin["distance"] < 1e-10
    assert basin["spectral_radius"] == pytest.approx(float(torch.linalg.eigvals(matrix).abs().max()), rel=1e-6)

    x_star = 0.9575040240772687  # x = tanh(2x)
    for _ in range(100):
        x_star = math.tanh(2 * x_star)
    row = measure(lambda x: torch.tanh(2 * x), torch.zeros(1, dtype=torch.float64), loops=60,
                  diagnostics=["fixed_points"], options={"basin_starts": 10, "basin_noise": 0.1})
    found = row.diagnostic("fixed_points")
    assert found.count == 2 and sum(b["fraction"] for b in found.basins) == pytest.approx(1.0)
    generator = torch.Generator().manual_seed(0)
    signs = [float(torch.randn((1,), generator=generator, dtype=torch.float64)) > 0 for _ in range(10)]
    assert sorted(b["fraction"] for b in found.basins) == sorted([sum(signs) / 10, 1 - sum(signs) / 10])
    for basin in found.basins:
        assert basin["settled"] and basin["spectral_radius"] == pytest.approx(2 / math.cosh(2 * x_star) ** 2,
                                                                              rel=1e-6)


def test_halting_replay_on_tokens_converging_at_known_rates():
    """Token i contracts to a_i at rate c_i: its relative change per loop and the loop at which an exit rule
    fires follow from x_t = a + c^t (x_0 - a), computed here independently."""
    from jacobiscope.diagnostics import HaltingMeasurement

    rates = torch.tensor([0.5, 0.8, 0.95], dtype=torch.float64).view(3, 1)
    targets = torch.tensor([[1.0, 2.0], [-1.0, 0.5], [0.3, 0.3]], dtype=torch.float64)
    x0 = torch.zeros(3, 2, dtype=torch.float64)
    loops = 40
    row = measure(lambda x: rates * x + (1 - rates) * targets, x0, loops=loops, diagnostics=["halting"],
                  options={"halting_thresholds": [1e-2, 1e-4], "halting_agree_rtol": 1e-3})
    result = row.diagnostic("halting")
    assert isinstance(result, HaltingMeasurement) and result.tokens == 3 and result.agreement_by == "state"
    t = torch.arange(loops + 1, dtype=torch.float64).view(-1, 1, 1)
    states = targets + rates.view(1, 3, 1) ** t * (x0 - targets)
    change = (states[1:] - states[:-1]).norm(dim=-1) / states[:-1].norm(dim=-1).clamp_min(1e-30)
    assert result.max_change == pytest.approx(change.max(dim=1).values.tolist(), rel=1e-9)
    for rule in result.rules:
        expected = []
        for token in range(3):
            below = [step for step in range(loops) if change[step, token] < rule["threshold"]]
            expected.append(below[0] + 1 if below else loops)
        assert rule["exits"] == expected
        assert rule["loops_saved"] == pytest.approx(1 - sum(expected) / (3 * loops))
        agree = [float((states[e, i] - states[-1, i]).norm()) <= 1e-3 * float(states[-1, i].norm())
                 for i, e in enumerate(expected)]
        assert rule["agreement"] == pytest.approx(sum(agree) / 3)
    assert result.rules[0]["agreement"] < 1.0 == result.rules[1]["agreement"]  # a loose exit disagrees, a strict one not


def test_loop_depth_sweep_reads_the_solver_at_every_loop_of_one_trajectory():
    """The quality curve of the shipped ItrSA solver equals its own solve() at each loop count (an independent
    re-run per count); the KL is zero and the agreement one at the trained depth."""
    from jacobiscope.data import sudoku
    from jacobiscope.diagnostics import LoopDepthMeasurement
    from jacobiscope.models.itrsa.modeling_itrsa import _is_solution

    model = jacobiscope.load_pretrained("itrsa-sudoku").eval()
    _, test = sudoku.satnet_splits()
    puzzles = sudoku.to_tensor(list(test["puzzle"][:2]))
    report = jacobiscope.analyze(model, puzzles, loops=24, progress=False, diagnostics=["loop_depth"])
    for index, row in enumerate(report.rows):
        sweep = row.diagnostic("loop_depth")
        assert isinstance(sweep, LoopDepthMeasurement) and sweep.reference_loop == model.config.loops
        assert len(sweep.quality) == 25 and sweep.kl[sweep.reference_loop] == pytest.approx(0.0, abs=1e-12)
        assert sweep.agreement[sweep.reference_loop] == 1.0
        for count in (1, 4, 16, 24):
            solved = _is_solution(model.solve(puzzles[index:index + 1], loops=count))
            assert sweep.quality[count] == float(solved[0]), count
        assert sweep.peak == max(sweep.quality) and sweep.quality[sweep.peak_loop] == sweep.peak
    assert "peak loop" in report.summary().splitlines()[0]
