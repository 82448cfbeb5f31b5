"""The command line: the demo, the main job on real SATNet test puzzles, and every user error as one line + exit 2."""
import argparse
import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import jacobiscope
from conftest import all_parsers
import jacobiscope.cli
from jacobiscope.cli import build_parser, main
from jacobiscope.data import sudoku

ONE_LINE = re.compile(r"^jacobiscope: error: \S.* — \S.*$")


@pytest.fixture
def no_network(monkeypatch):
    """Any attempt to open a connection fails the test: unknown names must be refused offline."""
    def refuse(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


@pytest.fixture
def restore_transformers_bars():
    from huggingface_hub.utils import enable_progress_bars
    from transformers.utils import logging as transformers_logging

    verbosity = transformers_logging.get_verbosity()
    yield
    transformers_logging.enable_progress_bar()
    transformers_logging.set_verbosity(verbosity)
    enable_progress_bars()


def run_cli(argv, capsys):
    status = main(argv)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def assert_user_error(argv, capsys, *fragments):
    status, _, err = run_cli(argv, capsys)
    lines = err.strip().splitlines()
    assert status == 2, err
    assert len(lines) == 1 and ONE_LINE.match(lines[0]), err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def test_demo_table_and_json(capsys):
    assert main(["demo", "--tokens", "4", "--dim", "8", "--heads", "2", "--steps", "10", "--k", "2"]) == 0
    table = capsys.readouterr().out
    assert "rmsnorm" in table and "layernorm" in table and "lambda_max" in table
    assert main(["demo", "--tokens", "4", "--dim", "8", "--heads", "2", "--steps", "10", "--k", "2", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    rows = {row["norm"]: row for row in record["rows"]}
    assert set(rows) == {"rmsnorm", "layernorm", "none"}
    # normalization keeps the state on the sphere of radius ~sqrt(dim); the unnormalized map drifts away
    assert abs(rows["rmsnorm"]["state_norm"] - 8 ** 0.5) < 0.5
    assert rows["none"]["state_norm"] > rows["rmsnorm"]["state_norm"]
    assert record["provenance"]["torch"]


# ------------------------------------------------------------------------------------------- main job
def test_main_job_reports_which_satnet_test_puzzles_it_solves(tmp_path, capsys):
    record = tmp_path / "report.json"
    status, out, _ = run_cli(["analyze", "itrsa-sudoku", "--loops", "6", "--puzzles", "3", "--k", "1",
                              "--diagnostics", "lyapunov", "--json", str(record), "--quiet"], capsys)
    assert status == 0
    report = jacobiscope.Report.from_json(record)
    assert [row.input_label for row in report.rows] == [f"SATNet test row {9000 + i}" for i in range(3)]
    # Independent check: the model's own solve at 6 loops against the data file's solutions.
    _, test = sudoku.satnet_splits()
    rows = test.select(range(3))
    model = jacobiscope.load_pretrained("itrsa-sudoku")
    puzzles, solutions = sudoku.to_tensor(list(rows["puzzle"])), sudoku.to_tensor(list(rows["solution"]))
    expected = sudoku.board_correct(model.solve(puzzles, loops=6), puzzles, solutions).tolist()
    assert [row.outcome["solved"] for row in report.rows] == expected
    assert [row.outcome["givens"] for row in report.rows] == [81 - p.count("0") for p in rows["puzzle"]]
    solved = sum(expected)
    assert f"Outcome at 6 loops: {solved} of 3 inputs solved" in out
    assert "SATNet test rows 9000-9002" in out
    assert report.provenance["model"] == "itrsa-sudoku"


def test_reports_and_listings_name_no_absolute_path(tmp_path, capsys):
    record = tmp_path / "r.json"
    assert main(["analyze", "itrsa-sudoku", "--loops", "2", "--puzzles", "1", "--diagnostics", "spectral_norm",
                 "--json", str(record), "--quiet"]) == 0
    assert main(["hub", "list"]) == 0
    text = record.read_text() + capsys.readouterr().out
    package = str(Path(jacobiscope.__file__).resolve().parents[1])
    for forbidden in (package, str(Path.cwd().resolve()), str(Path.home())):
        assert forbidden not in text
    assert "itrsa-sudoku\titrsa_sudoku\thub_configs/itrsa-sudoku" in text


# -------------------------------------------------------------------------------------- user errors
def test_missing_path_is_one_line(capsys, no_network):
    assert_user_error(["analyze", "./no/such/model-folder"], capsys, "no such model folder", "./no/such/model-folder")


def test_unknown_name_fails_offline_at_once(capsys, no_network, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)  # refused without network even when the hub is "online"
    line = assert_user_error(["analyze", "no-such-model-xyz"], capsys, "unknown model 'no-such-model-xyz'")
    assert "itrsa-sudoku" in line and "--download" in line


def test_layer_out_of_range(capsys):
    assert_user_error(["analyze", "minilm", "--layers", "0,9", "--quiet"], capsys,
                      "layer 9 is out of range", "6 blocks (0-5")
    assert_user_error(["analyze", "itrsa-sudoku", "--layers", "2", "--quiet"], capsys,
                      "layer 2 is out of range", "--layers 0")


@pytest.mark.parametrize("argv, fragment", [
    (["analyze", "itrsa-sudoku", "--loops", "0"], "--loops: expected an integer >= 1, got '0'"),
    (["analyze", "itrsa-sudoku", "--loops", "many"], "--loops: expected an integer >= 1, got 'many'"),
    (["analyze", "itrsa-sudoku", "--eta", "-1"], "--eta: expected a number > 0.0"),
    (["analyze", "itrsa-sudoku", "--eta", "nan"], "--eta: expected a number > 0.0"),
    (["analyze", "itrsa-sudoku", "--layers", "0,x"], "--layers: expected comma-separated integers"),
    (["analyze", "itrsa-sudoku", "--puzzles", "5000"], "the SATNet test set has 1000 puzzles"),
    (["sudoku", "eval", "itrsa-sudoku", "--loops", "16,-2"], "--loops: expected comma-separated integers >= 1"),
    (["demo", "--k", "1.5"], "--k: expected an integer >= 1"),
    (["analyze"], "the following arguments are required: model"),
    (["analyze", "itrsa-sudoku", "--no-such-option"], "unrecognized arguments: --no-such-option"),
    ([], "the following arguments are required: COMMAND"),
])
def test_bad_numbers_and_arguments(argv, fragment, capsys):
    assert_user_error(argv, capsys, fragment)


def test_missing_data(capsys, tmp_path, monkeypatch):
    assert_user_error(["sudoku", "eval", "itrsa-sudoku", "--data", str(tmp_path / "absent")], capsys,
                      "does not exist", "check the path")
    monkeypatch.setenv(sudoku.ENV_VAR, str(tmp_path / "gone"))
    assert_user_error(["sudoku", "eval", "itrsa-sudoku", "--split", "ood"], capsys, "JACOBISCOPE_SUDOKU_DATA")
    assert_user_error(["sudoku", "eval", "itrsa-sudoku", "--split", "id,hard.csv"], capsys,
                      "--split 'hard.csv' is neither id, ood, fresh nor an existing csv file")


def test_arguments_are_checked_before_the_model_is_loaded(capsys, monkeypatch, tmp_path):
    def no_loading(*args, **kwargs):
        raise AssertionError("the model was loaded before the arguments were checked")

    monkeypatch.setattr(jacobiscope.hub, "load_pretrained", no_loading)
    assert_user_error(["analyze", "itrsa-sudoku", "--puzzle", "123"], capsys, "--puzzle #1 is not a usable Sudoku")
    assert_user_error(["analyze", "itrsa-sudoku", "--diagnostics", "lyapunov,entropy"], capsys,
                      "unknown diagnostic(s) entropy", "spectral_norm")
    assert_user_error(["analyze", "itrsa-sudoku", "--out", str(tmp_path)], capsys, "is a folder")
    assert_user_error(["analyze", "itrsa-sudoku", "--text", "a", "--puzzle", "0" * 81], capsys, "both given")


def test_a_folder_without_a_tokenizer_takes_token_ids(tmp_path, capsys):
    """transformers builds an empty tokenizer for a folder with a config and no tokenizer files: text is refused
    with the fix (not an 'empty batch'), and --ids analyses the model, here in the traced attention mode."""
    import transformers

    torch.manual_seed(0)
    config = transformers.Qwen3Config(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, head_dim=4, vocab_size=50, bos_token_id=0,
                                      eos_token_id=0, pad_token_id=0)
    transformers.Qwen3Model(config).save_pretrained(tmp_path / "model")
    capsys.readouterr()  # transformers' own progress bar while saving
    assert_user_error(["analyze", str(tmp_path / "model"), "--quiet"], capsys, "turned text number 0 into no tokens",
                      "--ids 1,2,3")
    json_path = tmp_path / "report.json"
    status, out, err = run_cli(["analyze", str(tmp_path / "model"), "--ids", "1,2,3,4", "--ids", "5,6,7,8", "--mode",
                                "attention", "--loops", "4", "--layers", "1", "--quiet", "--json", str(json_path)],
                               capsys)
    assert status == 0, err
    # Read back through the public loader: the numbers are checked whatever the JSON layout of the rows.
    written = jacobiscope.Report.from_json(json_path)
    assert [row.input_label for row in written.rows] == ["--ids #1", "--ids #2"]
    assert written.provenance["adapter"] == "generic blocks, traced attention"
    assert "traced from one call of the block" in out
    # the same numbers as the Python call on the same ids
    model = transformers.AutoModel.from_pretrained(tmp_path / "model")
    report = jacobiscope.analyze(model, torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]]), layers=[1], mode="attention",
                                 loops=4, progress=False)
    assert [float(row.lyapunov["exponents"][0]) for row in written.rows] == pytest.approx(
        [float(r.lyapunov["exponents"][0]) for r in report.rows], rel=1e-6)
    assert_user_error(["analyze", str(tmp_path / "model"), "--ids", "1,2", "--ids", "3"], capsys, "different lengths (2, 1)")
    assert_user_error(["analyze", str(tmp_path / "model"), "--ids", "1,60"], capsys, "token id 60 is outside",
                      "between 0 and 49")
    assert_user_error(["analyze", str(tmp_path / "model"), "--ids", "1", "--text", "a"], capsys, "--text and --ids")
    assert_user_error(["analyze", "itrsa-sudoku", "--ids", "1,2"], capsys, "takes puzzles, not --ids")
    assert_user_error(["analyze", str(tmp_path / "model"), "--ids", "1,x"], capsys, "--ids: expected comma-separated integers")


def test_pickle_only_folder_is_refused(tmp_path, capsys):
    model = jacobiscope.models.ItrSAForSudoku(jacobiscope.models.ItrSAConfig(hidden_size=8, num_heads=2))
    model.config.save_pretrained(tmp_path)
    torch.save(model.state_dict(), tmp_path / "pytorch_model.bin")
    assert_user_error(["analyze", str(tmp_path), "--quiet"], capsys, "only pickle weights (pytorch_model.bin)",
                      "safe_serialization=True")
    with pytest.raises(jacobiscope.hub.HubError, match="only pickle weights"):
        jacobiscope.load_pretrained(tmp_path)


def test_debug_shows_the_traceback(capsys):
    with pytest.raises(jacobiscope.hub.HubError):
        main(["analyze", "no-such-model-xyz", "--debug"])


# ------------------------------------------------------------------------------------- help, version
def test_every_option_has_help_that_shows_its_default():
    for parser in all_parsers(build_parser()):
        for action in parser._actions:
            if isinstance(action, (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction)):
                continue
            assert action.help, f"{parser.prog} {action.dest} has no help"
            if action.option_strings:
                rendered = parser._get_formatter()._get_help_string(action) % {"default": action.default}
                assert "default" in rendered or "required" in rendered, f"{parser.prog} {action.option_strings}"


def test_version_and_help_import_neither_torch_nor_transformers():
    code = ("import sys, jacobiscope.cli as c, contextlib, io\n"
            "out = io.StringIO()\n"
            "with contextlib.redirect_stdout(out):\n"
            "    assert c.main(['--version']) == 0 and c.main(['analyze', '--help']) == 0\n"
            "assert 'torch' not in sys.modules and 'transformers' not in sys.modules, 'heavy import'\n"
            "print(out.getvalue())")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert f"jacobiscope {jacobiscope.__version__}" in result.stdout and "--loops LOOPS" in result.stdout


def test_entry_point_exits_2_with_one_line():
    result = subprocess.run([sys.executable, "-m", "jacobiscope", "analyze", "itrsa-sudoku", "--loops", "-3"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and result.stdout == ""
    assert ONE_LINE.match(result.stderr.strip()) and len(result.stderr.strip().splitlines()) == 1


# ------------------------------------------------------------------------------------------- progress
def test_quiet_silences_every_bar(capsys, restore_transformers_bars):
    status, _, err = run_cli(["analyze", "itrsa-sudoku", "--loops", "2", "--puzzles", "1", "--diagnostics",
                              "spectral_norm", "--quiet"], capsys)
    assert status == 0 and err == ""


def test_progress_counts_rows_on_stderr(capsys, monkeypatch):
    import transformers

    monkeypatch.setattr("jacobiscope._progress.DELAY_SECONDS", 0.0)
    model = transformers.GPT2Model(transformers.GPT2Config(n_embd=16, n_layer=2, n_head=2, vocab_size=50))
    jacobiscope.analyze(model, torch.tensor([[1, 2, 3], [4, 5, 6]]), loops=2, diagnostics="spectral_norm")
    err = capsys.readouterr().err
    assert "4/4" in err and "row" in err  # 2 inputs x 2 layers


def test_a_shipped_solvers_layer_check_works_in_a_fresh_process():
    # in a process where nothing had imported jacobiscope.models yet, the check read "no model type 'itrsa_sudoku'
    # is known here" (the in-process tests passed only when an earlier test had registered the model type)
    done = subprocess.run([sys.executable, "-m", "jacobiscope", "analyze", "itrsa-sudoku", "--layers", "2", "--quiet"],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        "jacobiscope: error: layer 2 is out of range: itrsa-sudoku is one looped block (layer 0) — drop --layers or "
        "use --layers 0"]
