"""Every command's mistakes (issue 28, families 5 and 7): a user's mistake on the command line is one line, exit 2,
naming the problem and the fix — never "internal error", never minutes of work before saying no. Sizes are checked
against the same budgets as the Python API, as the value is parsed (before any model or data is loaded); seeds are
32-bit; options are never abbreviated; typos of commands, splits and diagnostics get "did you mean". The CLI runs
in-process (`jacobiscope.cli.main`)."""
import os
import re
import time

import pytest

from jacobiscope.cli import main

ONE_LINE = re.compile(r"^jacobiscope: error: \S.* — \S.*$")
LONG = "n" * 300


def _cli(capsys, argv):
    started = time.perf_counter()
    status = main([str(part) for part in argv])
    return status, capsys.readouterr().err.strip().splitlines(), time.perf_counter() - started


def _case(name, argv, *fragments, guards="internal"):
    return pytest.param(argv, fragments, id=name, marks=pytest.mark.guards(guards))


CASES = [
    # seeds: 32-bit everywhere (torch overflowed past 2**64, numpy past 2**32)
    _case("demo-seed-2**64", ["demo", "--seed", str(2**64)], "a seed is a 32-bit integer", "pass a smaller seed"),
    _case("analyze-seed-2**70", ["analyze", "itrsa-sudoku", "--seed", str(2**70)], "32-bit integer", "e.g. 0"),
    _case("train-seed-2**40", ["sudoku", "train", "--out", "{tmp}/r", "--seed", str(2**40)], "32-bit integer",
          "pass a smaller seed"),
    _case("demo-seed-2**32", ["demo", "--seed", str(2**32)], "(0 to 4294967295)", "pass a smaller seed"),
    # budgets, before any model is loaded (family 5)
    _case("analyze-loops-1e12", ["analyze", "itrsa-sudoku", "--loops", str(10**12)], "over the budget of 100,000 loops",
          "JACOBISCOPE_MAX_LOOPS", guards="hang"),
    _case("analyze-k-1e9", ["analyze", "itrsa-sudoku", "--k", str(10**9)], "over the budget of 1,024 Lyapunov",
          "pass at most 1024", guards="hang"),
    _case("demo-steps-1e12", ["demo", "--steps", str(10**12)], "over the budget", "pass at most 100000",
          guards="hang"),
    _case("demo-k-1e6", ["demo", "--k", str(10**6)], "over the budget of 1,024", "pass at most", guards="hang"),
    _case("demo-tokens-1e9", ["demo", "--tokens", str(10**9)], "over the budget of 4,096 tokens",
          "JACOBISCOPE_MAX_DEMO_TOKENS", guards="internal"),
    _case("demo-tokens-x-dim", ["demo", "--tokens", "2000", "--dim", "2000"], "4,000,000 values per state",
          "lower --tokens or --dim", guards="hang"),
    _case("demo-k-over-state", ["demo", "--tokens", "2", "--dim", "4", "--heads", "2", "--k", "9"],
          "more than the 8 values of the state", "at most 8", guards="silent"),
    _case("eval-loops-1e12", ["sudoku", "eval", "itrsa-sudoku", "--loops", f"16,{10**12}"], "over the budget",
          "pass at most 100000", guards="internal"),
    _case("eval-votes-x-loops", ["sudoku", "eval", "akorn-sudoku", "--votes", "1000", "--loops", "128"],
          "128,000 loop applications per puzzle", "lower --votes", guards="hang"),
    _case("eval-votes-1e9", ["sudoku", "eval", "akorn-sudoku", "--votes", str(10**9)], "over the budget of 1,024 votes",
          "pass at most 1024", guards="hang"),
    _case("eval-fresh-limit-1e12", ["sudoku", "eval", "itrsa-sudoku", "--split", "fresh", "--limit", str(10**12)],
          "would generate 1,000,000,000,000 puzzles", "JACOBISCOPE_MAX_FRESH_PUZZLES", guards="hang"),
    _case("train-max-steps-1e15", ["sudoku", "train", "--out", "{tmp}/r", "--max-steps", str(10**15)],
          "over the budget of 1,000,000,000 optimizer steps", "pass at most", guards="hang"),
    _case("train-epochs-1e30", ["sudoku", "train", "--out", "{tmp}/r", "--epochs", "1e30"], "budget of 1e6 epochs",
          "--max-steps", guards="hang"),
    _case("analyze-token-id-1e22", ["analyze", "minilm", "--ids", f"1,{10**22}"], "token id 10000000000000000000000 "
          "is larger than any model has", "e.g. 101,2023,102", guards="internal"),
    _case("analyze-layer-1e20", ["analyze", "minilm", "--layers", f"0,{10**20}"], "is larger than any model has",
          "e.g. 0,3", guards="internal"),
    _case("demo-eta-1e308", ["demo", "--eta", "1e308"], "overflows the state at the first loop", "--eta 1.0"),
    _case("analyze-eta-1e300", ["analyze", "itrsa-sudoku", "--eta", "1e300"], "overflows the state", "--eta 1.0"),
    # votes for a model that has none: read from its config.json, before anything is loaded
    _case("eval-votes-itrsa", ["sudoku", "eval", "itrsa-sudoku", "--votes", "3", "--split", "{csv}"],
          "has no energy votes", "drop --votes"),
    # file names too long: one line, not an OSError
    _case("analyze-json-too-long", ["analyze", "itrsa-sudoku", "--json", LONG], "too long for the file system",
          "use a name under 200"),
    _case("analyze-out-too-long", ["analyze", "itrsa-sudoku", "--out", f"{LONG}/r.html"], "--out", "check the path"),
    _case("eval-json-too-long", ["sudoku", "eval", "itrsa-sudoku", "--json", LONG], "too long", "under 200"),
    _case("prepare-out-too-long", ["hub", "prepare", "itrsa-sudoku", "--out", "{tmp}/" + LONG], "too long",
          "shorter folder"),
    _case("eval-split-too-long", ["sudoku", "eval", "itrsa-sudoku", "--split", LONG + ".csv"],
          "is neither id, ood, fresh nor an existing csv file", "the path of a puzzle,solution csv"),
    # no abbreviations: '--loop 3' must not run as '--loops 3'
    _case("analyze-loop-abbrev", ["analyze", "itrsa-sudoku", "--loop", "3"], "unrecognized arguments: --loop",
          "did you mean --loops", guards="silent"),
    _case("demo-ste-abbrev", ["demo", "--ste", "3"], "unrecognized arguments: --ste", "never abbreviated",
          guards="silent"),
    _case("eval-vote-abbrev", ["sudoku", "eval", "akorn-sudoku", "--vote", "4"], "--vote", "did you mean --votes",
          guards="silent"),
    # typos get "did you mean"
    _case("command-typo", ["anlyze", "itrsa-sudoku"], "invalid choice: 'anlyze'", "did you mean 'analyze'"),
    _case("hub-command-typo", ["hub", "lst"], "invalid choice: 'lst'", "did you mean 'list'"),
    _case("sudoku-command-typo", ["sudoku", "evl", "x"], "invalid choice: 'evl'", "did you mean 'eval'"),
    _case("split-typo", ["sudoku", "eval", "itrsa-sudoku", "--split", "oood"], "--split 'oood'",
          "did you mean 'ood'"),
    _case("diagnostics-typo", ["analyze", "itrsa-sudoku", "--diagnostics", "spectral_nrom"],
          "unknown diagnostic(s) spectral_nrom", "did you mean 'spectral_norm'"),
    # inputs that are not regular files: named as what they are, not as missing (and never read forever)
    _case("config-is-a-folder", ["sudoku", "train", "--config", "{tmp}", "--out", "{tmp}/r"],
          "is a folder, not a file", "pass a recipe JSON file"),
    _case("config-is-a-fifo", ["sudoku", "train", "--config", "{fifo}", "--out", "{tmp}/r"],
          "is a FIFO (named pipe), not a regular file", "pass a recipe JSON file", guards="hang"),
    _case("split-is-a-folder", ["sudoku", "eval", "itrsa-sudoku", "--split", "{tmp}"], "is a folder, not a file",
          "puzzle,solution csv file"),
    _case("split-is-a-fifo", ["sudoku", "eval", "itrsa-sudoku", "--split", "{fifo}"], "is a FIFO", "csv file",
          guards="hang"),
    _case("eval-data-is-a-fifo", ["sudoku", "eval", "itrsa-sudoku", "--split", "id", "--data", "{fifo}"],
          "is a FIFO (named pipe), not a regular file", "pass the path of a csv file", guards="hang"),
    # outputs that are not regular files
    _case("json-is-dev-dir", ["analyze", "itrsa-sudoku", "--json", "{tmp}"], "is a folder", "give a file name"),
]


@pytest.mark.parametrize("argv, fragments", CASES)
def test_a_mistake_is_one_line_exit_2_before_any_work(tmp_path, capsys, argv, fragments):
    (tmp_path / "boards.csv").write_text("670000005003040082040005136000730090304206070001090600509008000000950208000127400\n")
    os.mkfifo(tmp_path / "fifo")
    argv = [part.replace("{tmp}", str(tmp_path)).replace("{csv}", str(tmp_path / "boards.csv"))
            .replace("{fifo}", str(tmp_path / "fifo")) for part in argv]
    status, err, seconds = _cli(capsys, argv)
    assert status == 2 and len(err) == 1 and ONE_LINE.match(err[0]), err
    assert "internal error" not in err[0]
    for fragment in fragments:
        assert fragment in err[0], err
    assert seconds < 10  # refused before a model, the data or a training run was loaded


@pytest.mark.guards("internal")
def test_a_bom_prefixed_recipe_is_read_and_its_mistake_named(tmp_path, capsys):
    recipe = tmp_path / "recipe.json"
    recipe.write_bytes(b'\xef\xbb\xbf{"hiden_size": 64}')
    status, err, _ = _cli(capsys, ["sudoku", "train", "--config", recipe, "--out", tmp_path / "run"])
    assert status == 2 and len(err) == 1 and ONE_LINE.match(err[0]), err
    assert "hiden_size" in err[0] and "BOM" not in err[0] and "not valid JSON" not in err[0], err
    assert not (tmp_path / "run").exists()


@pytest.mark.guards("internal")
def test_a_bom_prefixed_csv_split_is_read(tmp_path, capsys):
    from jacobiscope.data import sudoku

    puzzle, solution = sudoku.generate(givens=40, seed=0)
    path = tmp_path / "boards.csv"
    path.write_bytes(b"\xef\xbb\xbf" + f"{puzzle},{solution}\n".encode())
    assert list(sudoku.load_csv(path)["puzzle"]) == [puzzle]


@pytest.mark.guards("silent")
def test_an_override_that_breaks_the_recipe_is_refused_before_the_data_loads(tmp_path, capsys):
    recipe = tmp_path / "recipe.json"
    recipe.write_text('{"arch": "itrsa", "energy_reg": "e_single", "energy_reg_weight": 0.1}')
    status, err, _ = _cli(capsys, ["sudoku", "train", "--config", recipe, "--arch", "akorn", "--out",
                                   tmp_path / "run", "--data", tmp_path / "no-data-here"])
    # the data folder does not exist: a refusal about the data would mean the override was checked too late
    assert status == 2 and len(err) == 1 and ONE_LINE.match(err[0]), err
    assert "--arch akorn does not fit the recipe" in err[0] and "energy_reg" in err[0], err
    assert not (tmp_path / "run").exists()


@pytest.mark.guards("internal")
def test_budgets_follow_the_environment_variable(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("JACOBISCOPE_MAX_LOOPS", "10")
    status, err, _ = _cli(capsys, ["analyze", "itrsa-sudoku", "--loops", "11"])
    assert status == 2 and "over the budget of 10 loops" in err[0], err


@pytest.mark.guards("silent")
def test_a_limit_over_a_splits_size_is_said_not_silently_clamped(tmp_path, capsys):
    import json

    (tmp_path / "boards.csv").write_text("670000005003040082040005136000730090304206070001090600509008000000950208000127400\n")
    status = main(["sudoku", "eval", "itrsa-sudoku", "--split", str(tmp_path / "boards.csv"), "--limit", "50",
                   "--loops", "1", "--quiet", "--json", str(tmp_path / "eval.json")])
    out = capsys.readouterr().out
    assert status == 0
    note = "boards.csv: --limit 50 is more than its 1 puzzles; all 1 were used"
    assert note in out and json.loads((tmp_path / "eval.json").read_text())["notes"] == [note]


@pytest.mark.parametrize("content, problem, fix", [
    pytest.param("puzzle\n", "only a header line", "— check the path and the file's contents", id="header-only-csv"),
    pytest.param("puzzle,solution\n" + "1" * 80 + "," + "1" * 81 + "\n", "81", "— ", id="short-puzzle-row"),
])
@pytest.mark.guards("internal")
def test_a_data_error_written_as_sentences_puts_its_fix_after_the_dash(tmp_path, capsys, content, problem, fix):
    """Loader messages read '<problem>. Check ...': the line names that fix, not a generic pointer to --help."""
    split = tmp_path / "split.csv"
    split.write_text(content)
    status, lines, _ = _cli(capsys, ["sudoku", "eval", "itrsa-sudoku", "--split", split, "--loops", "2"])
    assert status == 2 and len(lines) == 1 and ONE_LINE.match(lines[0]), lines
    assert problem in lines[0] and fix in lines[0] and "see 'jacobiscope --help'" not in lines[0], lines[0]
