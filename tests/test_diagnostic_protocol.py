"""One protocol for every diagnostic: a diagnostic written here, outside the package (its own options, requires,
result type and figure), reaches summary(), to_dataframe(), JSON, HTML and report.display(name) with no edit to the
package, with its numbers checked against the map's analytic values; the same checks run for every built-in."""
import json
from html import escape as html_escape
import math
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass

import pytest
import torch

import jacobiscope
from jacobiscope.diagnostics import Diagnostic, DiagnosticResult, Option, register_diagnostic, unregister_diagnostic
from jacobiscope.report import Report

DIAGONAL = (0.5, 0.25)  # x -> diag(0.5, 0.25) x: exponents log 0.5 and log 0.25, gap log 2


@dataclass
class DriftResult(DiagnosticResult):
    """The mean relative step over the last ``window`` loops, and the gap between the top two exponents."""

    mean_step: float
    gap: float
    steps: list

    headers = ("drift", "gap")
    glossary = {"drift": ("per loop", "mean relative step over the last loops."),
                "gap": ("nats per loop", "lambda_1 - lambda_2.")}
    panels = 1

    def columns(self):
        return {"drift": self.mean_step, "gap": self.gap}

    def scalars(self):
        return {"mean_step": self.mean_step, "gap": self.gap}

    @classmethod
    def draw(cls, axes, entries):
        for _, result, label, color in entries:
            if result is not None:
                axes[0].plot(range(1, len(result.steps) + 1), result.steps, label=label, color=color)
        axes[0].set_title("drift")


class Drift(Diagnostic):
    """Drift: the mean relative step over a window, and the Lyapunov gap."""

    name = "drift"
    result_type = DriftResult
    requires = ("lyapunov",)
    default = False
    options = {"drift_window": Option("count", 4, maximum=64, doc="loops averaged")}

    def cost(self, state_size, loops, options):
        return {"forward": 0}

    def compute(self, context):
        window = context.options.get("drift_window", 4)
        steps = context.step_size[-window:]
        exponents = context.results["lyapunov"].exponents
        return DriftResult(mean_step=sum(steps) / len(steps), gap=exponents[0] - exponents[1],
                           steps=list(context.step_size))


@pytest.fixture()
def drift():
    register_diagnostic(Drift())
    yield
    unregister_diagnostic("drift")


def _expected_steps(loops):
    """||x_{t+1} - x_t|| / ||x_t|| for x_t = (0.5^t, 0.25^t), by hand."""
    steps = []
    for t in range(loops):
        now = [a ** t for a in DIAGONAL]
        after = [a ** (t + 1) for a in DIAGONAL]
        steps.append(math.dist(after, now) / math.hypot(*now))
    return steps


def _drift_report():
    scale = torch.tensor(DIAGONAL, dtype=torch.float64)
    row = jacobiscope.measure(lambda x: scale * x, torch.ones(2, dtype=torch.float64), loops=12, k=2,
                              diagnostics=["drift"], options={"drift_window": 3})
    return Report([row], {"model": "diagonal"}, [])


def test_a_users_diagnostic_is_measured_with_its_options_and_requires(drift):
    row = _drift_report().rows[0]
    result = row.results["drift"]
    assert isinstance(result, DriftResult) and row.diagnostic("drift") is result
    assert result.steps == pytest.approx(_expected_steps(12), rel=1e-12)
    assert result.mean_step == pytest.approx(sum(_expected_steps(12)[-3:]) / 3, rel=1e-12)
    exponents = row.results["lyapunov"].exponents  # its requirement ran, and compute read it
    assert result.gap == exponents[0] - exponents[1]
    assert sum(exponents) == pytest.approx(math.log(0.125), abs=1e-12)  # k = n: the exponents sum to log|det|
    with pytest.raises(jacobiscope.ArgumentError, match="drift option drift_window must be an int >= 1"):
        jacobiscope.measure(lambda x: x, torch.ones(2), loops=2, diagnostics=["drift"], options={"drift_window": 0})


def test_a_users_diagnostic_reaches_text_dataframe_json_html_and_display(drift, tmp_path):
    pytest.importorskip("pandas")
    pytest.importorskip("matplotlib")
    report = _drift_report()
    result = report.rows[0].results["drift"]
    header, rule, line = report.summary().splitlines()[:3]
    spans = {header[m.start():m.end()].strip(): (m.start(), m.end()) for m in re.finditer(r"-+", rule)}
    for name, value in (("drift", result.mean_step), ("gap", result.gap)):
        start, end = spans[name]
        cell = line[start:end]
        assert cell.strip() == f"{value:.4g}" and not cell.endswith(" ")  # numbers right-aligned
    frame = report.to_dataframe()
    assert frame.loc[0, "drift.mean_step"] == pytest.approx(result.mean_step)
    assert frame.loc[0, "drift.gap"] == pytest.approx(result.gap)
    text = report.to_json(tmp_path / "r.json")
    assert json.loads(text)["rows"][0]["results"]["drift"]["gap"] == pytest.approx(result.gap)
    back = Report.from_json(tmp_path / "r.json")
    assert back == report and isinstance(back.rows[0].results["drift"], DriftResult)
    html = report.save_html(tmp_path / "r.html").read_text(encoding="utf-8")
    assert "<th>drift</th>" in html and "lambda_1 - lambda_2." in html
    # no caption declared: its docstring's first paragraph captions its figure
    assert "<figcaption>Drift: the mean relative step over a window, and the Lyapunov gap.</figcaption>" in html
    assert html.count("data:image/png") == len(report.plot())
    assert "drift" in report.plot()
    from matplotlib.figure import Figure

    axes = Figure().add_subplot()
    display = report.display("drift").plot(ax=axes)
    assert display.ax_ is axes
    assert list(axes.get_lines()[0].get_ydata()) == pytest.approx(_expected_steps(12))


@pytest.fixture(scope="module")
def every_builtin():
    """One row carrying every built-in's result: a self-attention map with a drive, and a readout for loop_depth."""
    from jacobiscope.systems import self_attention_map

    looped = self_attention_map(tokens=5, dim=6, heads=2, seed=0)
    readout = torch.randn(6, 3, dtype=looped.x0.dtype, generator=torch.Generator().manual_seed(1))
    looped.meta["readout"] = lambda state: state @ readout
    looped.meta["loops"] = 6
    row = jacobiscope.measure(looped, loops=8, diagnostics=jacobiscope.list_diagnostics(),
                              options={"basin_starts": 2})
    return Report([row], {"model": "self-attention"}, [])


BUILTINS = ("spectral_norm", "eigenvalues", "lyapunov", "clusters", "energy", "fixed_points", "halting", "loop_depth",
            "loop_lens", "depth_safety", "attractors", "regime")


def test_the_builtins_are_all_covered():
    assert set(BUILTINS) == set(jacobiscope.list_diagnostics())


@pytest.mark.parametrize("name", BUILTINS)
def test_every_builtin_speaks_the_same_protocol(every_builtin, name, tmp_path):
    pytest.importorskip("pandas")
    pytest.importorskip("matplotlib")
    report = every_builtin
    diagnostic = jacobiscope.get_diagnostic(name)
    result = report.rows[0].results[name]
    assert isinstance(result, diagnostic.result_type)
    assert diagnostic.result_type.from_dict(result.to_dict()) == result
    columns = diagnostic.columns(result)
    headers = report.summary().splitlines()[0]
    assert all(header in headers for header in columns)
    html = report.save_html(tmp_path / "r.html", figures=False).read_text(encoding="utf-8")
    glossary = diagnostic.glossary()
    for header in columns:
        assert f"<th>{header}</th>" in html
        if header in glossary:
            assert html_escape(glossary[header][1]) in html
    frame = report.to_dataframe()
    for column, value in diagnostic.scalars(result).items():
        cell = frame.loc[0, column]
        assert cell == value or (isinstance(value, float) and math.isnan(value)) or (value is None and cell is None)
    assert Report.from_json(report.to_json()).rows[0].results[name] == result
    if diagnostic.result_type.panels != 0:
        display = report.display(diagnostic.figure_name or name).plot()
        assert display.figure_ is not None
        assert (diagnostic.figure_name or name) in report.plot()


def test_a_requirement_on_a_builtin_works_in_a_fresh_process(tmp_path):
    """Built-ins register before any user registration: requires=("lyapunov",) in a new interpreter."""
    script = tmp_path / "fresh.py"
    script.write_text(textwrap.dedent("""
        import torch
        from jacobiscope.diagnostics import Diagnostic, register_diagnostic
        import jacobiscope

        class Gap(Diagnostic):
            name = "gap"
            requires = ("lyapunov",)
            def compute(self, context):
                exponents = context.results["lyapunov"].exponents
                return exponents[0] - exponents[1]

        register_diagnostic(Gap())
        row = jacobiscope.measure(lambda x: torch.tensor([0.5, 0.25], dtype=x.dtype) * x,
                                  torch.ones(2, dtype=torch.float64), loops=10, k=2, diagnostics=["gap"])
        print(repr(row.results["gap"]), repr(sum(row.results["lyapunov"].exponents)))
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    gap, total = map(float, done.stdout.split())
    assert 0 < gap < 1 and total == pytest.approx(math.log(0.125), abs=1e-12)
