"""jacobiscope.data.sudoku: solver, generator, metrics, conversions, loaders, benchmark splits, augmentation."""
import lzma
import random
from pathlib import Path

import pytest
import torch

from jacobiscope.errors import JacobiscopeError
from jacobiscope.data import sudoku
from jacobiscope.data.sudoku import (
    SudokuDataNotFoundError,
    SudokuError,
    SudokuFileError,
    UnsolvableSudokuError,
)

# The copy bundled with the package: a fresh clone or a wheel has it, so nothing here skips for want of files.
DATA = sudoku.BUNDLED_DIR
SATNET = DATA / "satnet.csv.xz"
RRN = DATA / "rrn-test.csv.xz"

# SATNet row 0 (as printed in SATNet's notebook) and its solution.
PUZZLE = "670000005003040082040005136000730090304206070001090600509008000000950208000127400"
SOLUTION = "678312945153649782942875136265731894394286571781594623529468317417953268836127459"
# SATNet row 1, whose first cell is blank.
LEADING_ZERO_PUZZLE = "030074608000050000279010400000608925028097006000000010060540109084000030301900700"
LEADING_ZERO_SOLUTION = "135274698846359271279816453417638925528197346693425817762543189984761532351982764"


def read_rows(path, n):
    """The first ``n`` rows of a data file, read independently of the module under test."""
    with lzma.open(path, "rt") as handle:
        return [tuple(line.strip().split(",")) for _, line in zip(range(n), handle)]


def givens_agree(puzzle, solution):
    return all(p in "0." or p == s for p, s in zip(puzzle, solution))


def count_givens(puzzle):
    return sum(ch not in "0." for ch in puzzle)


# ---------------------------------------------------------------------------------------------- solver
def test_solver_matches_the_satnet_file():
    rows = read_rows(SATNET, 200)
    assert rows[0] == (PUZZLE, SOLUTION)
    for puzzle, solution in rows:
        assert sudoku.solve(puzzle) == solution


def test_solver_matches_rrn_hard_puzzles():
    for puzzle, solution in read_rows(RRN, 100):
        assert sudoku.solve(puzzle) == solution
        assert sudoku.count_solutions(puzzle) == 1


def test_solver_accepts_dots_tensors_and_lists():
    dotted = PUZZLE.replace("0", ".")
    assert sudoku.solve(dotted) == SOLUTION
    assert sudoku.solve(sudoku.to_tensor(PUZZLE)[0]) == SOLUTION
    assert sudoku.solve(sudoku.to_tensor(PUZZLE).reshape(9, 9)) == SOLUTION
    assert sudoku.solve([int(ch) for ch in PUZZLE]) == SOLUTION
    assert sudoku.solve(PUZZLE, unique=True) == SOLUTION


def test_solver_on_boards_that_defeat_plain_backtracking():
    # Norvig's "hard1" has many solutions and sends naive fewest-candidate search into huge dead subtrees.
    hard1 = ".....6....59.....82....8....45........3........6..3.54...325..6.................."
    assert sudoku.count_solutions(hard1, limit=2) == 2
    assert sudoku.is_valid_solution(sudoku.solve(hard1))
    # Arto Inkala's puzzle, billed as the world's hardest: unique.
    inkala = "8..........36......7..9.2...5...7.......457.....1...3...1....68..85...1..9....4.."
    assert sudoku.count_solutions(inkala) == 1
    assert givens_agree(inkala, sudoku.solve(inkala))


def test_count_solutions():
    assert sudoku.count_solutions(PUZZLE) == 1
    # Only the first row given: many completions.
    assert sudoku.count_solutions(SOLUTION[:9] + "0" * 72) >= 2
    assert sudoku.count_solutions("0" * 81, limit=5) == 5
    assert sudoku.count_solutions(SOLUTION) == 1
    with pytest.raises(SudokuError, match="limit"):
        sudoku.count_solutions(PUZZLE, limit=0)


def test_solve_unique_rejects_a_puzzle_with_several_solutions():
    with pytest.raises(SudokuError, match="more than one solution"):
        sudoku.solve(SOLUTION[:9] + "0" * 72, unique=True)
    # Without unique=True the first solution is returned.
    assert sudoku.is_valid_solution(sudoku.solve(SOLUTION[:9] + "0" * 72))


# ---------------------------------------------------------------------------------------- bad input
def test_bad_input_errors():
    with pytest.raises(SudokuError, match="81 characters.*got 80"):
        sudoku.solve(PUZZLE[:80])
    with pytest.raises(SudokuError, match=r"only the digits 0-9 and '\.', got 'x' at position 3 \(r1c4\)"):
        sudoku.solve(PUZZLE[:3] + "x" + PUZZLE[4:])
    with pytest.raises(SudokuError, match="digits must be 0-9.*got 10"):
        sudoku.solve([10] + [0] * 80)
    with pytest.raises(SudokuError, match="digits 0-9"):
        sudoku.to_tensor(torch.full((1, 81), 10))
    with pytest.raises(SudokuError, match="must be an 81-character string"):
        sudoku.solve(None)
    with pytest.raises(SudokuError, match="integer digits"):
        sudoku.solve(torch.zeros(81))
    # The errors are jacobiscope errors and ValueErrors.
    with pytest.raises(ValueError):
        sudoku.validate_puzzle("1" * 82)
    with pytest.raises(JacobiscopeError):
        sudoku.validate_puzzle("1" * 82)


def test_contradictory_puzzle_is_rejected():
    twice_in_row = "5" + "0" * 7 + "5" + "0" * 72
    for function in (sudoku.solve, sudoku.count_solutions, sudoku.validate_puzzle):
        with pytest.raises(SudokuError, match=r"contradictory: digit 5 appears twice in row 1 \(cells r1c1 and r1c9\)"):
            function(twice_in_row)
    twice_in_column = "7" + "0" * 8 + "7" + "0" * 71
    with pytest.raises(SudokuError, match="twice in column 1"):
        sudoku.validate_puzzle(twice_in_column)
    twice_in_box = "3" + "0" * 9 + "3" + "0" * 70  # r1c1 and r2c2
    with pytest.raises(SudokuError, match="twice in box 1"):
        sudoku.validate_puzzle(twice_in_box)
    assert sudoku.validate_puzzle(PUZZLE.replace("0", ".")) == PUZZLE


def test_unsolvable_puzzle():
    # Row 1 holds 1-8, so r1c9 must be 9, but column 9 already has a 9 in row 9. No two givens clash.
    puzzle = "123456780" + "0" * 71 + "9"
    assert sudoku.validate_puzzle(puzzle) == puzzle
    with pytest.raises(UnsolvableSudokuError, match="no solution"):
        sudoku.solve(puzzle)
    assert sudoku.count_solutions(puzzle) == 0
    assert issubclass(UnsolvableSudokuError, SudokuError)


# -------------------------------------------------------------------------------------------- generator
@pytest.mark.parametrize("givens", [23, 30, 45, 81])
def test_generator_gives_unique_puzzles_with_the_requested_givens(givens):
    for seed in range(3):
        puzzle, solution = sudoku.generate(givens=givens, seed=seed)
        assert count_givens(puzzle) == givens
        assert sudoku.is_valid_solution(solution)
        assert givens_agree(puzzle, solution)
        assert sudoku.count_solutions(puzzle, limit=2) == 1
        assert sudoku.solve(puzzle) == solution


def test_generate_many_is_reproducible_and_honours_a_givens_range():
    puzzles, solutions = sudoku.generate_many(6, givens=(25, 35), seed=3)
    assert (puzzles, solutions) == sudoku.generate_many(6, givens=(25, 35), seed=3)
    assert len(set(puzzles)) == 6
    for puzzle, solution in zip(puzzles, solutions):
        assert 25 <= count_givens(puzzle) <= 35
        assert sudoku.count_solutions(puzzle) == 1 and givens_agree(puzzle, solution)
    fixed, _ = sudoku.generate_many(3, givens=28, seed=0)
    assert [count_givens(p) for p in fixed] == [28, 28, 28]


def test_generator_without_uniqueness_and_bad_counts():
    puzzle, solution = sudoku.generate(givens=10, seed=0, unique=False)
    assert count_givens(puzzle) == 10 and givens_agree(puzzle, solution)
    assert sudoku.count_solutions(puzzle) >= 1
    with pytest.raises(SudokuError, match="17"):
        sudoku.generate(givens=16)
    with pytest.raises(SudokuError, match="givens"):
        sudoku.generate(givens=82)
    with pytest.raises(SudokuError, match="max_attempts"):
        sudoku.generate(givens=17, seed=0, max_attempts=1)


# --------------------------------------------------------------------------------------------- metrics
def test_board_and_cell_accuracy_on_hand_made_cases():
    puzzle = "0" * 10 + SOLUTION[10:]  # blanks at cells 0-9
    wrong_blank = "9" + SOLUTION[1:]  # cell 0 (a blank) wrong: the board fails
    assert SOLUTION[0] != "9"
    wrong_given = SOLUTION[:80] + ("1" if SOLUTION[80] != "1" else "2")  # cell 80 is a given: ignored
    preds = [SOLUTION, wrong_blank, wrong_given]
    assert sudoku.board_correct(preds, [puzzle] * 3, [SOLUTION] * 3).tolist() == [True, False, True]
    assert sudoku.board_accuracy(preds, [puzzle] * 3, [SOLUTION] * 3) == pytest.approx(2 / 3)
    assert sudoku.cell_accuracy(preds, [puzzle] * 3, [SOLUTION] * 3) == pytest.approx(29 / 30)
    # A blank left blank in the prediction is wrong.
    assert sudoku.board_accuracy(puzzle, puzzle, SOLUTION) == 0.0
    assert sudoku.cell_accuracy(puzzle, puzzle, SOLUTION) == 0.0


def test_metrics_accept_tensors_and_logits():
    puzzles = sudoku.to_tensor([PUZZLE, PUZZLE])
    solutions = sudoku.to_tensor([SOLUTION, SOLUTION])
    pred = solutions.clone()
    blank = int((puzzles[1] == 0).nonzero()[0, 0])
    pred[1, blank] = pred[1, blank] % 9 + 1
    assert sudoku.board_accuracy(pred, puzzles, solutions) == 0.5
    logits = torch.nn.functional.one_hot(pred - 1, 9).float().reshape(2, 9, 9, 9) * 3.0 - 1.0
    assert sudoku.board_correct(logits, puzzles, solutions).tolist() == [True, False]
    blanks = int((puzzles == 0).sum())
    assert sudoku.cell_accuracy(logits, puzzles, solutions) == pytest.approx((blanks - 1) / blanks)
    with pytest.raises(SudokuError, match="same number of boards"):
        sudoku.board_accuracy(pred[:1], puzzles, solutions)


def test_is_valid_solution():
    assert sudoku.is_valid_solution(SOLUTION) is True
    assert sudoku.is_valid_solution(PUZZLE) is False
    swapped = SOLUTION[1] + SOLUTION[0] + SOLUTION[2:]  # two digits swapped within a row: columns break
    assert sudoku.is_valid_solution(swapped) is False
    assert sudoku.is_valid_solution(sudoku.to_tensor(SOLUTION).reshape(9, 9)) is True
    assert sudoku.is_valid_solution([SOLUTION, swapped, SOLUTION]).tolist() == [True, False, True]


# ----------------------------------------------------------------------------------------- conversions
def test_conversions_round_trip_and_keep_leading_zeros():
    boards = [PUZZLE, "0" * 80 + "9", SOLUTION]
    grid = sudoku.to_tensor(boards)
    assert grid.shape == (3, 81) and grid.dtype == torch.int64
    assert grid[1].tolist() == [0] * 80 + [9]
    assert sudoku.to_strings(grid) == boards
    hot = sudoku.to_one_hot(grid)
    assert hot.shape == (3, 9, 9, 9)
    assert float(hot[0, 0, 2].sum()) == 0.0  # r1c3 is blank: all-zero vector
    assert int(hot[0, 0, 0].argmax()) == 5  # r1c1 is a 6
    assert torch.equal(sudoku.from_one_hot(hot), grid)
    assert torch.equal(sudoku.from_one_hot(hot.reshape(3, 729)), grid)
    assert sudoku.to_strings(PUZZLE.replace("0", ".")) == [PUZZLE]


# --------------------------------------------------------------------------------------------- loaders
def write_rows(path, rows, separator=",", opener=open):
    with opener(path, "wt") as handle:
        handle.writelines(f"{p}{separator}{s}\n" for p, s in rows)


@pytest.fixture(scope="module")
def small_rows():
    puzzles, solutions = sudoku.generate_many(4, givens=30, seed=11)
    # SATNet row 1 starts with a blank: its leading "0" must survive as a string digit.
    return [(LEADING_ZERO_PUZZLE, LEADING_ZERO_SOLUTION)] + list(zip(puzzles, solutions))


def check_dataset(ds, rows):
    assert ds.column_names == ["puzzle", "solution", "input_ids", "labels"]
    assert list(ds["puzzle"]) == [p.replace(".", "0") for p, _ in rows]
    assert list(ds["solution"]) == [s for _, s in rows]
    columns = ds.with_format("torch")[:]
    assert torch.equal(columns["input_ids"], sudoku.to_tensor([p for p, _ in rows]))
    assert torch.equal(columns["labels"], sudoku.to_tensor([s for _, s in rows]))


def test_load_csv_plain_and_xz(tmp_path, small_rows):
    write_rows(tmp_path / "boards.csv", small_rows)
    write_rows(tmp_path / "boards.csv.xz", small_rows, opener=lzma.open)
    for name in ("boards.csv", "boards.csv.xz"):
        ds = sudoku.load_csv(tmp_path / name)
        check_dataset(ds, small_rows)
        assert ds[0]["puzzle"].startswith("03007")
        assert ds[0]["input_ids"][:3] == [0, 3, 0]
    assert len(sudoku.load_csv(tmp_path / "boards.csv", limit=2)) == 2


def test_load_csv_tolerates_comma_space_blank_lines_header_and_dots(tmp_path, small_rows):
    path = tmp_path / "rrn-test-17.csv"
    lines = ["quizzes,solutions", ""] + [f"{p.replace('0', '.')}, {s}" for p, s in small_rows] + ["", "  "]
    path.write_text("\n".join(lines) + "\n")
    check_dataset(sudoku.load_csv(path), small_rows)
    headless = tmp_path / "headless.csv"
    write_rows(headless, small_rows, separator=", ")
    check_dataset(sudoku.load_csv(headless, header=False), small_rows)


def test_load_csv_reads_the_columns_a_header_names(tmp_path, small_rows):
    """HRM's sudoku-extreme (source,question,answer,rating with '.' blanks), a tab-separated file with the solution
    first, a semicolon file, a space-aligned file, and puzzles alone under a puzzle,solution header: the same rows each time."""
    hrm = tmp_path / "extreme.csv"
    hrm.write_text("source,question,answer,rating\n" + "".join(
        f"set{i},{p.replace('0', '.')},{s},{i}\n" for i, (p, s) in enumerate(small_rows)))
    check_dataset(sudoku.load_csv(hrm), small_rows)
    reversed_tsv = tmp_path / "reversed.tsv"
    reversed_tsv.write_text("Solution\tPuzzle\n" + "".join(f"{s}\t{p}\n" for p, s in small_rows))
    check_dataset(sudoku.load_csv(reversed_tsv), small_rows)
    semicolons = tmp_path / "semicolons.csv"
    semicolons.write_text("".join(f"{p};{s}\n" for p, s in small_rows))
    check_dataset(sudoku.load_csv(semicolons), small_rows)
    spaces = tmp_path / "spaces.txt"  # aligned by hand: runs of spaces (and a stray tab) separate the fields
    spaces.write_text("quizzes    solutions\n" + "".join(f"{p.replace('0', '.')}   {s}\n" if i % 2 else f"{p} \t{s}\n"
                                                         for i, (p, s) in enumerate(small_rows)))
    check_dataset(sudoku.load_csv(spaces), small_rows)
    alone = tmp_path / "alone.csv"
    p, s = small_rows[1]
    alone.write_text(f"puzzle,solution\n{p}\n")
    assert list(sudoku.load_csv(alone)["solution"]) == [s]   # the exact solver supplies it
    wide = tmp_path / "wide.csv"
    wide.write_text(f"id,grid,score\n1,{p},3\n")
    with pytest.raises(SudokuFileError, match=r"wide\.csv:1: a header of 3 columns .* names no puzzle column"):
        sudoku.load_csv(wide)
    hrm.write_text(f"source,question,answer,rating\nx,{p},{s[:-1]},1\n")  # an 80-digit answer
    with pytest.raises(SudokuFileError, match=r"extreme\.csv:2: expected the header's 4 columns .* column 3"):
        sudoku.load_csv(hrm)


def test_puzzles_given_alone_are_scored_against_their_unique_solution(tmp_path):
    """A file of puzzles without solutions (real SATNet test rows): the solver supplies each one's solution, which
    must be the one SATNet ships with it."""
    _, test = sudoku.satnet_splits(limit=None)
    rows = test.select(range(5))
    path = tmp_path / "puzzles.txt"
    lines = [p.replace("0", ".") if i % 2 else p for i, p in enumerate(rows["puzzle"])]
    lines[2] = f"{rows[2]['puzzle']},{rows[2]['solution']}"  # rows with and without solutions may mix
    path.write_text("\n".join(lines) + "\n")
    loaded = sudoku.load_csv(path)
    assert list(loaded["solution"]) == list(rows["solution"]) and list(loaded["puzzle"]) == list(rows["puzzle"])


def test_load_csv_bad_files_name_the_file_and_line(tmp_path, small_rows):
    path = tmp_path / "bad.csv"
    good = [f"{p},{s}" for p, s in small_rows]
    path.write_text("\n".join([good[0], "", good[1][:-1]]) + "\n")  # line 3: an 80-digit solution
    with pytest.raises(SudokuFileError, match=r"bad\.csv:3: expected 'puzzle,solution'") as info:
        sudoku.load_csv(path)
    assert info.value.line == 3 and info.value.path == path
    path.write_text(f"{good[0]}\n{small_rows[1][0]}\n{'0' * 81}\n")  # puzzles alone: line 3 has many solutions
    with pytest.raises(SudokuFileError, match=r"bad\.csv:3: a puzzle without its solution"):
        sudoku.load_csv(path)
    p, s = small_rows[1]
    i = next(k for k in range(81) if p[k] != "0")
    wrong_given = p[:i] + str(int(p[i]) % 9 + 1) + p[i + 1:]
    path.write_text(f"{good[0]}\n{wrong_given},{s}\n")
    with pytest.raises(SudokuFileError, match=r"bad\.csv:2: given .* disagrees with the solution"):
        sudoku.load_csv(path)
    broken = s[1] + s[0] + s[2:]
    path.write_text(f"{good[0]}\n{'0' * 81},{broken}\n")
    with pytest.raises(SudokuFileError, match=r"bad\.csv:2: the solution breaks the Sudoku rules"):
        sudoku.load_csv(path)
    assert len(sudoku.load_csv(path, validate=False)) == 2
    (tmp_path / "not.csv.xz").write_bytes(b"not xz data")
    with pytest.raises(SudokuFileError, match=r"not\.csv\.xz: cannot read it"):
        sudoku.load_csv(tmp_path / "not.csv.xz")
    with pytest.raises(SudokuDataNotFoundError, match="does not exist"):
        sudoku.load_csv(tmp_path / "missing.csv")
    with pytest.raises(FileNotFoundError):
        sudoku.load_csv(tmp_path / "missing.csv")


def test_load_satnet_tensors(tmp_path, small_rows):
    puzzles = [p for p, _ in small_rows]
    solutions = [s for _, s in small_rows]
    torch.save(sudoku.to_one_hot(puzzles), tmp_path / "features.pt")
    torch.save(sudoku.to_one_hot(solutions), tmp_path / "labels.pt")
    check_dataset(sudoku.load_satnet_tensors(tmp_path / "features.pt", tmp_path / "labels.pt"), small_rows)
    check_dataset(sudoku.load_satnet_tensors(tmp_path), small_rows)
    assert len(sudoku.load_satnet_tensors(tmp_path, limit=3)) == 3
    # SATNet's bits flattened to [N, 729] load too.
    torch.save(sudoku.to_one_hot(puzzles).reshape(-1, 729), tmp_path / "flat.pt")
    check_dataset(sudoku.load_satnet_tensors(tmp_path / "flat.pt", tmp_path / "labels.pt"), small_rows)


def test_load_satnet_tensors_bad_files(tmp_path, small_rows):
    solutions = sudoku.to_one_hot([s for _, s in small_rows])
    torch.save(solutions, tmp_path / "labels.pt")
    torch.save(solutions[:2], tmp_path / "short.pt")
    with pytest.raises(SudokuFileError, match="pair up"):
        sudoku.load_satnet_tensors(tmp_path / "short.pt", tmp_path / "labels.pt")
    torch.save(solutions * 2, tmp_path / "twos.pt")
    with pytest.raises(SudokuFileError, match=r"twos\.pt: board 0 is not one-hot"):
        sudoku.load_satnet_tensors(tmp_path / "twos.pt", tmp_path / "labels.pt")
    torch.save(torch.zeros(5, 9, 9, 8), tmp_path / "shape.pt")
    with pytest.raises(SudokuFileError, match=r"shape\.pt: expected one-hot boards"):
        sudoku.load_satnet_tensors(tmp_path / "shape.pt", tmp_path / "labels.pt")
    torch.save({"features": solutions}, tmp_path / "dict.pt")
    with pytest.raises(SudokuFileError, match="got dict"):
        sudoku.load_satnet_tensors(tmp_path / "dict.pt", tmp_path / "labels.pt")
    blank_label = solutions.clone()
    blank_label[1, 0, 0] = 0
    torch.save(blank_label, tmp_path / "blank_label.pt")
    with pytest.raises(SudokuFileError, match=r"blank_label\.pt: board 1 does not have exactly one digit"):
        sudoku.load_satnet_tensors(tmp_path / "labels.pt", tmp_path / "blank_label.pt")
    (tmp_path / "junk.pt").write_bytes(b"junk")
    with pytest.raises(SudokuFileError, match=r"junk\.pt: cannot load it"):
        sudoku.load_satnet_tensors(tmp_path / "junk.pt", tmp_path / "labels.pt")


def test_load_rrn_folder(tmp_path, small_rows):
    folder = tmp_path / "sudoku-hard"
    folder.mkdir()
    splits = {"train": small_rows[:3], "valid": small_rows[3:4], "test": small_rows[4:]}
    for split, rows in splits.items():
        write_rows(folder / f"{split}.csv", rows)
    for split, rows in splits.items():
        check_dataset(sudoku.load_rrn_csv(folder, split=split), rows)
    check_dataset(sudoku.load_rrn_csv(folder / "train.csv"), splits["train"])
    assert len(sudoku.load_rrn_csv(folder, "train", limit=1)) == 1
    with pytest.raises(SudokuError, match="split must be one of"):
        sudoku.load_rrn_csv(folder, split="validation")
    (folder / "test.csv").write_text("puzzle,solution\n")  # RRN files have no header: a header line is an error
    with pytest.raises(SudokuFileError, match=r"test\.csv:1"):
        sudoku.load_rrn_csv(folder)
    with pytest.raises(SudokuDataNotFoundError, match="RRN"):
        sudoku.load_rrn_csv(tmp_path / "nowhere")


def test_to_dataset(small_rows):
    puzzles = [p for p, _ in small_rows]
    solutions = [s for _, s in small_rows]
    check_dataset(sudoku.to_dataset(puzzles, solutions), small_rows)
    with pytest.raises(SudokuFileError, match="row 0: given"):
        sudoku.to_dataset(solutions[1:2], solutions[:1])
    assert len(sudoku.to_dataset([], [])) == 0


# ----------------------------------------------------------------------------------- benchmark protocol
@pytest.fixture(scope="module")
def satnet_splits():
    return sudoku.satnet_splits()


def test_satnet_splits_from_the_real_file(satnet_splits):
    train, test = satnet_splits
    assert (len(train), len(test)) == (9000, 1000)
    assert train[0]["puzzle"].startswith("670000005003040082")
    assert train[0]["solution"] == SOLUTION
    row_9000 = read_rows(SATNET, 9001)[9000]
    assert (test[0]["puzzle"], test[0]["solution"]) == row_9000
    limited_train, limited_test = sudoku.satnet_splits(limit=3)
    assert list(limited_train["puzzle"]) == train["puzzle"][:3]
    assert list(limited_test["puzzle"]) == test["puzzle"][:3]


def test_rrn_test_from_the_real_file():
    ood = sudoku.rrn_test()
    assert len(ood) == 18000
    givens = [81 - p.count("0") for p in ood["puzzle"]]
    assert min(givens) == 17 and max(givens) == 34
    assert len(sudoku.rrn_test(limit=10)) == 10


def test_data_path_override_by_env_var_and_argument(tmp_path, monkeypatch, small_rows):
    write_rows(tmp_path / "rrn-test.csv.xz", small_rows, opener=lzma.open)
    monkeypatch.setenv(sudoku.ENV_VAR, str(tmp_path))
    assert sudoku.data_dir() == tmp_path
    check_dataset(sudoku.rrn_test(), small_rows)
    with pytest.raises(SudokuDataNotFoundError, match="satnet.csv.xz"):
        sudoku.satnet_splits()
    # An explicit argument wins over the environment; a file works as well as a folder.
    write_rows(tmp_path / "other.csv", small_rows[:2])
    check_dataset(sudoku.rrn_test(tmp_path / "other.csv"), small_rows[:2])
    # SATNet's split is by index, so a file that is not the full 10,000 rows is refused.
    write_rows(tmp_path / "satnet.csv.xz", small_rows, opener=lzma.open)
    with pytest.raises(SudokuFileError, match="expected 10000"):
        sudoku.satnet_splits()
    monkeypatch.setenv(sudoku.ENV_VAR, str(tmp_path / "missing"))
    with pytest.raises(SudokuDataNotFoundError, match="JACOBISCOPE_SUDOKU_DATA"):
        sudoku.rrn_test()


def test_missing_default_data_folder(monkeypatch, tmp_path):
    monkeypatch.delenv(sudoku.ENV_VAR, raising=False)
    monkeypatch.setattr(sudoku._splits, "BUNDLED_DIR", tmp_path / "absent")  # where data_dir looks it up
    with pytest.raises(SudokuDataNotFoundError, match="bundled with jacobiscope are missing.*JACOBISCOPE_SUDOKU_DATA"):
        sudoku.satnet_splits()


def test_bundled_files_are_the_documented_ones(monkeypatch):
    """The loaders default to the package's copy, and its bytes are the ones PROVENANCE.md names."""
    import hashlib
    import re

    monkeypatch.delenv(sudoku.ENV_VAR, raising=False)
    assert sudoku.data_dir() == sudoku.BUNDLED_DIR
    provenance = (DATA / "PROVENANCE.md").read_text()
    for path in (SATNET, RRN):
        documented = re.search(rf"`{re.escape(path.name)}`.*`([0-9a-f]{{64}})`", provenance).group(1)
        assert hashlib.sha256(path.read_bytes()).hexdigest() == documented


# -------------------------------------------------------------------------------------------- augmentation
def test_augment_preserves_validity_and_maps_puzzle_and_solution_together():
    rng = random.Random(0)
    for seed in range(40):
        puzzle, solution = sudoku.augment(PUZZLE, SOLUTION, rng)
        assert sudoku.is_valid_solution(solution)
        assert givens_agree(puzzle, solution)
        assert count_givens(puzzle) == count_givens(PUZZLE)
        assert puzzle != PUZZLE
        if seed < 5:
            assert sudoku.count_solutions(puzzle) == 1 and sudoku.solve(puzzle) == solution
    assert sudoku.augment(PUZZLE, SOLUTION, 5) == sudoku.augment(PUZZLE, SOLUTION, 5)
    generator = torch.Generator().manual_seed(0)
    p, s = sudoku.augment(sudoku.to_tensor(PUZZLE)[0], sudoku.to_tensor(SOLUTION)[0], generator)
    assert p.shape == (81,) and sudoku.is_valid_solution(s)
    assert bool(((p == 0) | (p == s)).all())


def test_augment_uses_every_symmetry():
    # Two givens in one original row, in different stacks: without transposition they stay in one row (in
    # different boxes); transposed, they share a column instead. Which line they end on shows the band and
    # row-within-band permutations; their digits show the relabelling.
    marker = "0" * 3 + "1" + "0" * 4 + "2" + "0" * 72  # r1c4 = 1, r1c9 = 2
    same_row = same_column = 0
    digits, rows = set(), set()
    rng = random.Random(2)
    for _ in range(60):
        puzzle, _ = sudoku.augment(marker, marker, rng)
        cells = [i for i, ch in enumerate(puzzle) if ch != "0"]
        assert len(cells) == 2
        (r1, c1), (r2, c2) = divmod(cells[0], 9), divmod(cells[1], 9)
        same_row += r1 == r2 and c1 // 3 != c2 // 3
        same_column += c1 == c2 and r1 // 3 != r2 // 3
        digits.add(puzzle[cells[0]])
        rows.add(min(r1, r2) if r1 == r2 else min(c1, c2))
    assert same_row + same_column == 60  # they always share a line and stay in different boxes
    assert same_row > 10 and same_column > 10  # transposition happens about half of the time
    assert len(digits) >= 8  # digits are relabelled
    assert len(rows) >= 8  # band and row-within-band permutations move the line around


def test_augmented_dataset_gives_fresh_valid_views(small_rows):
    ds = sudoku.to_dataset([p for p, _ in small_rows], [s for _, s in small_rows])
    view = sudoku.augmented_dataset(ds, seed=0)
    first, second = view[0], view[0]
    assert not torch.equal(first["input_ids"], second["input_ids"])  # a fresh symmetry at every read
    for row in (first, second):
        assert row["input_ids"].dtype == torch.int64 and row["input_ids"].shape == (81,)
        assert sudoku.is_valid_solution(row["labels"])
        assert bool(((row["input_ids"] == 0) | (row["input_ids"] == row["labels"])).all())
        assert row["puzzle"] == sudoku.to_strings(row["input_ids"])[0]
        assert row["solution"] == sudoku.to_strings(row["labels"])[0]
        assert sudoku.solve(row["puzzle"]) == row["solution"]
    batch = view[:3]
    assert batch["input_ids"].shape == (3, 81)
    assert ds.format["type"] is None  # the original is untouched
    assert ds[0]["puzzle"] == small_rows[0][0]
    # A Trainer drops columns the model does not take; the transform works on input_ids/labels alone.
    trimmed = view.remove_columns(["puzzle", "solution"])
    loader = torch.utils.data.DataLoader(trimmed, batch_size=2)
    batch = next(iter(loader))
    assert batch["input_ids"].shape == (2, 81) and bool(sudoku.is_valid_solution(batch["labels"]).all())
    with pytest.raises(SudokuError, match="input_ids and labels"):
        sudoku.augmented_dataset(ds.remove_columns(["labels"]))


def test_relabelled_rows_are_valid_puzzles_with_their_solutions():
    from jacobiscope.data import sudoku as sudoku_data

    rows = sudoku_data.relabelled_rows(6, seed=3)
    grids = {tuple(row["labels"].tolist()) for row in rows}
    assert len(grids) > 1  # the relabelling differs between rows
    for row in rows:
        solution = "".join(str(v) for v in row["labels"].tolist())
        assert sudoku_data.is_valid_solution(solution)
        given = row["input_ids"] > 0
        assert torch.equal(row["input_ids"][given], row["labels"][given])
        assert 0 < int(given.sum()) < 81


# ------------------------------------------------------------------------------------------- difficulty
def _tensor_naked_rounds(puzzle: str):
    """Independent reference: naked-single rounds with candidate masks built from one-hot unit sums in torch."""
    board = torch.tensor([int(c) for c in puzzle]).reshape(9, 9)
    rounds = 0
    while (board == 0).any():
        one_hot = torch.nn.functional.one_hot(board, 10)[..., 1:].bool()  # [9, 9, 9]
        in_row = one_hot.any(1, keepdim=True)
        in_col = one_hot.any(0, keepdim=True)
        in_box = one_hot.reshape(3, 3, 3, 3, 9).any(3, keepdim=True).any(1, keepdim=True)
        in_box = in_box.expand(3, 3, 3, 3, 9).reshape(9, 9, 9)
        candidates = ~(in_row | in_col | in_box) & (board == 0).unsqueeze(-1)
        forced = candidates.sum(-1) == 1
        if not forced.any():
            return None
        board = torch.where(forced, candidates.float().argmax(-1) + 1, board)
        rounds += 1
    return rounds


def test_propagation_rounds_against_an_independent_propagator():
    rows = read_rows(SATNET, 60) + read_rows(RRN, 60)
    for puzzle, _ in rows:
        assert sudoku.propagation_rounds(puzzle) == _tensor_naked_rounds(puzzle), puzzle
    # Every SATNet puzzle falls to naked singles; hidden singles never need more rounds.
    for puzzle, _ in read_rows(SATNET, 60):
        naked, both = sudoku.propagation_rounds(puzzle), sudoku.propagation_rounds(puzzle, hidden_singles=True)
        assert naked is not None and both <= naked


def test_propagation_rounds_analytic_cases():
    one_blank = "0" + SOLUTION[1:]
    assert sudoku.propagation_rounds(one_blank) == 1
    row_blanked = "0" * 9 + SOLUTION[9:]  # every cell of the row sees 8 digits in its column: one round
    assert sudoku.propagation_rounds(row_blanked) == 1
    assert sudoku.propagation_rounds(SOLUTION) == 0
    assert sudoku.propagation_rounds("0" * 81) is None and sudoku.propagation_rounds("0" * 81, hidden_singles=True) is None
    with pytest.raises(SudokuError, match="contradictory"):
        sudoku.propagation_rounds("11" + "0" * 79)
