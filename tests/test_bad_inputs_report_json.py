"""Bad inputs to Report JSON: hostile or careless files and texts given to `Report.from_json` (a BOM, a truncated or
empty file, another tool's JSON, hand edits into wrong types, duplicated keys, pointers to nowhere) end in
jacobiscope's own `ReportFormatError` naming the problem and the fix; reports that `measure` writes with any legal
argument (NaN/Inf, non-ASCII, huge ints, labels of any type) are read back exactly; reading never rewrites the file.
"""
import json
import math
import re

import pytest
import torch

import jacobiscope
from jacobiscope.errors import JacobiscopeError
from jacobiscope.report import LayerResult, Report, ReportFormatError, ReportSourceError

FIX = r"pass a file written by Report\.to_json or 'jacobiscope analyze --json'"


@pytest.fixture(scope="module")
def good():
    """A report `measure` wrote: one row with Lyapunov exponents, as JSON text."""
    row = jacobiscope.measure(lambda x: 0.5 * x, torch.ones(3, dtype=torch.float64), loops=3, diagnostics=["lyapunov"],
                              label="halves")
    return Report([row], {"model": "demo"}, ["a note"]).to_json()


def edited(text, change):
    document = json.loads(text)
    change(document)
    return json.dumps(document, indent=1)


def _set_row(key, value):
    def change(document):
        document["rows"][0][key] = value
    return change


def _set_result(name, key, value):
    """Edit one field of one diagnostic's result in the first row (``key`` None: the whole result)."""
    def change(document):
        results = document["rows"][0]["results"]
        if key is None:
            results[name] = value
        else:
            results.setdefault(name, {})[key] = value
    return change


def _set(key, value):
    def change(document):
        document[key] = value
    return change


# (the file's text from the good one, problem, fix, guards)
HOSTILE = {
    "truncated": (lambda t: t[: len(t) // 2], r"is not valid JSON \(.* line \d+ column \d+; truncated or edited\?\)", FIX,
                  "internal"),
    "empty": (lambda t: "", r"is empty", r"an interrupted analyze keeps a partial report", "internal"),
    "whitespace-only": (lambda t: " \n\t", r"is empty", FIX, "internal"),
    "utf16": (lambda t: t.encode("utf-16"), r"is not UTF-8 text \(byte 0xff at offset 0\)", FIX, "internal"),
    "latin1": (lambda t: t.replace("halves", "é").encode("latin-1"), r"is not UTF-8 text \(byte 0xe9", FIX,
               "internal"),
    "other-tools-json": (lambda t: json.dumps({"name": "pkg", "version": "1.0"}),
                         r"has no rows \(keys: 'name', 'version'\)", FIX, "internal"),
    "a-json-list": (lambda t: "[1, 2]", r"holds a JSON list, expected an object with rows", FIX, "internal"),
    "json-null": (lambda t: "null", r"holds a JSON NoneType, expected an object", FIX, "internal"),
    "other-format": (lambda t: edited(t, _set("format", "tensorboard")), r"format is 'tensorboard', expected "
                     r"'jacobiscope-report' \(a file of another tool\?\)", FIX, "internal"),
    "future-version": (lambda t: edited(t, _set("format_version", 99)), r"format_version 99; this jacobiscope reads up "
                       r"to 2", r"Upgrade jacobiscope \(git pull in its clone", "internal"),
    "version-as-str": (lambda t: edited(t, _set("format_version", "1")), r"format_version is '1' \(str\), expected an "
                       r"integer", FIX, "internal"),
    "version-zero": (lambda t: edited(t, _set("format_version", 0)), r"format_version 0 was never written", FIX,
                     "internal"),
    "rows-an-object": (lambda t: edited(t, _set("rows", {})), r"rows is a JSON dict, expected a list", FIX, "internal"),
    "row-a-string": (lambda t: edited(t, _set("rows", ["row"])), r"rows\[0\] is a JSON str, expected an object", FIX,
                     "internal"),
    "notes-not-str": (lambda t: edited(t, _set("notes", [3])), r"notes\[0\] is 3, expected a string", FIX, "internal"),
    "provenance-a-list": (lambda t: edited(t, _set("provenance", [])), r"provenance is a JSON list, expected an object",
                          FIX, "internal"),
    "loops-as-str": (lambda t: edited(t, _set_row("loops", "3")), r"rows\[0\]: loops is '3' \(str\), expected an int",
                     FIX, "silent"),
    "layer-as-float": (lambda t: edited(t, _set_row("layer", 1.5)), r"rows\[0\]: layer is 1\.5 \(float\), expected an "
                       r"int", FIX, "silent"),
    "label-as-int": (lambda t: edited(t, _set_row("input_label", 7)), r"input_label is 7 \(int\), expected a str", FIX,
                     "silent"),
    "mode-typo": (lambda t: edited(t, _set_row("mode", "Block")), r"mode is 'Block' \(str\), expected one of 'block'",
                  FIX, "silent"),
    "regime-unknown-word": (lambda t: edited(t, _set_result("regime", "regime", "stable")), r"regime is 'stable'", FIX, "silent"),
    "state-norm-strings": (lambda t: edited(t, _set_row("state_norm", [1, "x"])), r"state_norm is \[1, 'x'\] \(list\), "
                           r"expected a list of numbers", FIX, "silent"),
    "lyapunov-exponents-str": (lambda t: edited(t, _set_result("lyapunov", "exponents", "x")),
                               r"lyapunov\['exponents'\] is 'x'", FIX, "silent"),
    "spectral-entry-bare-number": (lambda t: edited(t, _set_result("spectral_norm", None, {"samples": [5]})), r"spectral_norm\[0\] is 5",
                                   FIX, "silent"),
    "evidence-a-list": (lambda t: edited(t, _set_result("regime", "evidence", [])), r"evidence is \[\] \(list\), expected an object",
                        FIX, "silent"),
    "results-a-list": (lambda t: edited(t, _set_row("results", [1])), r"results is \[1\] \(list\), expected an object",
                     FIX, "silent"),
    "timings-not-seconds": (lambda t: edited(t, _set_row("timings", {"lyapunov": "fast"})),
                            r"timings\['lyapunov'\] is 'fast' \(str\), expected a number of seconds", FIX, "silent"),
    "unknown-row-field": (lambda t: edited(t, _set_row("colour", "red")), r"unknown field\(s\) 'colour'",
                          r"A file written by a newer jacobiscope needs that version", "internal"),
    "missing-row-field": (lambda t: edited(t, lambda d: d["rows"][0].pop("state_norm")),
                          r"missing field\(s\) state_norm", FIX, "internal"),
    "duplicate-key": (lambda t: t.replace('"loops": 3', '"loops": 3, "loops": 4', 1), r"has the key 'loops' twice in "
                      r"one object \(the file was edited or merged", FIX, "silent"),
    "nonfinite-not-a-pointer": (lambda t: edited(t, _set("nonfinite", {"rows": "nan"})),
                                r"nonfinite key 'rows' is not a JSON Pointer", FIX, "internal"),
    "nonfinite-points-nowhere": (lambda t: edited(t, _set("nonfinite", {"/rows/9/x": "inf"})),
                                 r"nonfinite entry '/rows/9/x' points to nothing", FIX, "internal"),
    "nonfinite-bad-kind": (lambda t: edited(t, _set("nonfinite", {"/rows/0/seconds": "NaN"})),
                           r"nonfinite entry '/rows/0/seconds' is 'NaN', expected 'nan', 'inf' or '-inf'", FIX,
                           "internal"),
    "nonfinite-onto-an-int": (lambda t: edited(t, _set("nonfinite", {"/rows/0/loops": "inf"})),
                              r"rows\[0\]: loops is inf \(float\), expected an int", FIX, "silent"),
    "nested-too-deep": (lambda t: "[" * 100_000 + "]" * 100_000, r"nests JSON too deeply to be a report", FIX,
                        "internal"),
    "int-of-5000-digits": (lambda t: '{"rows": [], "provenance": {"seed": ' + "9" * 5000 + "}}",
                           r"is not usable JSON \(Exceeds the limit", FIX, "internal"),
}


@pytest.mark.parametrize("make, problem, fix", [
    pytest.param(make, problem, fix, id=name, marks=pytest.mark.guards(kind))
    for name, (make, problem, fix, kind) in HOSTILE.items()])
def test_a_hostile_report_file_is_refused_with_the_fix(tmp_path, good, make, problem, fix):
    content = make(good)
    path = tmp_path / "report.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    before = path.read_bytes()
    with pytest.raises(ReportFormatError, match=problem) as raised:
        Report.from_json(path)
    assert re.search(fix, str(raised.value)) and " — " in str(raised.value)
    assert isinstance(raised.value, (JacobiscopeError, ValueError))
    assert path.read_bytes() == before  # reading never rewrites the input


@pytest.mark.parametrize("source, error, problem", [
    pytest.param(5, ReportSourceError, r"expected a path or JSON text, got int — pass e\.g\. Report\.from_json",
                 id="source-an-int", marks=pytest.mark.guards("internal")),
    pytest.param(None, ReportSourceError, r"expected a path or JSON text, got NoneType", id="source-none",
                 marks=pytest.mark.guards("internal")),
    pytest.param("", ReportFormatError, r"got an empty string — pass a file written by", id="source-empty-str",
                 marks=pytest.mark.guards("internal")),
])
def test_a_source_that_is_neither_path_nor_json_is_named(source, error, problem):
    with pytest.raises(error, match=problem):
        Report.from_json(source)


@pytest.mark.parametrize("prefix", [
    pytest.param("\ufeff", id="bom-in-text", marks=pytest.mark.guards("internal")),
    pytest.param(b"\xef\xbb\xbf", id="bom-in-file", marks=pytest.mark.guards("internal")),
])
def test_a_byte_order_mark_is_not_an_error(tmp_path, good, prefix):
    """Windows editors add one; as text it used to be taken for a file path ("no such report file")."""
    if isinstance(prefix, bytes):
        path = tmp_path / "report.json"
        path.write_bytes(prefix + good.encode("utf-8"))
        back = Report.from_json(path)
    else:
        back = Report.from_json(prefix + good)
    assert back == Report.from_json(good) and back.rows[0].input_label == "halves"


def _row(**changes):
    row = jacobiscope.measure(lambda x: 0.5 * x, torch.ones(3, dtype=torch.float64), loops=2, diagnostics=["lyapunov"])
    for key, value in changes.items():
        setattr(row, key, value)
    return row


@pytest.mark.parametrize("changes", [
    pytest.param(dict(evidence={"growth": math.inf, "rate": -math.inf, "ratio": math.nan}), id="nonfinite-evidence",
                 marks=pytest.mark.guards("silent")),
    pytest.param(dict(extra={"mine": {"values": [1.0, math.nan, math.inf]}}), id="nonfinite-extra",
                 marks=pytest.mark.guards("silent")),
    pytest.param(dict(outcome={"solved": False, "score": math.nan}), id="nonfinite-outcome",
                 marks=pytest.mark.guards("silent")),
    pytest.param(dict(input_label="ünïcødé — 数独 \u2028 line"), id="non-ascii-label",
                 marks=pytest.mark.guards("lost")),
    pytest.param(dict(input_label="half \ud83d of a pair"), id="lone-surrogate-label", marks=pytest.mark.guards("lost")),
    pytest.param(dict(input_index=10**40, extra={"big": 10**300}), id="huge-ints", marks=pytest.mark.guards("lost")),
    pytest.param(dict(extra={"a/b~c": 1.0, "": math.inf}), id="pointer-special-keys", marks=pytest.mark.guards("lost")),
])
def test_legal_values_round_trip_exactly(tmp_path, changes):
    report = Report([_row(**changes)], {"seconds": math.nan, "limit": math.inf}, ["ü"])
    path = tmp_path / "report.json"
    report.to_json(path)
    back = Report.from_json(path)
    assert back == report
    assert back.provenance["limit"] == math.inf and math.isnan(back.provenance["seconds"])


@pytest.mark.guards("lost")
def test_a_value_json_cannot_hold_is_refused_before_the_file_is_touched(tmp_path, good):
    path = tmp_path / "report.json"
    path.write_text(good)
    report = Report([_row(extra={"mine": 10**5000})])
    with pytest.raises(TypeError, match=r"LayerResult\.results\['mine'\] is an int of about 5,000 digits.*store it as "
                                        r"a float or a str"):
        report.to_json(path)
    assert path.read_text() == good  # the earlier report is intact


@pytest.mark.guards("silent")
def test_a_label_of_any_type_from_measure_is_stored_as_text_and_read_back(tmp_path):
    rows = [jacobiscope.measure(lambda x: 0.5 * x, torch.ones(2, dtype=torch.float64), loops=2,
                                diagnostics=["spectral_norm"], label=label, input_index=i)
            for i, label in enumerate([3, 2.5, None, True, ("a", 1), torch.tensor(1.0)])]
    path = tmp_path / "report.json"
    Report(rows).to_json(path)
    back = Report.from_json(path)
    assert [row.input_label for row in back.rows] == ["3", "2.5", rows[2].input_label, "True", "('a', 1)",
                                                      "tensor(1.)"]
    assert back == Report(rows)



@pytest.mark.guards("hang")
def test_a_fifo_given_as_the_report_is_refused_not_read_forever(tmp_path):
    import os

    from jacobiscope._io import PathError

    fifo = tmp_path / "report.json"
    os.mkfifo(fifo)  # nobody ever writes to it: reading it would block for good
    with pytest.raises(PathError, match=r"'.*report\.json' is a FIFO, not a report file — pass the path of a regular "
                                        r"file"):
        Report.from_json(fifo)


def _one_row_report(model="a"):
    looped = jacobiscope.systems.logistic_map(3.9)
    return Report([jacobiscope.measure(looped, loops=8, diagnostics=["spectral_norm"])], {"model": model}, [])


@pytest.mark.parametrize("call, builtin, words", [
    pytest.param(lambda r, t: r.merge(r), ValueError, "is in report 0 and report 1", id="merge-duplicate"),
    pytest.param(lambda r, t: r.merge(_one_row_report("b")), ValueError, "the reports differ in model",
                 id="merge-other-model"),
    pytest.param(lambda r, t: r.merge(3), TypeError, "argument 1 is a int, not a Report", id="merge-int"),
    pytest.param(lambda r, t: r.plot(rows=[5]), IndexError, "row index 5 is out of range", id="plot-row-index"),
    pytest.param(lambda r, t: r.plot(rows=["x"]), TypeError, "rows must hold row indices", id="plot-row-type"),
    pytest.param(lambda r, t: r.save_figure("nope", t / "x.png"), ValueError, "unknown figure kind 'nope'",
                 id="figure-kind"),
    pytest.param(lambda r, t: r.save_figure("norms", t / "x.bmpx"), ValueError, "cannot tell the figure format",
                 id="figure-suffix"),
    pytest.param(lambda r, t: r.save_html(t / "r.html", dpi="high"), TypeError, "dpi must be a number",
                 id="html-dpi"),
    pytest.param(lambda r, t: r.to_hub_folder(t / "file.txt"), NotADirectoryError, "is a file, not a folder",
                 id="hub-folder-is-file"),
    pytest.param(lambda r, t: Report.from_hub_folder(t / "missing"), FileNotFoundError, "has no report.json",
                 id="hub-folder-missing"),
    pytest.param(lambda r, t: r.to_json(path=3), TypeError, "expected a file path", id="json-path-int"),
])
@pytest.mark.guards("internal")
def test_report_errors_are_jacobiscopes_own_and_the_builtin_a_caller_catches(tmp_path, call, builtin, words):
    # these were plain ValueError / TypeError / IndexError / OSError subclasses: `except JacobiscopeError` missed them
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(JacobiscopeError) as info:
        call(_one_row_report(), tmp_path)
    assert isinstance(info.value, builtin) and words in str(info.value)
