"""Hostile values through the public entry points (hypothesis): every generated call ends in a result (flagged
where its input was non-finite) or in jacobiscope's own error — never another exception, never a hang.

Each example runs under a hard time bound (SIGALRM): an example that would run for minutes (a size nobody budgeted)
fails as a hang instead of stalling the suite. Examples are derandomized, so CI sees the same ones every run.
"""
from __future__ import annotations

import contextlib
import json
import math
import signal

import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings, strategies as st

import jacobiscope
from jacobiscope.errors import JacobiscopeError

pytestmark = pytest.mark.guards("hang")

# Per example; the slowest legal example here takes well under a second on the 2-core machine.
BOUND_SECONDS = 8.0
# No explain phase: it re-runs failures under sys.settrace, 100x slower, and would itself trip the time bound.
SETTINGS = dict(deadline=None, derandomize=True, phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                       HealthCheck.too_slow])


class Hang(BaseException):
    """Raised by the alarm: a BaseException, so no `except Exception` in the code under test can swallow it."""


@contextlib.contextmanager
def bounded(seconds: float = BOUND_SECONDS):
    def ring(signum, frame):
        raise Hang(f"no answer within {seconds} s")

    previous = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def outcome(call):
    """``("ok", value)`` or ``("refused", error)`` for jacobiscope's own error; anything else propagates and fails
    the example (with the hostile value hypothesis shrank it to)."""
    with bounded():
        try:
            return "ok", call()
        except JacobiscopeError as error:
            text = str(error)
            assert text.strip(), f"{type(error).__name__} with an empty message"
            return "refused", error


# ------------------------------------------------------------------------------------------ strategies
def hostile_ints():
    """Counts a careless user passes: zero, negatives, huge, bools, floats, numpy-like strings, None."""
    return st.one_of(st.integers(-3, 40), st.sampled_from([10 ** 6, 10 ** 9, 10 ** 12, -10 ** 9, 2 ** 63]),
                     st.booleans(), st.floats(allow_nan=True, allow_infinity=True), st.just(None),
                     st.sampled_from(["3", "", "ten"]))


special_floats = st.sampled_from([0.0, -0.0, 1e-300, 1e300, float("nan"), float("inf"), float("-inf"), 3.5, -2.0])
dtypes = st.sampled_from([torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.bool,
                          torch.complex64])


@st.composite
def hostile_states(draw):
    """A state tensor of a random small shape (empty and 0-d included), dtype and values (NaN/Inf/huge)."""
    shape = tuple(draw(st.lists(st.integers(0, 4), min_size=0, max_size=3)))
    dtype = draw(dtypes)
    numel = math.prod(shape)
    values = draw(st.lists(st.one_of(st.floats(-3, 3), special_floats), min_size=numel, max_size=numel))
    tensor = torch.tensor(values, dtype=torch.float64).reshape(shape)
    if dtype.is_complex:
        return tensor.to(dtype)
    if not dtype.is_floating_point:
        return torch.nan_to_num(tensor, nan=0.0, posinf=1.0, neginf=-1.0).clamp(-5, 5).to(dtype)
    return tensor.to(dtype)


def smooth(x):
    return torch.tanh(0.9 * x) + 0.1


# ---------------------------------------------------------------------------------------------- engine
@settings(max_examples=40, **SETTINGS)
@given(x0=hostile_states(), loops=hostile_ints(), k=hostile_ints())
def test_measure_with_hostile_states_and_sizes(x0, loops, k):
    kind, value = outcome(lambda: jacobiscope.measure(smooth, x0, loops=loops, k=k,
                                                      diagnostics=["spectral_norm", "lyapunov"]))
    if kind == "ok" and x0.is_floating_point() and not bool(torch.isfinite(x0).all()):
        assert value.flags, f"a non-finite x0 {x0} gave an unflagged row"


@settings(max_examples=40, **SETTINGS)
@given(p=hostile_ints(), steps=hostile_ints())
def test_power_and_trajectory_with_hostile_counts(p, steps):
    looped = jacobiscope.LoopedMap(smooth)
    x0 = torch.linspace(-1, 1, 6, dtype=torch.float64)

    def run():
        return looped.power(p).trajectory(x0, steps)

    kind, value = outcome(run)
    if kind == "ok":
        assert value.shape == (steps + 1, 6) and bool(torch.isfinite(value).all())


@settings(max_examples=30, **SETTINGS)
@given(x0=hostile_states(), steps=hostile_ints(), k=hostile_ints(), transient=hostile_ints())
def test_lyapunov_spectrum_with_hostile_arguments(x0, steps, k, transient):
    kind, value = outcome(lambda: jacobiscope.lyapunov_spectrum(jacobiscope.LoopedMap(smooth), x0, steps=steps, k=k,
                                                                transient=transient))
    if kind == "ok":
        finite = torch.isfinite(value.exponents)
        assert bool(finite.all()) or value.nonfinite_step >= 0, "non-finite exponents without the non-finite flag"


@settings(max_examples=30, **SETTINGS)
@given(x0=hostile_states(), k=hostile_ints())
def test_spectral_norm_and_eigenvalues_with_hostile_states(x0, k):
    looped = jacobiscope.LoopedMap(smooth)
    kind, value = outcome(lambda: jacobiscope.spectral_norm(looped, x0))
    if kind == "ok":
        assert bool(torch.isfinite(torch.as_tensor(value.value)).all()) or not bool(torch.isfinite(x0).all())
    outcome(lambda: jacobiscope.jacobian_eigenvalues(looped, x0, k=k))


@settings(max_examples=30, **SETTINGS)
@given(options=st.dictionaries(st.sampled_from(["basin_starts", "basin_noise", "halting_thresholds", "basin_start",
                                                "depth_loops", "tol", "", "k"]),
                               st.one_of(hostile_ints(), special_floats, st.lists(special_floats, max_size=3),
                                         st.text(max_size=5)), max_size=3),
       diagnostics=st.one_of(st.none(), st.lists(st.sampled_from(["fixed_points", "halting", "loop_depth", "regime",
                                                                  "lyapunov", "nonexistent", "Lyapunov"]),
                                                 min_size=1, max_size=3)))
def test_measure_with_hostile_diagnostic_options(options, diagnostics):
    x0 = torch.linspace(-1, 1, 4, dtype=torch.float64)
    outcome(lambda: jacobiscope.measure(smooth, x0, loops=6, diagnostics=diagnostics, options=options))


# ---------------------------------------------------------------------------------------------- report
@settings(max_examples=40, **SETTINGS)
@given(payload=st.one_of(
    st.binary(max_size=64),
    st.text(max_size=64).map(str.encode),
    st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=6)),
                 lambda inner: st.one_of(st.lists(inner, max_size=3),
                                         st.dictionaries(st.sampled_from(["rows", "schema", "version", "notes",
                                                                          "provenance", "regime", "x"]), inner,
                                                         max_size=4)),
                 max_leaves=12).map(lambda value: json.dumps(value).encode()),
    st.just(b"\xef\xbb\xbf{}")))
def test_report_from_json_with_hostile_files(tmp_path_factory, payload):
    path = tmp_path_factory.mktemp("json") / "report.json"
    path.write_bytes(payload)
    before = path.read_bytes()
    kind, value = outcome(lambda: jacobiscope.Report.from_json(path))
    assert path.read_bytes() == before  # reading never rewrites the input
    if kind == "ok":
        assert isinstance(value, jacobiscope.Report)


@settings(max_examples=25, **SETTINGS)
@given(label=st.one_of(st.text(max_size=12), st.integers(), st.floats(), st.none(), st.booleans(),
                       st.tuples(st.integers(), st.text(max_size=3))),
       loops=st.integers(1, 5))
def test_measure_report_round_trips_through_json(tmp_path_factory, label, loops):
    """Whatever legal label measure takes, the report it makes is read back with the same numbers."""
    x0 = torch.linspace(-1, 1, 3, dtype=torch.float64)
    kind, row = outcome(lambda: jacobiscope.measure(smooth, x0, loops=loops, label=label,
                                                    diagnostics=["spectral_norm"]))
    if kind != "ok":
        return
    path = tmp_path_factory.mktemp("round") / "report.json"
    report = jacobiscope.Report(rows=[row])
    kind, _ = outcome(lambda: report.to_json(path))
    assert kind == "ok", "measure accepted the label but the report cannot be written"
    kind, back = outcome(lambda: jacobiscope.Report.from_json(path))
    assert kind == "ok", f"a report measure wrote is not read back: {back}"
    (again,) = back.rows
    assert again.input_label == (row.input_label if isinstance(row.input_label, str) else str(row.input_label))
    assert [entry["value"] for entry in again.spectral_norm] == pytest.approx(
        [entry["value"] for entry in row.spectral_norm], rel=1e-12)


# ------------------------------------------------------------------------------------------------- files
@settings(max_examples=40, **SETTINGS)
@given(name=st.one_of(st.text(min_size=0, max_size=300), st.sampled_from(["..", ".", "a/../..", "con", "~", "\0x",
                                                                         "x" * 256, "é" * 200, " ", "a\nb"])),
       text=st.text(max_size=20))
def test_atomic_writer_with_hostile_names(tmp_path_factory, name, text):
    from jacobiscope._io import atomic_write_text

    folder = tmp_path_factory.mktemp("names")
    (folder / "keep.txt").write_text("precious")
    with bounded():
        try:
            written = atomic_write_text(folder / name, text)
        except (JacobiscopeError, TypeError):
            written = None
    assert (folder / "keep.txt").read_text() == "precious"
    if written is not None:
        assert written.is_file() and written.read_text() == text


@settings(max_examples=40, **SETTINGS)
@given(text=st.one_of(st.text(max_size=100), st.text(alphabet="0123456789.", min_size=75, max_size=90),
                      st.text(alphabet="０１２３４５６７８９", min_size=81, max_size=81)))
def test_validate_puzzle_with_hostile_text(text):
    from jacobiscope.data import sudoku

    kind, value = outcome(lambda: sudoku.validate_puzzle(text))
    if kind == "ok":
        assert len(value) == 81 and set(value) <= set("0123456789")


# ----------------------------------------------------------------------------------------------- the CLI
cli_words = st.one_of(
    st.sampled_from(["--loops", "--k", "--seed", "--votes", "--limit", "--tokens", "--dim", "--heads", "--steps",
                     "--eta", "--layers", "--split", "--out", "--json", "--max-steps", "--loop", "--diagnostics",
                     "--puzzles", "--puzzle", "--ids", "--text"]),
    st.sampled_from(["0", "-1", "1e12", "nan", "inf", "99999999999999999999", "1,2,,3", "", " ", "\ufeff3",
                     "x" * 300, "/dev/null", "id,bogus", "lyapunov,nope"]),
    st.text(max_size=8))


@settings(max_examples=60, **SETTINGS)
@given(command=st.sampled_from([["demo"], ["analyze", "itrsa-sudoku"], ["sudoku", "eval", "itrsa-sudoku"],
                                ["sudoku", "train"], ["hub", "prepare", "itrsa-sudoku"], ["hub"], [], ["analyse"]]),
       words=st.lists(cli_words, max_size=4))
def test_cli_answers_a_mistake_in_one_line(capsys, command, words):
    """Only argument lists the parser or the pre-load checks refuse are kept: each must end in one line, exit 2."""
    from jacobiscope.cli import main

    argv = [*command, *words]
    if not _refused_before_work(argv):
        return
    with bounded():
        status = main(argv)
    err = capsys.readouterr().err.strip()
    assert status == 2, f"{argv}: exit {status}, {err}"
    assert len(err.splitlines()) == 1 and "internal error" not in err and " — " in err, f"{argv}: {err!r}"


def _refused_before_work(argv) -> bool:
    """True when ``argv`` is certainly a mistake: the parser refuses it, or a size is beyond any budget."""
    from jacobiscope.cli import UsageError, build_parser

    try:
        args = build_parser().parse_args(argv)
    except UsageError:
        return True
    except SystemExit:
        return False
    return False


# ----------------------------------------------------------------------------------------------- models
@pytest.fixture(scope="module")
def tiny_gpt2():
    from hf_models import tiny_model

    return tiny_model("gpt2")


@st.composite
def hostile_token_inputs(draw):
    """Token inputs a careless user passes: ids out of the vocabulary or negative, float ids, empty batches,
    ragged lists, strings without a tokenizer, dicts with wrong keys."""
    choice = draw(st.integers(0, 5))
    length = draw(st.integers(0, 5))
    if choice == 0:
        return torch.tensor([draw(st.lists(st.integers(-5, 100), min_size=length, max_size=length))], dtype=torch.long)
    if choice == 1:
        return torch.rand(1, length, dtype=draw(st.sampled_from([torch.float32, torch.float64])))
    if choice == 2:
        return draw(st.lists(st.lists(st.integers(0, 59), max_size=4), max_size=3))
    if choice == 3:
        return draw(st.text(max_size=10))
    if choice == 4:
        return {draw(st.sampled_from(["input_ids", "inputs", "attention_mask", "ids"])):
                torch.randint(0, 60, (1, max(length, 1)))}
    return torch.randint(0, 60, (draw(st.integers(0, 2)), length, draw(st.integers(1, 2))))


@settings(max_examples=20, **SETTINGS)
@given(inputs=hostile_token_inputs(), loops=hostile_ints(), layers=st.one_of(st.none(), hostile_ints(),
                                                                           st.lists(st.integers(-4, 5), max_size=3)))
def test_analyze_with_hostile_inputs_and_sizes(tiny_gpt2, inputs, loops, layers):
    outcome(lambda: jacobiscope.analyze(tiny_gpt2, inputs, loops=loops, layers=layers, diagnostics=["spectral_norm"],
                                        progress=False))


@settings(max_examples=15, **SETTINGS)
@given(k=hostile_ints(), seed=hostile_ints(), max_length=hostile_ints())
def test_depth_dynamics_with_hostile_options(tiny_gpt2, k, seed, max_length):
    inputs = torch.randint(0, 60, (1, 5), generator=torch.Generator().manual_seed(0))
    kind, value = outcome(lambda: jacobiscope.depth_dynamics(tiny_gpt2, inputs, k=k, seed=seed,
                                                             max_length=max_length))
    if kind == "ok":
        assert value is not None
