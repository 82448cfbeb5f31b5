"""GPU check: the engine on the accelerator agrees with the CPU in float64, and what it costs at Llama scale.

One prepared script for a lent GPU (about 10 minutes on an H200; ``--tiny`` runs in under a minute on a CPU):

1. **agreement**: a fixed list of engine checks, each run on the device in float32 and on the CPU in float64
   from the same map, state and start vectors: jvp, vjp, ``spectral_norm``, ``jacobian_eigenvalues`` (moduli),
   the top-4 ``lyapunov_spectrum``, ``finite_time_exponents`` over 8 starts, a Llama block's exponents and
   spectral norm through ``looped_block``, and ``analyze`` on a small Llama model. Each entry records both
   values, the error, the tolerance and whether it passed. TF32 matmuls are switched off (float32 proper).
2. **llama_layer**: one Llama-7B-shaped decoder layer (hidden 4096, 32 heads, intermediate 11008; a
   ``transformers.LlamaConfig`` with one layer, random weights, float32) as a looped map at 4096 tokens: the
   top-16 Lyapunov exponents over 32 loops, the spectral norm, the top-4 eigenvalues, each with its time and
   its peak memory (``torch.cuda.max_memory_allocated``; not measured on a CPU).
3. **analyze_1b**: ``jacobiscope.analyze`` on a 1B-shaped Llama (hidden 2048, 16 layers, random weights) over
   512 tokens: time, peak memory, and each layer's lambda_max, max ||J||_2 and verdict.

Every section is timed and caught on its own (an out-of-memory or an error is recorded, the next section runs),
and the outputs are rewritten after each section, so a run cut short still leaves what it measured:
``OUT/gpu_check.json`` and ``OUT/gpu_check.md`` (a Markdown table). ``--budget`` (default 540 s) is the time the
run may take: a measurement (or an analyzed layer) that would start past it is skipped, and the output says so.
The exit status is 1 when a section failed or an agreement check is out of tolerance.

Usage (from the repository root)::

    .venv/bin/python benchmarks/gpu_check.py --out benchmarks/out/gpu_check           # cuda when available
    .venv/bin/python benchmarks/gpu_check.py --tiny --out /tmp/gpu_check              # CPU smoke run, < 60 s
    .venv/bin/python benchmarks/gpu_check.py --only agreement --out /tmp/gpu_check     # one section

The device is ``cuda`` when ``torch.cuda.is_available()``, else ``cpu`` (then "device" means float32 on the
CPU, compared with float64 on the CPU); ``--device`` overrides.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import platform
import sys
import time
import traceback
from pathlib import Path

import torch

import jacobiscope as js

FULL = {
    "agreement": {"tokens": 81, "dim": 128, "heads": 8, "llama_hidden": 256, "llama_heads": 8,
                  "llama_intermediate": 688, "llama_tokens": 128, "analyze_layers": 2},
    "llama_layer": {"hidden": 4096, "heads": 32, "intermediate": 11008, "tokens": 4096, "k": 16, "loops": 32,
                    "chunk_size": 4, "eigen_k": 4, "eigen_restarts": 8},
    "analyze_1b": {"hidden": 2048, "heads": 32, "kv_heads": 8, "intermediate": 8192, "layers": 16, "tokens": 512,
                   "loops": 32, "k": 4},
}
TINY = {
    "agreement": {"tokens": 16, "dim": 32, "heads": 4, "llama_hidden": 64, "llama_heads": 4,
                  "llama_intermediate": 172, "llama_tokens": 64, "analyze_layers": 2},
    "llama_layer": {"hidden": 64, "heads": 4, "intermediate": 172, "tokens": 64, "k": 16, "loops": 32,
                    "chunk_size": 4, "eigen_k": 4, "eigen_restarts": 8},
    "analyze_1b": {"hidden": 64, "heads": 4, "kv_heads": 2, "intermediate": 172, "layers": 2, "tokens": 64,
                   "loops": 16, "k": 4},
}
# float32 on the device against float64 on the CPU: what rounding allows, with room for reduction orders.
TOLERANCES = {"jvp": 1e-4, "vjp": 1e-4, "spectral_norm": 1e-3, "eigenvalue_moduli": 2e-3, "lyapunov": 2e-3,
              "finite_time": 2e-3, "llama_lyapunov": 2e-3, "llama_spectral_norm": 1e-3, "analyze_lambda_max": 2e-3}
TRANSIENT = 8
SECTIONS = ("agreement", "llama_layer", "analyze_1b")
_DEADLINE = [math.inf]  # perf_counter time by which the run should end (--budget); steps past it are skipped


def time_left() -> float:
    return _DEADLINE[0] - time.perf_counter()


# ---------------------------------------------------------------------------------------------- helpers
def pick_device(requested: str) -> torch.device:
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(requested)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(device: torch.device, function):
    """``(result, seconds, peak_bytes)``: wall time after a device sync; peak allocated memory on CUDA, else None."""
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    synchronize(device)
    start = time.perf_counter()
    result = function()
    synchronize(device)
    seconds = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    return result, seconds, peak


def entry(name: str, device_value, reference_value, kind: str = "abs") -> dict:
    """One agreement check: the largest absolute (or relative) difference of two lists of numbers."""
    device_values, reference_values = _floats(device_value), _floats(reference_value)
    differences = [abs(a - b) for a, b in zip(device_values, reference_values)]
    error = max(differences) if differences else math.nan
    if kind == "rel":
        error = error / max(max(abs(v) for v in reference_values), 1e-30)
    tolerance = TOLERANCES[name]
    return {"name": name, "kind": kind, "device": device_values, "reference": reference_values, "error": error,
            "tolerance": tolerance, "ok": bool(math.isfinite(error) and error <= tolerance)}


def _floats(value) -> list:
    """Plain floats; a list of Python floats stays float64 (torch.as_tensor would round it to float32)."""
    if isinstance(value, torch.Tensor):
        return [float(v) for v in value.detach().cpu().double().reshape(-1).tolist()]
    if isinstance(value, (list, tuple)):
        return [float(v) for v in value]
    return [float(value)]


def relative_entry(name: str, device_tensor: torch.Tensor, reference_tensor: torch.Tensor) -> dict:
    """A check on a whole tensor: ``||a - b|| / ||b||`` (the values are too many to list)."""
    a, b = device_tensor.detach().cpu().double(), reference_tensor.detach().double()
    error = float((a - b).norm() / b.norm().clamp_min(1e-300))
    tolerance = TOLERANCES[name]
    return {"name": name, "kind": "rel_norm", "device": [float(a.norm())], "reference": [float(b.norm())],
            "error": error, "tolerance": tolerance, "ok": bool(math.isfinite(error) and error <= tolerance)}


def llama_model(hidden, heads, intermediate, layers, tokens, kv_heads=None, device="cpu", dtype=torch.float32):
    """A random-weight ``LlamaModel`` (vocabulary 1024: the embedding is not what is measured) built on ``device``."""
    import transformers

    config = transformers.LlamaConfig(hidden_size=hidden, num_attention_heads=heads,
                                      num_key_value_heads=kv_heads or heads, intermediate_size=intermediate,
                                      num_hidden_layers=layers, vocab_size=1024,
                                      max_position_embeddings=max(tokens, 64), attn_implementation="sdpa")
    torch.manual_seed(0)
    with torch.device(device):
        model = transformers.LlamaModel(config).to(dtype).eval()
    ids = torch.randint(0, 1024, (1, tokens), generator=torch.Generator().manual_seed(1)).to(device)
    return model, ids


def representative_state(m, x0):
    return m.trajectory(x0, steps=TRANSIENT)[-1].clone()


# ---------------------------------------------------------------------------------------------- sections
def agreement(device: torch.device, sizes: dict) -> dict:
    """Device float32 against CPU float64, check by check."""
    checks = []
    reference = js.systems.self_attention_map(tokens=sizes["tokens"], dim=sizes["dim"], heads=sizes["heads"],
                                              injection=True, seed=0, dtype=torch.float64)
    x_ref = representative_state(reference, reference.x0)
    on_device = reference.to(dtype=torch.float32, device=device)
    x_dev = x_ref.to(device=device, dtype=torch.float32)
    v = torch.randn(x_ref.shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    from jacobiscope.linalg.operators import jvp, vjp

    checks.append(relative_entry("jvp", jvp(on_device, x_dev, v.to(device, torch.float32)), jvp(reference, x_ref, v)))
    checks.append(relative_entry("vjp", vjp(on_device, x_dev, v.to(device, torch.float32)), vjp(reference, x_ref, v)))
    checks.append(entry("spectral_norm", js.spectral_norm(on_device, x_dev).value,
                        js.spectral_norm(reference, x_ref).value, kind="rel"))
    dev_eig = js.jacobian_eigenvalues(on_device, x_dev, k=4, method="arnoldi").values.abs().cpu()
    ref_eig = js.jacobian_eigenvalues(reference, x_ref, k=4, method="arnoldi").values.abs()
    checks.append(entry("eigenvalue_moduli", dev_eig, ref_eig, kind="rel"))
    checks.append(entry("lyapunov", js.lyapunov_spectrum(on_device, x_dev, steps=32, k=4).exponents.cpu(),
                        js.lyapunov_spectrum(reference, x_ref, steps=32, k=4).exponents))
    checks.append(entry("finite_time", js.finite_time_exponents(on_device, x_dev, loops=16, starts=8).exponents.cpu(),
                        js.finite_time_exponents(reference, x_ref, loops=16, starts=8).exponents))
    checks += _llama_agreement(device, sizes)
    return {"checks": checks, "passed": sum(check["ok"] for check in checks), "total": len(checks),
            "tf32": bool(torch.backends.cuda.matmul.allow_tf32)}


def _llama_agreement(device: torch.device, sizes: dict) -> list:
    """A Llama block through the adapter (rotary tables, causal mask replayed), and analyze on a small Llama."""
    checks = []
    model, ids = llama_model(sizes["llama_hidden"], sizes["llama_heads"], sizes["llama_intermediate"],
                             sizes["analyze_layers"], sizes["llama_tokens"])
    reference = js.looped_block(model, ids, layer=0, dtype=torch.float64)
    x_ref = reference.x0
    on_device = reference.to(dtype=torch.float32, device=device)
    x_dev = x_ref.to(device=device, dtype=torch.float32)
    checks.append(entry("llama_lyapunov", js.lyapunov_spectrum(on_device, x_dev, steps=16, k=2).exponents.cpu(),
                        js.lyapunov_spectrum(reference, x_ref, steps=16, k=2).exponents))
    checks.append(entry("llama_spectral_norm", js.spectral_norm(on_device, x_dev).value,
                        js.spectral_norm(reference, x_ref).value, kind="rel"))
    options = {"loops": 8, "diagnostics": ["lyapunov"], "k": 1, "progress": False}
    device_rows = js.analyze(model, ids, dtype=torch.float32, device=device, **options).rows
    reference_rows = js.analyze(model, ids, dtype=torch.float64, **options).rows
    checks.append(entry("analyze_lambda_max", [row.scalars()["lambda_max"] for row in device_rows],
                        [row.scalars()["lambda_max"] for row in reference_rows]))
    return checks


def llama_layer(device: torch.device, sizes: dict) -> dict:
    """One Llama-7B-shaped layer at 4k tokens as a looped map: Lyapunov, spectral norm, eigenvalues."""
    model, ids = llama_model(sizes["hidden"], sizes["heads"], sizes["intermediate"], 1, sizes["tokens"], device=device)
    m = js.looped_block(model, ids, layer=0)
    x = m.x0
    results = {"state": list(x.shape), "parameters": sum(p.numel() for p in model.layers[0].parameters()),
               "dtype": str(x.dtype).replace("torch.", ""), "chunk_size": sizes["chunk_size"],
               # weights and state, resident before any measurement: the peaks below include them
               "resident_bytes": torch.cuda.memory_allocated(device) if device.type == "cuda" else None}
    forward, seconds, peak = timed(device, lambda: torch.no_grad()(m.step)(x))
    results["forward"] = {"seconds": seconds, "peak_bytes": peak}
    del forward
    measurements = {
        "lyapunov": lambda: js.lyapunov_spectrum(m, x, steps=sizes["loops"], k=sizes["k"],
                                                 chunk_size=sizes["chunk_size"]),
        "spectral_norm": lambda: js.spectral_norm(m, x),
        "eigenvalues": lambda: js.jacobian_eigenvalues(m, x, k=sizes["eigen_k"], method="arnoldi",
                                                       max_restarts=sizes["eigen_restarts"]),
    }
    for name, run in measurements.items():
        if time_left() < 30:
            results[name] = {"error": f"skipped: {time_left():.0f} s of the --budget left"}
            continue
        try:
            value, seconds, peak = timed(device, run)
        except torch.OutOfMemoryError as error:  # recorded; the next measurement still runs
            results[name] = {"error": f"out of memory: {str(error).splitlines()[0]}"}
            torch.cuda.empty_cache()
            continue
        except Exception as error:  # noqa: BLE001 - recorded with its traceback; the next measurement runs
            results[name] = {"error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc()[-3000:]}
            continue
        results[name] = {"seconds": seconds, "peak_bytes": peak, **_summary(name, value)}
    return results


def _summary(name: str, value) -> dict:
    if name == "lyapunov":
        return {"exponents": value.exponents.reshape(-1).tolist(), "stderr": value.stderr.reshape(-1).tolist()}
    if name == "spectral_norm":
        return {"value": float(torch.as_tensor(value.value).reshape(-1)[0]), "iterations": int(value.iterations)}
    moduli = value.values.abs().reshape(-1).tolist()
    return {"moduli": moduli, "converged": bool(value.converged), "matvecs": int(value.matvecs)}


def analyze_1b(device: torch.device, sizes: dict) -> dict:
    """``jacobiscope.analyze`` on every layer of a 1B-shaped Llama, one layer per call so that a run short of
    --budget stops between layers (and says which it skipped) instead of being killed mid-way."""
    model, ids = llama_model(sizes["hidden"], sizes["heads"], sizes["intermediate"], sizes["layers"],
                             sizes["tokens"], kv_heads=sizes["kv_heads"], device=device)
    options = {"loops": sizes["loops"], "k": sizes["k"], "progress": False}
    rows, seconds, peak = [], 0.0, 0
    for layer in range(sizes["layers"]):
        if rows and time_left() < 1.5 * seconds / len(rows):
            break
        report, spent, layer_peak = timed(device, lambda: js.analyze(model, ids, layers=[layer], **options))
        seconds += spent
        peak = None if layer_peak is None else max(peak, layer_peak)
        rows += [{"layer": row.layer, "lambda_max": row.scalars()["lambda_max"],
                  "max_spectral_norm": row.scalars()["max_spectral_norm"], "regime": row.regime,
                  "seconds": row.seconds} for row in report.rows]
    return {"seconds": seconds, "peak_bytes": peak, "parameters": sum(p.numel() for p in model.parameters()),
            "tokens": sizes["tokens"], "rows": rows, "skipped_layers": list(range(len(rows), sizes["layers"]))}


RUNNERS = {"agreement": agreement, "llama_layer": llama_layer, "analyze_1b": analyze_1b}


# ---------------------------------------------------------------------------------------------- output
def markdown(record: dict) -> str:
    lines = [f"# GPU check ({record['device_name']}, {record['date']})", ""]
    sections = record["sections"]
    agreement_section = sections.get("agreement", {})
    if "checks" in agreement_section:
        lines += ["| check | device (float32) | CPU float64 | error | tolerance | ok |", "|---|---|---|---|---|---|"]
        for check in agreement_section["checks"]:
            lines.append(f"| {check['name']} ({check['kind']}) | {_short(check['device'])} | "
                         f"{_short(check['reference'])} | {check['error']:.2e} | {check['tolerance']:.0e} | "
                         f"{'yes' if check['ok'] else 'NO'} |")
        lines.append("")
    layer = sections.get("llama_layer", {})
    if "state" in layer:
        lines += [f"Llama-7B-shaped layer, state {layer['state']} ({layer['dtype']}):", "",
                  "| measurement | seconds | peak memory | result |", "|---|---|---|---|"]
        for name in ("forward", "lyapunov", "spectral_norm", "eigenvalues"):
            item = layer.get(name, {})
            if "error" in item:
                lines.append(f"| {name} | - | - | {item['error']} |")
            elif item:
                lines.append(f"| {name} | {item['seconds']:.2f} | {_bytes(item['peak_bytes'])} | "
                             f"{_layer_result(name, item)} |")
        lines.append("")
    big = sections.get("analyze_1b", {})
    if "rows" in big:
        skipped = f" (layers {big['skipped_layers']} skipped: --budget)" if big["skipped_layers"] else ""
        lines += [f"analyze on a 1B-shaped Llama, {big['tokens']} tokens: {big['seconds']:.1f} s, peak "
                  f"{_bytes(big['peak_bytes'])}{skipped}", "",
                  "| layer | lambda_max | max \\|\\|J\\|\\|2 | verdict |", "|---|---|---|---|"]
        lines += [f"| {row['layer']} | {_number(row['lambda_max'])} | {_number(row['max_spectral_norm'])} | "
                  f"{row['regime']} |" for row in big["rows"]]
        lines.append("")
    for name, section in sections.items():
        if "error" in section:
            lines.append(f"**{name} failed**: {section['error']}")
    lines.append("Section seconds: " + ", ".join(f"{name} {seconds:.1f}" for name, seconds in
                                                  record["section_seconds"].items()))
    return "\n".join(lines) + "\n"


def _short(values) -> str:
    shown = ", ".join(f"{v:.5g}" for v in values[:4])
    return f"[{shown}{', ...' if len(values) > 4 else ''}]"


def _bytes(value) -> str:
    return "-" if value is None else f"{value / 2**30:.2f} GiB"


def _number(value) -> str:
    return "-" if value is None else f"{value:.4g}"


def _layer_result(name: str, item: dict) -> str:
    if name == "lyapunov":
        return f"lambda_1..3 = {_short(item['exponents'][:3])}"
    if name == "spectral_norm":
        return f"\\|\\|J\\|\\|2 = {item['value']:.4g} ({item['iterations']} iterations)"
    if name == "eigenvalues":
        return f"moduli {_short(item['moduli'])}, converged {item['converged']}, {item['matvecs']} jvps"
    return ""


def write_outputs(record: dict, out: Path) -> None:
    (out / "gpu_check.json").write_text(json.dumps(record, indent=1, default=str))
    (out / "gpu_check.md").write_text(markdown(record))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for gpu_check.json and gpu_check.md")
    parser.add_argument("--tiny", action="store_true", help="hidden 64, 64 tokens, 2 layers: a CPU smoke run")
    parser.add_argument("--device", default="auto", help="auto (cuda when available), cpu, cuda, cuda:1, ...")
    parser.add_argument("--only", choices=SECTIONS, action="append", help="run only these sections")
    parser.add_argument("--budget", type=float, default=540.0,
                        help="seconds the run may take: later measurements are skipped (and said so) past it")
    args = parser.parse_args(argv)
    _DEADLINE[0] = time.perf_counter() + args.budget
    device = pick_device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = False  # the agreement is about float32, not TF32's 10-bit mantissa
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sizes = TINY if args.tiny else FULL
    record = {"date": _dt.datetime.now().isoformat(timespec="seconds"), "device": str(device),
              "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor()
              or "cpu", "tiny": args.tiny, "sizes": sizes, "versions": {"torch": torch.__version__,
                                                                        "jacobiscope": js.__version__,
                                                                        "python": platform.python_version()},
              "sections": {}, "section_seconds": {}}
    failed = False
    for name in args.only or SECTIONS:
        started = time.perf_counter()
        if time_left() < 30:
            record["sections"][name] = {"error": f"skipped: {time_left():.0f} s of the --budget left"}
            continue
        try:
            record["sections"][name] = RUNNERS[name](device, sizes[name])
        except Exception as error:  # noqa: BLE001 - recorded; the other sections still run
            record["sections"][name] = {"error": f"{type(error).__name__}: {error}",
                                        "traceback": traceback.format_exc()[-4000:]}
            failed = True
        record["section_seconds"][name] = time.perf_counter() - started
        write_outputs(record, out)
        print(f"{name}: {record['section_seconds'][name]:.1f} s", file=sys.stderr, flush=True)
    agreement_section = record["sections"].get("agreement", {})
    if agreement_section.get("checks") and agreement_section["passed"] < agreement_section["total"]:
        failed = True
    layer = record["sections"].get("llama_layer", {})
    if any(isinstance(item, dict) and not str(item.get("error", "skipped")).startswith("skipped")
           for item in layer.values()):
        failed = True
    print(markdown(record))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
