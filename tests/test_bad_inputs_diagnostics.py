"""Bad inputs to the diagnostics layer: `measure`, its options and sizes, the registry, user diagnostics, and the
loop_depth / halting / fixed_points protocol (a map's readout and quality score). Each case ends in jacobiscope's own
error naming the problem and the fix, or in a row that carries an explicit flag — never a torch traceback, never a
silently wrong number, never minutes of work before a no.

Real parts only: small float64 maps written here, the registry itself, a subprocess for the import-order case.
"""
import math
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

import jacobiscope
from jacobiscope import LoopedMap
from jacobiscope.diagnostics import (
    Diagnostic, DiagnosticDefinitionError, DiagnosticError, Option, register_diagnostic, unregister_diagnostic,
)
from jacobiscope.errors import ArgumentError, JacobiscopeError, MemoryBudgetError, StepError, StepOutputError
from jacobiscope.report import Report

F64 = torch.float64


def smooth(x):
    return torch.tanh(0.9 * x) + 0.1


def x0():
    return torch.linspace(-1, 1, 12, dtype=F64).reshape(3, 4)  # 3 tokens x 4 features


def measure(diagnostics, **kwargs):
    return jacobiscope.measure(smooth, x0(), loops=kwargs.pop("loops", 3), diagnostics=diagnostics, **kwargs)


def guards(kind):
    return pytest.mark.guards(kind)


# ---------------------------------------------------------------------------------------- options, declared
FP, HALT = ["fixed_points"], ["halting"]
OPTION_CASES = [
    # (diagnostics, options, problem, fix, guards)
    (FP, {"basin_starts": 0}, r"basin_starts must be an int >= 1, got 0", r"pass e\.g\. basin_starts=8", "silent"),
    (FP, {"basin_starts": -3}, r"basin_starts must be an int >= 1, got -3", r"basin_starts=8", "silent"),
    (FP, {"basin_starts": True}, r"basin_starts must be an int >= 1, got True \(bool\)", r"basin_starts=8", "silent"),
    (FP, {"basin_starts": 2.7}, r"basin_starts must be an int >= 1, got 2\.7", r"basin_starts=8", "silent"),
    (FP, {"basin_starts": "8"}, r"basin_starts must be an int >= 1, got '8' \(str\)", r"basin_starts=8", "silent"),
    (FP, {"basin_starts": 10**9}, r"basin_starts=1000000000 is over the budget of 4,096", r"at most basin_starts=4096",
     "hang"),
    (FP, {"basin_noise": math.nan}, r"basin_noise must be a finite number >= 0, got nan", r"basin_noise=1e-2",
     "silent"),
    (FP, {"basin_noise": -0.1}, r"basin_noise must be a finite number >= 0, got -0\.1", r"basin_noise=", "silent"),
    (FP, {"basin_rtol": math.inf}, r"basin_rtol must be a finite number >= 0, got inf", r"basin_rtol=", "silent"),
    (FP, {"basin_rtol": "1e-2"}, r"basin_rtol must be a finite number >= 0, got '1e-2'", r"basin_rtol=", "internal"),
    (FP, {"basin_start": 4}, r"unknown option 'basin_start' \(did you mean 'basin_starts'\?\)",
     r"options of the chosen diagnostics: basin_noise, basin_rtol, basin_starts", "silent"),
    (HALT, {"halting_threshold": [0.1]}, r"unknown option 'halting_threshold' \(did you mean 'halting_thresholds'",
     r"options of the chosen diagnostics", "silent"),
    (HALT, {"halting_thresholds": 0.1}, r"halting_thresholds must be a non-empty list of finite numbers > 0, got 0\.1",
     r"halting_thresholds=\[1e-2, 1e-3\]", "internal"),
    (HALT, {"halting_thresholds": "0.1"}, r"halting_thresholds must be a non-empty list.*got '0\.1'",
     r"halting_thresholds=\[", "internal"),
    (HALT, {"halting_thresholds": []}, r"halting_thresholds must be a non-empty list.*got \[\]",
     r"halting_thresholds=\[", "silent"),
    (HALT, {"halting_thresholds": [math.nan]}, r"halting_thresholds must be .*finite.*got \[nan\]",
     r"halting_thresholds=\[", "silent"),
    (HALT, {"halting_thresholds": [1e-2, -1]}, r"halting_thresholds must be .*> 0, got \[0\.01, -1\]",
     r"halting_thresholds=\[", "silent"),
    (HALT, {"halting_thresholds": [1e-3] * 100}, r"halting_thresholds has 100 entries, over the budget of 64",
     r"pass at most 64", "hang"),
    (HALT, {"halting_agree_rtol": math.nan}, r"halting_agree_rtol must be a finite number >= 0, got nan",
     r"halting_agree_rtol=", "silent"),
    (["lyapunov"], {"basin_starts": 4}, r"option 'basin_starts' belongs to the diagnostic 'fixed_points', which "
     r"this call does not run", r"add 'fixed_points' to diagnostics=, or drop the option", "silent"),
    (["lyapunov"], {"k": 0}, r"options\['k'\] would be overridden by measure's own argument k",
     r"pass k=\.\.\. to measure", "silent"),
    (["lyapunov"], {"seed": 3}, r"options\['seed'\] would be overridden", r"pass seed=\.\.\. to measure", "silent"),
    (FP, {1: 2}, r"options has the key 1 \(int\); option names are str", r"options=\{'basin_starts': 16\}",
     "internal"),
    (FP, {"zzz": 1}, r"unknown option 'zzz' —", r"options of the chosen diagnostics: basin_noise", "silent"),
]


@pytest.mark.parametrize("diagnostics, options, problem, fix", [
    pytest.param(d, o, p, f, id=f"{d[0]}-{'-'.join(map(str, o))}-{i}", marks=guards(g))
    for i, (d, o, p, f, g) in enumerate(OPTION_CASES)])
def test_bad_options_are_refused_before_any_loop_runs(diagnostics, options, problem, fix):
    with pytest.raises(ArgumentError, match=problem) as error:
        measure(diagnostics, options=options)
    assert " — " in str(error.value) and re.search(fix, str(error.value))


# ---------------------------------------------------------------------------------------- sizes and budgets
SIZE_CASES = [
    pytest.param(lambda: measure(["lyapunov"], loops=10**12), ArgumentError,
                 r"loops=1000000000000 is over the budget of 100000 loops", r"pass loops <= 100000; .*JACOBISCOPE_MAX_LOOPS",
                 id="loops-over-budget", marks=guards("hang")),
    pytest.param(lambda: measure(["spectral_norm"], spectral_samples=10**9), ArgumentError,
                 r"spectral_samples=1000000000 is over the budget of 1024", r"pass spectral_samples <= 1024",
                 id="spectral-samples-huge", marks=guards("hang")),
    pytest.param(lambda: measure(["eigenvalues"], eigen_k=10**9), ArgumentError, r"eigen_k=1000000000 is over the "
                 r"budget of 1024 eigenvalues", r"pass eigen_k <= 1024", id="eigen-k-huge", marks=guards("hang")),
    pytest.param(lambda: measure(["lyapunov"], k=10**9), ArgumentError, r"k=1000000000 is over the budget of 1024 tangent vectors",
                 r"pass k <= 1024", id="k-huge", marks=guards("hang")),
    pytest.param(lambda: measure(["eigenvalues"], eigen_restarts=10**9), ArgumentError,
                 r"eigen_restarts=1000000000 is over the budget of 100000 restarts",
                 r"pass eigen_restarts <= 100000",
                 id="eigen-restarts-huge", marks=guards("hang")),
    pytest.param(lambda: measure(FP, loops=100_000, options={"basin_starts": 4000}), ArgumentError,
                 r"basin_starts=4000 is over the budget of 100000 loops of the map \(4000 x 100000 = 400000000",
                 r"pass basin_starts <= 1; .*JACOBISCOPE_MAX_LOOPS", id="basins-times-loops", marks=guards("hang")),
    pytest.param(lambda: jacobiscope.measure(smooth, torch.zeros(1000, 1000, dtype=F64), loops=50_000,
                                             diagnostics=["lyapunov"]), MemoryBudgetError,
                 r"measure would hold 400 GB \(50001 states", r"lower loops, k or eigen_k",
                 id="trajectory-over-memory", marks=guards("hang")),
    pytest.param(lambda: measure(["lyapunov"], seed=2**70), ArgumentError, r"seed=\d+ is outside the range",
                 r"pass a smaller int such as seed=0", id="seed-overflows-generator", marks=guards("internal")),
    pytest.param(lambda: measure(["lyapunov"], mode="Block"), ArgumentError,
                 r"mode must be None or one of 'block', 'attention', 'loop', got 'Block'", r"pass e\.g\. mode='loop'",
                 id="mode-typo-refused-up-front", marks=guards("internal")),
    pytest.param(lambda: measure(["lyapunov"], input_index=-1), ArgumentError, r"input_index must be an int >= 0, "
                 r"got -1", r"input_index=0", id="input-index-negative", marks=guards("silent")),
    pytest.param(lambda: measure(["lyapunov"], input_index=True), ArgumentError, r"input_index must be an int >= 0, "
                 r"got True", r"input_index=0", id="input-index-bool", marks=guards("internal")),
    pytest.param(lambda: measure(["lyapunov"], input_index="0"), ArgumentError, r"input_index must be an int >= 0, "
                 r"got '0'", r"input_index=0", id="input-index-str", marks=guards("internal")),
    pytest.param(lambda: measure(["lyapunv"]),
                 ArgumentError, r"Unknown diagnostics \['lyapunv'\] \(did you mean 'lyapunov'\?\)", r"choose from",
                 id="diagnostic-name-typo", marks=guards("internal")),
    pytest.param(lambda: jacobiscope.get_diagnostic("fixed_point"), ArgumentError,
                 r"unknown diagnostic 'fixed_point' \(did you mean 'fixed_points'\?\)", r"choose from spectral_norm",
                 id="get-diagnostic-typo", marks=guards("internal")),
    pytest.param(lambda: unregister_diagnostic("lyapunv"), ArgumentError,
                 r"no diagnostic named 'lyapunv' is registered \(did you mean 'lyapunov'\?\)", r"registered: ",
                 id="unregister-typo", marks=guards("internal")),
]


@pytest.mark.parametrize("call, error, problem, fix", SIZE_CASES)
def test_sizes_over_budget_and_bad_identities_are_refused_before_work(call, error, problem, fix):
    with pytest.raises(error, match=problem) as raised:
        call()
    assert re.search(fix, str(raised.value))


@pytest.mark.parametrize("kwargs, flag", [
    pytest.param(dict(diagnostics=["lyapunov"], k=50), "k=50 clamped to 12 (the state has 12 entries)",
                 id="k-clamped-said", marks=guards("silent")),
    pytest.param(dict(diagnostics=["eigenvalues"], eigen_k=40), "eigen_k=40 clamped to 12",
                 id="eigen-k-clamped-said", marks=guards("silent")),
    pytest.param(dict(diagnostics=["spectral_norm"], spectral_samples=50), "spectral_samples=50 clamped to 4",
                 id="spectral-samples-clamped-said", marks=guards("silent")),
])
def test_a_clamped_size_is_said_on_the_row(kwargs, flag):
    row = measure(**kwargs)
    assert any(flag in text for text in row.flags), row.flags


# ---------------------------------------------------------------------------------------- NaN/Inf in results
def _blows_up_off_the_basin(x):
    return torch.where(x.abs() > 1.05, x * 1e200, 0.5 * x + 0.5)


@guards("silent")
def test_diverging_basins_are_flagged_not_passed_on_as_numbers():
    row = jacobiscope.measure(_blows_up_off_the_basin, torch.ones(4, dtype=F64), loops=6, diagnostics=["fixed_points"],
                              options={"basin_starts": 4, "basin_noise": 0.5})
    basins = row.extra["fixed_points"]["basins"]
    assert any(not math.isfinite(basin["step"]) for basin in basins)
    assert any(flag.startswith("fixed_points: NaN/Inf in its result (basins[") for flag in row.flags), row.flags


@guards("silent")
def test_halting_changes_that_overflow_are_flagged():
    row = jacobiscope.measure(lambda x: x * 1e150, torch.ones(2, 3, dtype=F64), loops=3, diagnostics=["halting"])
    assert any(flag.startswith("halting: NaN/Inf in its result (median_change[") for flag in row.flags), row.flags


def _readout_map(readout=None, quality=None, loops=None):
    looped = LoopedMap(smooth)
    if readout is not None:
        looped.meta["readout"] = readout
    if quality is not None:
        looped.meta["quality"] = quality
    if loops is not None:
        looped.meta["loops"] = loops
    return looped


def logits(state):
    return state @ torch.ones(4, 5, dtype=F64)


def depth(**meta):
    return jacobiscope.measure(_readout_map(**meta), x0(), loops=4, diagnostics=["loop_depth", "halting"])


@pytest.mark.parametrize("meta, flag", [
    pytest.param(dict(readout=lambda s: logits(s) * math.nan), "loop_depth: NaN/Inf in its result (kl[0]",
                 id="readout-nan-kl-flagged", marks=guards("silent")),
    pytest.param(dict(readout=logits, quality=lambda s: math.nan), "loop_depth: NaN/Inf in its result (quality[0]",
                 id="quality-nan-flagged", marks=guards("silent")),
    pytest.param(dict(readout=logits, loops=True), "info.loops is True (bool), not a loop count",
                 id="trained-depth-bool", marks=guards("silent")),
    pytest.param(dict(readout=logits, loops="3"), "info.loops is '3' (str), not a loop count",
                 id="trained-depth-str", marks=guards("silent")),
    pytest.param(dict(readout=logits, loops=10**9), "trained depth info.loops=1000000000 is beyond the measured",
                 id="trained-depth-beyond-the-run", marks=guards("silent")),
])
def test_loop_depth_problems_are_flagged_on_the_row(meta, flag):
    row = depth(**meta)
    assert any(flag in text for text in row.flags), row.flags
    sweep = row.diagnostic("loop_depth")
    assert sweep is not None and (math.isnan(sweep.peak) or math.isfinite(sweep.peak))


@pytest.mark.parametrize("meta, error, problem", [
    pytest.param(dict(readout=lambda s: None), StepOutputError, r"readout \(info\.readout\) returned NoneType None "
                 r"at loop 0", id="readout-none", marks=guards("internal")),
    pytest.param(dict(readout=lambda s: [1, 2]), StepOutputError, r"readout.*returned list \[1, 2\]",
                 id="readout-list", marks=guards("internal")),
    pytest.param(dict(readout=lambda s: torch.ones(3, dtype=torch.long)), StepOutputError,
                 r"returned a torch\.int64 tensor of shape \[3\]", id="readout-predictions-not-logits",
                 marks=guards("internal")),
    pytest.param(dict(readout=lambda s: s.sum()), StepOutputError, r"returned a torch\.float64 tensor of shape \[\]",
                 id="readout-scalar", marks=guards("internal")),
    pytest.param(dict(readout=lambda s: 1 / 0), StepError, r"readout \(info\.readout\) raised ZeroDivisionError "
                 r"at loop 0", id="readout-raises", marks=guards("internal")),
    pytest.param(dict(readout=lambda s: logits(s)[..., : 2 + int(s.abs().sum() * 100) % 3]), StepOutputError,
                 r"logits of different shapes along the loop", id="readout-shape-changes", marks=guards("internal")),
    pytest.param(dict(readout=logits, quality=lambda s: "good"), StepOutputError,
                 r"quality score \(info\.quality\) returned str 'good' at loop 0, expected one number",
                 id="quality-str", marks=guards("internal")),
    pytest.param(dict(readout=logits, quality=lambda s: torch.ones(3)), StepOutputError,
                 r"quality score.*returned a tensor of shape \[3\]", id="quality-vector", marks=guards("internal")),
    pytest.param(dict(readout=logits, quality=lambda s: None), StepOutputError, r"quality score.*returned NoneType",
                 id="quality-none", marks=guards("internal")),
    pytest.param(dict(readout=logits, quality=lambda s: 1 / 0), StepError, r"quality score.*raised ZeroDivisionError",
                 id="quality-raises", marks=guards("internal")),
])
def test_a_bad_readout_or_quality_score_is_named(meta, error, problem):
    with pytest.raises(error, match=problem) as raised:
        depth(**meta)
    assert " — " in str(raised.value) and ("return" in str(raised.value) or "fix" in str(raised.value))


# ---------------------------------------------------------------------------------------- user diagnostics
def user(name, compute=None, **attributes):
    namespace = dict(name=name, **attributes)
    if compute is not None:
        namespace["compute"] = lambda self, context: compute(context)
    return type(f"User_{name}", (Diagnostic,), namespace)()


@pytest.fixture
def registered():
    """Register user diagnostics for one test; whatever was registered is removed afterwards."""
    names = []

    def add(diagnostic):
        register_diagnostic(diagnostic)
        names.append(diagnostic.name)
        return diagnostic

    yield add
    for name in reversed(names):
        unregister_diagnostic(name)


@pytest.mark.parametrize("compute, problem, fix", [
    pytest.param(lambda c: 1 / 0, r"diagnostic 'u_raises' \(User_u_raises\.compute\) raised ZeroDivisionError",
                 r"fix its compute, or leave it out of diagnostics=", id="compute-raises", marks=guards("internal")),
    pytest.param(lambda c: object(), r"diagnostic 'u_object' returned <object object.*which a report cannot hold",
                 r"return plain values", id="returns-object", marks=guards("internal")),
    pytest.param(lambda c: {"v": 1j}, r"diagnostic 'u_complex' returned \{'v': 1j\}.*complex",
                 r"return plain values", id="returns-complex", marks=guards("internal")),
    pytest.param(lambda c: {1: 2.0}, r"diagnostic 'u_intkey' returned \{1: 2\.0\}.*Use str keys",
                 r"return plain values", id="returns-int-keys", marks=guards("silent")),
    pytest.param(lambda c: {1, 2}, r"diagnostic 'u_set' returned \{1, 2\} \(set\)", r"return plain values",
                 id="returns-set", marks=guards("internal")),
    pytest.param(lambda c: 10**5000, r"diagnostic 'u_bigint' returned <int too long to print> \(int\).*int of about 5,000 digits",
                 r"store it as a float or a str", id="returns-int-json-cannot-read", marks=guards("lost")),
    pytest.param(lambda c: c.states.mul_(0).sum().item(), r"diagnostic 'u_mutates' modified context\.states in place",
                 r"compute on a copy", id="mutates-the-trajectory", marks=guards("silent")),
    pytest.param(lambda c: c.flags.append(5) or 1.0, r"diagnostic 'u_flag' added the flag 5 \(int\)",
                 r"append a str", id="non-str-flag", marks=guards("internal")),
])
def test_a_user_diagnostic_that_misbehaves_is_named(registered, request, compute, problem, fix):
    name = {"compute-raises": "u_raises", "returns-object": "u_object", "returns-complex": "u_complex",
            "returns-int-keys": "u_intkey", "returns-set": "u_set", "returns-int-json-cannot-read": "u_bigint",
            "mutates-the-trajectory": "u_mutates", "non-str-flag": "u_flag"}[request.node.callspec.id]
    registered(user(name, compute))
    with pytest.raises(DiagnosticError, match=problem) as raised:
        measure([name])
    assert re.search(fix, str(raised.value))


@pytest.mark.parametrize("value, where", [
    pytest.param(math.nan, "the result", id="user-nan", marks=guards("silent")),
    pytest.param({"a": [{"b": [1.0, math.inf]}]}, "a[0].b[1]", id="user-nested-inf", marks=guards("silent")),
    pytest.param(np.float64("-inf"), "the result", id="user-numpy-inf", marks=guards("silent")),
])
def test_a_user_diagnostic_nonfinite_number_is_flagged_and_round_trips(registered, value, where):
    registered(user("u_value", lambda c: value))
    row = measure(["u_value"])
    assert any(flag.startswith(f"u_value: NaN/Inf in its result ({where}") for flag in row.flags), row.flags
    back = Report.from_json(Report([row]).to_json()).rows[0]
    assert back == row and back.flags == row.flags


class _Plain(Diagnostic):
    name = "u_plain"

    def compute(self, context):
        return 1.0


@pytest.mark.parametrize("make, error, problem, fix", [
    pytest.param(lambda: user("u_nocompute"), DiagnosticDefinitionError, r"'u_nocompute' \(User_u_nocompute\) does "
                 r"not define compute", r"override compute\(self, context\)", id="no-compute", marks=guards("internal")),
    pytest.param(lambda: user("u_self", lambda c: 1, requires=("u_self",)), DiagnosticDefinitionError,
                 r"'u_self' requires itself", r"remove 'u_self' from its requires", id="requires-itself",
                 marks=guards("hang")),
    pytest.param(lambda: user("u_missing", lambda c: 1, requires=("lyapunv",)), DiagnosticDefinitionError,
                 r"requires \['lyapunv'\], which are not registered", r"register them first \(did you mean 'lyapunov'",
                 id="requires-missing", marks=guards("internal")),
    pytest.param(lambda: user("u_str", lambda c: 1, requires="lyapunov"), DiagnosticDefinitionError,
                 r"requires must be a tuple of diagnostic names, got 'lyapunov'", r"requires = \('lyapunov',\)",
                 id="requires-a-str", marks=guards("internal")),
    pytest.param(lambda: user("u_type", lambda c: 1, result_type=int), DiagnosticDefinitionError,
                 r"result_type must be a DiagnosticResult dataclass or None, got <class 'int'>",
                 r"subclass jacobiscope\.DiagnosticResult", id="result-type-not-a-result", marks=guards("internal")),
    pytest.param(lambda: user("u_default", lambda c: 1, default="no"), DiagnosticDefinitionError,
                 r"default must be True or False, got 'no'", r"set default = True/False", id="default-not-bool",
                 marks=guards("silent")),
    pytest.param(lambda: user("u_opts", lambda c: 1, options={"window": 4}), DiagnosticDefinitionError,
                 r"options must be a dict of name -> jacobiscope\.diagnostics\.Option", r"Option\('count', 4\)",
                 id="options-not-declared", marks=guards("internal")),
    pytest.param(lambda: user("lyapunov", lambda c: 1), ArgumentError,
                 r"a built-in diagnostic named 'lyapunov' is already registered", r"choose another name",
                 id="clash-with-builtin", marks=guards("silent")),
    pytest.param(lambda: _Plain, DiagnosticDefinitionError, r"got type \(pass an instance",
                 r"subclass jacobiscope\.Diagnostic and pass an instance", id="class-not-instance",
                 marks=guards("internal")),
])
def test_a_bad_user_diagnostic_is_refused_at_registration(make, error, problem, fix):
    before = jacobiscope.list_diagnostics()
    with pytest.raises(error, match=problem) as raised:
        register_diagnostic(make())
    assert re.search(fix, str(raised.value))
    assert jacobiscope.list_diagnostics() == before
    assert jacobiscope.get_diagnostic("lyapunov").__class__.__module__ == "jacobiscope.diagnostics._lyapunov"


@guards("hang")
def test_a_requires_cycle_made_by_replacing_is_refused(registered):
    registered(user("u_a", lambda c: 1))
    registered(user("u_b", lambda c: 1, requires=("u_a",)))
    with pytest.raises(DiagnosticDefinitionError, match=r"'u_a' requires \['u_b'\], which .* need 'u_a' back"):
        register_diagnostic(user("u_a", lambda c: 1, requires=("u_b",)), replace=True)
    assert measure(["u_b"]).extra == {"u_a": 1, "u_b": 1}


@guards("silent")
def test_a_user_diagnostic_option_is_declared_checked_and_read(registered):
    class Window(Diagnostic):
        name = "u_window"
        options = {"u_window_size": Option("count", 2, maximum=10)}

        def compute(self, context):
            return context.options.get("u_window_size", 2)

    registered(Window())
    assert measure(["u_window"], options={"u_window_size": 5}).extra["u_window"] == 5
    with pytest.raises(ArgumentError, match=r"u_window option u_window_size=11 is over the budget of 10 .* — pass at most u_window_size=10"):
        measure(["u_window"], options={"u_window_size": 11})
    with pytest.raises(ArgumentError, match=r"unknown option 'u_window_sise' \(did you mean 'u_window_size'"):
        measure(["u_window"], options={"u_window_sise": 3})


@pytest.mark.parametrize("figure, problem", [
    pytest.param(lambda self, rows, labels: 1 / 0, r"diagnostic 'u_fig' failed to draw its figure "
                 r"\(User_u_fig\.figure raised ZeroDivisionError", id="figure-raises", marks=guards("internal")),
    pytest.param(lambda self, rows, labels: 42, r"diagnostic 'u_fig'\.figure returned 42 \(int\), not a matplotlib "
                 r"Figure", id="figure-not-a-figure", marks=guards("internal")),
])
def test_a_user_figure_that_fails_is_named(registered, tmp_path, figure, problem):
    registered(user("u_fig", lambda c: 1.0, figure=figure))
    report = Report([measure(["u_fig"])])
    with pytest.raises(DiagnosticError, match=problem) as raised:
        report.plot()
    assert "return None to draw nothing" in str(raised.value) or "return a matplotlib" in str(raised.value)
    with pytest.raises(DiagnosticError, match=problem):
        report.save_html(tmp_path / "report.html")
    assert not (tmp_path / "report.html").exists()  # nothing half-written


@guards("silent")
def test_a_builtin_name_is_refused_even_when_registered_before_the_builtins_load():
    """In a fresh process the built-ins register on first use: a user's "lyapunov" registered before that used to be
    silently overwritten by the built-in (its results vanished)."""
    code = (
        "from jacobiscope.diagnostics._base import Diagnostic, register_diagnostic\n"
        "class L(Diagnostic):\n"
        "    name = 'lyapunov'\n"
        "    def compute(self, context): return 1\n"
        "try:\n"
        "    register_diagnostic(L())\n"
        "except Exception as error:\n"
        "    print(type(error).__name__, error)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "ArgumentError a built-in diagnostic named 'lyapunov' is already registered" in result.stdout
    assert "choose another name" in result.stdout


# ---------------------------------------------------------------------------------------- a legal call, round trip
@pytest.mark.parametrize("label", [
    pytest.param(7, id="label-int"), pytest.param(("a", 1), id="label-tuple"),
    pytest.param("数独 \u2028 é", id="label-non-ascii"), pytest.param("a\ud800b", id="label-lone-surrogate"),
])
@guards("lost")
def test_any_legal_label_is_written_and_read_back(tmp_path, label):
    row = measure(["lyapunov"], label=label, input_index=10**30)
    assert row.input_label == (label if isinstance(label, str) else str(label))
    Report([row]).to_json(tmp_path / "report.json")
    back = Report.from_json(tmp_path / "report.json").rows[0]
    assert back == row and back.input_label == row.input_label and back.input_index == 10**30



@guards("silent")
def test_a_user_columns_method_that_fails_is_said_in_the_table(registered):
    registered(user("u_cols", lambda c: 1.0, columns=lambda self, result: {"cols": 1 / 0}))
    summary = Report([measure(["u_cols"])]).summary()
    assert "? (ZeroDivisionError in User_u_cols.columns)" in summary


@guards("internal")
def test_replace_must_be_a_bool():
    with pytest.raises(ArgumentError, match=r"replace must be True or False, got 'yes' — pass replace=True"):
        register_diagnostic(user("u_replace", lambda c: 1), replace="yes")
    assert "u_replace" not in jacobiscope.list_diagnostics()


@pytest.mark.parametrize("cost, problem", [
    pytest.param(lambda self, size, loops, options: 1 / 0, r"cost\(state_size=64, loops=8, options\) raised "
                 r"ZeroDivisionError", id="cost-raises", marks=guards("internal")),
    pytest.param(lambda self, size, loops, options: -5, r"cost returned -5", id="cost-negative", marks=guards("silent")),
    pytest.param(lambda self, size, loops, options: {"forwards": 3}, r"cost returned \{'forwards': 3\}",
                 id="cost-unknown-operation", marks=guards("silent")),
    pytest.param(lambda self, size, loops, options: math.nan, r"cost returned nan", id="cost-nan",
                 marks=guards("silent")),
])
def test_a_cost_describe_cannot_price_is_refused_at_registration(cost, problem):
    with pytest.raises(DiagnosticDefinitionError, match=problem) as raised:
        register_diagnostic(user("u_cost", lambda c: 1, cost=cost))
    assert re.search(r"— (make cost return|return a finite number >= 0)", str(raised.value))
    assert "u_cost" not in jacobiscope.list_diagnostics()
