"""The fast paths of the Lyapunov engine (the jvp recording split at the state, a traced tangent graph,
torch.compile) against a plain jvp + QR loop, and the automatic choice between them."""
import math
import warnings
import weakref

import pytest
import torch

import jacobiscope
from jacobiscope import NonFiniteWarning
from jacobiscope.dynamics import _tangent_policy
from jacobiscope.dynamics._tangent_step import TangentStep
from jacobiscope.dynamics._tangent_trace import traced_tangent_step


@pytest.fixture
def attention_map():
    """A small ItrSA-form self-attention map in float64 (6 tokens x 8 dims, 2 heads, RMSNorm, injection)."""
    return jacobiscope.systems.self_attention_map(tokens=6, dim=8, heads=2, eta=0.9, injection=True,
                                                  weight_scale=1.5, seed=5, dtype=torch.float64)


@pytest.fixture(autouse=True)
def fresh_graphs(monkeypatch):
    """Each test starts with no traced graph: graphs are shared by modules of one structure, process-wide."""
    import collections

    from jacobiscope.linalg import _trace

    monkeypatch.setattr(_trace, "_SHARED", collections.OrderedDict())


@pytest.fixture(autouse=True)
def jvp_loop(monkeypatch):
    """These maps (D = 48) are small enough for the dense loop of tiny states; the tests here are about the jvp
    loop's paths (tests/test_dynamics_dense_tangent.py checks the dense loop against it)."""
    from jacobiscope.dynamics import _dense_tangent

    monkeypatch.setattr(_dense_tangent, "DENSE_MAX_STATE", 0)


@pytest.fixture
def trace_at_once(monkeypatch):
    """Make a recording look free, so that every automatic run switches to a recorded loop after two loops."""
    monkeypatch.setattr(_tangent_policy, "trace_cost_seconds", lambda eager_loop_seconds=0.0: 0.0)


@pytest.fixture
def first_recording_kept(monkeypatch):
    """No loop is timed, so a run keeps the recorded path it took first (no comparison of the two recordings)."""
    monkeypatch.setattr(_tangent_policy, "_TIMED_FAST_LOOPS", 10**6)


def orthonormal_frame(x, k, seed=0):
    Y = torch.randn(x.numel(), k, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    Q, R = torch.linalg.qr(Y)
    return (Q * torch.sign(torch.diagonal(R))).T.reshape(k, *x.shape)


def plain_jvp_qr_exponents(m, x, frame, steps):
    """Independent reference: torch.func.jvp of the bare step, vmapped over the frame, and a QR every loop."""
    step = m.detached().step
    k = frame.shape[0]
    total = torch.zeros(k, dtype=torch.float64)
    for _ in range(steps):
        x, tangents = torch.vmap(lambda v: torch.func.jvp(step, (x,), (v,)), out_dims=(None, 0))(frame)
        Q, R = torch.linalg.qr(tangents.reshape(k, -1).T)
        frame = (Q * torch.sign(torch.diagonal(R))).T.reshape(frame.shape)
        total += torch.diagonal(R).abs().log()
    return (total / steps).sort(descending=True).values


@pytest.mark.parametrize("path", ["linearized", "traced"])
@pytest.mark.parametrize("k", [1, 4])
def test_recorded_paths_match_plain_jvp_and_qr(attention_map, trace_at_once, first_recording_kept, monkeypatch, k,
                                               path):
    if path == "traced":
        monkeypatch.setattr(_tangent_policy, "split_graph", lambda *args, **kwargs: None)
    m = attention_map
    frame = orthonormal_frame(m.x0, k)
    expected = plain_jvp_qr_exponents(m, m.x0, frame, steps=40)
    result = jacobiscope.lyapunov_spectrum(m, m.x0, steps=40, k=k, tangents=frame)
    assert result.meta["tangent_path"] == path
    assert torch.allclose(result.exponents, expected, atol=1e-10, rtol=0)


def test_automatic_choice_gives_the_eager_exponents_and_state(attention_map, trace_at_once, first_recording_kept):
    m = attention_map
    for k in (1, 3):
        eager = jacobiscope.lyapunov_spectrum(m, m.x0, steps=30, k=k, compile=False)
        automatic = jacobiscope.lyapunov_spectrum(m, m.x0, steps=30, k=k)
        assert eager.meta["tangent_path"] == "eager" and automatic.meta["tangent_path"] == "linearized"
        assert torch.allclose(automatic.exponents, eager.exponents, atol=1e-10, rtol=0)
        assert torch.allclose(automatic.history, eager.history, atol=1e-10, rtol=0)
        assert torch.allclose(automatic.final_state, eager.final_state, atol=1e-12, rtol=0)
    # reorthonormalizing every 3 loops uses the graph without QR in between
    eager = jacobiscope.lyapunov_spectrum(m, m.x0, steps=30, k=3, reorth_every=3, transient=4, compile=False)
    automatic = jacobiscope.lyapunov_spectrum(m, m.x0, steps=30, k=3, reorth_every=3, transient=4)
    assert automatic.meta["tangent_path"] == "linearized"
    assert torch.allclose(automatic.finite_time, eager.finite_time, atol=1e-10, rtol=0)


def test_short_run_in_a_fresh_process_stays_eager(attention_map, monkeypatch):
    # Nothing spent yet and a trace that costs more than the whole run: renting (eager) is cheaper than buying.
    monkeypatch.setattr(_tangent_policy, "trace_cost_seconds", lambda eager_loop_seconds=0.0: 1e6)
    result = jacobiscope.lyapunov_spectrum(attention_map, steps=20, k=2)
    assert result.meta["tangent_path"] == "eager"


def test_the_eager_time_that_pays_for_a_recording_is_kept_per_map_and_shared_by_its_users(attention_map,
                                                                                           monkeypatch):
    """Lyapunov runs of any k and the Krylov products at states of one shape add to one sum: one recording of the
    split jvp serves them all. A map of another structure neither adds to it nor resets it (before: one counter for
    the whole process, reset by any trace, so k = 1 runs mixed with traced k = 16 runs never left eager); the
    recording does."""
    from jacobiscope.linalg._linearized import eager_product_seconds

    costly = lambda eager_loop_seconds=0.0: 1e6  # noqa: E731  a recording that never pays: every run stays eager
    monkeypatch.setattr(_tangent_policy, "trace_cost_seconds", costly)
    m, other = attention_map, jacobiscope.systems.self_attention_map(tokens=6, dim=8, heads=2, seed=6,
                                                                      dtype=torch.float64)
    x, owner = m.x0, m.module
    spent = []
    for _ in range(3):
        assert jacobiscope.lyapunov_spectrum(m, x, steps=12, k=1).meta["tangent_path"] == "eager"
        spent.append(eager_product_seconds(m, x, owner))
    assert 0 < spent[0] < spent[1] < spent[2]   # it accumulates, run after run
    jacobiscope.lyapunov_spectrum(other, other.x0, steps=12, k=1)
    assert eager_product_seconds(m, x, owner) == spent[2]   # another map's time is its own
    assert jacobiscope.lyapunov_spectrum(m, x, steps=12, k=3).meta["tangent_path"] == "eager"
    after_k3 = eager_product_seconds(m, x, owner)
    assert after_k3 > spent[2]   # a k = 3 run adds to what the same recording would save
    operator = jacobiscope.linalg.JacobianOperator(m, x)
    operator.matvec(torch.ones_like(x))
    assert eager_product_seconds(m, x, owner) > after_k3   # and so do the Krylov products
    monkeypatch.setattr(_tangent_policy, "trace_cost_seconds", lambda eager_loop_seconds=0.0: 0.0)
    assert jacobiscope.lyapunov_spectrum(m, x, steps=12, k=1).meta["tangent_path"] == "linearized"
    assert eager_product_seconds(m, x, owner) == 0.0   # recorded: paid for


def test_one_recording_serves_the_krylov_products_and_the_lyapunov_loop(attention_map, monkeypatch):
    """After the spectral norm's products recorded the split jvp, a Lyapunov run on the same map uses it from its
    first loop, whatever k, and records nothing (``analyze`` used to record twice: ~0.3-0.6 s each on CPU)."""
    from jacobiscope.linalg import _linearized
    from jacobiscope.dynamics import _tangent_trace

    recordings = []

    def counting(original):
        def trace_graph(*args, **kwargs):
            recordings.append(1)
            return original(*args, **kwargs)

        return trace_graph

    monkeypatch.setattr(_linearized, "trace_graph", counting(_linearized.trace_graph))
    monkeypatch.setattr(_tangent_trace, "trace_graph", counting(_tangent_trace.trace_graph))
    monkeypatch.setattr(_tangent_policy, "trace_cost_seconds", lambda eager_loop_seconds=0.0: 1e6)  # never pays
    m = attention_map
    operator = jacobiscope.linalg.JacobianOperator(m, m.x0, linearize=True)
    operator.matvec(torch.ones_like(m.x0))
    assert operator.product_path == "linearized" and len(recordings) == 1
    for k in (1, 4):
        automatic = jacobiscope.lyapunov_spectrum(m, m.x0, steps=10, k=k)
        eager = jacobiscope.lyapunov_spectrum(m, m.x0, steps=10, k=k, compile=False)
        assert automatic.meta["tangent_path"] == "linearized"
        assert torch.allclose(automatic.exponents, eager.exponents, atol=1e-10, rtol=0)
    assert len(recordings) == 1


def test_k_above_one_times_both_recordings_and_keeps_the_faster(attention_map, trace_at_once):
    """For k > 1 the linearized loop (k products from one split) and the traced vmap graph each win somewhere
    (arithmetic- against dispatch-bound maps): both are timed, remembered per map and call, and the faster runs."""
    m = attention_map
    x = m.x0
    key = (3, tuple(x.shape), x.dtype, str(x.device))
    eager = jacobiscope.lyapunov_spectrum(m, x, steps=40, k=3, compile=False)
    paths = [jacobiscope.lyapunov_spectrum(m, x, steps=40, k=3).meta["tangent_path"] for _ in range(3)]
    measured = _tangent_policy.measured_loop_seconds(m.module, key)
    assert set(measured) == {"linearized", "traced"} and all(s > 0 for s in measured.values())
    faster = min(measured, key=measured.get)
    for seconds in ({"linearized": 1.0, "traced": 2.0}, {"linearized": 2.0, "traced": 1.0}):
        for path, value in seconds.items():   # what the timings said: the next run starts on the faster path
            _tangent_policy._ledger_for(m.module)[("loop seconds", path, *key)] = value
        result = jacobiscope.lyapunov_spectrum(m, x, steps=10, k=3)
        assert result.meta["tangent_path"] == min(seconds, key=seconds.get)
        assert torch.allclose(result.exponents, jacobiscope.lyapunov_spectrum(m, x, steps=10, k=3,
                                                                              compile=False).exponents,
                              atol=1e-10, rtol=0)
    slower = max(measured, key=measured.get)
    # the last run ends on the faster path, unless the two are within the switching margin (then it stays put)
    assert paths[-1] == faster or measured[faster] >= _tangent_policy._SWITCH_MARGIN * measured[slower]
    assert torch.allclose(jacobiscope.lyapunov_spectrum(m, x, steps=40, k=3).exponents, eager.exponents,
                          atol=1e-10, rtol=0)


def test_a_layer_of_the_same_structure_reuses_the_graph_with_its_own_weights(attention_map, monkeypatch):
    """A second module of one structure (other weights, e.g. the next layer of a model) takes the graph the first
    traced, from its first loop, with its own parameters: its exponents are its eager ones, not the first's."""
    monkeypatch.setattr(_tangent_policy, "trace_cost_seconds", lambda eager_loop_seconds=0.0: 0.0)
    first = attention_map
    jacobiscope.lyapunov_spectrum(first, first.x0, steps=10, k=2)   # traces
    monkeypatch.setattr(_tangent_policy, "trace_cost_seconds", lambda eager_loop_seconds=0.0: 1e6)  # never pays
    other = jacobiscope.systems.self_attention_map(tokens=6, dim=8, heads=2, eta=0.9, injection=True,
                                                   weight_scale=1.5, seed=11, dtype=torch.float64)
    assert not torch.equal(other.module.query.weight, first.module.query.weight)
    automatic = jacobiscope.lyapunov_spectrum(other, other.x0, steps=10, k=2)
    eager = jacobiscope.lyapunov_spectrum(other, other.x0, steps=10, k=2, compile=False)
    assert automatic.meta["tangent_path"] == "linearized"   # the shared graph: no recording would have paid here
    assert torch.allclose(automatic.exponents, eager.exponents, atol=1e-10, rtol=0)
    different = jacobiscope.systems.self_attention_map(tokens=6, dim=8, heads=2, eta=0.9, injection=True,
                                                       weight_scale=1.5, seed=12, dtype=torch.float64)
    different.module.eta = 0.4   # the same structure, another baked-in scalar: the first-loop check catches it
    automatic = jacobiscope.lyapunov_spectrum(different, different.x0, steps=10, k=2)
    eager = jacobiscope.lyapunov_spectrum(different, different.x0, steps=10, k=2, compile=False)
    assert torch.allclose(automatic.exponents, eager.exponents, atol=1e-10, rtol=0)


def test_graph_of_an_earlier_run_is_reused_and_checked(attention_map, trace_at_once):
    m = attention_map
    jacobiscope.lyapunov_spectrum(m, m.x0, steps=10, k=2)  # traces and caches
    m.module.eta = 0.3  # the cached graph has eta = 0.9 baked in: the check at the first loop must catch it
    eager = jacobiscope.lyapunov_spectrum(m, m.x0, steps=20, k=2, compile=False)
    automatic = jacobiscope.lyapunov_spectrum(m, m.x0, steps=20, k=2)
    assert automatic.meta["tangent_path"] == "traced"  # traced afresh after the stale graph was dropped
    assert torch.allclose(automatic.exponents, eager.exponents, atol=1e-10, rtol=0)


def test_step_with_data_dependent_branch_is_not_traced(trace_at_once):
    # Fake-tensor tracing cannot evaluate x.sum() > 0, so the trace is refused rather than frozen on one branch.
    A = torch.tensor([[0.9, 0.4], [-0.3, 0.7]], dtype=torch.float64)
    m = jacobiscope.LoopedMap(lambda x: torch.tanh(A @ x) if x.sum() > 0 else 1.5 * torch.sin(A @ x))
    x0 = torch.tensor([0.3, -0.1], dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        automatic = jacobiscope.lyapunov_spectrum(m, x0, steps=30, k=2)
    eager = jacobiscope.lyapunov_spectrum(m, x0, steps=30, k=2, compile=False)
    assert automatic.meta["tangent_path"] == "eager"
    assert torch.equal(automatic.exponents, eager.exponents)


def test_nonfinite_trajectory_is_flagged_on_the_traced_path(trace_at_once):
    first_row = torch.tensor([[True], [False]])
    m = jacobiscope.LoopedMap(lambda x: torch.where(first_row, 0.5 * x, x**2), batch_dims=1)
    x0 = torch.tensor([[1.0], [1e10]], dtype=torch.float64)  # row 1 overflows float64 at loop 5
    with pytest.warns(NonFiniteWarning, match="first at loop 5"):
        result = jacobiscope.lyapunov_spectrum(m, x0, steps=20)
    assert result.meta["tangent_path"] == "linearized"
    assert result.nonfinite_step.tolist() == [-1, 5]
    assert abs(float(result.exponents[0, 0]) - math.log(0.5)) < 1e-12 and torch.isnan(result.exponents[1, 0])


def _broken_compile(*args, **kwargs):
    def fail(x, frame):
        raise RuntimeError("compilation failed (simulated)")

    return TangentStep("compiled", fail, fail)


def test_failed_compile_falls_back_to_eager_with_a_warning(attention_map, monkeypatch):
    monkeypatch.setattr(_tangent_policy, "compiled_tangent_step", _broken_compile)
    m = attention_map
    eager = jacobiscope.lyapunov_spectrum(m, m.x0, steps=10, k=2, compile=False)
    with pytest.warns(RuntimeWarning, match="torch.compile failed"):
        result = jacobiscope.lyapunov_spectrum(m, m.x0, steps=10, k=2, compile=True)
    assert result.meta["tangent_path"] == "eager"
    assert torch.equal(result.exponents, eager.exponents)


def test_automatic_compile_switches_on_long_runs_and_falls_back_silently(attention_map, trace_at_once,
                                                                            monkeypatch):
    m = attention_map
    eager = jacobiscope.lyapunov_spectrum(m, m.x0, steps=40, k=2, compile=False)
    monkeypatch.setattr(_tangent_policy, "_COMPILE_PAYOFF_SECONDS", 0.0)  # every run counts as long
    # A stand-in for torch.compile (a real compilation takes 10-20 s): the traced loop, labelled compiled.
    monkeypatch.setattr(_tangent_policy, "compiled_tangent_step",
                        lambda looped_map, batch, chunk_size: _relabelled(traced_tangent_step(looped_map, batch,
                                                                                              chunk_size)))
    switched = jacobiscope.lyapunov_spectrum(m, m.x0, steps=40, k=2)
    assert switched.meta["tangent_path"] == "compiled"
    assert torch.allclose(switched.exponents, eager.exponents, atol=1e-10, rtol=0)
    monkeypatch.setattr(_tangent_policy, "compiled_tangent_step", _broken_compile)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fallen_back = jacobiscope.lyapunov_spectrum(m, m.x0, steps=40, k=2)
    assert fallen_back.meta["tangent_path"] == "linearized"
    assert torch.allclose(fallen_back.exponents, eager.exponents, atol=1e-10, rtol=0)


def _relabelled(step):
    step.path = "compiled"
    return step


def test_compile_argument_is_checked(attention_map):
    with pytest.raises(jacobiscope.ArgumentError, match="compile must be None"):
        jacobiscope.lyapunov_spectrum(attention_map, steps=3, compile="yes")


def test_chunked_tangents_match_unchunked():
    """k > 1 with chunk_size: chunked vmap cannot return an unbatched output; the engine batches it instead."""
    import jacobiscope

    looped = jacobiscope.systems.self_attention_map(tokens=4, dim=8, heads=2, dtype=torch.float64)
    whole = jacobiscope.lyapunov_spectrum(looped, looped.x0, steps=6, k=4).exponents
    chunked = jacobiscope.lyapunov_spectrum(looped, looped.x0, steps=6, k=4, chunk_size=3).exponents
    torch.testing.assert_close(chunked, whole, rtol=0, atol=1e-12)
