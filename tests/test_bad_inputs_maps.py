"""Bad sizes to the engine: ``power(p)``, trajectories and loop counts, Lyapunov ``k``, ``eigen_k``, solver
iterations, analyze's sizes. Every size a user controls is checked against its budget before any work starts and
refused with the budget and the fix (`jacobiscope._validation.BUDGETS`, raised per process with
``JACOBISCOPE_MAX_<NAME>``); a clamp is said, never silent; numpy integers count, booleans do not."""
import json
import math

import numpy as np
import pytest
import torch
import transformers

import jacobiscope
from jacobiscope import LoopedMap
from jacobiscope.errors import ArgumentError, BudgetError, MemoryBudgetError
from jacobiscope.linalg import jacobian_eigenvalues, spectral_norm
from jacobiscope.dynamics.lyapunov import lyapunov_spectrum

F64 = torch.float64


def smooth(x):
    return 0.5 * x + torch.sin(x)


def three():
    return torch.tensor([0.1, 0.2, 0.3], dtype=F64)


@pytest.fixture(scope="module")
def gpt2():
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_embd=8, n_layer=1, n_head=2, vocab_size=20, n_positions=16)
    return transformers.GPT2Model(config).eval()


IDS = torch.tensor([[1, 2, 3]])

# ----------------------------------------------------------------------------------------------- power(p)

POWER_HANGS = {
    "billion": (lambda m: m.power(10**9), "power p=1000000000 is over the budget of 100000 steps per application",
                "pass power p <= 100000"),
    "nested": (lambda m: m.power(1000).power(1000), "(1000 x 1000 = 1000000 steps per application)",
               "pass power p <= 100"),
    "numpy-billion": (lambda m: m.power(np.int64(10**9)), "over the budget of 100000", "JACOBISCOPE_MAX_POWER"),
}


@pytest.mark.parametrize("call, problem, fix", [
    pytest.param(*case, id=name, marks=pytest.mark.guards("hang")) for name, case in POWER_HANGS.items()])
def test_power_beyond_its_budget_is_refused_before_its_first_call(call, problem, fix):
    with pytest.raises(ArgumentError) as info:
        call(LoopedMap(smooth))
    assert problem in str(info.value) and fix in str(info.value)


@pytest.mark.parametrize("p", [
    pytest.param(0, id="zero", marks=pytest.mark.guards("internal")),
    pytest.param(-2, id="negative", marks=pytest.mark.guards("internal")),
    pytest.param(2.0, id="float", marks=pytest.mark.guards("internal")),
    pytest.param(True, id="bool", marks=pytest.mark.guards("silent")),
    pytest.param("2", id="str", marks=pytest.mark.guards("internal")),
])
def test_power_of_a_non_count_is_refused_with_an_example(p):
    with pytest.raises(ArgumentError, match=r"power needs a positive int number of loops, got .* — pass e\.g\. "
                                            r"power\(2\)"):
        LoopedMap(smooth).power(p)


@pytest.mark.guards("internal")
def test_power_of_a_numpy_integer_is_the_same_map():
    m = LoopedMap(smooth)
    assert torch.equal(m.power(np.int64(3))(three()), m.power(3)(three()))
    assert m.power(np.int32(3)).meta["power"] == 3 and type(m.power(np.int32(3)).meta["power"]) is int


# ----------------------------------------------------------------------------------------------- trajectory

@pytest.mark.parametrize("call, problem, fix", [
    pytest.param(lambda m: m.trajectory(three(), 10**9, every=10**8),
                 "steps=1000000000 is over the budget of 100000 loops of the step", "pass steps <= 100000",
                 id="steps-billion", marks=pytest.mark.guards("hang")),
    pytest.param(lambda m: m.power(1000).trajectory(three(), 1000),
                 "(1000 x 1000 = 1000000 loops of the step)", "pass steps <= 100", id="steps-of-a-power",
                 marks=pytest.mark.guards("hang")),
    pytest.param(lambda m: m.trajectory(three(), 3, include_initial="no"), "include_initial must be True or False, got "
                 "'no'", "include_initial=False", id="include-initial-str", marks=pytest.mark.guards("silent")),
    pytest.param(lambda m: m.trajectory(three(), 3, every=5, include_initial=False),
                 "every=5 is larger than steps=3 and include_initial=False: no state would be kept",
                 "pass every <= 3, or include_initial=True", id="nothing-kept", marks=pytest.mark.guards("internal")),
    pytest.param(lambda m: m.trajectory(three(), 3, on_nonfinite="wran"),
                 "on_nonfinite must be 'warn', 'raise' or 'ignore', got 'wran'", "pass one of them",
                 id="on-nonfinite-typo", marks=pytest.mark.guards("internal")),
    pytest.param(lambda m: m.trajectory(three(), 3.0), "steps must be a positive int, got 3.0", "e.g. steps=1",
                 id="steps-float", marks=pytest.mark.guards("internal")),
    pytest.param(lambda m: m.trajectory(three(), True), "steps must be a positive int, got True", "e.g. steps=1",
                 id="steps-bool", marks=pytest.mark.guards("silent")),
])
def test_a_bad_trajectory_size_is_refused_before_the_first_loop(call, problem, fix):
    calls = []
    m = LoopedMap(lambda x: calls.append(1) or smooth(x))
    with pytest.raises(ArgumentError) as info:
        call(m)
    assert problem in str(info.value) and fix in str(info.value)
    assert not calls  # refused before anything ran


@pytest.mark.guards("hang")
def test_a_trajectory_whose_kept_states_cannot_fit_in_memory_is_refused_before_it_runs():
    calls = []
    m = LoopedMap(lambda x: calls.append(1) or 0.5 * x)
    with pytest.raises(MemoryBudgetError, match=r"keeps 100002 states of 4000000 values .* GB\), more than the .* GB "
                                                r"of memory on cpu — lower steps, or keep fewer states with every="):
        m.trajectory(torch.zeros(4_000_000), 100_000)
    assert not calls


@pytest.mark.guards("internal")
def test_numpy_integer_sizes_run_like_ints():
    m = LoopedMap(smooth)
    assert torch.equal(m.trajectory(three(), np.int64(4), every=np.int32(2)), m.trajectory(three(), 4, every=2))


@pytest.mark.parametrize("call", [
    pytest.param(lambda m: jacobiscope.measure(m, three(), loops=10**9), id="measure-loops-billion",
                 marks=pytest.mark.guards("hang")),
    pytest.param(lambda m: jacobiscope.measure(m.power(1000), three(), loops=10**4), id="measure-a-power",
                 marks=pytest.mark.guards("hang")),
])
def test_measure_refuses_a_trajectory_over_the_loop_budget(call):
    with pytest.raises(ArgumentError, match=r"over the budget of 100000 loops.*JACOBISCOPE_MAX_LOOPS"):
        call(LoopedMap(smooth))


@pytest.mark.guards("hang")
def test_the_loop_budget_is_raised_or_lowered_per_process(monkeypatch):
    monkeypatch.setenv("JACOBISCOPE_MAX_LOOPS", "10")
    m = LoopedMap(smooth)
    assert m.trajectory(three(), 10).shape == (11, 3)
    with pytest.raises(ArgumentError, match=r"steps=11 is over the budget of 10 loops of the step: .* — pass steps <= 10"):
        m.trajectory(three(), 11)


@pytest.mark.parametrize("value", [pytest.param("lots", id="not-an-int", marks=pytest.mark.guards("internal")),
                                   pytest.param("-5", id="negative", marks=pytest.mark.guards("silent"))])
def test_a_bad_budget_variable_is_named(monkeypatch, value):
    monkeypatch.setenv("JACOBISCOPE_MAX_LOOPS", value)
    with pytest.raises(ArgumentError, match=r"JACOBISCOPE_MAX_LOOPS=.* (is not an int|must be a positive int) — set it"):
        LoopedMap(smooth).trajectory(three(), 2)


# ----------------------------------------------------------------------------------------------- dynamics / linalg

@pytest.mark.parametrize("call, problem, fix", [
    pytest.param(lambda m: lyapunov_spectrum(m, three(), steps=10**9), "transient + steps=1000000000 is over the "
                 "budget of 100000 loops", "JACOBISCOPE_MAX_LOOPS", id="lyapunov-steps",
                 marks=pytest.mark.guards("hang")),
    pytest.param(lambda m: lyapunov_spectrum(m, three(), steps=10, transient=10**9), "transient + steps=1000000010",
                 "pass transient + steps <= 100000", id="lyapunov-transient", marks=pytest.mark.guards("hang")),
    pytest.param(lambda m: lyapunov_spectrum(m.power(10), three(), steps=20_000), "(20000 x 10 = 200000 loops of "
                 "the step)", "pass transient + steps <= 10000", id="lyapunov-of-a-power",
                 marks=pytest.mark.guards("hang")),
    pytest.param(lambda m: lyapunov_spectrum(m, three(), steps=2, k=10**6), "k=1000000 is over the budget of 1024 "
                 "k", "pass k <= 1024", id="lyapunov-k", marks=pytest.mark.guards("hang")),
    pytest.param(lambda m: jacobian_eigenvalues(m, three(), k=10**6), "k=1000000 is over the budget of 1024 "
                 "eigenvalues", "JACOBISCOPE_MAX_EIGEN_K", id="eigen-k", marks=pytest.mark.guards("hang")),
    pytest.param(lambda m: jacobian_eigenvalues(m, three(), k=1, method="arnoldi", max_restarts=10**12, tol=0.0),
                 "max_restarts=1000000000000 is over the budget of 100000 restarts", "pass max_restarts <= 100000",
                 id="eigen-restarts", marks=pytest.mark.guards("hang")),
    pytest.param(lambda m: spectral_norm(m, three(), max_iter=10**12, tol=0.0), "max_iter=1000000000000 is over "
                 "the budget of 100000 iterations", "JACOBISCOPE_MAX_ITERATIONS", id="lanczos-iterations",
                 marks=pytest.mark.guards("hang")),
    pytest.param(lambda m: jacobiscope.finite_time_exponents(m, three(), loops=1000, starts=1000),
                 "(1000 x 1000 = 1000000 loops of the step over all starts)", "pass transient + loops <= 100",
                 id="finite-time-starts-times-loops", marks=pytest.mark.guards("hang")),
    pytest.param(lambda m: jacobiscope.finite_time_exponents(m, three(), k=10**5), "k=100000 is over the budget of "
                 "1024 tangent vectors", "pass k <= 1024", id="finite-time-k", marks=pytest.mark.guards("hang")),
    pytest.param(lambda m: jacobiscope.dynamics.symmetric_eigenpairs(m, three(), k=10**6), "k=1000000 is over the budget of "
                 "1024 eigenpairs", "JACOBISCOPE_MAX_EIGEN_K", id="symmetric-k", marks=pytest.mark.guards("hang")),
    pytest.param(lambda m: jacobiscope.dynamics.symmetric_eigenpairs(m, three(), k=1, max_restarts=10**9, tol=0.0),
                 "max_restarts=1000000000 is over the budget of 100000 restarts", "pass max_restarts <= 100000",
                 id="symmetric-restarts", marks=pytest.mark.guards("hang")),
    pytest.param(lambda m: jacobiscope.dynamics.symmetric_overlap_along_loop(m, three(), loops=10**9), "loops=1000000000 is "
                 "over the budget of 100000 loops of the step", "pass loops <= 100000", id="overlap-loops",
                 marks=pytest.mark.guards("hang")),
    pytest.param(lambda m: jacobiscope.dynamics.norm_bound(m, three(), max_iter=10**12), "max_iter=1000000000000 is over the "
                 "budget of 100000 iterations", "pass max_iter <= 100000", id="norm-bound-iterations",
                 marks=pytest.mark.guards("hang")),
])
def test_a_solver_size_over_its_budget_is_refused(call, problem, fix):
    with pytest.raises(ArgumentError) as info:
        call(LoopedMap(smooth))
    assert problem in str(info.value) and fix in str(info.value)


@pytest.mark.parametrize("call", [
    pytest.param(lambda m: lyapunov_spectrum(m, three(), steps=np.int64(8), k=np.int64(2),
                                                             compile=False).exponents, id="lyapunov"),
    pytest.param(lambda m: jacobian_eigenvalues(m, three(), k=np.int64(2)).values, id="eigenvalues"),
    pytest.param(lambda m: jacobian_eigenvalues(m, three(), k=np.int64(1), method="arnoldi",
                                                krylov_dim=np.int64(3)).values, id="arnoldi"),
    pytest.param(lambda m: spectral_norm(m, three(), max_iter=np.int64(50)).value, id="spectral-norm"),
])
@pytest.mark.guards("internal")
def test_numpy_integer_solver_sizes_are_counts(call):
    assert bool(torch.isfinite(call(LoopedMap(smooth))).all())


# ----------------------------------------------------------------------------------------------- analyze's sizes

@pytest.mark.parametrize("options, error, problem, fix", [
    pytest.param({"loops": 10**9}, BudgetError, "loops=1000000000 keeps 1000000001 states", "pass loops <= 100000",
                 id="loops", marks=pytest.mark.guards("hang")),
    pytest.param({"k": 10**6}, ArgumentError, "k=1000000 is over the budget of 1024 tangent vectors", "pass k <= 1024",
                 id="k", marks=pytest.mark.guards("hang")),
    pytest.param({"eigen_k": 10**6}, ArgumentError, "eigen_k=1000000 is over the budget of 1024 eigenvalues",
                 "JACOBISCOPE_MAX_EIGEN_K", id="eigen-k", marks=pytest.mark.guards("hang")),
    pytest.param({"spectral_samples": 10**6}, ArgumentError, "spectral_samples=1000000 is over the budget of 1024 "
                 "samples", "pass spectral_samples <= 1024", id="spectral-samples", marks=pytest.mark.guards("hang")),
    pytest.param({"eigen_restarts": 10**6}, ArgumentError, "eigen_restarts=1000000 is over the budget of 10000",
                 "eigen_restarts=4", id="eigen-restarts", marks=pytest.mark.guards("hang")),
    pytest.param({"k": np.bool_(True)}, ArgumentError, "k must be a positive int, got", "e.g. k=1",
                 id="numpy-bool-k", marks=pytest.mark.guards("silent")),
])
def test_analyze_refuses_a_size_over_its_budget_before_the_model_runs(gpt2, options, error, problem, fix):
    calls = []
    handle = gpt2.register_forward_pre_hook(lambda *_: calls.append(1))
    try:
        with pytest.raises(error) as info:
            jacobiscope.analyze(gpt2, IDS, **{"loops": 2, **options}, progress=False)
    finally:
        handle.remove()
    assert problem in str(info.value) and fix in str(info.value)
    assert not calls  # refused before the model's first forward


@pytest.mark.guards("hang")
def test_describe_refuses_absurd_loops_too(gpt2):
    with pytest.raises(BudgetError, match=r"loops=1000000000000 keeps .* budget of 100000 loops"):
        jacobiscope.describe(gpt2, IDS, loops=10**12)


@pytest.mark.parametrize("option, requested, used, note", [
    pytest.param("k", 100, 24, "k=100 clamped to 24: the state has D=24 entries", id="k",
                 marks=pytest.mark.guards("silent")),
    pytest.param("eigen_k", 50, 24, "eigen_k=50 clamped to 24: the Jacobian has D=24 eigenvalues", id="eigen-k",
                 marks=pytest.mark.guards("silent")),
    pytest.param("spectral_samples", 9, 3, "spectral_samples=9 clamped to 3: the trajectory has 3 states (loops=2)",
                 id="spectral-samples", marks=pytest.mark.guards("silent")),
])
def test_analyze_says_each_clamp_in_a_warning_and_the_notes(gpt2, option, requested, used, note):
    with pytest.warns(UserWarning, match=note.split(":")[0]):
        report = jacobiscope.analyze(gpt2, IDS, loops=2, diagnostics=["lyapunov", "eigenvalues", "spectral_norm"],
                                     progress=False, **{option: requested})
    assert any(line.startswith(note) for line in report.notes)
    (row,) = report.rows
    if option == "k":
        assert len(row.lyapunov["exponents"]) == used
        assert report.provenance["k"] == used and report.provenance["k_requested"] == requested
    elif option == "spectral_samples":
        assert len(row.spectral_norm) <= used


@pytest.mark.guards("internal")
def test_analyze_takes_numpy_integer_sizes_and_writes_plain_ints(gpt2, tmp_path):
    report = jacobiscope.analyze(gpt2, IDS, loops=np.int64(2), k=np.int32(2), eigen_k=np.int64(2), seed=np.int64(1),
                                 diagnostics=["lyapunov"], progress=False)
    assert report.provenance["loops"] == 2 and type(report.provenance["loops"]) is int
    assert type(report.provenance["k"]) is int and type(report.provenance["seed"]) is int
    path = tmp_path / "report.json"
    report.to_json(path)
    assert json.loads(path.read_text())["provenance"]["loops"] == 2
    assert jacobiscope.Report.from_json(path).rows[0].loops == 2


# ----------------------------------------------------------------------------------------------- per_example

@pytest.mark.parametrize("call, error, problem, fix", [
    pytest.param(lambda report: jacobiscope.recipes.per_example_from_report(report, [True], resamples=10**9), ArgumentError,
                 "resamples=1000000000 is over the budget of 1000000 resamples", "pass resamples <= 1000000",
                 id="resamples-billion", marks=pytest.mark.guards("hang")),
    pytest.param(lambda report: jacobiscope.recipes.per_example_from_report(report, [True], statistic="lambda_mx"),
                 ArgumentError, "got 'lambda_mx' (did you mean 'lambda_max'?)", "statistic='lambda_max'",
                 id="statistic-typo", marks=pytest.mark.guards("internal")),
    pytest.param(lambda report: jacobiscope.recipes.per_example_from_report(report, [True], statistic=["lambda_max"]),
                 ArgumentError, "got ['lambda_max']", "statistic='lambda_max'", id="statistic-list",
                 marks=pytest.mark.guards("internal")),
])
def test_per_example_refuses_bad_settings(gpt2, call, error, problem, fix):
    report = jacobiscope.analyze(gpt2, IDS, loops=2, diagnostics=["lyapunov"], progress=False)
    with pytest.raises(error) as info:
        call(report)
    assert problem in str(info.value) and fix in str(info.value)



# ----------------------------------------------------------------------------------------------- building maps

def _linear64():
    return torch.nn.Linear(3, 3).double()


@pytest.mark.parametrize("call, error, problem, fix", [
    pytest.param(lambda: LoopedMap(smooth, name=123), ArgumentError, "name must be a str (a label for reports), got "
                 "int 123", "name=str(...)", id="name-int", marks=pytest.mark.guards("internal")),
    pytest.param(lambda: LoopedMap(smooth, drive=3), jacobiscope.StepError, "drive must be a callable X -> Y_t (or "
                 "None), got int", "drive=block.drive", id="drive-int", marks=pytest.mark.guards("silent")),
    pytest.param(lambda: LoopedMap(_linear64()).with_params([1, 2]), ArgumentError, "with_params takes a dict name -> "
                 "tensor, got list", "{'weight': tensor}", id="with-params-list", marks=pytest.mark.guards("internal")),
    pytest.param(lambda: LoopedMap(_linear64()).with_params({"weight": torch.ones(2, 2, dtype=F64)}), ArgumentError,
                 "'weight' must have shape (3, 3) (the module's), got (2, 2)", "shaped like the parameter",
                 id="with-params-shape", marks=pytest.mark.guards("internal")),
    pytest.param(lambda: LoopedMap(_linear64()).with_params({"weight": 3}), ArgumentError, "'weight' must be a "
                 "torch.Tensor of shape (3, 3), got int", "torch.as_tensor", id="with-params-number",
                 marks=pytest.mark.guards("internal")),
    pytest.param(lambda: LoopedMap(_linear64()).with_params({"wieght": torch.eye(3)}), KeyError, "['wieght'] (did "
                 "you mean 'weight'?)", "dict(module.named_parameters())", id="with-params-typo",
                 marks=pytest.mark.guards("internal")),
    pytest.param(lambda: jacobiscope.systems.logistic_map(math.nan), ArgumentError, "r must be a finite number, got "
                 "nan", "r=4.0", id="logistic-nan", marks=pytest.mark.guards("silent")),
    pytest.param(lambda: jacobiscope.systems.logistic_map(batch=0), ArgumentError, "batch must be a positive int, "
                 "got 0", "batch=1", id="logistic-empty-batch", marks=pytest.mark.guards("silent")),
    pytest.param(lambda: jacobiscope.systems.logistic_map(batch=10**12), ArgumentError, "batch=1000000000000 would "
                 "build 1000000000000 state entries, over the budget", "a smaller batch", id="logistic-huge-batch",
                 marks=pytest.mark.guards("hang")),
    pytest.param(lambda: jacobiscope.systems.henon_map(a=math.inf), ArgumentError, "a must be a finite number, got "
                 "inf", "a=1.4", id="henon-inf", marks=pytest.mark.guards("silent")),
    pytest.param(lambda: jacobiscope.systems.linear_map(torch.full((2, 2), math.nan)), ArgumentError, "holds 4 "
                 "NaN/Inf entries", "a finite matrix", id="linear-nan", marks=pytest.mark.guards("silent")),
    pytest.param(lambda: jacobiscope.systems.self_attention_map(tokens=10**6, dim=10**4), ArgumentError,
                 "tokens=1000000 x dim=10000 is over the budget of 50000000 entries", "smaller tokens / dim",
                 id="attention-huge", marks=pytest.mark.guards("hang")),
    pytest.param(lambda: jacobiscope.systems.self_attention_map(tokens=0, dim=8, heads=2), ArgumentError,
                 "tokens must be a positive int, got 0", "tokens=1", id="attention-no-tokens",
                 marks=pytest.mark.guards("silent")),
    pytest.param(lambda: jacobiscope.systems.self_attention_map(tokens=3, dim=8, heads=2, eta=math.nan),
                 ArgumentError, "eta must be a finite number, got nan", "eta=1.0", id="attention-eta-nan",
                 marks=pytest.mark.guards("silent")),
    pytest.param(lambda: jacobiscope.systems.self_attention_map(tokens=3, dim=8, heads=2, dtype="float64"),
                 ArgumentError, "dtype must be a floating torch.dtype, got 'float64'", "dtype=torch.float64",
                 id="attention-dtype-str", marks=pytest.mark.guards("internal")),
])
def test_a_bad_map_or_system_is_refused_when_built(call, error, problem, fix):
    with pytest.raises(error) as info:
        call()
    assert problem in str(info.value) and fix in str(info.value)


@pytest.mark.guards("internal")
def test_numpy_integer_batch_dims_are_accepted():
    assert LoopedMap(smooth, batch_dims=np.int64(1)).batch_dims == 1
    assert type(jacobiscope.as_looped_map(smooth, batch_dims=np.int32(1)).batch_dims) is int


@pytest.mark.parametrize("options, problem, fix", [
    pytest.param({"mode": "atention"}, "got 'atention' (did you mean 'attention'?)", "pass one of them",
                 id="mode-typo", marks=pytest.mark.guards("internal")),
    pytest.param({"mode": 1}, "mode must be 'block', 'attention' or 'loop', got 1", "pass one of them",
                 id="mode-int", marks=pytest.mark.guards("internal")),
    pytest.param({"progress": "no"}, "progress must be None (a bar after 2 s), True or False, got 'no'",
                 "progress=False", id="progress-str", marks=pytest.mark.guards("silent")),
])
def test_analyze_refuses_a_bad_option_with_its_fix(gpt2, options, problem, fix):
    with pytest.raises(ArgumentError) as info:
        jacobiscope.analyze(gpt2, IDS, loops=2, **options)
    assert problem in str(info.value) and fix in str(info.value)


@pytest.mark.guards("internal")
def test_analyze_takes_a_numpy_integer_max_length(gpt2):
    report = jacobiscope.analyze(gpt2, IDS, loops=2, max_length=np.int64(8), diagnostics=["spectral_norm"],
                                 progress=False)
    assert len(report.rows) == 1


@pytest.mark.guards("internal")
def test_a_step_that_writes_its_buffers_in_place_is_named_with_the_fix():
    # BatchNorm in training mode updates its running statistics in place: torch.func refused it with a
    # RuntimeError from inside torch ("mutate a captured Tensor") that named neither the step nor the fix
    norm = torch.nn.BatchNorm1d(3)
    x = torch.randn(4, 3, generator=torch.Generator().manual_seed(0))
    with pytest.warns(RuntimeWarning, match="BatchNorm1d is in training mode"), \
            pytest.raises(jacobiscope.errors.StepError) as info:
        jacobiscope.measure(norm, x, loops=4)
    assert "'BatchNorm1d' writes in place" in str(info.value) and "module.eval()" in str(info.value)
    # in eval mode the same block scales each channel: ||J|| = max gamma / sqrt(running var + eps), gamma = 1
    row = jacobiscope.measure(norm.eval(), x.double(), loops=4, dtype=torch.float64, diagnostics=["spectral_norm"])
    expected = float((norm.running_var.double() + norm.eps).rsqrt().max())
    assert row.spectral_norm[0]["value"] == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("mode, eta, problem", [
    pytest.param("attention", math.nan, "eta must be a finite number > 0, got nan", id="attention-eta-nan"),
    pytest.param("attention", -1.0, "eta must be a finite number > 0, got -1.0", id="attention-eta-negative"),
    pytest.param("block", 0.5, "mode='block' would ignore eta=0.5 — drop eta or pass mode='attention'",
                 id="block-with-eta"),
])
@pytest.mark.guards("silent")
def test_looped_block_checks_eta_as_analyze_does(gpt2, mode, eta, problem):
    # looped_block took eta=nan (and an eta block mode ignores) without a word; analyze refused both
    with pytest.raises(ArgumentError, match=problem):
        jacobiscope.looped_block(gpt2, IDS, layer=0, mode=mode, eta=eta)
