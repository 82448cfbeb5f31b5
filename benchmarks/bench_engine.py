"""Engine benchmark: dense vs matrix-free Jacobian diagnostics on a looped self-attention map.

The map is the ItrSA-style looped self-attention of `jacobiscope.systems.self_attention_map` with
81 tokens x 128 dims (state size D = 10,368), 8 heads, eta = 1, RMSNorm. It measures, side by side:

1. the dense Jacobian (``js.jacobian`` with ``method="rev"`` and ``"fwd"``; plain ``torch.func.jacrev`` for
   comparison): wall time and peak memory;
2. the top-16 Lyapunov exponents over 32 loops in float64: matrix-free ``js.lyapunov_spectrum`` vs a dense
   reference written here (form J each loop, ``Q, R = qr(J Q)``, accumulate ``log diag R``), from the same
   initial frame: both times, the speed-up and the largest difference of the 16 exponents;
3. the spectral norm in float32: matrix-free ``js.spectral_norm`` (Lanczos) vs ``matrix_norm(J, 2)`` of the
   dense Jacobian (timed including forming J): both values, relative difference and speed-up;
4. the top-1 Lyapunov exponent over T = 200 loops (float32) as a multiple of the plain T-loop forward, and the
   same for k = 16 (for information).

Every case runs in its own subprocess (``--case NAME --json``) so its peak resident memory is its own: after
the map and the state are built, the kernel's peak-RSS counter is reset (``/proc/self/clear_refs``), and the
case reports ``ru_maxrss`` at its end minus the RSS at that baseline. The driver runs all cases, writes a JSON
record to ``benchmarks/out/engine.json`` (``engine_quick.json`` with ``--quick``) and prints a markdown table
with the targets of the issue. Nothing is asserted: this script measures.

Usage (from the repository root)::

    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/bench_engine.py            # full run (~30 min, 2 cores)
    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/bench_engine.py --quick    # 27 tokens x 64 dims smoke run
    .venv/bin/python benchmarks/bench_engine.py --case spectral_free --json        # one case, JSON on stdout

Timings are wall-clock (``time.perf_counter``); cheap cases report the median of ``--repeats`` runs after one
warm-up, expensive ones (dense Jacobians, the dense Lyapunov reference, the dense SVD) a single run. The
machine may be shared: load averages are recorded at the start and end of the run and of every case.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import gc
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

import jacobiscope as js

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULT_MARKER = "@@BENCH_RESULT "

FULL = {"tokens": 81, "dim": 128, "heads": 8}
QUICK = {"tokens": 27, "dim": 64, "heads": 8}
MAP_KWARGS = {"eta": 1.0, "norm": "rmsnorm", "seed": 0}
TRANSIENT = 8  # loops run from m.x0 to reach a representative state
LYAP_K, LYAP_STEPS = 16, 32  # case 2
FORWARD_T = 200  # case 4
CHUNK = 256
BIG_BUDGET = 8 << 30  # max_bytes for the dense Jacobians (fp64 J of D = 10,368 is 860 MB)

TARGETS = {
    "top1_over_forward": 3.0,  # top-1 Lyapunov <= 3x the plain forward
    "lyap16_speedup": 50.0,  # matrix-free top-16 >= 50x faster than dense + QR
    "lyap16_max_abs_diff": 1e-4,  # exponents agree to 1e-4 (fp64)
    "spectral_rel_diff": 1e-4,  # spectral norm within 1e-4 (relative) of the dense value
    "spectral_speedup": 20.0,  # matrix-free spectral norm >= 20x faster than dense
}


# ---------------------------------------------------------------------------------------------- helpers
def build(shape: dict, dtype: torch.dtype):
    """The benchmark map in ``dtype`` and a representative state (``TRANSIENT`` loops from ``m.x0``)."""
    m = js.systems.self_attention_map(**shape, **MAP_KWARGS, dtype=dtype)
    x = m.trajectory(m.x0, steps=TRANSIENT)[-1].clone()
    return m, x


def state_size(shape: dict) -> int:
    return shape["tokens"] * shape["dim"]


def timed(fn):
    """Run ``fn()`` once; return (seconds, result)."""
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def median_time(fn, repeats: int, warmup: int = 1):
    """Median wall time of ``repeats`` calls after ``warmup`` calls; returns (median, all samples, last result)."""
    result = None
    for _ in range(warmup):
        result = fn()
    samples = []
    for _ in range(repeats):
        seconds, result = timed(fn)
        samples.append(seconds)
    return statistics.median(samples), samples, result


def _status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


class PeakMemory:
    """Peak RSS of this process above a baseline, in MiB (Linux: ``ru_maxrss`` is in KiB).

    ``start()`` records the current RSS and, where the kernel allows, resets the peak counter so that
    ``ru_maxrss`` afterwards covers only what the case allocates.
    """

    def start(self):
        gc.collect()
        self.reset = False
        try:
            with open("/proc/self/clear_refs", "w") as handle:
                handle.write("5")
            self.reset = True
        except OSError:
            pass
        self.baseline_rss_kib = _status_kib("VmRSS")
        self.baseline_maxrss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return self

    def stop(self) -> dict:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        # Without the reset, ru_maxrss may still be the (higher) peak of the set-up: subtract that instead.
        base = self.baseline_rss_kib if (self.reset and self.baseline_rss_kib) else self.baseline_maxrss_kib
        return {
            "baseline_rss_mib": (self.baseline_rss_kib or 0) / 1024,
            "peak_rss_mib": peak / 1024,
            "peak_extra_mib": max(peak - base, 0) / 1024,
            "peak_counter_reset": self.reset,
        }


def loadavg():
    try:
        return list(os.getloadavg())
    except OSError:
        return None


def machine_info() -> dict:
    mkl = None
    for line in torch.__config__.show().splitlines():
        if "Math Kernel Library" in line or "OpenBLAS" in line:
            mkl = line.strip(" -")
            break
    commit, dirty = None, None
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True).stdout.strip())
    except OSError:
        pass
    cpu_model = None
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    cpu_model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        mem_total_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        mem_total_gib = None
    return {
        "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor(),
        "cpu_model": cpu_model,
        "cpu_count": os.cpu_count(),
        "mem_total_gib": mem_total_gib,
        "torch_num_threads": torch.get_num_threads(),
        "torch_num_interop_threads": torch.get_num_interop_threads(),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "blas": mkl,
        "jacobiscope": js.__version__,
        "git_commit": commit,
        "git_dirty": dirty,
        "env": {name: os.environ.get(name) for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")},
    }


# ---------------------------------------------------------------------------------------------- cases
def case_jacobian(shape, args, method: str) -> dict:
    """Dense fp32 Jacobian through ``js.jacobian`` (rows by vjps for "rev", columns by jvps for "fwd")."""
    m, x = build(shape, torch.float32)
    memory = PeakMemory().start()
    seconds, J = timed(lambda: js.jacobian(m, x, method=method, chunk_size=CHUNK, max_bytes=BIG_BUDGET))
    out = {"seconds": seconds, **memory.stop(), "shape": list(J.shape), "J_mib": J.numel() * J.element_size() / 2**20}
    out["fro_norm"] = float(torch.linalg.matrix_norm(J))
    return out


def case_jacobian_rev(shape, args):
    return case_jacobian(shape, args, "rev")


def case_jacobian_fwd(shape, args):
    return case_jacobian(shape, args, "fwd")


def case_jacrev_plain(shape, args) -> dict:
    """Plain ``torch.func.jacrev(step, chunk_size=256)`` on the same map, for comparison."""
    m, x = build(shape, torch.float32)
    step = m.detached().step
    memory = PeakMemory().start()
    seconds, J = timed(lambda: torch.func.jacrev(step, chunk_size=CHUNK)(x))
    size = state_size(shape)
    out = {"seconds": seconds, **memory.stop(), "J_mib": J.numel() * J.element_size() / 2**20}
    # Same matrix as js.jacobian(method="rev")? (checked on a few rows, cheaply)
    rows = js.jacobian(m, x, method="rev", chunk_size=CHUNK, max_bytes=BIG_BUDGET)[:64]
    out["max_abs_diff_vs_js_jacobian_first_64_rows"] = float((J.reshape(size, size)[:64] - rows).abs().max())
    return out


def initial_frame(size: int, k: int, seed: int, dtype) -> torch.Tensor:
    """An orthonormal ``[D, k]`` frame, drawn as `lyapunov_spectrum` draws its own (randn then QR, diag R > 0)."""
    generator = torch.Generator().manual_seed(seed)
    Y = torch.randn(size, k, generator=generator, dtype=dtype)
    Q, R = torch.linalg.qr(Y)
    return Q * torch.where(R.diagonal() < 0, -1.0, 1.0).to(dtype)


def dense_lyapunov(m, x, Q, steps: int) -> dict:
    """Reference top-k exponents: the dense Jacobian each loop, ``Q, R = qr(J Q)`` with diag R > 0."""
    log_sum = torch.zeros(Q.shape[1], dtype=Q.dtype)
    jac_seconds = qr_seconds = 0.0
    for _ in range(steps):
        start = time.perf_counter()
        J = js.jacobian(m, x, method="rev", chunk_size=CHUNK, max_bytes=BIG_BUDGET).reshape(Q.shape[0], Q.shape[0])
        middle = time.perf_counter()
        Q, R = torch.linalg.qr(J @ Q)
        diagonal = R.diagonal()
        Q = Q * torch.where(diagonal < 0, -1.0, 1.0).to(Q.dtype)
        log_sum += diagonal.abs().log()
        with torch.no_grad():
            x = m(x)
        del J
        jac_seconds += middle - start
        qr_seconds += time.perf_counter() - middle
    exponents = torch.sort(log_sum / steps, descending=True).values
    return {"exponents": exponents, "jacobian_seconds": jac_seconds, "matmul_qr_step_seconds": qr_seconds}


def case_lyap16_free(shape, args) -> dict:
    """Matrix-free top-16 exponents over 32 loops in float64 (``js.lyapunov_spectrum``)."""
    m, x = build(shape, torch.float64)
    size = state_size(shape)
    Q0 = initial_frame(size, LYAP_K, 0, torch.float64)
    tangents = Q0.T.reshape(LYAP_K, *x.shape)
    memory = PeakMemory().start()

    def run():
        return js.lyapunov_spectrum(m, x, steps=LYAP_STEPS, k=LYAP_K, seed=0, tangents=tangents, dtype=torch.float64)

    seconds, samples, result = median_time(run, args.repeats)
    # The library's own seeded frame (no tangents=): the same draw, so the same exponents.
    seeded = js.lyapunov_spectrum(m, x, steps=LYAP_STEPS, k=LYAP_K, seed=0, dtype=torch.float64)
    return {
        "seconds": seconds,
        "samples": samples,
        **memory.stop(),
        "exponents": result.exponents.tolist(),
        "max_abs_diff_vs_library_seeded_frame": float((seeded.exponents - result.exponents).abs().max()),
    }


def case_lyap16_dense(shape, args) -> dict:
    """Dense reference of case 2: 32 dense fp64 Jacobians, each followed by ``qr(J Q)``."""
    m, x = build(shape, torch.float64)
    Q0 = initial_frame(state_size(shape), LYAP_K, 0, torch.float64)
    memory = PeakMemory().start()
    seconds, result = timed(lambda: dense_lyapunov(m, x, Q0, LYAP_STEPS))
    return {
        "seconds": seconds,
        **memory.stop(),
        "exponents": result["exponents"].tolist(),
        "jacobian_seconds": result["jacobian_seconds"],
        "jacobian_seconds_per_loop": result["jacobian_seconds"] / LYAP_STEPS,
        "matmul_qr_step_seconds": result["matmul_qr_step_seconds"],
    }


def case_spectral_free(shape, args) -> dict:
    """Matrix-free spectral norm (Lanczos on J^T J, default tol 1e-5 in float32)."""
    m, x = build(shape, torch.float32)
    memory = PeakMemory().start()
    seconds, samples, result = median_time(lambda: js.spectral_norm(m, x), args.repeats)
    return {
        "seconds": seconds,
        "samples": samples,
        **memory.stop(),
        "value": float(result.value),
        "iterations": result.iterations,
        "tolerance": float(result.tolerance),
        "converged": result.converged,
    }


def case_spectral_dense(shape, args) -> dict:
    """Dense spectral norm: form J (fp32, rows by vjps), then ``torch.linalg.matrix_norm(J, 2)`` (an SVD)."""
    m, x = build(shape, torch.float32)
    size = state_size(shape)
    memory = PeakMemory().start()
    jac_seconds, J = timed(lambda: js.jacobian(m, x, method="rev", chunk_size=CHUNK, max_bytes=BIG_BUDGET))
    svd_seconds, value = timed(lambda: torch.linalg.matrix_norm(J.reshape(size, size), 2))
    return {
        "seconds": jac_seconds + svd_seconds,
        "jacobian_seconds": jac_seconds,
        "svd_seconds": svd_seconds,
        **memory.stop(),
        "value": float(value),
        "dtype": "float32",
    }


def case_lyap_vs_forward(shape, args) -> dict:
    """Top-1 (and top-16) Lyapunov over T loops vs the plain T-loop forward, all float32.

    The baseline is the bare loop ``x = m(x)`` under ``no_grad``; ``m.trajectory`` (which also stacks the states
    and checks them for NaN) is timed too. Repeats are interleaved so that load from other processes hits all
    of them alike. One jvp, one vjp and one forward are timed on their own to explain the ratio.
    """
    m, x = build(shape, torch.float32)
    T = args.steps
    md = m.detached()
    v = torch.randn(x.shape, generator=torch.Generator().manual_seed(1))

    def forward_loop():
        y = x
        with torch.no_grad():
            for _ in range(T):
                y = m(y)
        return y

    runs = {
        "forward": forward_loop,
        "trajectory": lambda: m.trajectory(x, steps=T),
        "top1": lambda: js.lyapunov_spectrum(m, x, steps=T, k=1, seed=0),
        "top16": lambda: js.lyapunov_spectrum(m, x, steps=T, k=16, seed=0),
        # compile=True: one-off compilation (timed below), then fused jvps
        "top1_compiled": lambda: js.lyapunov_spectrum(m, x, steps=T, k=1, seed=0, compile=True),
        "top16_compiled": lambda: js.lyapunov_spectrum(m, x, steps=T, k=16, seed=0, compile=True),
    }
    compile_started = time.perf_counter()
    js.lyapunov_spectrum(m, x, steps=2, k=1, seed=0, compile=True)
    js.lyapunov_spectrum(m, x, steps=2, k=16, seed=0, compile=True)
    compile_seconds = time.perf_counter() - compile_started
    memory = PeakMemory().start()
    for fn in runs.values():  # warm-up
        fn()
    samples = {name: [] for name in runs}
    results = {}
    for _ in range(args.repeats):
        for name, fn in runs.items():
            seconds, results[name] = timed(fn)
            samples[name].append(seconds)
    medians = {name: statistics.median(values) for name, values in samples.items()}

    def micro(fn, n=100):
        return median_time(fn, n, warmup=5)[0]

    with torch.no_grad():
        one_forward = micro(lambda: md(x))
    one_jvp = micro(lambda: torch.func.jvp(md.step, (x,), (v,)))
    one_vjp = micro(lambda: torch.func.vjp(md.step, x)[1](v))
    with torch.no_grad():
        scalar_add = micro(lambda: x + 1.0, 300)
    scalar_add_jvp = micro(lambda: torch.func.jvp(lambda z: z + 1.0, (x,), (v,)), 300)
    return {
        "T": T,
        "forward_seconds": medians["forward"],
        "trajectory_seconds": medians["trajectory"],
        "top1_seconds": medians["top1"],
        "top16_seconds": medians["top16"],
        "top1_over_forward": medians["top1"] / medians["forward"],
        "top1_over_trajectory": medians["top1"] / medians["trajectory"],
        "top16_over_forward": medians["top16"] / medians["forward"],
        "top1_compiled_over_forward": medians["top1_compiled"] / medians["forward"],
        "top16_compiled_over_forward": medians["top16_compiled"] / medians["forward"],
        "compile_seconds_first_calls": compile_seconds,
        "top1_compiled_exponent": float(results["top1_compiled"].exponents[0]),
        "top1_exponent": float(results["top1"].exponents[0]),
        "top16_first_exponent": float(results["top16"].exponents[0]),
        "samples": samples,
        **memory.stop(),
        "one_forward_ms": 1e3 * one_forward,
        "one_jvp_ms": 1e3 * one_jvp,
        "one_vjp_ms": 1e3 * one_vjp,
        "x_plus_scalar_forward_us": 1e6 * scalar_add,
        "x_plus_scalar_jvp_us": 1e6 * scalar_add_jvp,
    }


CASES = {
    "jacobian_rev": case_jacobian_rev,
    "jacobian_fwd": case_jacobian_fwd,
    "jacrev_plain": case_jacrev_plain,
    "lyap16_free": case_lyap16_free,
    "lyap16_dense": case_lyap16_dense,
    "spectral_free": case_spectral_free,
    "spectral_dense": case_spectral_dense,
    "lyap_vs_forward": case_lyap_vs_forward,
}


def canary_ms() -> float:
    """Median time of a fixed small workload (a 512 x 512 fp32 matmul): a contention gauge.

    The machine is a shared VM whose steal time is not reported; a canary several times slower than in a quiet
    moment (about 0.8 ms on this 2-vCPU Xeon VM when quiet) means that the case around it ran under contention.
    """
    a = torch.randn(512, 512, generator=torch.Generator().manual_seed(0))
    return 1e3 * median_time(lambda: a @ a, 50, warmup=5)[0]


def run_case(name: str, args) -> dict:
    shape = QUICK if args.quick else FULL
    if args.threads:
        torch.set_num_threads(args.threads)
    start_load, start_canary = loadavg(), canary_ms()
    wall_start = time.perf_counter()
    out = CASES[name](shape, args)
    out["case_wall_seconds"] = time.perf_counter() - wall_start
    out["loadavg_start"], out["loadavg_end"] = start_load, loadavg()
    out["canary_ms_start"], out["canary_ms_end"] = start_canary, canary_ms()
    out["torch_num_threads"] = torch.get_num_threads()
    return out


# ---------------------------------------------------------------------------------------------- driver
def _cpu_busy_seconds() -> float | None:
    """Busy CPU time of the whole machine (all CPUs, every process) since boot, from ``/proc/stat``."""
    try:
        with open("/proc/stat") as handle:
            values = [int(value) for value in handle.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    idle = values[3] + values[4]  # idle + iowait
    return (sum(values) - idle) / os.sysconf("SC_CLK_TCK")


def _children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def foreign_cpu_share(seconds: float = 2.0) -> float | None:
    """Share of the machine's CPUs kept busy by other processes over ``seconds`` while the driver sleeps."""
    before = _cpu_busy_seconds()
    time.sleep(seconds)
    after = _cpu_busy_seconds()
    if before is None or after is None:
        return None
    return (after - before) / (seconds * (os.cpu_count() or 1))


def wait_for_quiet(max_wait: float, threshold: float = 0.15):
    """Wait (at most ``max_wait`` s) until other processes use under ``threshold`` of the CPUs.

    Returns (the last measured share, seconds waited). The benchmark uses every core, so a concurrent job
    (tests, another benchmark) would slow the cases down by far more than its share.
    """
    start = time.perf_counter()
    while True:
        share = foreign_cpu_share()
        waited = time.perf_counter() - start
        if share is None or share <= threshold or waited >= max_wait:
            return share, waited
        print(f"[bench] other processes keep {share:.0%} of the CPUs busy; waiting ({waited:.0f} s so far) ...",
              file=sys.stderr, flush=True)
        time.sleep(20)


def run_subprocess(name: str, args) -> dict:
    """Run one case in a fresh interpreter; also measure the CPU time other processes took meanwhile."""
    command = [sys.executable, str(Path(__file__).resolve()), "--case", name, "--json",
               "--repeats", str(args.repeats), "--steps", str(args.steps)]
    if args.threads:
        command += ["--threads", str(args.threads)]
    if args.quick:
        command.append("--quick")
    share_before, waited = wait_for_quiet(args.max_wait)
    print(f"[bench] {name} ...", file=sys.stderr, flush=True)
    busy_start, children_start = _cpu_busy_seconds(), _children_cpu_seconds()
    start = time.perf_counter()
    process = subprocess.run(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - start
    busy_end, children_end = _cpu_busy_seconds(), _children_cpu_seconds()
    lines = [line for line in process.stdout.splitlines() if line.startswith(RESULT_MARKER)]
    if process.returncode != 0 or not lines:
        print(f"[bench] {name} FAILED (exit {process.returncode})", file=sys.stderr, flush=True)
        return {"error": f"exit code {process.returncode}", "stdout_tail": process.stdout[-2000:]}
    result = json.loads(lines[-1][len(RESULT_MARKER):])
    result["subprocess_seconds"] = elapsed
    result["finished_utc"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    result["quiet_wait_seconds"] = waited
    result["foreign_cpu_share_before"] = share_before
    if busy_start is not None and busy_end is not None:
        foreign = max((busy_end - busy_start) - (children_end - children_start), 0.0)
        result["foreign_cpu_seconds"] = foreign
        result["foreign_cpu_share"] = foreign / (elapsed * (os.cpu_count() or 1))
    print(f"[bench] {name} done in {elapsed:.1f} s (other processes: "
          f"{100 * result.get('foreign_cpu_share', float('nan')):.0f}% of the CPUs)", file=sys.stderr, flush=True)
    return result


def _command_line() -> str:
    """How this run was started, with the thread-count variables that were set."""
    env = [f"{name}={os.environ[name]}" for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
           if name in os.environ]
    python = os.path.relpath(sys.executable, ROOT) if sys.executable.startswith(str(ROOT)) else sys.executable
    return " ".join([*env, python, *sys.argv])


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def summarize(cases: dict) -> dict:
    """Derived comparisons and target verdicts."""
    summary = {}
    free, dense = cases.get("lyap16_free", {}), cases.get("lyap16_dense", {})
    if "exponents" in free and "exponents" in dense:
        diff = max(abs(a - b) for a, b in zip(free["exponents"], dense["exponents"]))
        summary["lyap16_max_abs_diff"] = diff
        summary["lyap16_speedup"] = dense["seconds"] / free["seconds"]
    free, dense = cases.get("spectral_free", {}), cases.get("spectral_dense", {})
    if "value" in free and "value" in dense:
        summary["spectral_abs_diff"] = abs(free["value"] - dense["value"])
        summary["spectral_rel_diff"] = summary["spectral_abs_diff"] / abs(dense["value"])
        summary["spectral_speedup"] = dense["seconds"] / free["seconds"]
    if "top1_over_forward" in cases.get("lyap_vs_forward", {}):
        summary["top1_over_forward"] = cases["lyap_vs_forward"]["top1_over_forward"]
        summary["top1_compiled_over_forward"] = cases["lyap_vs_forward"].get("top1_compiled_over_forward")
    checks = {
        "top1_over_forward": lambda v: v <= TARGETS["top1_over_forward"],
        "top1_compiled_over_forward": lambda v: v is not None and v <= TARGETS["top1_over_forward"],
        "lyap16_speedup": lambda v: v >= TARGETS["lyap16_speedup"],
        "lyap16_max_abs_diff": lambda v: v <= TARGETS["lyap16_max_abs_diff"],
        "spectral_rel_diff": lambda v: v <= TARGETS["spectral_rel_diff"],
        "spectral_speedup": lambda v: v >= TARGETS["spectral_speedup"],
    }
    summary["verdicts"] = {key: verdict(check(summary[key])) for key, check in checks.items() if key in summary}
    return summary


def markdown_table(record: dict) -> str:
    cases, summary = record["cases"], record["summary"]
    verdicts = summary.get("verdicts", {})
    rows = []

    def add(what, measured, target="", key=None):
        rows.append((what, measured, target, verdicts.get(key, "") if key else ""))

    def get(case, key, fmt="{:.2f}"):
        value = cases.get(case, {}).get(key)
        return "n/a" if value is None else fmt.format(value)

    add("Dense Jacobian fp32, js.jacobian rev (chunk 256): time", get("jacobian_rev", "seconds", "{:.1f} s"))
    add("Dense Jacobian fp32, js.jacobian rev: peak RSS above baseline", get("jacobian_rev", "peak_extra_mib", "{:.0f} MiB"))
    add("Dense Jacobian fp32, js.jacobian fwd (chunk 256): time", get("jacobian_fwd", "seconds", "{:.1f} s"))
    add("Dense Jacobian fp32, js.jacobian fwd: peak RSS above baseline", get("jacobian_fwd", "peak_extra_mib", "{:.0f} MiB"))
    add("Dense Jacobian fp32, plain torch.func.jacrev (chunk 256): time", get("jacrev_plain", "seconds", "{:.1f} s"))
    add("Dense Jacobian fp32, plain torch.func.jacrev: peak RSS above baseline", get("jacrev_plain", "peak_extra_mib", "{:.0f} MiB"))
    add(f"Top-{LYAP_K} Lyapunov, {LYAP_STEPS} loops fp64, matrix-free: time", get("lyap16_free", "seconds", "{:.2f} s"))
    add(f"Top-{LYAP_K} Lyapunov, {LYAP_STEPS} loops fp64, dense J + QR: time", get("lyap16_dense", "seconds", "{:.1f} s"))
    add("  of which forming the 32 dense fp64 Jacobians", get("lyap16_dense", "jacobian_seconds", "{:.1f} s"))
    add("Top-16 Lyapunov: dense peak RSS above baseline", get("lyap16_dense", "peak_extra_mib", "{:.0f} MiB"))
    add("Top-16 Lyapunov: matrix-free peak RSS above baseline", get("lyap16_free", "peak_extra_mib", "{:.0f} MiB"))
    if "lyap16_speedup" in summary:
        add("Top-16 Lyapunov: speed-up matrix-free vs dense + QR", f"{summary['lyap16_speedup']:.0f}x",
            f">= {TARGETS['lyap16_speedup']:.0f}x", "lyap16_speedup")
        add("Top-16 Lyapunov: max |exponent difference|", f"{summary['lyap16_max_abs_diff']:.1e}",
            f"<= {TARGETS['lyap16_max_abs_diff']:.0e}", "lyap16_max_abs_diff")
    free = cases.get("lyap16_free", {})
    if "exponents" in free:
        add("Top-16 Lyapunov: largest / 16th exponent (matrix-free)", f"{free['exponents'][0]:.6f} / {free['exponents'][-1]:.6f}")
    add("Spectral norm fp32, matrix-free (Lanczos): time", get("spectral_free", "seconds", "{:.2f} s"))
    add("Spectral norm fp32, matrix-free: value / iterations",
        f"{get('spectral_free', 'value', '{:.6f}')} / {get('spectral_free', 'iterations', '{:d}')}")
    add("Spectral norm fp32, dense J + matrix_norm(J, 2): time", get("spectral_dense", "seconds", "{:.1f} s"))
    add("  of which forming J / the SVD",
        f"{get('spectral_dense', 'jacobian_seconds', '{:.1f} s')} / {get('spectral_dense', 'svd_seconds', '{:.1f} s')}")
    add("Spectral norm fp32, dense: value", get("spectral_dense", "value", "{:.6f}"))
    if "spectral_rel_diff" in summary:
        add("Spectral norm: relative difference matrix-free vs dense", f"{summary['spectral_rel_diff']:.1e}",
            f"<= {TARGETS['spectral_rel_diff']:.0e}", "spectral_rel_diff")
        add("Spectral norm: speed-up matrix-free vs dense", f"{summary['spectral_speedup']:.0f}x",
            f">= {TARGETS['spectral_speedup']:.0f}x", "spectral_speedup")
    lf = cases.get("lyap_vs_forward", {})
    if "T" in lf:
        T = lf["T"]
        add(f"Plain forward, {T} loops fp32 (bare m(x) loop, no_grad)", f"{1e3 * lf['forward_seconds']:.1f} ms")
        add(f"m.trajectory, {T} loops", f"{1e3 * lf['trajectory_seconds']:.1f} ms")
        add(f"Top-1 Lyapunov, {T} loops fp32: time", f"{1e3 * lf['top1_seconds']:.1f} ms")
        add("Top-1 Lyapunov / plain forward", f"{lf['top1_over_forward']:.1f}x",
            f"<= {TARGETS['top1_over_forward']:.0f}x", "top1_over_forward")
        if "top1_compiled_over_forward" in lf:
            add("Top-1 Lyapunov / plain forward, compile=True", f"{lf['top1_compiled_over_forward']:.1f}x",
                f"<= {TARGETS['top1_over_forward']:.0f}x", "top1_compiled_over_forward")
            add("Top-16 Lyapunov / plain forward, compile=True (information)", f"{lf['top16_compiled_over_forward']:.1f}x")
            add("compile=True: one-off compilation (k=1 and k=16)", f"{lf['compile_seconds_first_calls']:.1f} s")
        add("Top-1 Lyapunov / m.trajectory", f"{lf['top1_over_trajectory']:.1f}x")
        add(f"Top-16 Lyapunov, {T} loops fp32: time (information)", f"{1e3 * lf['top16_seconds']:.1f} ms")
        add("Top-16 Lyapunov / plain forward (information)", f"{lf['top16_over_forward']:.1f}x")
        add("One forward / one jvp / one vjp (+ its forward)",
            f"{lf['one_forward_ms']:.2f} / {lf['one_jvp_ms']:.2f} / {lf['one_vjp_ms']:.2f} ms")
        add("x + 1.0 on the state: forward / under torch.func.jvp",
            f"{lf['x_plus_scalar_forward_us']:.0f} / {lf['x_plus_scalar_jvp_us']:.0f} us")
    canaries = [value for case in cases.values() for key in ("canary_ms_start", "canary_ms_end")
                if (value := case.get(key)) is not None]
    if canaries:
        add("Contention canary (512x512 fp32 matmul) at case starts/ends, min - max",
            f"{min(canaries):.2f} - {max(canaries):.2f} ms")
    shares = [f"{name} {100 * case['foreign_cpu_share']:.0f}%" for name, case in cases.items()
              if case.get("foreign_cpu_share") is not None]
    if shares:
        add("CPU share taken by other processes during each case", ", ".join(shares))
    lines = ["| Measurement | Measured | Target | Verdict |", "|---|---|---|---|"]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="27 tokens x 64 dims (D = 1,728): a fast smoke run")
    parser.add_argument("--case", choices=sorted(CASES), help="run one case in this process")
    parser.add_argument("--cases", help="driver: comma-separated subset of cases (default: all)")
    parser.add_argument("--json", action="store_true", help="with --case: print the result as one JSON line")
    parser.add_argument("--repeats", type=int, default=5, help="repeats of the cheap cases (median reported)")
    parser.add_argument("--steps", type=int, default=FORWARD_T, help="T of the top-1-vs-forward case")
    parser.add_argument("--threads", type=int, help="torch.set_num_threads in every case (default: torch's default)")
    parser.add_argument("--max-wait", type=float, default=900.0,
                        help="driver: seconds to wait, before each case, for other processes to leave the CPUs")
    parser.add_argument("--update", action="store_true",
                        help="driver: keep the other cases of an existing JSON record and rerun only --cases")
    parser.add_argument("--out", type=Path, help="JSON output (default benchmarks/out/engine[_quick].json)")
    args = parser.parse_args(argv)

    if args.case:
        result = run_case(args.case, args)
        if args.json:
            print(RESULT_MARKER + json.dumps(result), flush=True)
        else:
            print(json.dumps(result, indent=2))
        return 0

    names = list(CASES) if not args.cases else [name.strip() for name in args.cases.split(",")]
    unknown = [name for name in names if name not in CASES]
    if unknown:
        parser.error(f"unknown case(s) {unknown}; choose from {sorted(CASES)}")
    shape = QUICK if args.quick else FULL
    record = {
        "benchmark": "engine",
        "command": _command_line(),
        "quick": args.quick,
        "map": {**shape, **MAP_KWARGS, "state_size": state_size(shape), "transient": TRANSIENT},
        "settings": {"chunk_size": CHUNK, "lyap_k": LYAP_K, "lyap_steps": LYAP_STEPS, "forward_T": args.steps,
                     "repeats": args.repeats, "threads": args.threads or torch.get_num_threads()},
        "targets": TARGETS,
        "machine": machine_info(),
        "loadavg_start": loadavg(),
    }
    out = args.out or HERE / "out" / ("engine_quick.json" if args.quick else "engine.json")
    previous = {}
    if args.update and out.exists():
        previous = json.loads(out.read_text()).get("cases", {})
        record["updated_cases"] = names
    start = time.perf_counter()
    record["cases"] = {**previous, **{name: run_subprocess(name, args) for name in names}}
    record["cases"] = {name: record["cases"][name] for name in CASES if name in record["cases"]}
    record["total_seconds"] = time.perf_counter() - start
    record["loadavg_end"] = loadavg()
    record["summary"] = summarize(record["cases"])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=2))
    machine = record["machine"]
    print(f"Map: self_attention tokens={shape['tokens']} dim={shape['dim']} heads={shape['heads']} "
          f"(D = {state_size(shape)}), eta=1, rmsnorm, seed 0, {TRANSIENT}-loop transient")
    print(f"Machine: {machine['cpu_model']} ({machine['machine']}), cpu_count={machine['cpu_count']}, "
          f"torch threads={machine['torch_num_threads']}, torch {machine['torch']}, python {machine['python']}, "
          f"{machine['blas']}, env {machine['env']}")
    print(f"Load average start {record['loadavg_start']} end {record['loadavg_end']}; "
          f"total {record['total_seconds']:.0f} s; JSON: {out}")
    print()
    print(markdown_table(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
