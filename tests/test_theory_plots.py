"""Theory figures: the drawn data are the simulated numbers, one panel per regime, files written atomically."""
import importlib.util
import math
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("matplotlib")

from jacobiscope.errors import ArgumentError  # noqa: E402
from jacobiscope.theory import aim, tokens  # noqa: E402
from jacobiscope.theory.plots import plot_escape_curves, plot_phase_portrait  # noqa: E402

D = torch.float64


@pytest.fixture(scope="module")
def portrait_data():
    return tokens.regime_trajectories(n=24, horizon=12.0, dt=0.05, record_every=2)


def _line(ax, gid):
    lines = [line for line in ax.lines if line.get_gid() == gid]
    assert len(lines) == 1, (gid, [line.get_gid() for line in ax.lines])
    return lines[0]


def test_phase_portrait_draws_the_simulated_order_parameter(portrait_data, tmp_path):
    path = tmp_path / "portrait.png"
    fig = plot_phase_portrait(portrait_data, tokens_shown=5, path=path)
    assert path.stat().st_size > 1000 and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in tmp_path.iterdir()] == ["portrait.png"]  # no temp file left behind
    axes = {ax.get_label(): ax for ax in fig.axes}
    assert len(fig.axes) == 3 * len(tokens.TOKEN_REGIMES)
    for regime in tokens.TOKEN_REGIMES:
        item = portrait_data[regime]
        plane = axes[f"{regime}/plane"]
        assert plane.get_title().splitlines()[0] == regime.replace("_", " ")
        line = _line(plane, "particles")
        assert torch.equal(torch.as_tensor(line.get_xdata()), item["R2"].real)
        assert torch.equal(torch.as_tensor(line.get_ydata()), item["R2"].imag)
        assert torch.equal(torch.as_tensor(_line(plane, "oa").get_ydata()), item["Z"].imag)
        modulus = axes[f"{regime}/modulus"]
        assert torch.equal(torch.as_tensor(_line(modulus, "particles").get_xdata()), item["times"])
        assert torch.equal(torch.as_tensor(_line(modulus, "particles").get_ydata()), item["R2"].abs())
        token_lines = [line for line in axes[f"{regime}/tokens"].lines if line.get_gid().startswith("token ")]
        assert len(token_lines) == 5
        for line in token_lines:
            k = int(line.get_gid().split()[1])
            expected = torch.remainder(item["theta"][:, k], math.pi)
            assert torch.allclose(torch.as_tensor(line.get_ydata()), expected, rtol=0, atol=1e-15)


def test_regime_trajectories_are_the_simulation_and_follow_oa(portrait_data):
    # The portrait data are what simulate / integrate_oa give for the same (A, V) and initial tokens, and splay
    # initial data make the particles' R_2 follow the OA solution (spec A.3).
    item = portrait_data["oscillation"]
    sim = tokens.simulate(item["A"], item["V"], n=24, d=2, steps=240, dt=0.05, x0=item["states"][0], record_every=2)
    assert float((sim.R2 - item["R2"]).abs().max()) < 1e-13
    assert float((item["R2"] - item["Z"]).abs().max()) < 1e-6
    # each column is the regime it is named after
    for regime, data in portrait_data.items():
        A, V = data["A"], data["V"]
        assert tokens.predict_regime(A, V).regime == regime
    assert float(portrait_data["clustering"]["R2"].abs()[-1]) > 0.999
    assert abs(float(portrait_data["interior_fixed_point"]["Z"][-1].real) - 1 / 3) < 1e-3


@pytest.mark.slow  # suite time: a longer end-to-end run (pytest -m slow)
def test_escape_curves_draw_the_sgd_overlaps(tmp_path):
    results = aim.escape_runs(d=10, link="he2", t=1.0, eta=0.02, runs=2, records=50, seed=3, clip=5.0)
    path = tmp_path / "sub" / "escape.png"
    fig = plot_escape_curves(results, path=path)
    assert path.stat().st_size > 1000
    ax = fig.axes[0]
    for label, run in results.items():
        expected = torch.nan_to_num(run.order["cos_c"].abs(), nan=0.0)
        for j in range(2):
            line = _line(ax, f"{label}/{j}")
            assert torch.equal(torch.as_tensor(line.get_xdata()), run.times)
            assert torch.equal(torch.as_tensor(line.get_ydata()), expected[:, j])
    # He2 from the exact critical point S0 = 0 stays at 0; the drawn threshold is the weak-recovery threshold
    assert bool((results["direct, S0 = 0"].S == 0).all())
    assert float(torch.as_tensor(_line(ax, "direct, S0 = 0/0").get_ydata()).abs().max()) == 0.0
    assert list(_line(ax, "threshold").get_ydata()) == [0.3, 0.3]
    tied = results["tied"]
    escaped = torch.isfinite(tied.escape_time)
    if bool(escaped.any()):
        marks = _line(ax, "tied/escape")
        assert torch.equal(torch.as_tensor(marks.get_xdata()), tied.escape_time[escaped])


def test_escape_curves_into_given_axes_and_signed_links():
    from matplotlib.figure import Figure

    fig = Figure()
    ax = fig.add_subplot()
    results = aim.escape_runs(d=8, link="softmax", t=0.5, eta=0.5, runs=1, records=10, random_direct=False)
    assert plot_escape_curves(results, link="softmax", ax=ax) is fig
    run = results["tied"]
    # softmax is not even: the signed cosine is drawn (and thresholded)
    assert torch.equal(torch.as_tensor(_line(ax, "tied/0").get_ydata()),
                       torch.nan_to_num(run.order["cos_c"][:, 0], nan=0.0))


def test_plot_errors():
    with pytest.raises(ArgumentError, match="results"):
        plot_escape_curves({"tied": 3})
    with pytest.raises(ArgumentError, match="cannot apply"):
        plot_escape_curves({"x": aim.escape_runs(d=6, t=0.05, runs=1)["tied"]}, runs=3)
    with pytest.raises(ArgumentError, match="tokens_shown"):
        plot_phase_portrait({"a": {}}, tokens_shown=0)


def test_missing_matplotlib_names_the_extra(monkeypatch):
    import jacobiscope.theory.plots as plots

    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # import of it now raises ImportError
    with pytest.raises(ImportError, match=r"pip install matplotlib \(the plot extra\)"):
        plots._matplotlib()


@pytest.mark.slow  # suite time: a longer end-to-end run (pytest -m slow)
def test_example_script_runs_at_tiny_size(tmp_path, capsys):
    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("theory_tables", root / "examples" / "theory_tables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(["--quick", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert "| V=I, A=diag(-1, -2) |" in out and "interior_fixed_point" in out
    assert "| direct, S0 = 0 | he2 |" in out
    assert (tmp_path / "phase_portraits.png").stat().st_size > 0
    assert (tmp_path / "escape_curves.png").stat().st_size > 0
