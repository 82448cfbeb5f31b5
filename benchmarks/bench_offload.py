"""Memory of `analyze` on a model whose layers accelerate offloads to disk, against the same model in memory.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_offload.py [--layers 12] [--hidden 768]

A GPT-2-shaped model (random weights, saved once as safetensors) is loaded two ways, each in a fresh process:
in memory (``from_pretrained(folder)``) and with its transformer layers offloaded to disk
(``device_map={..., "transformer.h": "disk"}, offload_folder=...``). Each process runs `jacobiscope.analyze` on the
first and last layer (default diagnostics, 8 loops, 64 tokens) and reports its peak resident memory
(VmRSS sampled every 20 ms while analyze runs; the process peak, which includes loading, beside it), the seconds, and the first layer's lambda_max and ||J||_2 (which must agree). Written to
benchmarks/out/offload.json; printed as RESULTS.md rows. Timings, not assertions.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path


def child(folder: str, mode: str, layers: int) -> None:
    import torch
    import transformers

    import jacobiscope

    torch.set_num_threads(1)
    if mode == "memory":
        model = transformers.GPT2LMHeadModel.from_pretrained(folder)
    else:
        where = {"transformer.wte": "cpu", "transformer.wpe": "cpu", "transformer.drop": "cpu",
                 "transformer.h": "disk", "transformer.ln_f": "cpu", "lm_head": "cpu"}
        model = transformers.GPT2LMHeadModel.from_pretrained(folder, device_map=where,
                                                             offload_folder=str(Path(folder) / "offload"))
    loaded = _rss_mib()
    ids = torch.randint(0, 1000, (1, 64), generator=torch.Generator().manual_seed(0))
    peak, stop = [loaded], threading.Event()

    def sample() -> None:   # the resident set while analyze runs (ru_maxrss would keep the loading's transient)
        while not stop.wait(0.02):
            peak[0] = max(peak[0], _rss_mib())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    started = time.perf_counter()
    report = jacobiscope.analyze(model.eval(), {"input_ids": ids}, layers=[0, layers - 1], loops=8, progress=False)
    seconds = time.perf_counter() - started
    stop.set()
    sampler.join()
    row = report.rows[0]
    print(json.dumps({"mode": mode, "peak_mib": peak[0], "process_peak_mib": resource.getrusage(
                          resource.RUSAGE_SELF).ru_maxrss / 1024, "after_load_mib": loaded, "seconds": seconds,
                      "lambda_max": row.results["lyapunov"].exponents[0],
                      "spectral_norm": row.results["spectral_norm"].max}))


def _rss_mib() -> float:
    """The process's resident set now (VmRSS), in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], args.child[1], args.layers)
        return
    import torch
    import transformers

    with tempfile.TemporaryDirectory() as folder:
        torch.manual_seed(0)
        config = transformers.GPT2Config(n_layer=args.layers, n_embd=args.hidden, n_head=args.hidden // 64,
                                         vocab_size=1000, n_positions=128)
        model = transformers.GPT2LMHeadModel(config)
        block_mib = sum(p.numel() * p.element_size() for p in model.transformer.h.parameters()) / 2**20
        model.save_pretrained(folder)
        del model
        results = []
        for mode in ("memory", "disk", "memory", "disk"):   # interleaved rounds
            env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
            out = subprocess.run([sys.executable, __file__, "--layers", str(args.layers), "--child", folder, mode],
                                 env=env, capture_output=True, text=True, check=True).stdout
            results.append(json.loads(out.strip().splitlines()[-1]))
    summary = {"layers": args.layers, "hidden": args.hidden, "layer_weights_mib": block_mib,
               "load": os.getloadavg(), "runs": results}
    path = Path(__file__).resolve().parent / "out" / "offload.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(summary, indent=1))
    print(f"GPT-2 shape, {args.layers} layers x hidden {args.hidden}: the layers' weights {block_mib:.0f} MiB")
    print("| weights | RSS after loading (MiB) | peak RSS during analyze (MiB) | process peak (MiB) | analyze seconds | "
          "lambda_max (layer 0) | ||J||_2 |")
    print("|---|---|---|---|---|---|---|")
    for run in results:
        print(f"| {run['mode']} | {run['after_load_mib']:.0f} | {run['peak_mib']:.0f} | {run['process_peak_mib']:.0f} | "
              f"{run['seconds']:.1f} | "
              f"{run['lambda_max']:+.5f} | {run['spectral_norm']:.5f} |")


if __name__ == "__main__":
    main()
