"""per_example: the point-biserial correlation against a hand computation, rows equal to analyze on each example
alone, correctness from the model's own outcome and from a sudoku eval record, a tiny ItrSA model end to end."""
import json
import math

import pytest
import torch
import transformers

import jacobiscope
from jacobiscope._per_example import point_biserial
from jacobiscope.data import sudoku
from jacobiscope.errors import ArgumentError
from jacobiscope.models.itrsa import ItrSAConfig, ItrSAForSudoku
from jacobiscope.recipes.sudoku import predict_along, puzzle_records


def _hand_point_biserial(values, flags):
    """The textbook formula (M1 - M0) / s_n * sqrt(p q), s_n the population standard deviation."""
    n = len(values)
    ones = [v for v, f in zip(values, flags) if f]
    zeros = [v for v, f in zip(values, flags) if not f]
    mean = sum(values) / n
    s_n = math.sqrt(sum((v - mean) ** 2 for v in values) / n)
    p, q = len(ones) / n, len(zeros) / n
    return (sum(ones) / len(ones) - sum(zeros) / len(zeros)) / s_n * math.sqrt(p * q)


def _hand_pearson(xs, ys):
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    sxx = sum((x - mx) ** 2 for x in xs)
    syy = sum((y - my) ** 2 for y in ys)
    return sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else None


def _percentile(sorted_values, q):
    position = q * (len(sorted_values) - 1)
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (position - low) * (sorted_values[high] - sorted_values[low])


VALUES = [-0.21, -0.05, 0.02, -0.30, 0.11, -0.12, 0.04, -0.18, 0.07, -0.02]
FLAGS = [False, True, True, False, True, False, True, False, False, True]


def test_point_biserial_equals_the_textbook_formula():
    summary = point_biserial(VALUES, FLAGS, resamples=50)
    assert summary.r == pytest.approx(_hand_point_biserial(VALUES, FLAGS), rel=1e-12)
    solved = [v for v, f in zip(VALUES, FLAGS) if f]
    unsolved = [v for v, f in zip(VALUES, FLAGS) if not f]
    assert summary.mean_solved == pytest.approx(sum(solved) / len(solved), rel=1e-12)
    assert summary.mean_unsolved == pytest.approx(sum(unsolved) / len(unsolved), rel=1e-12)
    assert (summary.n, summary.solved, summary.unsolved, summary.excluded) == (10, 5, 5, 0)


def test_bootstrap_interval_equals_a_hand_bootstrap_of_the_same_draws():
    resamples, seed = 300, 5
    summary = point_biserial(VALUES, FLAGS, resamples=resamples, seed=seed)
    draws = torch.randint(len(VALUES), (resamples, len(VALUES)), generator=torch.Generator().manual_seed(seed))
    rs = []
    for row in draws.tolist():
        r = _hand_pearson([VALUES[i] for i in row], [1.0 if FLAGS[i] else 0.0 for i in row])
        if r is not None:
            rs.append(r)
    rs.sort()
    assert summary.resamples == len(rs)
    assert summary.ci_low == pytest.approx(_percentile(rs, 0.025), rel=1e-9)
    assert summary.ci_high == pytest.approx(_percentile(rs, 0.975), rel=1e-9)
    assert summary.ci_low < summary.r < summary.ci_high


def test_undefined_correlation_says_why_and_nonfinite_values_are_excluded():
    all_solved = point_biserial([0.1, 0.2, 0.3], [True, True, True])
    assert math.isnan(all_solved.r) and "solved" in all_solved.reason and all_solved.mean_solved == pytest.approx(0.2)
    mixed = point_biserial([0.1, math.nan, 0.3, -0.2, 0.0], [True, True, None, False, False], resamples=20)
    assert mixed.excluded == 2 and mixed.n == 3
    assert mixed.r == pytest.approx(_hand_point_biserial([0.1, -0.2, 0.0], [True, False, False]), rel=1e-12)


@pytest.fixture(scope="module")
def tiny_itrsa():
    torch.manual_seed(0)
    model = ItrSAForSudoku(ItrSAConfig(hidden_size=16, num_heads=2, loops=4)).eval()
    puzzles, solutions = sudoku.generate_many(4, givens=(36, 44), seed=3)
    return model, puzzles, solutions


def test_rows_equal_analyze_on_each_example_alone(tiny_itrsa):
    model, puzzles, _ = tiny_itrsa
    correct = [True, False, False, True]
    table = jacobiscope.recipes.per_example(model, puzzles, correct, loops=6, progress=False)
    assert [row.index for row in table.rows] == [0, 1, 2, 3] and [row.solved for row in table.rows] == correct
    for index, puzzle in enumerate(puzzles):
        (alone,) = jacobiscope.analyze(model, [puzzle], loops=6, diagnostics=["lyapunov", "spectral_norm"], k=1,
                                       progress=False).rows
        row = table.rows[index]
        scalars = alone.scalars()
        assert row.lambda_max == pytest.approx(scalars["lambda_max"], rel=1e-6, abs=1e-9)
        assert row.lambda_stderr == pytest.approx(scalars["lambda_max_stderr"], rel=1e-6, abs=1e-9)
        assert row.spectral_norm == pytest.approx(scalars["max_spectral_norm"], rel=1e-6)
        assert row.lambda_late == pytest.approx(alone.evidence["lambda_late"], rel=1e-6, abs=1e-9)
        assert row.regime == alone.regime
    # The summary is the correlation of exactly these rows.
    values = [row.lambda_max for row in table.rows]
    assert table.summary.r == pytest.approx(_hand_point_biserial(values, correct), rel=1e-9)
    assert table.summary.statistic == "lambda_max" and table.loops == 6


def test_correctness_defaults_to_the_solvers_own_outcome(tiny_itrsa):
    model, puzzles, _ = tiny_itrsa
    table = jacobiscope.recipes.per_example(model, puzzles, loops=3, progress=False, diagnostics=["lyapunov"])
    grids = model.solve(puzzles, loops=3)
    givens = sudoku.to_tensor(puzzles)
    kept = ((givens == 0) | (grids == givens)).all(-1)
    expected = (sudoku.is_valid_solution(grids) & kept).tolist()
    assert [row.solved for row in table.rows] == expected
    assert all(math.isnan(row.spectral_norm) for row in table.rows)  # not measured: NaN, not a number made up


def test_join_with_a_sudoku_eval_record(tiny_itrsa, tmp_path):
    model, puzzles, solutions = tiny_itrsa
    ids, truth = sudoku.to_tensor(puzzles), sudoku.to_tensor(solutions)
    # A model that solves some puzzles: replace the prediction of two by their solutions.
    predictions = predict_along(model, ids, loops=(2, 5))
    predictions[5][[0, 2]] = truth[[0, 2]]
    record = {"model": "tiny", "loops": [2, 5], "puzzles": {"id": puzzle_records(ids, truth, predictions)}}
    path = tmp_path / "eval.json"
    path.write_text(json.dumps(record))
    solved = jacobiscope.recipes.solved_from_sudoku_eval(path, split="id", loops=5)
    assert solved == sudoku.board_correct(predictions[5], ids, truth).tolist() == [True, False, True, False]
    report = jacobiscope.analyze(model, puzzles, loops=5, diagnostics=["lyapunov"], k=1, progress=False)
    table = jacobiscope.recipes.per_example_from_report(report, solved, resamples=100)
    assert [row.solved for row in table.rows] == solved and table.summary.solved == 2
    loaded = json.loads(table.to_json(tmp_path / "table.json"))
    assert loaded["summary"]["n"] == 4 and len(loaded["rows"]) == 4
    with pytest.raises(ArgumentError, match="evaluated at loops"):
        jacobiscope.recipes.solved_from_sudoku_eval(record, split="id", loops=7)
    with pytest.raises(ArgumentError, match="split 'ood'"):
        jacobiscope.recipes.solved_from_sudoku_eval(record, split="ood", loops=5)


def test_layered_model_needs_one_layer_and_joins_it():
    model = transformers.GPT2Model(transformers.GPT2Config(n_embd=16, n_layer=2, n_head=2, vocab_size=50)).eval()
    ids = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]])
    table = jacobiscope.recipes.per_example(model, ids, [True, False, True], layer=1, loops=4, progress=False,
                                    diagnostics=["lyapunov"])
    (alone,) = jacobiscope.analyze(model, ids[1:2], layers=[1], loops=4, diagnostics=["lyapunov"], k=1,
                                   progress=False).rows
    assert table.rows[1].lambda_max == pytest.approx(alone.scalars()["lambda_max"], rel=1e-6, abs=1e-9)
    report = jacobiscope.analyze(model, ids, loops=2, diagnostics=["lyapunov"], k=1, progress=False)
    with pytest.raises(ArgumentError, match=r"layers \[0, 1\]"):
        jacobiscope.recipes.per_example_from_report(report, [True, False, True])
    with pytest.raises(ArgumentError, match="NoOutcome|no outcome"):
        jacobiscope.recipes.per_example_from_report(report, layer=0)


@pytest.mark.parametrize("correct, match", [([True, False], "2 values for 3 inputs"), ([True, 2, False], "bools"),
                                            ("yes", "one bool per input")])
def test_bad_correctness_is_refused(correct, match):
    rows = [jacobiscope.report.LayerResult(i, f"x{i}", 0, "loop", None, 2, [2], [1.0] * 3, [0.1] * 2, [], None,
                                           None, None, {"exponents": [0.1 * i], "stderr": [0.01], "history": [],
                                                        "kaplan_yorke": 0.0}, None, None, "converging", {}, [], 0.0)
            for i in range(3)]
    report = jacobiscope.Report(rows, {}, [])
    with pytest.raises(ArgumentError, match=match):
        jacobiscope.recipes.per_example_from_report(report, correct)
    with pytest.raises(ArgumentError, match="statistic must be one of"):
        jacobiscope.recipes.per_example_from_report(report, [True, False, True], statistic="rho")
