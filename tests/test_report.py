"""Report: the terminal summary, exact JSON round trips (NaN/Inf included), atomic writes, DataFrame, figures, HTML."""
import json
import math
import os
import stat
import sys

import pytest

from jacobiscope._io import atomic_write_bytes, atomic_write_text
from jacobiscope.report import DATAFRAME_COLUMNS, LayerResult, Report

LABEL = 'The cat <script>alert("x")</script> & sat'


def _row(**overrides):
    loops = 4
    base = dict(
        input_index=0,
        input_label=LABEL,
        layer=0,
        mode="block",
        eta=None,
        loops=loops,
        state_shape=[5, 8],
        state_norm=[1.0, 1.02, 1.03, 1.031, 1.0312],
        step_size=[0.2, 0.05, 0.01, 0.002],
        spectral_norm=[{"loop": 0, "value": 1.3, "tolerance": 1e-7}, {"loop": 4, "value": 0.95, "tolerance": 2e-7}],
        eigenvalues=[[0.9, 0.1], [0.9, -0.1], [-0.5, 0.0], [0.2, 0.0]],
        eigen_loop=4,
        oscillation={"spectral_radius": 0.9055, "complex_fraction": 0.5, "max_imag": 0.1, "max_rotation_angle": 0.11,
                     "mean_rotation_angle": 0.11, "outside_unit_circle_fraction": 0.0},
        lyapunov={"exponents": [-0.05, -0.4], "stderr": [0.01, 0.02],
                  "history": [[-0.1, -0.5], [-0.07, -0.45], [-0.06, -0.42], [-0.05, -0.4]], "kaplan_yorke": 0.0},
        clusters={"top_eigenvalue": [3.0, 3.5, 3.9, 4.0, 4.0], "effective_clusters": [5.0, 3.2, 2.1, 2.0, 2.0],
                  "cluster_count": [5, 3, 2, 2, 2]},
        energy=[-1.0, -1.5, -1.7, -1.75],
        regime="converging",
        evidence={"lambda_max": -0.05, "final_step": 0.002},
        flags=[],
        seconds=0.25,
    )
    base.update(overrides)
    return LayerResult(**base)


@pytest.fixture
def report():
    nan, inf = math.nan, math.inf
    chaotic = _row(layer=1, regime="chaotic", energy=None,
                   lyapunov={"exponents": [0.31, -0.2], "stderr": [0.04, 0.03],
                             "history": [[0.5, -0.1], [0.4, -0.15], [0.33, -0.2], [0.31, -0.2]],
                             "kaplan_yorke": 2.0},
                   evidence={"lambda_max": 0.31})
    flagged = _row(
        input_index=1, input_label="pixel_values[1]", layer=2, mode="attention", eta=0.5, regime="diverging",
        state_norm=[1.0, 50.0, 3e4, inf, nan], step_size=[49.0, 600.0, nan, nan],
        spectral_norm=[{"loop": 0, "value": 4.0, "tolerance": 1e-6}, {"loop": 4, "value": nan, "tolerance": nan}],
        eigenvalues=None, eigen_loop=None, oscillation=None, clusters=None, energy=None,
        lyapunov={"exponents": [nan, nan], "stderr": [nan, nan], "history": [[2.0, 1.0], [nan, nan]],
                  "kaplan_yorke": nan},
        evidence={"growth": inf, "floor": -inf, "ratio": nan, "a/b~c": [1.0, nan], "none": None},
        flags=["NaN/Inf at loop 3", "lyapunov stopped early"], seconds=0.5,
    )
    return Report(
        rows=[_row(), chaotic, flagged],
        provenance={"model": "tiny-gpt", "layers": [0, 1, 2], "mode": "block", "loops": 4, "dtype": "float64",
                    "device": "cpu", "seed": 0, "versions": {"torch": "2.13.0", "jacobiscope": "0.1.0"},
                    "threshold": nan},
        notes=["attention switched sdpa -> eager for forward-mode AD, restored afterwards"],
    )


# ----------------------------------------------------------------------------------------------- summary


def test_summary_lists_every_row_with_regime_and_flags(report):
    text = report.summary()
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["layer", "mode", "input"]
    table = lines[2:5]
    assert [line.split()[0] for line in table] == ["0", "1", "2"]
    for line, regime in zip(table, ["converging", "chaotic", "diverging"]):
        assert regime in line
    assert "NaN/Inf at loop 3; lyapunov stopped early" in table[2]
    assert table[0].rstrip().endswith("-")  # no flags
    # lambda_max as the verdict reads it: the late half of the running estimates (loops 3-4: -0.04, -0.02) with
    # its 95% interval (two batch means: t with 1 dof, 12.7 x 0.01); the complex share
    assert "-0.03 +/- 0.13" in table[0] and "50%" in table[0]
    assert "nan" in table[2] and "attention" in table[2]
    assert "attention switched sdpa -> eager" in text
    assert "model=tiny-gpt" in text and "versions.torch=2.13.0" in text
    assert str(report) == text
    assert repr(report) == "<Report: 3 rows (2 inputs x 3 layers), 1 flagged, model='tiny-gpt'>"
    assert "layer=2" in repr(report.rows[2]) and len(repr(report.rows[0])) < 200


def test_summary_max_spectral_norm_skips_nan(report):
    scalars = report.rows[2].scalars()
    assert scalars["max_spectral_norm"] == 4.0 and scalars["max_spectral_norm_loop"] == 0
    assert math.isnan(scalars["final_spectral_norm"])
    assert scalars["flags"] == "NaN/Inf at loop 3; lyapunov stopped early" and scalars["n_flags"] == 2


# ----------------------------------------------------------------------------------------------- JSON


def _reject_constant(name):
    raise AssertionError(f"non-standard JSON constant {name} in the output")


def test_json_round_trip_is_exact_with_nan_and_inf(report, tmp_path):
    path = tmp_path / "out" / "report.json"
    text = report.to_json(path)
    assert path.read_text(encoding="utf-8") == text
    json.loads(text, parse_constant=_reject_constant)  # strict JSON: no NaN/Infinity literals

    back = Report.from_json(path)
    assert back == report
    assert Report.from_json(text) == report
    assert Report.from_json(str(path)) == report
    assert back.to_json() == text

    flagged = back.rows[2]
    assert flagged.state_norm[3] == math.inf and math.isnan(flagged.state_norm[4])
    assert math.isnan(flagged.spectral_norm[1]["value"]) and math.isnan(flagged.lyapunov["kaplan_yorke"])
    assert flagged.evidence["growth"] == math.inf and flagged.evidence["floor"] == -math.inf
    assert math.isnan(flagged.evidence["ratio"]) and math.isnan(flagged.evidence["a/b~c"][1])
    assert flagged.evidence["none"] is None  # a real None stays None, it is not confused with NaN
    assert back.rows[0].eta is None and flagged.eta == 0.5
    assert math.isnan(back.provenance["threshold"])


def test_equality_is_by_value(report):
    other = Report.from_dict(report.to_dict())
    assert other == report
    other.rows[2].state_norm[4] = 1.0
    assert other != report
    other = Report.from_dict(report.to_dict())
    other.rows[2].evidence["growth"] = 1e308
    assert other != report


def test_null_where_a_float_is_expected_reads_as_nan(report):
    data = json.loads(report.to_json())
    # A file from another tool: NaN in the row's own float lists written as plain nulls (no "nonfinite" entry).
    assert not any(pointer.startswith("/rows/0/st") for pointer in data["nonfinite"])
    data["rows"][0]["state_norm"][1] = None
    data["rows"][0]["step_size"][0] = None
    back = Report.from_json(json.dumps(data))
    assert math.isnan(back.rows[0].state_norm[1]) and math.isnan(back.rows[0].step_size[0])
    assert back.rows[2].evidence["growth"] == report.rows[2].evidence["growth"] == math.inf  # via "nonfinite"


def test_json_rejects_foreign_or_newer_files(report):
    data = json.loads(report.to_json())
    with pytest.raises(ValueError, match="Upgrade jacobiscope"):
        Report.from_json(json.dumps({**data, "format_version": 99}))
    with pytest.raises(ValueError, match="not a jacobiscope report"):
        Report.from_json('{"hello": 1}')
    with pytest.raises(ValueError, match="missing field"):
        Report.from_json(json.dumps({**data, "rows": [{"layer": 0}], "nonfinite": {}}))
    with pytest.raises(ValueError, match="points to nothing"):
        Report.from_json(json.dumps({**data, "nonfinite": {"/rows/7/state_norm/0": "nan"}}))


def test_optional_dtype_field_round_trips_and_may_be_absent(report):
    report.rows[0].dtype = "float32"
    assert Report.from_json(report.to_json()).rows[0].dtype == "float32"
    data = report.rows[1].to_dict()
    del data["dtype"]  # a file written before the field existed
    assert LayerResult.from_dict(data).dtype is None
    with pytest.raises(ValueError, match="unknown field.*'colour'"):
        LayerResult.from_dict({**data, "colour": "red"})


def test_to_dict_converts_array_likes_and_names_bad_values():
    class Scalar:  # a NumPy / torch style scalar
        def tolist(self):
            return 2.5

    row = _row(evidence={"x": Scalar(), "pair": (1, 2)})
    assert row.to_dict()["results"]["regime"]["evidence"] == {"x": 2.5, "pair": [1, 2]}
    with pytest.raises(TypeError, match=r"LayerResult.results\['regime'\].evidence has the key 0 .*Use str keys"):
        _row(evidence={0: 1.0}).to_dict()
    with pytest.raises(TypeError, match="JSON cannot hold"):
        Report([_row(evidence={"x": object()})], {}, []).to_json()


def test_validate_names_contract_problems(report):
    assert report.validate() is report
    bad = Report([_row(state_norm=[1.0], regime="stable")], {}, [])
    with pytest.raises(ValueError) as error:
        bad.validate()
    message = str(error.value)
    assert "regime is 'stable'" in message and "state_norm has 1 values, expected loops + 1 = 5" in message


def test_report_accepts_row_dicts_and_rejects_other_rows(report):
    rebuilt = Report([row.to_dict() for row in report.rows], report.provenance, report.notes)
    assert rebuilt == report
    with pytest.raises(TypeError, match=r"rows\[0\] is a str"):
        Report(["row"], {}, [])


# ----------------------------------------------------------------------------------------------- atomic writes


def test_failed_replace_keeps_the_old_file_and_leaves_no_temp(report, tmp_path, monkeypatch):
    path = tmp_path / "report.json"
    path.write_text("previous content", encoding="utf-8")

    def failing_replace(src, dst):
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="simulated"):
        report.to_json(path)
    assert path.read_text(encoding="utf-8") == "previous content"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]


def test_failure_mid_write_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "figure.png"
    path.write_bytes(b"old")

    def interrupted_fsync(fd):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", interrupted_fsync)
    with pytest.raises(KeyboardInterrupt):
        atomic_write_bytes(path, b"new bytes")
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["figure.png"]


def test_atomic_write_creates_parents_and_keeps_permissions(tmp_path):
    path = tmp_path / "a" / "b" / "notes.txt"
    assert atomic_write_text(path, "one\n") == path
    assert path.read_bytes() == b"one\n"
    os.chmod(path, 0o640)
    atomic_write_text(path, "two\r\n")
    assert path.read_bytes() == b"two\r\n"  # no newline translation
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert [p.name for p in path.parent.iterdir()] == ["notes.txt"]
    with pytest.raises(TypeError, match="atomic_write_bytes"):
        atomic_write_text(path, b"bytes")
    with pytest.raises(TypeError, match="atomic_write_text"):
        atomic_write_bytes(path, "text")


# ----------------------------------------------------------------------------------------------- pandas


def test_to_dataframe_one_row_per_layer_result(report):
    pytest.importorskip("pandas")
    frame = report.to_dataframe()
    assert frame.shape == (3, len(DATAFRAME_COLUMNS))
    assert list(frame.columns) == list(DATAFRAME_COLUMNS)
    assert frame["layer"].tolist() == [0, 1, 2]
    assert frame["regime"].tolist() == ["converging", "chaotic", "diverging"]
    assert frame["lambda_max"].iloc[1] == 0.31 and math.isnan(frame["lambda_max"].iloc[2])
    assert frame["state_shape"].iloc[0] == "5x8" and frame["n_flags"].tolist() == [0, 0, 2]
    assert frame["final_effective_clusters"].iloc[0] == 2.0
    assert Report([], {}, []).to_dataframe().shape == (0, len(DATAFRAME_COLUMNS))


def test_missing_optional_dependencies_are_named(report, monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ImportError, match="pip install pandas"):
        report.to_dataframe()
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ImportError, match=r"pip install matplotlib \(the plot extra\)"):
        report.plot()


# ----------------------------------------------------------------------------------------------- figures


def test_plot_figures_and_unit_circle(report):
    pytest.importorskip("matplotlib")
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    figures = report.plot()
    assert set(figures) == {"overview", "eigenvalues", "norms", "lyapunov", "energy", "clusters"}
    assert all(isinstance(figure.canvas, FigureCanvasAgg) for figure in figures.values())

    ax = figures["eigenvalues"].axes[0]
    circles = []
    for line in ax.get_lines():
        xs, ys = line.get_xdata(), line.get_ydata()
        radii = [math.hypot(x, y) for x, y in zip(xs, ys)]
        if len(radii) > 50 and all(abs(r - 1.0) < 1e-9 for r in radii):
            circles.append(line)
    assert len(circles) == 1
    markers = [line for line in ax.get_lines() if line.get_linestyle() == "None"]
    assert len(markers) == 2  # the flagged row has no eigenvalues

    assert len([ax for ax in figures["lyapunov"].axes if ax.get_visible()]) == 3
    assert len(figures["norms"].axes) == 3

    only_flagged = report.plot(rows=[2])
    assert set(only_flagged) == {"overview", "eigenvalues", "norms", "lyapunov"}
    assert set(report.plot(rows=[report.rows[0]])) == set(figures)
    with pytest.raises(IndexError, match="out of range"):
        report.plot(rows=[5])


# ----------------------------------------------------------------------------------------------- HTML


def test_save_html_is_self_contained_and_escaped(report, tmp_path):
    pytest.importorskip("matplotlib")
    path = report.save_html(tmp_path / "html" / "report.html")
    text = path.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>")
    assert text.count('src="data:image/png;base64,') == 6
    assert "The cat &lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; sat" in text
    assert "<script" not in text
    assert "http://" not in text and "https://" not in text
    assert "tiny-gpt" in text and "attention switched sdpa -&gt; eager" in text
    assert "NaN/Inf at loop 3" in text and "versions.torch" in text
    assert [p.name for p in path.parent.iterdir()] == ["report.html"]
    # A person reads the verdicts first, the provenance last; every summary column is explained.
    order = [text.index(marker) for marker in ("<h2>Verdicts</h2>", 'id="figure-overview"', "<h2>Summary</h2>",
                                               "What the columns mean", "<h2>Evidence</h2>", "<h2>Provenance</h2>")]
    assert order == sorted(order)
    assert 'class="regime-chaotic"><span class="who"' in text and "is chaotic: nearby states separate" in text
    glossary = text[text.index('<table class="glossary">'):]
    for header in ("max ||J||2", "rho(J)", "lambda_max (late half, 95%)", "regime", "flags"):
        assert f"<td>{header}</td>" in glossary
    assert "nats per loop" in glossary
    assert 'class="input" title="0: The cat &lt;script&gt;' in text  # long inputs keep their full text as a tooltip


def test_save_html_without_figures_needs_no_matplotlib(report, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    text = report.save_html(tmp_path / "tables.html", figures=False).read_text(encoding="utf-8")
    assert "data:image/png" not in text and "&lt;script&gt;" in text
    assert "<table" in report._repr_html_()


def test_displays_draw_the_rows_data_on_the_users_axes(report):
    """scikit-learn-style displays: the plotted lines are the rows' own numbers, on axes the caller owns."""
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    from jacobiscope.report import ReportDisplay

    figure = Figure()
    axes = figure.subplots(1, 3)
    display = report.display("norms").plot(ax=axes)
    assert display.figure_ is figure and list(display.ax_) == list(axes)
    state_lines = axes[1].get_lines()
    drawn = [row for row in report.rows if row.state_norm]
    assert len(state_lines) == len(drawn)
    for line, row in zip(state_lines, drawn):
        expected = [v if math.isfinite(v) else float("nan") for v in row.state_norm]  # Inf is not drawn
        assert list(line.get_ydata()) == pytest.approx(expected, nan_ok=True)
    single = Figure().add_subplot()
    pair = Figure().subplots(1, 2)
    shown = ReportDisplay.from_report(report, "eigenvalues").plot(ax=pair)
    assert list(shown.ax_) == list(pair) and shown.figure_ is pair[0].figure
    # The modulus-angle panel holds the same eigenvalues as the complex plane.
    for plane_line, polar_line in zip(*(
            [line for line in ax.get_lines() if line.get_linestyle() == "None"] for ax in pair)):
        points = [complex(x, y) for x, y in zip(plane_line.get_xdata(), plane_line.get_ydata())]
        assert list(polar_line.get_ydata()) == pytest.approx([abs(z) for z in points])
        assert list(polar_line.get_xdata()) == pytest.approx([math.atan2(z.imag, z.real) for z in points])
    with pytest.raises(ValueError, match="draws on 2 Axes, got 1"):
        report.display("eigenvalues").plot(ax=single)
    # The overview: one column per row, lambda_max from the verdict's interval (or the exponent and its stderr).
    overview = report.display("overview").plot()
    centres = [line.get_ydata()[0] for line in overview.ax_[0].get_lines() if line.get_marker() == "o"]
    assert centres[:2] == pytest.approx([-0.03, 0.22])  # the late half of each row's running estimates
    with pytest.raises(ValueError, match="draws on 3 Axes, got 1"):
        report.display("norms").plot(ax=single)
    with pytest.raises(ValueError, match="unknown figure kind 'spectrum'"):
        report.display("spectrum")
    lyapunov = report.display("lyapunov").plot()
    assert lyapunov.figure_ is not None and isinstance(lyapunov.ax_, list)
