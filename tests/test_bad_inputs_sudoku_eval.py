"""Bad inputs to Sudoku evaluation (`predict_along`, `evaluate_sudoku`): each refused before a loop runs with
jacobiscope's own error naming the problem and the fix — never a loop count nobody asked for (``2.7 -> 2``,
``"16" -> 1 and 6``, ``True -> 1``), never an internal TypeError from the model's methods.

The shipped checkpoints are the models (real weights, three real SATNet test puzzles).
"""
import numpy as np
import pytest
import torch

from jacobiscope.data import sudoku
from jacobiscope.errors import ArgumentError
from jacobiscope.hub import load_pretrained
from jacobiscope.recipes.sudoku import evaluate_sudoku, predict_along

silent = pytest.mark.guards("silent")
internal = pytest.mark.guards("internal")
hang = pytest.mark.guards("hang")


@pytest.fixture(scope="module")
def itrsa():
    return load_pretrained("itrsa-sudoku")


@pytest.fixture(scope="module")
def akorn():
    return load_pretrained("akorn-sudoku")


@pytest.fixture(scope="module")
def boards():
    _, test = sudoku.satnet_splits(limit=None)
    rows = test.select(range(3))
    return sudoku.to_tensor(list(rows["puzzle"])), sudoku.to_tensor(list(rows["solution"]))


LOOPS = [
    pytest.param([2.7], ("whole loop counts", "2.7"), id="fraction-not-truncated", marks=silent),
    pytest.param([True], ("whole loop counts", "True"), id="bool-not-read-as-1", marks=silent),
    pytest.param("16", ("positive int or a list", "'16'"), id="string-not-split-into-digits", marks=silent),
    pytest.param([float("nan")], ("whole loop counts", "NaN"), id="nan", marks=internal),
    pytest.param([], ("empty",), id="empty-list", marks=silent),
    pytest.param([0], (">= 1",), id="zero", marks=internal),
    pytest.param([-3], (">= 1", "-3"), id="negative", marks=internal),
    pytest.param([16, 10 ** 9], ("100,000 loops allowed",), id="absurd-count", marks=hang),
    pytest.param(None, ("positive int or a list",), id="none", marks=internal),
    pytest.param({16: 1}, ("positive int or a list",), id="dict", marks=silent),
    pytest.param([np.float64(16.0)], ("whole loop counts",), id="numpy-float", marks=silent),
    pytest.param([torch.tensor(1.5)], ("whole loop counts",), id="float-tensor", marks=silent),
]


@pytest.mark.parametrize("loops, fragments", LOOPS)
def test_predict_along_refuses_loop_counts_nobody_asked_for(itrsa, boards, loops, fragments):
    puzzles, _ = boards
    with pytest.raises(ArgumentError) as caught:
        predict_along(itrsa, puzzles, loops=loops)
    message = str(caught.value)
    assert all(fragment in message for fragment in fragments), message
    assert "pass" in message.split(" — ", 1)[1]


@pytest.mark.guards("silent")
def test_one_int_and_numpy_ints_are_loop_counts(itrsa, boards):
    """A single count is the one-element list, and numpy integers count: the same grids as the plain list."""
    puzzles, _ = boards
    reference = predict_along(itrsa, puzzles, loops=[3])[3]
    assert torch.equal(predict_along(itrsa, puzzles, loops=3)[3], reference)
    assert torch.equal(predict_along(itrsa, puzzles, loops=[np.int64(3)])[3], reference)


@pytest.mark.guards("internal")
def test_votes_for_a_model_without_votes_is_refused_by_name(itrsa, boards):
    puzzles, _ = boards
    with pytest.raises(ArgumentError, match=r"ItrSAForSudoku has no energy votes.* — use votes=1, or an AKOrN"):
        predict_along(itrsa, puzzles, loops=[2], votes=3)


@pytest.mark.parametrize("votes", [pytest.param(0, id="zero"), pytest.param(-1, id="negative"),
                                   pytest.param(2.5, id="fraction"), pytest.param(True, id="bool"),
                                   pytest.param("4", id="string")])
@pytest.mark.guards("internal")
def test_votes_must_be_a_positive_int(akorn, boards, votes):
    puzzles, _ = boards
    with pytest.raises(ArgumentError, match=r"votes must be a positive int.* — pass votes=1"):
        predict_along(akorn, puzzles, loops=[2], votes=votes)


@pytest.mark.parametrize("batch_size", [pytest.param(0, id="zero"), pytest.param(-1, id="negative-runs-silently"),
                                        pytest.param(1.5, id="fraction"), pytest.param(None, id="none")])
@pytest.mark.guards("silent")
def test_batch_size_must_be_a_positive_int(itrsa, boards, batch_size):
    puzzles, _ = boards
    with pytest.raises(ArgumentError, match=r"batch_size must be a positive int.* — pass e.g. batch_size=500"):
        predict_along(itrsa, puzzles, loops=[2], batch_size=batch_size)


@pytest.mark.parametrize("model", [pytest.param(torch.nn.Linear(2, 2), id="a-linear-layer"),
                                   pytest.param("itrsa-sudoku", id="a-name-not-a-model"),
                                   pytest.param(None, id="none")])
@pytest.mark.guards("internal")
def test_a_model_that_is_no_solver_is_named(boards, model):
    puzzles, solutions = boards
    with pytest.raises(ArgumentError, match=r"not a Sudoku solver .* — pass jacobiscope.load_pretrained"):
        evaluate_sudoku(model, puzzles, solutions, loops=[2])


@pytest.mark.parametrize("predictions, fragment", [
    pytest.param("grids", "non-empty dict", id="a-string", marks=internal),
    pytest.param({}, "non-empty dict", id="empty-dict", marks=silent),
    pytest.param({2: [[0] * 81]}, "[3, 81] tensor", id="a-list-not-a-tensor", marks=internal),
    pytest.param({"2": torch.zeros(3, 81, dtype=torch.long)}, "keyed by its loop count", id="string-key",
                 marks=silent),
])
def test_evaluate_sudoku_refuses_predictions_of_another_shape(itrsa, boards, predictions, fragment):
    puzzles, solutions = boards
    with pytest.raises(ArgumentError) as caught:
        evaluate_sudoku(itrsa, puzzles, solutions, loops=[2], predictions=predictions)
    assert fragment in str(caught.value) and "predict_along(model, puzzles, loops)" in str(caught.value)


@pytest.mark.guards("silent")
def test_evaluation_of_the_checked_counts_matches_the_models_own_solve(itrsa, boards):
    """The checks change no number: each count's grids are the model's own `solve` at that count."""
    puzzles, solutions = boards
    scores = evaluate_sudoku(itrsa, puzzles, solutions, loops=(4, 2, 4))
    assert sorted(scores) == [2, 4]
    for count in (2, 4):
        grid = itrsa.solve(puzzles, loops=count)
        assert scores[count]["board_accuracy"] == sudoku.board_accuracy(grid, puzzles, solutions)


@pytest.mark.guards("silent")
def test_evaluation_leaves_the_callers_thread_setting_as_it_was(itrsa, boards):
    """evaluate_sudoku computes on every core, then gives the caller back its own torch thread count."""
    puzzles, solutions = boards
    torch.set_num_threads(1)
    evaluate_sudoku(itrsa, puzzles, solutions, loops=[2])
    assert torch.get_num_threads() == 1
