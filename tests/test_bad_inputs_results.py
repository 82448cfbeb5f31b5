"""Bad inputs to the functions that read results (`loop_scaling`, `point_biserial`, `solved_from_sudoku_eval`):
each refused with jacobiscope's own error naming the problem and the fix — never a verdict computed from a NaN, a
percent read as a fraction, ``"no"`` read as solved, or a JSON parser's traceback.
"""
import json

import pytest
import torch

import jacobiscope
from jacobiscope._per_example import point_biserial, solved_from_sudoku_eval
from jacobiscope.errors import ArgumentError

silent = pytest.mark.guards("silent")
internal = pytest.mark.guards("internal")
hang = pytest.mark.guards("hang")

SCALING = [
    pytest.param({16: float("nan"), 32: 0.5}, "finite fraction in [0, 1], got nan", id="nan-accuracy", marks=silent),
    pytest.param({16: 42.0, 32: 0.5}, "not 42 percent", id="a-percent-not-a-fraction", marks=silent),
    pytest.param({16: -0.2, 32: 0.5}, "got -0.2", id="negative-accuracy", marks=silent),
    pytest.param({16: True, 32: 0.2}, "got True", id="bool-accuracy", marks=silent),
    pytest.param({16: "x"}, "got 'x'", id="text-accuracy", marks=internal),
    pytest.param({16: None, 32: 0.5}, "got None", id="none-accuracy", marks=internal),
    pytest.param({"abc": 0.5}, "got 'abc'", id="key-not-a-count", marks=internal),
    pytest.param({0: 0.1, 16: 0.2}, "got 0", id="zero-loops", marks=silent),
    pytest.param({16.5: 0.1, 32: 0.2}, "got 16.5", id="fractional-loops", marks=silent),
    pytest.param({16: 0.1, "16": 0.2}, "appears twice", id="same-count-as-int-and-text", marks=silent),
    pytest.param({16: {"acc": 0.2}}, "no 'board_accuracy'", id="dict-without-board-accuracy", marks=internal),
    pytest.param([0.1, 0.2], "mapping of loop count", id="a-list", marks=internal),
    pytest.param({}, "empty mapping", id="empty", marks=internal),
]


@pytest.mark.parametrize("per_loop, fragment", SCALING)
def test_loop_scaling_refuses_what_is_no_accuracy_table(per_loop, fragment):
    with pytest.raises(ArgumentError) as caught:
        jacobiscope.recipes.loop_scaling(per_loop)
    message = str(caught.value)
    assert fragment in message and " — " in message, message


@pytest.mark.parametrize("tolerance", [pytest.param(float("nan"), id="nan"), pytest.param(-0.01, id="negative"),
                                       pytest.param(None, id="none"), pytest.param("0.01", id="text")])
@pytest.mark.guards("silent")
def test_loop_scaling_tolerance_is_a_finite_non_negative_number(tolerance):
    with pytest.raises(ArgumentError, match=r"tolerance must be a finite number >= 0"):
        jacobiscope.recipes.loop_scaling({16: 0.2, 32: 0.5}, tolerance=tolerance)


@pytest.mark.guards("silent")
def test_loop_scaling_reads_results_json_entries_and_text_keys_alike():
    """The checks keep every legal shape: text keys and sudoku-eval dicts give the verdict of plain numbers."""
    plain = jacobiscope.recipes.loop_scaling({16: 0.5, 17: 0.52, 32: 0.7, 64: 0.68})
    stored = jacobiscope.recipes.loop_scaling({"16": {"board_accuracy": 0.5}, "17": {"board_accuracy": 0.52},
                                       "32": {"board_accuracy": 0.7}, "64": {"board_accuracy": 0.68}})
    assert plain == stored
    assert plain["largest_drop"] == pytest.approx(0.02) and plain["drop_loops"] == 64
    assert plain["keeps_scaling"] is False and plain["parity_gap"] == pytest.approx(0.02)


BISERIAL = [
    pytest.param([0.1, 0.2, 0.3, 0.4], ["no", "yes", "no", "yes"], "got 'no'", id="text-flags-read-as-solved",
                 marks=silent),
    pytest.param([0.1, 0.2, 0.3, 0.4], [2, 0, 1, 0], "got 2", id="a-count-not-a-flag", marks=silent),
    pytest.param(["a", 0.2], [True, False], "values must be numbers", id="text-value", marks=internal),
    pytest.param([True, 0.2], [True, False], "values must be numbers", id="bool-value", marks=silent),
    pytest.param(0.1, True, "must be a sequence", id="scalars", marks=internal),
    pytest.param("0.1,0.2", [True, False], "must be a sequence", id="a-string-of-values", marks=silent),
    pytest.param(torch.tensor(0.5), [True], "must be 1-d", id="a-0-d-tensor", marks=internal),
]


@pytest.mark.parametrize("values, solved, fragment", BISERIAL)
def test_point_biserial_refuses_what_is_no_flag_or_number(values, solved, fragment):
    with pytest.raises(ArgumentError) as caught:
        point_biserial(values, solved, resamples=10)
    assert fragment in str(caught.value) and " — " in str(caught.value)


@pytest.mark.guards("hang")
def test_point_biserial_resamples_have_a_budget():
    with pytest.raises(ArgumentError, match=r"over the budget .* — pass resamples <="):
        point_biserial([0.1, 0.2, 0.3, 0.4], [1, 0, 1, 0], resamples=10 ** 9)


@pytest.mark.guards("silent")
def test_point_biserial_takes_tensors_and_int_flags_as_the_plain_lists():
    plain = point_biserial([0.1, 0.4, -0.3, -0.5], [True, True, False, False], resamples=50)
    again = point_biserial(torch.tensor([0.1, 0.4, -0.3, -0.5], dtype=torch.float64), torch.tensor([1, 1, 0, 0]),
                           resamples=50)
    assert again.r == pytest.approx(plain.r, abs=1e-12) and again.ci_low == pytest.approx(plain.ci_low, abs=1e-12)


RECORDS = [
    pytest.param(b"{", "not JSON", id="truncated-json", marks=internal),
    pytest.param(b"\xff\xfe{}", "not JSON", id="utf-16-bytes", marks=internal),
    pytest.param(json.dumps({"puzzles": {"id": [{"x": 1}]}}).encode(), "list of {'index': int", id="entry-without-index",
                 marks=internal),
    pytest.param(json.dumps({"puzzles": {"id": {"0": [16]}}}).encode(), "list of {'index': int", id="entries-a-dict",
                 marks=internal),
    pytest.param(json.dumps({"puzzles": {"id": [{"index": 0, "solved_at": 16}]}}).encode(), "'solved_at'",
                 id="solved-at-not-a-list", marks=silent),
]


@pytest.mark.parametrize("content, fragment", RECORDS)
def test_solved_from_sudoku_eval_refuses_what_sudoku_eval_never_wrote(tmp_path, content, fragment):
    path = tmp_path / "eval.json"
    path.write_bytes(content)
    with pytest.raises(ArgumentError) as caught:
        solved_from_sudoku_eval(path, "id", loops=16)
    assert fragment in str(caught.value) and "jacobiscope sudoku eval" in str(caught.value)
    assert path.read_bytes() == content


@pytest.mark.guards("internal")
def test_a_record_with_a_byte_order_mark_reads_like_the_plain_one(tmp_path):
    record = {"loops": [16], "puzzles": {"id": [{"index": 1, "solved_at": []}, {"index": 0, "solved_at": [16]}]}}
    path = tmp_path / "eval.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(record).encode())
    assert solved_from_sudoku_eval(path, "id", loops=16) == solved_from_sudoku_eval(record, "id", loops=16) == \
        [True, False]
