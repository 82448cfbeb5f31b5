"""Nothing lost: `analyze` writes each finished row as it goes; Ctrl-C (a real SIGINT to a real CLI process) and a
crash leave a valid partial report; ``--resume`` / ``resume=True`` measures only the missing rows, and the completed
report has the numbers of an uninterrupted run."""
import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
import transformers

import jacobiscope
from jacobiscope._analyze_resume import is_partial, remaining_rows
from jacobiscope.cli import main
from jacobiscope.errors import ArgumentError

ONE_LINE_FIX = " — "


def _tiny_gpt2():
    config = transformers.GPT2Config(n_embd=16, n_layer=3, n_head=2, vocab_size=50, bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    return transformers.GPT2Model(config).eval()


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("models") / "tiny-gpt2"
    _tiny_gpt2().save_pretrained(folder)  # safetensors, a config.json: what `jacobiscope analyze FOLDER` loads
    return folder


def _numbers(report):
    """Every row as JSON without its timings: what must not change between an interrupted-and-resumed run and an
    uninterrupted one (NaN compares equal as text)."""
    return [json.dumps({key: value for key, value in row.to_dict().items() if key not in ("seconds", "timings")},
                       sort_keys=True) for row in report.rows]


def _same_numbers(got, expected):
    """The rows of `_numbers` equal in every key, text and count, and in every number to float32 rounding carried
    through a few steps (1e-4 relative): a run's products may take another path (eager, or a graph an earlier run in
    this process recorded) than the other run's, which moves the last bits (a regime interval's half-width: 2e-5)."""
    def same(a, b):
        if isinstance(a, float) and isinstance(b, float):
            return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-6)
        if isinstance(a, dict) and isinstance(b, dict):
            return a.keys() == b.keys() and all(same(a[key], b[key]) for key in a)
        if isinstance(a, list) and isinstance(b, list):
            return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
        return a == b

    def first_difference(a, b, where=""):
        if isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys():
            return next((d for key in a if (d := first_difference(a[key], b[key], f"{where}.{key}"))), None)
        if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
            return next((d for i, (x, y) in enumerate(zip(a, b)) if (d := first_difference(x, y, f"{where}[{i}]"))),
                        None)
        return None if same(a, b) else f"{where}: {a!r} != {b!r}"

    assert len(got) == len(expected)
    for row_got, row_expected in zip(got, expected):
        a, b = json.loads(row_got), json.loads(row_expected)
        assert same(a, b), first_difference(a, b)


# 2 inputs x 3 blocks = 6 rows. The signal must land while the run is still going, after its first row: the rows
# after the first reuse its recordings and may finish before a loaded machine delivers the signal (CI saw it with 12
# loops), so a run that finished first is repeated with 10x the loops (see _interrupted_run).
def cli_args(loops: int = 200) -> list[str]:
    return ["--ids", "1,2,3,4,5,6", "--ids", "7,8,9,10,11,12", "--loops", str(loops), "--diagnostics", "lyapunov",
            "--k", "2", "--seed", "3", "--quiet"]


def _wait_for_first_row(path, process, timeout=240.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, f"the run ended before its first row was seen: {process.communicate()}"
        if path.exists():
            report = jacobiscope.Report.from_json(path)  # never a half-written file: each write is a rename
            if report.rows:
                return report
        time.sleep(0.02)
    raise AssertionError("no row written in time")


def _interrupted_run(tiny_folder, partial_path):
    """Start the CLI run, send SIGINT once its first row is on disk; returns ``(process, stderr, loops)`` of the
    first attempt the signal interrupted (exit code other than 0), trying 200, then 2,000 loops per row."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", OPENBLAS_NUM_THREADS="1")
    for loops in (200, 2_000):
        partial_path.unlink(missing_ok=True)
        # SIGINT back to its default in the child: a test run started in the background (`cmd &` in a script)
        # inherits SIGINT ignored, and Python then installs no KeyboardInterrupt handler — Ctrl-C would do nothing
        process = subprocess.Popen([sys.executable, "-m", "jacobiscope", "analyze", str(tiny_folder),
                                    *cli_args(loops), "--json", str(partial_path)], env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True,
                                   preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        try:
            first = _wait_for_first_row(partial_path, process)
            assert is_partial(first)
            process.send_signal(signal.SIGINT)
            _, err = process.communicate(timeout=600)
        finally:
            if process.poll() is None:
                process.kill()
        if process.returncode != 0:  # interrupted (what it says is asserted by the caller)
            return process, err, loops
    raise AssertionError("every run finished before SIGINT arrived, even at 2,000 loops per row")


@pytest.mark.slow  # suite time (a subprocess or a training run); CI runs it in its slow step
def test_sigint_keeps_the_finished_rows_and_resume_completes_them(tiny_folder, tmp_path, capsys):
    partial_path = tmp_path / "partial.json"
    process, err, loops = _interrupted_run(tiny_folder, partial_path)
    args = cli_args(loops)
    assert process.returncode == 130, err
    assert "rows are kept in" in err and "--resume" in err and "Traceback" not in err, err
    partial = jacobiscope.Report.from_json(partial_path)
    assert is_partial(partial) and partial.provenance["partial"]["stopped"].startswith("KeyboardInterrupt")
    finished = {(row.input_index, row.layer) for row in partial.rows}
    assert 1 <= len(finished) < 6, "SIGINT came after the last row: make the run longer"
    everything = {(i, layer) for i in range(2) for layer in range(3)}
    assert set(remaining_rows(partial)) == everything - finished
    assert partial.provenance["partial"]["total"] == 6

    # A resume with other arguments is refused in one line that names the difference and the fix.
    assert main(["analyze", str(tiny_folder), *args, "--seed", "4", "--json", str(partial_path), "--resume"]) == 2
    line = capsys.readouterr().err.strip()
    assert line.count("\n") == 0 and "seed=3" in line and "seed=4" in line and "pass --seed 3 " in line, line
    # Without --resume, the partial report is not overwritten.
    assert main(["analyze", str(tiny_folder), *args, "--json", str(partial_path)]) == 2
    assert "--resume" in capsys.readouterr().err

    assert main(["analyze", str(tiny_folder), *args, "--json", str(partial_path), "--resume"]) == 0
    capsys.readouterr()
    resumed = jacobiscope.Report.from_json(partial_path)
    assert not resumed.partial and resumed.remaining == [] and len(resumed.rows) == 6
    kept = [row for row in resumed.rows if (row.input_index, row.layer) in finished]
    assert [row.seconds for row in kept] == [row.seconds for row in partial.rows]  # reused, not measured again

    reference_path = tmp_path / "reference.json"
    assert main(["analyze", str(tiny_folder), *args, "--json", str(reference_path)]) == 0
    reference = jacobiscope.Report.from_json(reference_path)
    _same_numbers(_numbers(resumed), _numbers(reference))
    assert resumed.provenance["arguments"] == reference.provenance["arguments"]


class Tripwire(jacobiscope.Diagnostic):
    """A real diagnostic (the state's final norm) that, while armed, stops the run on its fifth row (input 1,
    layer 1) with ``error``: KeyboardInterrupt as Ctrl-C raises it, or a crash."""

    name = "tripwire"
    armed, calls, error = False, 0, KeyboardInterrupt

    def compute(self, context):
        if Tripwire.armed and Tripwire.calls == 4:
            raise Tripwire.error("stopped on purpose")
        Tripwire.calls += 1
        return float(context.states[context.last_finite].norm())


@pytest.fixture
def tripwire():
    jacobiscope.register_diagnostic(Tripwire())
    Tripwire.calls, Tripwire.armed, Tripwire.error = 0, True, KeyboardInterrupt
    yield Tripwire
    jacobiscope.diagnostics.unregister_diagnostic("tripwire")


def test_an_interrupted_python_call_resumes_to_the_same_numbers(tmp_path, tripwire):
    model, ids = _tiny_gpt2(), torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]])
    settings = dict(loops=4, diagnostics=["lyapunov", "tripwire"], k=2, seed=1, progress=False)
    path = tmp_path / "run" / "report.json"
    with pytest.raises(KeyboardInterrupt):
        jacobiscope.analyze(model, ids, checkpoint=path, **settings)
    partial = jacobiscope.Report.from_json(path)
    assert is_partial(partial) and [(row.input_index, row.layer) for row in partial.rows] == [(0, 0), (0, 1), (0, 2),
                                                                                              (1, 0)]
    assert remaining_rows(partial) == [(1, 1), (1, 2)]
    with pytest.raises(ArgumentError, match=r"holds the partial report .*4 of 6 rows.* resume=True"):
        jacobiscope.analyze(model, ids, checkpoint=path, **settings)
    with pytest.raises(ArgumentError, match=r"made with loops=4, this run asks for loops=7 — pass loops=4 as before"):
        jacobiscope.analyze(model, ids, checkpoint=path, resume=True, **dict(settings, loops=7))
    with pytest.raises(ArgumentError, match=r"inputs="):
        jacobiscope.analyze(model, ids + 1, checkpoint=path, resume=True, **settings)

    tripwire.armed = False
    resumed = jacobiscope.analyze(model, ids, checkpoint=path, resume=True, **settings)
    assert tripwire.calls == 4 + 2  # the two missing rows only
    assert not is_partial(resumed) and jacobiscope.Report.from_json(path) == resumed
    reference = jacobiscope.analyze(model, ids, **settings)
    _same_numbers(_numbers(resumed), _numbers(reference))


def test_a_crash_leaves_a_partial_report_that_says_why(tmp_path, tripwire):
    tripwire.error = RuntimeError
    path = tmp_path / "report.json"
    with pytest.raises(jacobiscope.errors.DiagnosticError, match="stopped on purpose"):
        jacobiscope.analyze(_tiny_gpt2(), torch.tensor([[1, 2, 3], [4, 5, 6]]), checkpoint=path, loops=2,
                            diagnostics=["tripwire"], progress=False)
    partial = jacobiscope.Report.from_json(path)
    assert len(partial.rows) == 4 and remaining_rows(partial) == [(1, 1), (1, 2)]
    assert partial.provenance["partial"]["stopped"].startswith("DiagnosticError: diagnostic 'tripwire'")
    assert "resume=True" in partial.provenance["partial"]["continue"]


def test_resume_needs_a_checkpoint_and_an_existing_file(tmp_path):
    model, ids = _tiny_gpt2(), torch.tensor([[1, 2, 3]])
    with pytest.raises(ArgumentError, match="resume=True needs the report to continue — pass checkpoint="):
        jacobiscope.analyze(model, ids, resume=True, progress=False)
    with pytest.raises(ArgumentError, match="nothing to resume: .* does not exist — drop resume=True"):
        jacobiscope.analyze(model, ids, resume=True, checkpoint=tmp_path / "none.json", progress=False)
    with pytest.raises(ArgumentError, match="resume must be True or False"):
        jacobiscope.analyze(model, ids, resume="yes", checkpoint=tmp_path / "none.json", progress=False)


def test_a_complete_checkpoint_resumes_to_itself_without_measuring(tmp_path):
    model, ids = _tiny_gpt2(), torch.tensor([[1, 2, 3]])
    path = tmp_path / "report.json"
    first = jacobiscope.analyze(model, ids, loops=3, diagnostics=["lyapunov"], progress=False, checkpoint=path)
    again = jacobiscope.analyze(model, ids, loops=3, diagnostics=["lyapunov"], progress=False, checkpoint=path,
                                resume=True)
    assert _numbers(again) == _numbers(first) and again.notes == first.notes
    assert [row.seconds for row in again.rows] == [row.seconds for row in first.rows]


def test_the_cli_resume_refuses_before_the_model_loads(tiny_folder, tmp_path, capsys, monkeypatch):
    def no_loading(*args, **kwargs):
        raise AssertionError("the model was loaded before the resume was checked")

    monkeypatch.setattr(jacobiscope.hub, "load_pretrained", no_loading)
    assert main(["analyze", str(tiny_folder), "--resume", "--json", str(tmp_path / "absent.json")]) == 2
    err = capsys.readouterr().err
    assert "nothing to resume" in err and "drop --resume" in err and err.count("\n") == 1
    assert main(["analyze", str(tiny_folder), "--resume"]) == 2
    assert "--resume needs the interrupted run's report — pass the same --json" in capsys.readouterr().err


@pytest.mark.slow  # renders the HTML report's figures (seconds)
def test_an_html_only_run_keeps_its_rows_beside_the_html_until_it_completes(tiny_folder, tmp_path, capsys):
    out = tmp_path / "report.html"
    assert main(["analyze", str(tiny_folder), "--ids", "1,2,3", "--layers", "0", "--loops", "2", "--diagnostics",
                 "lyapunov", "--k", "1", "--out", str(out), "--quiet"]) == 0
    capsys.readouterr()
    assert out.is_file() and not (tmp_path / "report.html.partial.json").exists()  # the scratch checkpoint is gone
