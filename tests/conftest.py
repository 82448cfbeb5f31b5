"""Test settings: offline hub, and one BLAS/torch thread (tiny matrices run up to 20x slower multi-threaded on
the shared 2-core machines)."""
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Every test starts on one torch thread, whatever the one before it set: a test that leaves two threads on a
    2-core machine running two pytest workers makes every later tiny-matrix test of its worker several times slower."""
    torch.set_num_threads(1)
    yield


@pytest.fixture
def attention_map64():
    """A small random looped self-attention map (ItrSA form) in float64: 5 tokens x 8 dims, 2 heads, D=40."""
    import jacobiscope

    return jacobiscope.systems.self_attention_map(tokens=5, dim=8, heads=2, eta=0.8, injection=True,
                                                  weight_scale=1.5, seed=3, dtype=torch.float64)


def autograd_jacobian(function, x):
    """Independent dense reference: torch.autograd.functional.jacobian, flattened to [D_out, D_in].

    Reverse mode, one vmapped backward per output row (about 10x faster than row by row on a 288-dim state); a
    function that vmap cannot batch gets the row-by-row loop, the same numbers at the old cost.
    """
    try:
        J = torch.autograd.functional.jacobian(function, x, vectorize=True)
    except RuntimeError:
        J = torch.autograd.functional.jacobian(function, x)
    return J.reshape(x.numel(), x.numel())


def check_spectral_norm_is_dense(looped, x, numel=None):
    """jacobiscope.spectral_norm of ``looped`` at ``x`` equals the largest singular value of the dense autograd
    Jacobian of its step (rel 1e-5), and is not trivially small; returns it."""
    import jacobiscope

    if numel is not None:
        assert x.dtype == torch.float64 and x.numel() == numel
    dense = autograd_jacobian(looped.step, x)
    sigma = float(jacobiscope.spectral_norm(looped, x).value)
    expected = float(torch.linalg.matrix_norm(dense, ord=2))
    assert sigma == pytest.approx(expected, rel=1e-5) and expected > 0.1, (sigma, expected)
    return sigma


def launch_two_processes(script, timeout=300):
    """Run ``script`` under ``accelerate launch`` as two CPU (gloo) processes; the CompletedProcess is returned.

    ``--cpu`` would select accelerate's simple launcher, which starts ONE process; the multi-process launcher
    starts two. gloo's rendezvous occasionally aborts on a shared machine (a port race), so a failed launch is
    retried with a fresh port, up to three times.
    """
    import socket
    import subprocess
    import sys

    for _attempt in range(3):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        command = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
                   "--num_machines", "1", "--main_process_port", str(port), "--mixed_precision", "no",
                   "--dynamo_backend", "no", str(script)]
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        if result.returncode == 0:
            break
    return result


def check_loop_depth_readout(model, inputs, recurrence=None):
    """The family readout of a model with an output head: at the configured depth it is the model's own output
    (its logits on ``inputs``), and ``analyze`` sweeps it over twice that depth with the reference there.

    Returns the sweep (a `LoopDepthMeasurement`) for family-specific checks.
    """
    import math

    import jacobiscope

    looped = jacobiscope.native_loop(model, inputs, recurrence)
    loops = looped.meta["loops"]
    with torch.no_grad():
        own = model(**inputs).logits
        read = looped.meta["readout"](looped.trajectory(looped.x0, loops)[-1])
    assert read.shape == own.shape and float((read - own).abs().max()) <= 1e-4
    report = jacobiscope.analyze(model, inputs, loops=2 * loops, recurrence=recurrence, diagnostics=["loop_depth"],
                                 progress=False)
    (row,) = report.rows
    sweep = row.diagnostic("loop_depth")
    assert sweep is not None, row.flags
    assert sweep.reference_loop == loops and len(sweep.kl) == 2 * loops + 1
    assert sweep.kl[loops] == pytest.approx(0.0, abs=1e-6) and sweep.agreement[loops] == 1.0
    assert all(math.isfinite(kl) and kl >= -1e-9 for kl in sweep.kl)
    assert max(sweep.kl) > 1e-6  # the output moves along the loop: the sweep measures something
    return sweep


def load_script(relative_path: str):
    """A repository script (``examples/train_zoo.py``, ``benchmarks/solver_targets.py``) imported as a module, as
    its tests need its functions; the name is the file's stem."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / relative_path
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module   # dataclasses (and pickling) look their module up by name
    spec.loader.exec_module(module)
    return module


class NetworkAttempted(AssertionError):
    """A test that forbids the network saw a connection attempt."""


@pytest.fixture
def no_network(monkeypatch):
    """Every socket connection (and name lookup) raises `NetworkAttempted`: a test using this fixture proves its
    code path stays offline. The attempts are recorded in the returned list (address per attempt)."""
    import socket

    attempts = []

    def refuse(*args, **kwargs):
        attempts.append(args[1:] if args and isinstance(args[0], socket.socket) else args)
        raise NetworkAttempted(f"network access attempted: {args!r}")

    monkeypatch.setattr(socket.socket, "connect", lambda self, address: refuse(self, address))
    monkeypatch.setattr(socket.socket, "connect_ex", lambda self, address: refuse(self, address))
    monkeypatch.setattr(socket, "create_connection", lambda *a, **k: refuse(*a))
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: refuse(*a))
    return attempts


def all_parsers(parser):
    """The parser and every subcommand's parser under it, depth first (CLI tests check each one)."""
    import argparse

    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from all_parsers(sub)
