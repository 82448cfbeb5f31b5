"""Cost of the Lyapunov engine against the plain forward, on the 81 x 128 ItrSA-style attention map.

For the top-k Lyapunov exponents over T loops this measures, side by side and interleaved (so that load from
other processes hits every variant alike):

- the plain T-loop forward (``x = m(x)`` under ``no_grad``): the unit of every ratio;
- a plain ``torch.func.jvp`` loop with a QR (k > 1) or a normalization (k = 1) per loop: the reference a user
  would write by hand;
- ``lyapunov_spectrum`` with ``compile=False`` (eager forward-mode AD), with the default (no flag: the engine
  chooses its path by cost; measured in steady state, after the warm-up runs that let it choose), and with
  ``compile=True`` (after its one-off compilation, which is timed on its own);
- the first default call in a fresh process (subprocess), which pays for the trace of its graph;
- in float64, the largest difference of the exponents of each engine path from the plain jvp loop, all started
  from the same tangent frame.

Usage (from the repository root)::

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 .venv/bin/python benchmarks/bench_cost.py
    ... benchmarks/bench_cost.py --quick                 # 27 x 64 map, T = 50, no compile: a smoke run
    ... benchmarks/bench_cost.py --no-compile --profile  # skip torch.compile; show where a default loop's time goes

Prints a markdown table (and writes ``benchmarks/out/cost.json``): each cell is the median time of the interleaved
rounds and its multiple of the median forward, then the same multiple between the fastest rounds (less sensitive
to other processes on a shared machine). Nothing is asserted: this script measures.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

import jacobiscope as js

HERE = Path(__file__).resolve().parent
MAP_KWARGS = {"eta": 1.0, "norm": "rmsnorm", "seed": 0}
TRANSIENT = 8  # loops from m.x0 to a representative state (as bench_engine.py)
COLD_MARKER = "@@COLD "


def build(shape: dict, dtype: torch.dtype):
    m = js.systems.self_attention_map(**shape, **MAP_KWARGS, dtype=dtype)
    x = m.trajectory(m.x0, steps=TRANSIENT)[-1].clone()
    return m, x


def initial_frame(x: torch.Tensor, k: int, seed: int = 0) -> torch.Tensor:
    """An orthonormal frame ``[k, *state]`` (QR of a seeded Gaussian block, drawn in float64)."""
    generator = torch.Generator().manual_seed(seed)
    Y = torch.randn(x.numel(), k, generator=generator, dtype=torch.float64)
    Q, R = torch.linalg.qr(Y)
    Q = Q * torch.sign(torch.diagonal(R)).unsqueeze(0)
    return Q.T.reshape(k, *x.shape).to(x.dtype)


def forward_loop(m, x, T):
    y = x
    with torch.no_grad():
        for _ in range(T):
            y = m(y)
    return y


def plain_jvp_lyapunov(m, x, frame, T) -> torch.Tensor:
    """The hand-written reference: ``torch.func.jvp`` (vmapped over the frame) and a QR / normalization per loop."""
    step = m.detached().step
    k = frame.shape[0]
    total = torch.zeros(k, dtype=x.dtype)
    with torch.no_grad():
        for _ in range(T):
            if k == 1:
                x, tangent = torch.func.jvp(step, (x,), (frame[0],))
                norm = tangent.norm()
                frame, log_r = (tangent / norm).unsqueeze(0), norm.log().unsqueeze(0)
            else:
                x, tangents = torch.vmap(lambda v: torch.func.jvp(step, (x,), (v,)), out_dims=(None, 0))(frame)
                Q, R = torch.linalg.qr(tangents.reshape(k, -1).T)
                signs = torch.sign(torch.diagonal(R))
                frame, log_r = (Q * signs).T.reshape(frame.shape), torch.diagonal(R).abs().log()
            total += log_r
    return (total / T).sort(descending=True).values


def engine(m, x, T, k, compile, frame=None):
    return js.lyapunov_spectrum(m, x, steps=T, k=k, seed=0, tangents=frame, compile=compile)


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def interleaved(runs: dict, repeats: int) -> dict:
    """Median and minimum seconds of each run over ``repeats`` interleaved rounds."""
    samples = {name: [] for name in runs}
    for _ in range(repeats):
        for name, fn in runs.items():
            samples[name].append(timed(fn)[0])
    return {name: {"median": statistics.median(v), "min": min(v), "samples": v} for name, v in samples.items()}


def cold_first_call(shape: dict, T: int, k: int) -> dict:
    """The first default call in a fresh process (it pays for the trace of its graph), and the forward there."""
    code = (
        "import json, time, torch, sys; sys.path.insert(0, %r); import bench_cost as b; "
        "m, x = b.build(%r, torch.float32); b.forward_loop(m, x, 2); "
        "t = time.perf_counter(); b.forward_loop(m, x, %d); f = time.perf_counter() - t; "
        "t = time.perf_counter(); r = b.engine(m, x, %d, %d, None); first = time.perf_counter() - t; "
        "t = time.perf_counter(); r2 = b.engine(m, x, %d, %d, None); second = time.perf_counter() - t; "
        "print(%r + json.dumps({'forward': f, 'first': first, 'second': second, "
        "'first_path': r.meta['tangent_path'], 'second_path': r2.meta['tangent_path']}))"
    ) % (str(HERE), shape, T, T, k, T, k, COLD_MARKER)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ.copy())
    for line in out.stdout.splitlines():
        if line.startswith(COLD_MARKER):
            return json.loads(line[len(COLD_MARKER):])
    return {"error": out.stderr[-2000:]}


def measure_case(shape: dict, T: int, k: int, args) -> dict:
    m, x = build(shape, torch.float32)
    frame = initial_frame(x, k)
    runs = {
        "forward": lambda: forward_loop(m, x, T),
        "plain_jvp": lambda: plain_jvp_lyapunov(m, x, frame, T),
        "eager": lambda: engine(m, x, T, k, False),
        "default": lambda: engine(m, x, T, k, None),
    }
    warm = warm_up_default(m, x, T, k)
    record = {"map": f"{shape['tokens']} x {shape['dim']}, {shape['heads']} heads", "T": T, "k": k,
              "default_paths_while_warming": warm}
    if args.compile:
        record["compile_seconds"], result = timed(lambda: engine(m, x, T, k, True))
        record["compile_path"] = result.meta["tangent_path"]
        runs["compiled"] = lambda: engine(m, x, T, k, True)
    for fn in runs.values():
        fn()
    record["seconds"] = interleaved(runs, args.repeats)
    forward = record["seconds"]["forward"]["median"]
    record["ratio"] = {name: v["median"] / forward for name, v in record["seconds"].items()}
    fastest_forward = record["seconds"]["forward"]["min"]
    record["ratio_min"] = {name: v["min"] / fastest_forward for name, v in record["seconds"].items()}
    record["default_path"] = engine(m, x, T, k, None).meta["tangent_path"]
    record["agreement_fp64"] = agreement_fp64(shape, args.fp64_steps, k, args.compile)
    if args.cold:
        record["cold"] = cold_first_call(shape, T, k)
    return record


def warm_up_default(m, x, T, k, most: int = 12) -> list:
    """Default runs until the engine has left eager (it traces once the eager time spent in this process pays for
    a trace) and one more run on the chosen path; returns the path of each warm-up run."""
    paths = []
    for _ in range(most):
        paths.append(engine(m, x, T, k, None).meta["tangent_path"])
        if len(paths) >= 2 and paths[-1] != "eager" and paths[-2] == paths[-1]:
            break
    return paths


def agreement_fp64(shape: dict, T: int, k: int, compile: bool) -> dict:
    """Largest |exponent difference| of each engine path from the plain jvp loop, float64, same frame."""
    m, x = build(shape, torch.float64)
    frame = initial_frame(x, k)
    reference = plain_jvp_lyapunov(m, x, frame, T)
    paths = {"eager": False, "default": None}
    if compile:
        paths["compiled"] = True
    out = {"T": T}
    warm_up_default(m, x, T, k)
    for name, flag in paths.items():
        result = engine(m, x, T, k, flag, frame)
        out[name] = float((result.exponents - reference).abs().max())
        out[name + "_path"] = result.meta["tangent_path"]
    out["top_exponent"] = float(reference[0])
    return out


def profile_default(shape: dict, T: int, k: int) -> str:
    """Where a steady-state default run spends its time: torch profiler, top operators by self time."""
    m, x = build(shape, torch.float32)
    for _ in range(3):
        engine(m, x, T, k, None)
    with torch.profiler.profile() as prof:
        engine(m, x, T, k, None)
    forward = torch.profiler.profile()
    with forward:
        forward_loop(m, x, T)
    return ("default engine, k=%d:\n" % k + prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=14)
            + "\nplain forward:\n" + forward.key_averages().table(sort_by="self_cpu_time_total", row_limit=8))


def markdown(records: list, machine: str) -> str:
    lines = [
        f"Machine: {machine}",
        "",
        "| map | T | k | forward | plain jvp loop | engine compile=False | **engine default (no flag)** | "
        "engine compile=True | compile (one-off) | max abs diff vs plain jvp, fp64 (eager / default / compile) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        s, q, best = r["seconds"], r["ratio"], r["ratio_min"]

        def cell(name):
            if name not in s:
                return "—"
            return f"{1e3 * s[name]['median']:.0f} ms ({q[name]:.2f}x; fastest runs {best[name]:.2f}x)"

        a = r["agreement_fp64"]
        diffs = " / ".join(f"{a[n]:.1e}" for n in ("eager", "default", "compiled") if n in a)
        compile_cell = f"{r['compile_seconds']:.1f} s" if "compile_seconds" in r else "—"
        lines.append(f"| {r['map']} | {r['T']} | {r['k']} | {1e3 * s['forward']['median']:.0f} ms (1x) | "
                     f"{cell('plain_jvp')} | {cell('eager')} | **{cell('default')}** [{r['default_path']}] | "
                     f"{cell('compiled')} | {compile_cell} | {diffs} (T={a['T']}) |")
    cold = [r for r in records if "cold" in r and "first" in r["cold"]]
    if cold:
        lines += ["", "| first default call in a fresh process | k | first call | second call | forward there |",
                  "|---|---|---|---|---|"]
        for r in cold:
            c = r["cold"]
            lines.append(f"| {r['map']}, T={r['T']} | {r['k']} | {c['first']:.2f} s ({c['first'] / c['forward']:.1f}x, "
                         f"{c['first_path']}) | {c['second']:.2f} s ({c['second'] / c['forward']:.1f}x, "
                         f"{c['second_path']}) | {1e3 * c['forward']:.0f} ms |")
    return "\n".join(lines)


def machine_info() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = os.getloadavg() if hasattr(os, "getloadavg") else ("?",)
    return (f"{cpu}, {os.cpu_count()} cores, torch {torch.__version__}, {torch.get_num_threads()} thread(s), "
            f"Python {platform.python_version()}, load average {load[0]:.1f} at start")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="27 x 64 map, T = 50, no compile")
    parser.add_argument("--steps", type=int, default=200, help="loops T (default 200)")
    parser.add_argument("--ks", default="1,16", help="numbers of exponents (default 1,16)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--fp64-steps", type=int, default=100, help="loops of the float64 agreement check")
    parser.add_argument("--no-compile", dest="compile", action="store_false", help="skip compile=True")
    parser.add_argument("--no-cold", dest="cold", action="store_false", help="skip the fresh-process first call")
    parser.add_argument("--profile", action="store_true", help="print where a default run's time goes")
    parser.add_argument("--json", default=str(HERE / "out" / "cost.json"))
    args = parser.parse_args(argv)
    shape = {"tokens": 81, "dim": 128, "heads": 8}
    if args.quick:
        shape, args.steps, args.compile, args.repeats, args.fp64_steps = {"tokens": 27, "dim": 64, "heads": 8}, 50, \
            False, 3, 30
    machine = machine_info()
    records = []
    for k in (int(v) for v in args.ks.split(",")):
        records.append(measure_case(shape, args.steps, k, args))
        print(f"k={k} done: default {records[-1]['ratio']['default']:.2f}x", file=sys.stderr, flush=True)
    table = markdown(records, machine)
    print(table)
    if args.profile:
        for k in (int(v) for v in args.ks.split(",")):
            print(profile_default(shape, args.steps, k))
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"machine": machine, "argv": sys.argv, "records": records}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
