"""Bad inputs to the reference Sudoku models and the Sudoku data tools: each one gets the library's own error with a
message that names the problem and the fix, or an explicit result, never a torch traceback or a silently empty or
wrong answer. Real parts only: the shipped checkpoints, real files in tmp_path."""
import lzma
import math

import numpy as np
import pytest
import torch

import jacobiscope
from jacobiscope.data import sudoku
from jacobiscope.data.sudoku import SudokuDataNotFoundError, SudokuError, SudokuFileError
from jacobiscope.linalg.operators import forward_ad_context

PUZZLE = "004300209005009001070060043006002087190007400050083000600000105003508690042910300"
SOLUTION = "864371259325849761971265843436192587198657432257483916689734125713528694542916378"
# Givens that never clash directly, yet no completion exists: r1c9 needs a 9, which r2c9 already holds.
NO_SOLUTION = "12345678" + "0" + "0" * 8 + "9" + "0" * 63


@pytest.fixture(scope="module")
def models():
    return {"itrsa": jacobiscope.load_pretrained("itrsa-sudoku"), "akorn": jacobiscope.load_pretrained("akorn-sudoku")}


ARCHS = ["itrsa", "akorn"]


# ----------------------------------------------------------------------------------------- puzzles given to a model
BAD_PUZZLES = [
    pytest.param([], ValueError, r"0 puzzles \(an empty list\)", id="empty-list"),
    pytest.param((), ValueError, r"0 puzzles \(an empty list\)", id="empty-tuple"),
    pytest.param(torch.zeros(0, 81, dtype=torch.long), ValueError, r"0 puzzles \(an empty \[0, 81\] tensor\)",
                 id="empty-tensor"),
    pytest.param([[10] * 81], TypeError, r"Puzzle 0 is of type list, not a string.*81 ints \(or 9 rows of 9\)",
                 id="list-of-int-lists-out-of-range"),
    pytest.param([0] * 80, TypeError, r"Puzzle 0 is of type int, not a string", id="flat-list-of-80-ints"),
    pytest.param([[0] * 9] * 8, TypeError, r"Puzzle 0 is of type list", id="8-rows-of-9"),
    pytest.param([PUZZLE, None], TypeError, r"Puzzle 1 is of type NoneType", id="none-inside-list"),
    pytest.param(None, TypeError, r"got NoneType: pass one string", id="none"),
    pytest.param(5, TypeError, r"got int: pass one string", id="int"),
    pytest.param(PUZZLE.encode(), TypeError, r"got bytes: decode them first", id="bytes"),
    pytest.param({PUZZLE}, TypeError, r"got set: put them in a list", id="set"),
    pytest.param(PUZZLE[:-1] + "\u0663", ValueError, r"'\u0663' at position 80", id="arabic-indic-digit"),
    pytest.param("\uff15" + PUZZLE[1:], ValueError, r"'\uff15' at position 0", id="fullwidth-digit"),
    pytest.param("\u00b2" + PUZZLE[1:], ValueError, r"'\u00b2' at position 0", id="superscript-digit"),
    # whitespace is ignored: a space standing for a blank shortens the puzzle, so it is refused, never misread
    pytest.param(PUZZLE[:40] + " " + PUZZLE[41:], ValueError, r"got 80 characters", id="space-for-a-blank"),
    pytest.param(PUZZLE[:40] + "_" + PUZZLE[41:], ValueError, r"'_' at position 40", id="underscore-inside"),
    pytest.param(PUZZLE[:80], ValueError, r"81 characters .*got 80 characters", id="80-characters"),
    pytest.param(PUZZLE + "0", ValueError, r"81 characters .*got 82 characters", id="82-characters"),
    pytest.param("55" + "0" * 79, ValueError, r"contradictory: digit 5 appears twice in row 1.*fix its givens",
                 id="clash-in-row"),
    pytest.param("5" + "0" * 8 + "5" + "0" * 71, ValueError, r"digit 5 appears twice in column 1",
                 id="clash-in-column"),
    pytest.param("5" + "0" * 9 + "5" + "0" * 70, ValueError, r"digit 5 appears twice in box 1", id="clash-in-box"),
    pytest.param(torch.full((1, 81), 10), ValueError, r"digits 0-9, got values in \[10, 10\]. Use 0 for blanks",
                 id="int-tensor-10"),
    pytest.param(torch.full((1, 81), -1), ValueError, r"digits 0-9, got values in \[-1, -1\]", id="int-tensor-minus-1"),
    pytest.param(torch.zeros(1, 81), ValueError, r"integers \(0-9\), got torch.float32. Pass digit ids as .long",
                 id="float-tensor"),
    pytest.param(torch.zeros(1, 81, dtype=torch.bool), ValueError, r"integers \(0-9\), got torch.bool",
                 id="bool-tensor"),
    pytest.param(torch.zeros(81, dtype=torch.long), ValueError, r"got \(81,\). Reshape it: input_ids.reshape\(-1, 81\)",
                 id="1d-tensor"),
    pytest.param(torch.zeros(2, 9, 9, dtype=torch.long), ValueError, r"got \(2, 9, 9\). Reshape it",
                 id="n-9-9-tensor"),
    pytest.param(torch.zeros(2, 80, dtype=torch.long), ValueError, r"got \(2, 80\)", id="n-80-tensor"),
]


GRID = [[int(c) for c in PUZZLE[row * 9:row * 9 + 9]] for row in range(9)]
SAME_PUZZLE = {
    "nine-lines": "\n".join(PUZZLE[row * 9:row * 9 + 9] for row in range(9)) + "\n",
    "space-separated": " ".join(PUZZLE),
    "dots-in-lines": "\n".join(" ".join(PUZZLE[row * 9:row * 9 + 9]).replace("0", ".") for row in range(9)),
    "81-ints": [int(c) for c in PUZZLE],
    "9-rows-of-9": GRID,
    "list-of-grids": [GRID, tuple(int(c) for c in PUZZLE)],
}


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("form", sorted(SAME_PUZZLE))
def test_other_spellings_of_a_puzzle_read_as_the_puzzle(models, arch, form):
    expected = torch.tensor([[int(c) for c in PUZZLE]])
    given = models[arch].loop_inputs(SAME_PUZZLE[form])
    assert torch.equal(given, expected.expand(2 if form == "list-of-grids" else 1, 81))
    assert torch.equal(models[arch].solve(SAME_PUZZLE[form], loops=4)[:1], models[arch].solve(PUZZLE, loops=4))


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("puzzles, error, match", BAD_PUZZLES)
def test_bad_puzzles_are_refused_by_every_entry_point(models, arch, puzzles, error, match):
    model = models[arch]
    for call in (lambda: model.solve(puzzles, loops=2), lambda: model.solve_along(puzzles, loops=[1, 2]),
                 lambda: model.loop_map(puzzles), lambda: model.loop_inputs(puzzles)):
        with pytest.raises(error, match=match):
            call()


# ------------------------------------------------------------------------------------- arguments of solve and co.
COUNT_ARGUMENTS = [
    pytest.param({"loops": 0}, ValueError, r"loops must be a positive int, got 0. Pass e.g. loops=16", id="loops-0"),
    pytest.param({"loops": -3}, ValueError, r"loops must be a positive int, got -3", id="loops-negative"),
    pytest.param({"loops": 2.5}, TypeError, r"loops must be a positive int, got 2.5 \(float\)", id="loops-float"),
    pytest.param({"loops": True}, TypeError, r"got True \(bool\)", id="loops-bool"),
    pytest.param({"loops": "16"}, TypeError, r"got '16' \(str\)", id="loops-str"),
    pytest.param({"loops": None}, TypeError, r"got None \(NoneType\)", id="loops-none"),
    pytest.param({"loops": torch.tensor(2.0)}, TypeError, r"loops must be a positive int", id="loops-float-tensor"),
    pytest.param({"loops": 10**12}, ValueError, r"loops=1000000000000 is more than the 100000 allowed",
                 id="loops-huge"),
    pytest.param({"batch_size": 0}, ValueError, r"batch_size must be a positive int, got 0", id="batch-size-0"),
    pytest.param({"batch_size": -1}, ValueError, r"batch_size must be a positive int, got -1",
                 id="batch-size-negative"),
    pytest.param({"batch_size": 1.5}, TypeError, r"batch_size must be a positive int, got 1.5",
                 id="batch-size-float"),
]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("kwargs, error, match", COUNT_ARGUMENTS)
def test_bad_counts_in_solve_are_refused(models, arch, kwargs, error, match):
    with pytest.raises(error, match=match):
        models[arch].solve(PUZZLE, **{"loops": 2, **kwargs})


@pytest.mark.parametrize("votes", [0, 2, True, 2.5, "1"], ids=["0", "2", "bool", "float", "str"])
def test_itrsa_votes_must_be_1(models, votes):
    with pytest.raises(ValueError, match=rf"ItrSA is deterministic.*votes must be 1, got {votes!r}. Drop the votes"):
        models["itrsa"].solve(PUZZLE, loops=2, votes=votes)


@pytest.mark.parametrize("kwargs, error, match", [
    pytest.param({"votes": 0}, ValueError, r"votes must be a positive int, got 0", id="votes-0"),
    pytest.param({"votes": True}, TypeError, r"votes must be a positive int, got True \(bool\)", id="votes-bool"),
    pytest.param({"votes": 2.5}, TypeError, r"votes must be a positive int, got 2.5", id="votes-float"),
    pytest.param({"votes": 8, "batch_size": 4}, ValueError, r"votes=8 is more than batch_size=4.*Raise batch_size",
                 id="votes-over-batch-size"),
    pytest.param({"seed": "a"}, TypeError, r"seed must be an int .*got 'a' \(str\)", id="seed-str"),
    pytest.param({"seed": None}, TypeError, r"seed must be an int .*got None", id="seed-none"),
    pytest.param({"seed": 1.5}, TypeError, r"seed must be an int .*got 1.5", id="seed-float"),
])
def test_akorn_bad_votes_and_seeds_are_refused(models, kwargs, error, match):
    model = models["akorn"]
    with pytest.raises(error, match=match):
        model.solve(PUZZLE, **{"loops": 2, **kwargs})
    with pytest.raises(error, match=match):
        model.solve_along(PUZZLE, **{"loops": [1, 2], **kwargs})


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("loops, error, match", [
    pytest.param([], ValueError, r"loops must be positive ints \(one or several\), got none", id="empty"),
    pytest.param([0, 2], ValueError, r"positive ints \(one or several\), got 0", id="zero-inside"),
    pytest.param([2.0], TypeError, r"positive ints \(one or several\), got 2.0 \(float\)", id="float-inside"),
    pytest.param("16", TypeError, r"got '16' \(str\)", id="string"),
    pytest.param([4, 10**9], ValueError, r"loops=1000000000 is more than the 100000 allowed", id="huge-inside"),
])
def test_solve_along_refuses_bad_loop_lists(models, arch, loops, error, match):
    with pytest.raises(error, match=match):
        models[arch].solve_along(PUZZLE, loops=loops)


@pytest.mark.parametrize("arch", ARCHS)
def test_loop_outcome_refuses_zero_loops(models, arch):
    with pytest.raises(ValueError, match="loops must be a positive int, got 0"):
        models[arch].loop_outcome(PUZZLE, loops=0)


def test_akorn_loop_map_refuses_a_bad_seed(models):
    with pytest.raises(TypeError, match=r"seed must be an int .*got '0' \(str\)"):
        models["akorn"].loop_map(PUZZLE, seed="0")


# --------------------------------------------------------------------------------------------------- forward
def _ids():
    return sudoku.to_tensor([PUZZLE])


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("kwargs, error, match", [
    pytest.param({"loops": 0}, ValueError, r"loops must be a positive int, got 0", id="loops-0"),
    pytest.param({"loops": 1.5}, TypeError, r"loops must be a positive int, got 1.5", id="loops-float"),
    pytest.param({"labels": sudoku.to_tensor([PUZZLE])}, ValueError,
                 r"labels must be solution digits 1-9 \(no blanks\), got values in \[0, 9\]. Pass the solved grids",
                 id="labels-are-the-puzzle"),
    pytest.param({"labels": sudoku.to_tensor([SOLUTION] * 2)}, ValueError,
                 r"labels must be the solutions, an integer tensor shaped like input_ids \(1, 81\), got \(2, 81\)",
                 id="labels-wrong-batch"),
    pytest.param({"labels": sudoku.to_tensor([SOLUTION]).float()}, ValueError,
                 r"labels must be integer digits 1-9, got torch.float32", id="labels-float"),
    pytest.param({"labels": [int(c) for c in SOLUTION]}, ValueError, r"got list", id="labels-list"),
])
def test_forward_refuses_bad_loops_and_labels(models, arch, kwargs, error, match):
    with pytest.raises(error, match=match):
        models[arch](_ids(), **kwargs)


@pytest.mark.parametrize("kwargs, error, match", [
    pytest.param({"noise": torch.zeros(1, 81)}, ValueError, r"noise must be a float tensor shaped like the state "
                 r"\(1, 81, 128\).*got \(1, 81\) torch.float32", id="noise-wrong-shape"),
    pytest.param({"noise": torch.zeros(1, 81, 128, dtype=torch.long)}, ValueError, r"got \(1, 81, 128\) torch.int64",
                 id="noise-int"),
    pytest.param({"generator": 0}, TypeError, r"generator must be a torch.Generator or None, got int", id="generator-int"),
])
def test_akorn_forward_refuses_bad_noise_and_generators(models, kwargs, error, match):
    with pytest.raises(error, match=match):
        models["akorn"](_ids(), loops=1, **kwargs)


# ------------------------------------------------------------------------------- inputs that are fine (regression)
@pytest.mark.parametrize("arch", ARCHS)
def test_odd_but_valid_puzzles_give_complete_grids(models, arch):
    model = models[arch]
    dots = model.solve("." * 81, loops=2)  # no givens at all: any completion is a fair answer
    assert dots.shape == (1, 81) and int(dots.min()) >= 1 and int(dots.max()) <= 9
    as_uint8 = sudoku.to_tensor([PUZZLE]).to(torch.uint8)
    assert torch.equal(model.solve(as_uint8, loops=2), model.solve(PUZZLE, loops=2))
    assert torch.equal(model.solve(PUZZLE, loops=np.int64(2)), model.solve(PUZZLE, loops=2))
    assert torch.equal(model.solve(f"  {PUZZLE}\n", loops=2), model.solve(PUZZLE, loops=2))  # outer whitespace


@pytest.mark.parametrize("arch", ARCHS)
def test_givens_without_a_solution_are_flagged_not_solved(models, arch):
    # No direct clash, so the input is well formed; the model still answers, and loop_outcome says it is no solution.
    assert sudoku.count_solutions(NO_SOLUTION) == 0
    [outcome] = models[arch].loop_outcome(NO_SOLUTION, loops=2)
    assert outcome == {"solved": False, "givens": 9}


# ------------------------------------------------------------------- akorn's rotary cache inside torch.func.jvp
def test_akorn_first_used_inside_jvp_still_casts_and_solves(models):
    fresh = jacobiscope.load_pretrained("akorn-sudoku")
    assert not fresh.coupling._tables  # the attention has never run: its first call is inside the transform
    looped = fresh.loop_map(PUZZLE)
    x = looped.x0
    tangent = torch.randn(x.shape, generator=torch.Generator().manual_seed(0))
    with forward_ad_context():
        value, derivative = torch.func.jvp(looped.step, (x,), (tangent,))
    assert value.shape == derivative.shape == x.shape and bool(torch.isfinite(derivative).all())
    looped64 = fresh.loop_map(PUZZLE).to(torch.float64)  # raised "Cannot access storage of TensorWrapper"
    step64 = looped64.step(looped64.x0)
    assert step64.dtype == torch.float64
    assert torch.allclose(step64.float(), looped.step(x), atol=1e-4)
    assert torch.equal(fresh.solve(PUZZLE, loops=2), models["akorn"].solve(PUZZLE, loops=2))


# ------------------------------------------------------------------------------------------------- data files
ROW = f"{PUZZLE},{SOLUTION}\n"


def _write(tmp_path, name, text):
    path = tmp_path / name
    if name.endswith(".xz"):
        path.write_bytes(lzma.compress(text.encode()))
    else:
        path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("name, text, kwargs, match, line", [
    pytest.param("empty.csv", "", {}, r"no 'puzzle,solution' rows, no lines at all \(an empty or blank file\)", None,
                 id="empty-file"),
    pytest.param("blank.csv", "\n  \n\n", {}, r"no lines at all", None, id="blank-lines-only"),
    pytest.param("empty.csv.xz", "", {}, r"no lines at all", None, id="empty-xz"),
    pytest.param("header.csv", "quizzes,solutions\n", {}, r"only a header line \('quizzes,solutions'\)", None,
                 id="header-only"),
    pytest.param("one.csv", ROW, {"header": True}, r"skipped as a header by header=True.*pass header=False", None,
                 id="single-row-taken-as-header"),
    pytest.param("short.csv", f"{PUZZLE[:80]},{SOLUTION}\n", {}, r"expected 'puzzle,solution' \(two 81-digit", 1,
                 id="80-character-puzzle"),
    pytest.param("mismatch.csv", f"quizzes,solutions\n{ROW}{PUZZLE[:2]}1{PUZZLE[3:]},{SOLUTION}\n", {},
                 r"given 1 at r1c3 disagrees with the solution's 4. Fix or drop that row", 3, id="givens-disagree"),
    pytest.param("letter.csv", f"{PUZZLE[:5]}x{PUZZLE[6:]},{SOLUTION}\n", {}, r"expected 'puzzle,solution'", 1,
                 id="non-digit"),
    pytest.param("unicode.csv", f"{PUZZLE[:5]}\u0663{PUZZLE[6:]},{SOLUTION}\n", {}, r"expected 'puzzle,solution'", 1,
                 id="unicode-digit"),
    pytest.param("several.csv", f"{PUZZLE}\n{'0' * 81}\n", {}, r"more than one solution, so there is no single grid",
                 2, id="puzzle-alone-not-unique"),
    pytest.param("unsolvable.csv", f"{'123456780' + '0' * 35 + '9' + '0' * 36}\n", {},
                 r"a puzzle without its solution.*it has no solution", 1, id="puzzle-alone-unsolvable"),
    pytest.param("clash.csv", f"{'11' + '0' * 79}\n", {}, r"digit 1 appears twice in row 1.*Give the row as", 1,
                 id="puzzle-alone-contradictory"),
    pytest.param("three.csv", f"{PUZZLE},{SOLUTION},x\n", {}, r"expected 'puzzle,solution'", 1, id="extra-column"),
    pytest.param("swapped.csv", f"{SOLUTION},{PUZZLE}\n", {}, r"a complete solution of digits 1-9", 1,
                 id="columns-swapped"),
    pytest.param("broken.csv", f"{'0' * 81},{'1' * 81}\n", {}, r"the solution breaks the Sudoku rules", 1,
                 id="solution-breaks-rules"),
])
def test_load_csv_refuses_bad_files(tmp_path, name, text, kwargs, match, line):
    path = _write(tmp_path, name, text)
    with pytest.raises(SudokuFileError, match=match) as caught:
        sudoku.load_csv(path, **kwargs)
    assert caught.value.path == path and caught.value.line == line
    assert str(path) in str(caught.value)


@pytest.mark.parametrize("path, error, match", [
    pytest.param(None, SudokuError, r"Sudoku csv file must be a path \(str or pathlib.Path\), got NoneType", id="none"),
    pytest.param(5, SudokuError, r"must be a path .*got int", id="int"),
    pytest.param("definitely/not/here.csv", SudokuDataNotFoundError, r"does not exist — check the path",
                 id="missing"),
])
def test_load_csv_refuses_bad_paths(path, error, match):
    with pytest.raises(error, match=match):
        sudoku.load_csv(path)


@pytest.mark.parametrize("limit", [0, -1, 1.5, True, "10"], ids=["0", "negative", "float", "bool", "str"])
def test_limits_must_be_positive_ints(tmp_path, limit):
    path = _write(tmp_path, "rows.csv", ROW)
    for call in (lambda: sudoku.load_csv(path, limit=limit), lambda: sudoku.satnet_splits(limit=limit),
                 lambda: sudoku.rrn_test(limit=limit), lambda: sudoku.load_rrn_csv(path, limit=limit)):
        with pytest.raises(SudokuError, match=r"limit must be None \(all rows\) or a positive int.*limit=100"):
            call()


def test_satnet_splits_and_rrn_test_refuse_empty_files(tmp_path):
    path = _write(tmp_path, "satnet.csv.xz", "")
    with pytest.raises(SudokuFileError, match="no 'puzzle,solution' rows"):
        sudoku.satnet_splits(path)
    with pytest.raises(SudokuFileError, match="no 'puzzle,solution' rows"):
        sudoku.rrn_test(_write(tmp_path, "test.csv", "\n"))


def test_load_satnet_tensors_refuses_files_without_boards(tmp_path):
    torch.save(torch.zeros(0, 9, 9, 9), tmp_path / "features.pt")
    torch.save(torch.zeros(0, 9, 9, 9), tmp_path / "labels.pt")
    with pytest.raises(SudokuFileError, match=r"features.pt: holds no boards \(shape \(0, 9, 9, 9\)\)"):
        sudoku.load_satnet_tensors(tmp_path)


# --------------------------------------------------------------------------------------------------- generator
@pytest.mark.parametrize("kwargs, match", [
    pytest.param({"givens": 16}, r"givens must be an int in \[17, 81\] for unique puzzles, got 16", id="givens-16"),
    pytest.param({"givens": 82}, r"givens must be an int in \[17, 81\].*got 82", id="givens-82"),
    pytest.param({"givens": -1, "unique": False}, r"in \[0, 81\], got -1. Pass a number of givens from 0 to 81",
                 id="givens-negative"),
    pytest.param({"givens": 30.0}, r"got 30.0", id="givens-float"),
    pytest.param({"givens": True}, r"got True", id="givens-bool"),
    pytest.param({"max_attempts": 0}, r"max_attempts must be a positive int .*got 0", id="max-attempts-0"),
    pytest.param({"max_attempts": 1.5}, r"max_attempts must be a positive int .*got 1.5", id="max-attempts-float"),
    pytest.param({"unique": "no"}, r"unique must be True or False, got 'no'", id="unique-str"),
    pytest.param({"seed": "a"}, r"generator must be None, an int seed.*got str. Pass e.g. an int seed", id="seed-str"),
])
def test_generate_refuses_bad_arguments(kwargs, match):
    with pytest.raises(SudokuError, match=match):
        sudoku.generate(**kwargs)


@pytest.mark.parametrize("args, kwargs, match", [
    pytest.param((0,), {}, r"n must be a positive int \(the number of puzzles\), got 0", id="count-0"),
    pytest.param((-1,), {}, r"n must be a positive int .*got -1", id="count-negative"),
    pytest.param((2.0,), {}, r"n must be a positive int .*got 2.0", id="count-float"),
    pytest.param((2,), {"givens": (40, 30)}, r"low <= high, got \(40, 30\)", id="range-reversed"),
    pytest.param((2,), {"givens": (30, 35, 40)}, r"must be \(low, high\)", id="range-of-three"),
    pytest.param((2,), {"givens": (10, 30)}, r"in \[17, 81\] for unique puzzles, got 10", id="range-below-17"),
    pytest.param((2,), {"unique": 1}, r"unique must be True or False, got 1", id="unique-int"),
])
def test_generate_many_refuses_bad_arguments(args, kwargs, match):
    with pytest.raises(SudokuError, match=match):
        sudoku.generate_many(*args, **kwargs)


@pytest.mark.parametrize("kwargs, match", [
    pytest.param({"n": 0}, r"n must be a positive int \(the number of rows\), got 0", id="count-0"),
    pytest.param({"n": -2}, r"got -2", id="count-negative"),
    pytest.param({"n": 1.5}, r"got 1.5", id="count-float"),
    pytest.param({"n": 1, "blank_fraction": 2}, r"blank_fraction must be a number in \[0, 1\].*got 2",
                 id="fraction-above-1"),
    pytest.param({"n": 1, "blank_fraction": math.nan}, r"blank_fraction .*got nan", id="fraction-nan"),
    pytest.param({"n": 1, "seed": None}, r"seed must be an int, got None", id="seed-none"),
])
def test_relabelled_rows_refuses_bad_arguments(kwargs, match):
    with pytest.raises(SudokuError, match=match):
        sudoku.relabelled_rows(**kwargs)


# ------------------------------------------------------------------------------------------ metrics and tensors
@pytest.mark.parametrize("pred, puzzles, solutions, match", [
    pytest.param([SOLUTION] * 2, [PUZZLE], [SOLUTION] * 2, r"same number of boards, got 2, 1 and 2",
                 id="mismatched-counts"),
    pytest.param([SOLUTION], [SOLUTION], [PUZZLE], r"solution 0 has blanks.*are puzzles and solutions swapped",
                 id="swapped-arguments"),
    pytest.param([SOLUTION] * 2, [PUZZLE, "9" + "0" * 80], [SOLUTION] * 2,
                 r"puzzle 1's given 9 at r1c1 disagrees with solution 1's 8.*same order", id="misaligned-rows"),
    pytest.param(torch.zeros(1, 81, 10), [PUZZLE], [SOLUTION], r"from_one_hot expects .*got shape \(1, 81, 10\)",
                 id="logits-with-10-classes"),
    pytest.param(torch.full((1, 81, 9), math.nan), [PUZZLE], [SOLUTION], r"NaN or Inf values", id="nan-logits"),
    pytest.param([SOLUTION], [PUZZLE], [SOLUTION[:80]], r"board 0 must have 81 characters.*got 80",
                 id="short-solution"),
])
def test_accuracies_refuse_inconsistent_boards(pred, puzzles, solutions, match):
    for metric in (sudoku.board_accuracy, sudoku.cell_accuracy, sudoku.board_correct):
        with pytest.raises(SudokuError, match=match):
            metric(pred, puzzles, solutions)


def test_accuracy_of_zero_boards_is_an_explicit_nan():
    assert math.isnan(sudoku.board_accuracy([], [], []))
    assert math.isnan(sudoku.cell_accuracy([SOLUTION], [SOLUTION], [SOLUTION]))  # no blanks: nothing to score


def test_to_one_hot_refuses_a_dtype_that_is_not_a_dtype():
    with pytest.raises(SudokuError, match=r"dtype must be a torch.dtype, got 'float' \(str\). Pass e.g. dtype=torch"):
        sudoku.to_one_hot([PUZZLE], dtype="float")


def test_to_tensor_refuses_complex_boards():
    with pytest.raises(SudokuError, match=r"integer digits 0-9, got dtype torch.complex64"):
        sudoku.to_tensor(torch.zeros(1, 81, dtype=torch.complex64))


@pytest.mark.parametrize("grid, match", [
    pytest.param(PUZZLE, r"grid_key needs a complete grid, but .* has 46 blanks. Pass solutions", id="puzzle"),
    pytest.param("1" * 81, r"grid is contradictory: digit 1 appears twice in row 1", id="broken-grid"),
])
def test_grid_key_refuses_what_is_not_a_grid(grid, match):
    with pytest.raises(SudokuError, match=match):
        sudoku.grid_key(grid)
    with pytest.raises(SudokuError, match=match):
        sudoku.shared_grids([grid], [SOLUTION])


def test_shared_grids_takes_one_string_as_one_grid():
    assert sudoku.shared_grids(SOLUTION, SOLUTION) == [0]
    with pytest.raises(SudokuError, match=r"others must be grids .*got int"):
        sudoku.shared_grids([SOLUTION], 5)


def test_augment_refuses_a_solution_that_is_not_the_puzzles():
    with pytest.raises(SudokuError, match=r"given 8 at r1c1 disagrees with the solution's 0 .*in that order"):
        sudoku.augment(SOLUTION, PUZZLE)  # swapped


def test_augmented_dataset_refuses_what_is_not_a_dataset():
    with pytest.raises(SudokuError, match=r"needs a datasets.Dataset, got list. Build one with sudoku.to_dataset"):
        sudoku.augmented_dataset([{"input_ids": [0] * 81, "labels": [1] * 81}])
