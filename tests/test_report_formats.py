"""Reports written by earlier releases still load and render: a fixture written by the release of format 1 (every
built-in, a user's diagnostic, NaN/Inf, an outcome; tests/fixtures/reports/make_format1.py wrote it with that
release) reads back with the same numbers, the same summary cells and the same DataFrame as that release printed."""
import json
import math
from pathlib import Path

import pytest

import jacobiscope
from jacobiscope.report import FORMAT_VERSION, DATAFRAME_COLUMNS, Report, ReportFormatError, upgrade

FIXTURES = Path(__file__).parent / "fixtures" / "reports"
FORMAT1 = FIXTURES / "format1.json"


class FinalNorm(jacobiscope.Diagnostic):
    """The user diagnostic the fixture was written with (its columns are its own code, so it is registered)."""

    name = "final_norm"

    def compute(self, context):
        return {"value": float(context.states[context.last_finite].norm()), "inf": math.inf}

    def columns(self, result):
        return {"final |X|": result["value"]}


@pytest.fixture()
def final_norm():
    jacobiscope.register_diagnostic(FinalNorm())
    yield
    jacobiscope.diagnostics.unregister_diagnostic("final_norm")


def _cells(text: str) -> list[list[str]]:
    """The summary's cells, line by line (alignment aside: format 2 right-aligns every numeric column)."""
    return [line.split() for line in text.splitlines()]


def _without_column(text: str, header: str) -> str:
    """The summary with one table column cut out (its extent read off the rule line under the headers)."""
    lines = text.splitlines()
    start = lines[0].index(header)
    end = lines[1].index(" ", start) if " " in lines[1][start:] else len(lines[1])
    table = 2 + next((i for i, line in enumerate(lines[2:]) if not line[:1].isspace() and line[:1] != "-"),
                     len(lines) - 2)
    return "\n".join(line[:start] + line[end + 2:] if i < table else line for i, line in enumerate(lines))


def test_a_format1_report_renders_the_cells_that_release_printed(final_norm):
    """Every cell as that release printed it, but lambda_max: one definition now (issue 30), the late-half
    estimate with its 95% interval, next to the verdict — read from the same running estimates."""
    from jacobiscope.diagnostics._lyapunov import lambda_interval

    report = Report.from_json(FORMAT1)
    printed = (FIXTURES / "format1.summary.txt").read_text(encoding="utf-8")
    now = report.summary()
    assert _cells(_without_column(now, "lambda_max (late half, 95%)")) == _cells(
        _without_column(printed, "lambda_max +/- se"))
    for line, row in zip(now.splitlines()[2:], report.rows):
        late, width = lambda_interval(row)[:2]
        assert (f"{late:.3g} +/- {width:.2g}" if math.isfinite(late) else "nan") in line


def test_a_format1_report_keeps_its_numbers_and_reads_through_the_old_fields():
    raw = json.loads(FORMAT1.read_text(encoding="utf-8"))
    report = Report.from_json(FORMAT1)
    first, diverging, user = report.rows
    old = raw["rows"][0]
    assert first.lyapunov["exponents"] == old["lyapunov"]["exponents"]
    assert first.results["lyapunov"].exponents == old["lyapunov"]["exponents"]
    assert first.spectral_norm == old["spectral_norm"] and first.results["spectral_norm"].samples == old["spectral_norm"]
    assert first.eigenvalues == old["eigenvalues"] and first.eigen_loop == old["eigen_loop"]
    assert first.results["halting"].rules == old["extra"]["halting"]["rules"]
    assert first.results["fixed_points"].basins == old["extra"]["fixed_points"]["basins"]
    assert first.energy is None is old["energy"] and first.outcome == {"solved": True}
    # NaN / Inf restored from the format-1 "nonfinite" map and its typed positions
    assert math.isinf(diverging.state_norm[-1]) and math.isnan(diverging.lyapunov["exponents"][0])
    assert diverging.regime == "diverging" and diverging.flags == raw["rows"][1]["flags"]
    assert user.extra == {"final_norm": raw["rows"][2]["extra"]["final_norm"] | {"inf": math.inf}}


def test_a_format1_dataframe_has_that_releases_columns_and_values():
    pytest.importorskip("pandas")
    frame = Report.from_json(FORMAT1).to_dataframe()
    old = json.loads((FIXTURES / "format1.dataframe.json").read_text(encoding="utf-8"))
    # every column of that release is still there, in its order (issue 30 added the late-half lambda_max columns)
    assert [column for column in DATAFRAME_COLUMNS if column in old["columns"]] == old["columns"]
    assert list(DATAFRAME_COLUMNS) == list(frame.columns[: len(DATAFRAME_COLUMNS) - 4]) + list(frame.columns[-4:])
    for i, values in enumerate(old["data"]):
        for column, expected in zip(old["columns"], values):
            got = frame.loc[i, column]
            missing = [v is None or (isinstance(v, float) and math.isnan(v)) for v in (got, expected)]
            assert all(missing) or got == expected, (i, column, got, expected)
    assert "halting.loops_saved" in frame.columns and "fixed_points.basins" in frame.columns


def test_a_format1_report_is_rewritten_in_the_current_format_and_round_trips(tmp_path):
    report = Report.from_json(FORMAT1)
    text = report.to_json(tmp_path / "again.json")
    document = json.loads(text)
    assert document["format_version"] == FORMAT_VERSION == 2
    assert set(document["rows"][0]) >= {"results", "state_norm"} and "lyapunov" not in document["rows"][0]
    assert Report.from_json(text) == report
    assert FORMAT1.read_bytes() == FORMAT1.read_bytes()  # reading never rewrites: compare with the raw file
    raw = json.loads(FORMAT1.read_text(encoding="utf-8"))
    upgraded = upgrade(raw)
    assert raw["format_version"] == 1 and upgraded["format_version"] == 2  # the input is not modified
    assert sorted(upgraded["rows"][0]["results"]) == ["clusters", "eigenvalues", "fixed_points", "halting", "lyapunov",
                                                      "regime", "spectral_norm"]


def test_a_format1_report_renders_html_and_figures(tmp_path):
    pytest.importorskip("matplotlib")
    report = Report.from_json(FORMAT1)
    html = report.save_html(tmp_path / "old.html").read_text(encoding="utf-8")
    assert html.count("<tr") > 3 and "every built-in" in html and "data:image/png" in html
    figures = report.plot()
    assert {"overview", "norms", "eigenvalues", "lyapunov", "clusters", "fixed_points", "halting"} <= set(figures)


@pytest.mark.guards("silent")
@pytest.mark.parametrize("field, value, problem", [
    ("regime", "stable", r"regime is 'stable'"),
    ("lyapunov", {"exponents": "x", "stderr": [], "history": [], "kaplan_yorke": 0.0},
     r"lyapunov\['exponents'\] is 'x'"),
    ("spectral_norm", [5], r"spectral_norm\[0\] is 5"),
    ("evidence", [], r"evidence is \[\] \(list\), expected an object"),
    ("extra", [1], r"extra is list, expected an object or null"),
])
def test_a_hand_edited_format1_file_is_refused_naming_the_field(tmp_path, field, value, problem):
    document = json.loads(FORMAT1.read_text(encoding="utf-8"))
    document["rows"][0][field] = value
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    with pytest.raises(ReportFormatError, match=problem):
        Report.from_json(path)
