"""The command line's arguments: every advice names an option the user has (CLI and Python), --help lists every
registered diagnostic, no abbreviations, "did you mean" for names, and everything that can be checked before the
model loads is (output folders, layers against the config, options against their tables)."""
import ast
import inspect
import logging
import re
from pathlib import Path

import pytest
import torch
import transformers

import jacobiscope
from conftest import all_parsers
from jacobiscope._analyze_options import ANALYZE_SETTINGS
from jacobiscope.cli import build_parser, main
from jacobiscope.cli._analyze_checks import split_options
from jacobiscope.cli._catalogue import ANALYZE_OPTIONS, _from_source, diagnostic_catalogue, option_names
from jacobiscope.errors import UsageError

PACKAGE = Path(jacobiscope.__file__).parent
ONE_LINE = re.compile(r"^jacobiscope: error: \S.* — \S.*$")


def _error_line(argv, capsys) -> str:
    status = main(argv)
    err = capsys.readouterr().err.strip()
    assert status == 2 and ONE_LINE.match(err) and "\n" not in err, err
    return err


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("models") / "tiny-gpt2"
    torch.manual_seed(0)
    transformers.GPT2Model(transformers.GPT2Config(n_embd=16, n_layer=3, n_head=2, vocab_size=50, bos_token_id=0,
                                                   eos_token_id=0)).save_pretrained(folder)
    return folder


@pytest.fixture
def no_model_loading(monkeypatch):
    def no_loading(*args, **kwargs):
        raise AssertionError("the model was loaded before the arguments were checked")

    monkeypatch.setattr(jacobiscope.hub, "load_pretrained", no_loading)


# ------------------------------------------------------------------------------ advice names a real option
_ADVICE = re.compile(r"\b(?:[Rr]aise|[Ll]ower|[Ii]ncrease|[Rr]un|[Pp]ass|[Ss]et|[Uu]se)\s+((?:[a-z_][a-z0-9_]*)"
                     r"(?:=\S*)?(?:(?:,\s*|\s+or\s+|\s+and\s+)[a-z_][a-z0-9_]*(?:=\S*)?)*)")


def _messages(path: Path):
    """The string literals of a module that are not docstrings (f-strings with their fields as {})."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)) and node.body
                  and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            yield "".join(part.value if isinstance(part, ast.Constant) else "{}" for part in node.values)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield node.value


def _advised(folder: str) -> dict:
    """{option name: [module, ...]} of every name an advice ("raise eigen_restarts", "lower loops, k or eigen_k")
    in ``folder``'s messages tells the user to set."""
    names = {}
    for path in sorted((PACKAGE / folder).glob("*.py")):
        for text in _messages(path):
            for match in _ADVICE.finditer(text):
                for name in re.findall(r"[a-z_][a-z0-9_]*", re.sub(r"=\S*", "", match.group(1))):
                    if "_" in name or name in ("k", "loops"):
                        names.setdefault(name, []).append(path.name)
    return names


def _cli_sets(name: str) -> bool:
    parser = build_parser()
    for argv in (["analyze", "m", f"--{name.replace('_', '-')}", "2"], ["analyze", "m", "--option", f"{name}=2"]):
        try:
            parser.parse_args(argv)
            return True
        except UsageError:
            continue
    return False


def _python_sets(name: str) -> bool:
    return name in inspect.signature(jacobiscope.analyze).parameters or name in option_names()


def test_every_option_a_report_advises_is_settable_from_the_cli_and_python():
    advised = _advised("diagnostics")
    assert {"eigen_restarts", "loops"} <= set(advised)  # the scan finds the advice it is here for
    for name, modules in advised.items():
        assert _cli_sets(name), f"{modules} advise {name!r}, which the command line cannot set"
        assert _python_sets(name), f"{modules} advise {name!r}, which jacobiscope.analyze cannot set"


def test_every_option_a_dynamics_function_advises_is_an_argument_of_that_function():
    """The dynamics functions' advice is for their direct callers: each name is an argument of a function of the
    module that says it (or an analyze option)."""
    import importlib

    for name, modules in _advised("dynamics").items():
        for module_file in modules:
            module = importlib.import_module(f"jacobiscope.dynamics.{Path(module_file).stem}")
            arguments = {parameter for _, function in inspect.getmembers(module, inspect.isfunction)
                         for parameter in inspect.signature(function).parameters}
            # or a value the caller holds: a field of a result the module returns ("pass final_tangents of a
            # previous run")
            fields = {field for _, kind in inspect.getmembers(module, inspect.isclass)
                      for field in getattr(kind, "__dataclass_fields__", {})}
            assert name in arguments | fields or _python_sets(name), (
                f"{module_file} advises {name!r}, which no function there takes")


def test_options_are_checked_against_their_tables_before_the_model_loads(capsys, no_model_loading):
    line = _error_line(["analyze", "itrsa-sudoku", "--option", "basin_starts=4"], capsys)
    assert "belongs to the diagnostic 'fixed_points'" in line and "--diagnostics" in line
    line = _error_line(["analyze", "itrsa-sudoku", "--diagnostics", "fixed_points", "--option", "basin_starts=0"],
                       capsys)
    assert "basin_starts must be an int >= 1" in line
    assert "twice" in _error_line(["analyze", "itrsa-sudoku", "--option", "eigen_k=2", "--option", "eigen_k=3"], capsys)
    assert "not an integer >= 0" in _error_line(["analyze", "itrsa-sudoku", "--option", "eigen_restarts=-1"], capsys)
    assert "did you mean 'eigen_restarts'?" in _error_line(["analyze", "itrsa-sudoku", "--option", "eigen_restart=9"],
                                                           capsys)
    sizes, options = split_options([("eigen_restarts", 9), ("halting_thresholds", [0.1, 0.01])], ["halting"])
    assert sizes == {"eigen_restarts": 9} and options == {"halting_thresholds": [0.1, 0.01]}


def test_the_cli_and_the_catalogue_agree_on_analyze_sizes():
    assert ANALYZE_OPTIONS == ANALYZE_SETTINGS
    assert set(ANALYZE_SETTINGS) <= set(inspect.signature(jacobiscope.analyze).parameters)


def test_an_option_reaches_the_run_and_its_provenance(tiny_folder, tmp_path, capsys):
    path = tmp_path / "report.json"
    assert main(["analyze", str(tiny_folder), "--ids", "1,2,3", "--layers", "0", "--loops", "2", "--diagnostics",
                 "eigenvalues", "--option", "eigen_restarts=1", "--option", "eigen_k=2", "--json", str(path),
                 "--quiet"]) == 0
    capsys.readouterr()
    report = jacobiscope.Report.from_json(path)
    assert report.provenance["eigen_restarts"] == 1 and report.provenance["arguments"]["eigen_k"] == 2
    assert len(report.rows[0].eigenvalues) == 2  # eigen_k=2 eigenvalues summarized


# ------------------------------------------------------------------------------------------------ help
def test_help_lists_every_registered_diagnostic_with_a_line(capsys):
    assert main(["analyze", "--help"]) == 0
    text = capsys.readouterr().out
    for name in jacobiscope.list_diagnostics():
        line = next((line for line in text.splitlines() if re.match(rf"^\s+\*?\s*{name}\s+\S", line)), None)
        assert line is not None, f"--help does not list {name}"
    for name in option_names():
        assert re.search(rf"^\s+{name}\s+\S", text, re.M), f"--help does not list the option {name}"


def test_the_torch_free_catalogue_is_the_registry():
    live = diagnostic_catalogue()
    assert [entry.name for entry in live] == jacobiscope.list_diagnostics()
    source = {entry.name: entry for entry in _from_source()}
    for entry in live:
        if entry.name in source:
            assert (source[entry.name].default, source[entry.name].always, set(source[entry.name].options)) == (
                entry.default, entry.always, set(entry.options)), entry.name
            assert entry.description and len(entry.description.splitlines()) == 1


# ----------------------------------------------------------------------------------- abbreviations, typos
def test_no_parser_takes_abbreviations(capsys):
    for parser in all_parsers(build_parser()):
        assert parser.allow_abbrev is False, parser.prog
    line = _error_line(["analyze", "itrsa-sudoku", "--loop", "3"], capsys)
    assert "unrecognized arguments: --loop" in line and "did you mean --loops?" in line
    assert "did you mean --limit?" in _error_line(["sudoku", "eval", "itrsa-sudoku", "--limi", "3"], capsys)


def test_did_you_mean_offers_only_the_chosen_commands_options(capsys):
    """argparse reports leftovers from the root parser; the suggestion must be an option of the command typed
    ('demo' has --steps, not analyze's --loops), and a word other tools use maps to ours (--dtype -> --float64)."""
    demo = _error_line(["demo", "--loops", "3"], capsys)
    assert "did you mean --steps?" in demo and "'jacobiscope demo --help'" in demo
    assert "did you mean --float64?" in _error_line(["analyze", "itrsa-sudoku", "--dtype", "float64"], capsys)
    assert "did you mean --device?" in _error_line(["analyze", "itrsa-sudoku", "--gpu"], capsys)
    plain = _error_line(["hub", "list", "--zzzz"], capsys)
    assert "did you mean" not in plain and "'jacobiscope hub list --help'" in plain
    from jacobiscope.cli._suggestions import SYNONYMS, all_flags

    flags = all_flags(build_parser())
    assert all(target in flags for targets in SYNONYMS.values() for target in targets)


def test_device_is_checked_before_the_model_loads(capsys, tmp_path):
    """--device names a device this machine has; the run on 'cpu' equals the run without it, row for row."""
    line = _error_line(["analyze", "itrsa-sudoku", "--device", "meta"], capsys)
    assert "argument --device: 'meta' holds no numbers" in line
    assert "is not a device name" in _error_line(["analyze", "itrsa-sudoku", "--device", "floop"], capsys)
    if not torch.cuda.is_available():
        assert "'cuda' is not available" in _error_line(["analyze", "itrsa-sudoku", "--device", "cuda"], capsys)
    reports = []
    for extra in ([], ["--device", "cpu"]):
        out = tmp_path / f"report{len(extra)}.json"
        assert main(["analyze", "itrsa-sudoku", "--loops", "4", "--puzzles", "1", "--quiet", "--diagnostics",
                     "spectral_norm,lyapunov", "--json", str(out)] + extra) == 0
        reports.append(jacobiscope.Report.from_json(out))
    capsys.readouterr()
    assert reports[1].provenance["device"] == "cpu" and reports[1].provenance["arguments"]["device"] == "cpu"
    assert reports[0].rows[0].lyapunov["exponents"] == reports[1].rows[0].lyapunov["exponents"]


@pytest.mark.parametrize("command", [["sudoku", "eval", "itrsa-sudoku"], ["tasks", "eval", "hrm-text-addition"]])
def test_the_eval_commands_take_a_device_too(capsys, command):
    """sudoku eval / tasks eval --device: refused before loading when the machine lacks it; on 'cpu' the same table
    as without it."""
    assert "argument --device: 'meta' holds no numbers" in _error_line(command + ["--device", "meta"], capsys)
    small = (["--loops", "16", "--split", "id", "--limit", "20"] if command[0] == "sudoku"
             else ["--loops", "1-2", "--n", "20"]) + ["--quiet"]
    tables = []
    for extra in ([], ["--device", "cpu"]):
        assert main(command + small + extra) == 0
        tables.append([line for line in capsys.readouterr().out.splitlines() if "%" in line])
    assert tables[0] == tables[1] and tables[0]


@pytest.mark.parametrize("argv, suggestion", [
    (["analyz", "minilm"], "did you mean 'analyze'?"),
    (["sudoku", "evl", "x"], "did you mean 'eval'?"),
    (["hub", "lst"], "did you mean 'list'?"),
    (["analyze", "minilm", "--mode", "blok"], "did you mean 'block'?"),
    (["analyze", "minilm", "--diagnostics", "lyapunv"], "did you mean 'lyapunov'?"),
    (["analyze", "minilmm"], "did you mean 'minilm'?"),
    (["analyze", "itrsa-sudok"], "did you mean 'itrsa-sudoku'?"),
    (["analyze", "minilm", "--option", "basin_start=3"], "did you mean 'basin_starts'?"),
])
def test_names_get_a_did_you_mean(argv, suggestion, capsys, no_model_loading):
    assert suggestion in _error_line(argv, capsys)


# ------------------------------------------------------------------------------- checked before the load
def test_layers_are_checked_against_the_config_before_the_model_loads(tiny_folder, capsys, no_model_loading):
    line = _error_line(["analyze", str(tiny_folder), "--ids", "1,2", "--layers", "1,9"], capsys)
    assert "layer 9 is out of range" in line and "3 blocks (0-2, from its config)" in line and "--layers" in line


def test_ids_and_recurrences_are_checked_against_the_config_before_the_model_loads(tiny_folder, tmp_path, capsys,
                                                                                   no_model_loading):
    line = _error_line(["analyze", str(tiny_folder), "--ids", "1,99"], capsys)
    assert "token id 99 is outside" in line and "vocabulary of 50 (from its config)" in line
    albert = tmp_path / "tiny-albert"
    transformers.AlbertModel(transformers.AlbertConfig(vocab_size=50, embedding_size=8, hidden_size=16,
                                                       num_hidden_layers=3, num_attention_heads=2,
                                                       intermediate_size=32)).save_pretrained(albert)
    capsys.readouterr()  # the save's own progress bar (shown or not, depending on earlier tests) is not the CLI's
    assert "did you mean 'loop'?" in _error_line(["analyze", str(albert), "--ids", "1,2", "--recurrence", "lop"],
                                                 capsys)


def test_hub_names_get_a_did_you_mean(capsys, tmp_path):
    assert "did you mean 'itrsa-sudoku'?" in _error_line(["hub", "prepare", "itrsa-sudok", "--out",
                                                          str(tmp_path / "x")], capsys)


def test_an_output_folder_that_cannot_be_created_fails_before_the_model_loads(capsys, no_model_loading, tmp_path):
    line = _error_line(["analyze", "itrsa-sudoku", "--json", "/proc/jacobiscope-no/report.json"], capsys)
    assert "--json" in line and "cannot write in" in line
    (tmp_path / "file").write_text("x")
    assert "is a file, not a folder" in _error_line(["analyze", "itrsa-sudoku", "--out",
                                                     str(tmp_path / "file" / "r.html")], capsys)
    line = _error_line(["analyze", "itrsa-sudoku", "--out", str(tmp_path / "new" / "r.html"), "--diagnostics", "x"],
                       capsys)
    assert "unknown diagnostic" in line and (tmp_path / "new").is_dir()  # created by the check, before the run


# ------------------------------------------------------------------------------------ clamps, logging
@pytest.mark.parametrize("name, requested", [("k", 1000), ("eigen_k", 500), ("spectral_samples", 9)])
def test_a_clamped_size_is_recorded_as_it_ran(name, requested):
    model = transformers.GPT2Model(transformers.GPT2Config(n_embd=8, n_layer=1, n_head=2, vocab_size=50,
                                                           bos_token_id=0, eos_token_id=0))
    with pytest.warns(UserWarning, match=f"{name}={requested} clamped to"):
        report = jacobiscope.analyze(model, torch.tensor([[1, 2, 3]]), loops=2, progress=False,
                                     diagnostics=["lyapunov", "eigenvalues", "spectral_norm"], **{name: requested})
    ran = {"k": 24, "eigen_k": 24, "spectral_samples": 3}[name]
    assert report.provenance[name] == ran and report.provenance[f"{name}_requested"] == requested
    assert report.provenance["arguments"][name] == requested
    assert any(note.startswith(f"{name}={requested} clamped to {ran}") for note in report.notes)


def test_each_finished_row_is_logged(caplog, tmp_path):
    model = transformers.GPT2Model(transformers.GPT2Config(n_embd=8, n_layer=2, n_head=2, vocab_size=50,
                                                           bos_token_id=0, eos_token_id=0))
    with caplog.at_level(logging.INFO, logger="jacobiscope"):
        jacobiscope.analyze(model, torch.tensor([[1, 2, 3]]), loops=2, diagnostics=["lyapunov"], k=1,
                            progress=False, checkpoint=tmp_path / "r.json")
    messages = [record.getMessage() for record in caplog.records if record.name == "jacobiscope._analyze"]
    assert any(message.startswith("row 1/2 finished: input 0, layer 0") for message in messages), messages
    assert any(message.startswith("report written to") for message in messages), messages
