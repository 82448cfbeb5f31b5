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

Every measurement is timed and caught on its own (an out-of-memory or an error is recorded, the next one runs).
Each is appended to ``OUT/measurements.jsonl`` as it is taken (flushed and synced) and ``OUT/gpu_check.json`` /
``OUT/gpu_check.md`` are rewritten atomically after it, so a run killed at any point keeps what it measured. Times
are medians of ``--repeats`` warm runs after one cold run (the cold time is kept beside them), as far as
``--budget`` (default 450 s: the whole run stays under 8 minutes) allows. The run ends with one line per goal,
printed and written to ``OUT/verdicts.txt``:

    PASS agreement: 9/9 cuda float32 checks within tolerance of the float64 references (shipped from ...)
    PASS llama_layer: top-16 Lyapunov of a Llama-7B-shaped layer (4096 tokens x 4096) in 41.2 s (median of 3; ...)
    PASS analyze_1b: analyze of a 1.21B-parameter Llama shape, 16/16 layers at 512 tokens in 212.4 s

The exit status is 1 when a goal fails.

A bare GPU machine has only its system ``python3`` (its own torch and transformers, no network, no virtual
environment): the script puts the repository on ``sys.path`` itself, and the float64 references are computed
here, on this CPU, and travel with the run (``--prepare``), so the GPU machine's CPU computes none:

    .venv/bin/python benchmarks/gpu_check.py --prepare .gpu_reference                      # here, once (~1 min)
    python3 benchmarks/gpu_check.py --references .gpu_reference --out "$OUT"                 # there
    .venv/bin/python benchmarks/gpu_check.py --tiny --out /tmp/gpu_check                     # CPU smoke run (CI)

(``echo /.gpu_reference/ >> .git/info/exclude`` and name ``.gpu_reference`` in the device tool's ``carry``.) The
references hold the inputs too (the maps' weights, the states, the probe vectors, the Llama weights), so both
machines measure the very same maps whatever their torch versions draw from a seed. Without ``--references`` the
references are computed on the machine that runs the check, and the output says so.

The device is ``cuda`` when ``torch.cuda.is_available()``, else ``cpu`` (then "device" means float32 on the
CPU, compared with float64 on the CPU); ``--device`` overrides.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import platform
import sys
import time
import traceback
from pathlib import Path

import torch

# A bare GPU machine runs this with its system python3: the repository itself is the package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import jacobiscope as js  # noqa: E402

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


def timed_repeats(device: torch.device, function, repeats: int, *, room: float = 1.5):
    """``(result, times)``: one cold run, then up to ``repeats`` warm ones while the --budget leaves ``room`` x the
    last run's time. ``times = {"cold", "warm" (list), "median" (of the warm ones; the cold one when none ran),
    "peak_bytes"}``."""
    result, cold, peak = timed(device, function)
    warm = []
    while len(warm) < repeats and time_left() > room * (warm[-1] if warm else cold) + 20:
        result, seconds, run_peak = timed(device, function)
        warm.append(seconds)
        peak = None if peak is None else max(peak, run_peak or 0)
    ordered = sorted(warm)
    median = ordered[len(ordered) // 2] if len(ordered) % 2 else (
        (ordered[len(ordered) // 2 - 1] + ordered[len(ordered) // 2]) / 2 if ordered else cold)
    return result, {"cold": cold, "warm": warm, "median": median, "seconds": median, "peak_bytes": peak}


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
def agreement_inputs(sizes: dict) -> dict:
    """Everything the agreement checks start from: the attention map's float64 weights, its state and probe
    vector, and a small Llama's float32 weights and token ids (what ``--prepare`` ships)."""
    attention = js.systems.self_attention_map(tokens=sizes["tokens"], dim=sizes["dim"], heads=sizes["heads"],
                                              injection=True, seed=0, dtype=torch.float64)
    model, ids = llama_model(sizes["llama_hidden"], sizes["llama_heads"], sizes["llama_intermediate"],
                             sizes["analyze_layers"], sizes["llama_tokens"])
    return {"x": representative_state(attention, attention.x0),
            "v": torch.randn(attention.x0.shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64),
            "llama_ids": ids, **{f"attention.{k}": t.detach() for k, t in attention.params.items()},
            **{f"llama.{k}": t for k, t in model.state_dict().items()}}


def agreement_maps(inputs: dict, sizes: dict):
    """``(attention map, Llama model, ids)`` rebuilt from ``inputs``: the shipped weights, not a seed's draw."""
    attention = js.systems.self_attention_map(tokens=sizes["tokens"], dim=sizes["dim"], heads=sizes["heads"],
                                              injection=True, seed=0, dtype=torch.float64)
    attention.module.load_state_dict({k[len("attention."):]: t for k, t in inputs.items()
                                      if k.startswith("attention.")}, strict=False)
    attention = js.LoopedMap(attention.module, x0=inputs["x"], name=attention.name)
    model, _ = llama_model(sizes["llama_hidden"], sizes["llama_heads"], sizes["llama_intermediate"],
                           sizes["analyze_layers"], sizes["llama_tokens"])
    model.load_state_dict({k[len("llama."):]: t for k, t in inputs.items() if k.startswith("llama.")})
    return attention, model, inputs["llama_ids"]


def agreement_values(inputs: dict, sizes: dict, device: torch.device, dtype: torch.dtype) -> dict:
    """Every check's value with the maps in ``dtype`` on ``device`` (float64 on the CPU: the references)."""
    from jacobiscope.linalg.operators import jvp, vjp

    attention, model, ids = agreement_maps(inputs, sizes)
    m = attention.to(dtype=dtype, device=device)
    x, v = inputs["x"].to(device, dtype), inputs["v"].to(device, dtype)
    values = {"jvp": jvp(m, x, v), "vjp": vjp(m, x, v), "spectral_norm": js.spectral_norm(m, x).value,
              "eigenvalue_moduli": js.jacobian_eigenvalues(m, x, k=4, method="arnoldi").values.abs(),
              "lyapunov": js.lyapunov_spectrum(m, x, steps=32, k=4).exponents,
              "finite_time": js.finite_time_exponents(m, x, loops=16, starts=8).exponents}
    block = js.looped_block(model, ids, layer=0, dtype=torch.float64).to(dtype=dtype, device=device)
    values["llama_lyapunov"] = js.lyapunov_spectrum(block, block.x0, steps=16, k=2).exponents
    values["llama_spectral_norm"] = js.spectral_norm(block, block.x0).value
    options = {"loops": 8, "diagnostics": ["lyapunov"], "k": 1, "progress": False}
    rows = js.analyze(model, ids, dtype=dtype, device=device if device.type != "cpu" else None, **options).rows
    values["analyze_lambda_max"] = [row.scalars()["lambda_max"] for row in rows]
    return {name: (value.detach().cpu().double() if isinstance(value, torch.Tensor) else torch.tensor(
        value, dtype=torch.float64)) for name, value in values.items()}


WHOLE_TENSOR = ("jvp", "vjp")   # compared as ||a - b|| / ||b|| (too many values to list)
RELATIVE = ("spectral_norm", "eigenvalue_moduli", "llama_spectral_norm")


def agreement(device: torch.device, sizes: dict, references: dict | None = None) -> dict:
    """Device float32 against float64 references (shipped with ``--references``, else computed on this CPU)."""
    source = "shipped from the preparing machine's CPU" if references else "computed on this machine's CPU"
    if references is None:
        inputs = agreement_inputs(sizes)
        references = {"inputs": inputs, "values": agreement_values(inputs, sizes, torch.device("cpu"), torch.float64)}
    values = agreement_values(references["inputs"], sizes, device, torch.float32)
    checks = []
    for name, reference in references["values"].items():
        if name in WHOLE_TENSOR:
            checks.append(relative_entry(name, values[name], reference))
        else:
            checks.append(entry(name, values[name], reference, kind="rel" if name in RELATIVE else "abs"))
    return {"checks": checks, "passed": sum(check["ok"] for check in checks), "total": len(checks),
            "references": source, "tf32": bool(torch.backends.cuda.matmul.allow_tf32)}


def prepare(folder: Path, tiny: bool) -> None:
    """Compute the float64 references of the agreement checks here and write them, with their inputs, to
    ``folder`` (``references.safetensors`` + ``references.json``)."""
    from safetensors.torch import save_file

    sizes = (TINY if tiny else FULL)["agreement"]
    inputs = agreement_inputs(sizes)
    values = agreement_values(inputs, sizes, torch.device("cpu"), torch.float64)
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {f"input.{k}": t.contiguous() for k, t in inputs.items()}
    tensors.update({f"value.{k}": t.contiguous() for k, t in values.items()})
    temporary = folder / "references.safetensors.tmp"
    save_file(tensors, str(temporary))
    os.replace(temporary, folder / "references.safetensors")
    _write_atomic(folder / "references.json", json.dumps(
        {"tiny": tiny, "sizes": sizes, "torch": torch.__version__, "jacobiscope": js.__version__,
         "date": _dt.datetime.now().isoformat(timespec="seconds"), "checks": sorted(values)}, indent=1))
    print(f"references for {len(values)} checks ({'tiny' if tiny else 'full'} sizes) written to {folder}")


def load_references(folder: Path, tiny: bool) -> dict:
    from safetensors.torch import load_file

    meta = json.loads((folder / "references.json").read_text())
    if bool(meta["tiny"]) != tiny:
        raise SystemExit(f"{folder} holds {'tiny' if meta['tiny'] else 'full'}-size references and this run is "
                         f"{'tiny' if tiny else 'full'}-size — prepare them again with{'' if tiny else 'out'} --tiny")
    tensors = load_file(str(folder / "references.safetensors"))
    return {"inputs": {k[len("input."):]: t for k, t in tensors.items() if k.startswith("input.")},
            "values": {k[len("value."):]: t for k, t in tensors.items() if k.startswith("value.")}}


def _write_atomic(path: Path, text: str) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text)
    os.replace(temporary, path)


def llama_layer(device: torch.device, sizes: dict, log=None) -> dict:
    """One Llama-7B-shaped layer at 4k tokens as a looped map: Lyapunov, spectral norm, eigenvalues; each timed
    as the median of warm repeats, each logged as it is taken."""
    model, ids = llama_model(sizes["hidden"], sizes["heads"], sizes["intermediate"], 1, sizes["tokens"], device=device)
    m = js.looped_block(model, ids, layer=0)
    x = m.x0
    results = {"state": list(x.shape), "parameters": sum(p.numel() for p in model.layers[0].parameters()),
               "dtype": str(x.dtype).replace("torch.", ""), "chunk_size": sizes["chunk_size"],
               # weights and state, resident before any measurement: the peaks below include them
               "resident_bytes": torch.cuda.memory_allocated(device) if device.type == "cuda" else None}
    _, results["forward"] = timed_repeats(device, lambda: torch.no_grad()(m.step)(x), sizes.get("repeats", 3))
    _log(log, "forward", results["forward"])
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
        else:
            results[name] = _measured(device, name, run, sizes.get("repeats", 3))
        _log(log, name, results[name])
    return results


def _measured(device: torch.device, name: str, run, repeats: int) -> dict:
    """One measurement's summary and times, or the error it raised (recorded; the next one still runs)."""
    try:
        value, times = timed_repeats(device, run, repeats)
    except torch.OutOfMemoryError as error:
        torch.cuda.empty_cache()
        return {"error": f"out of memory: {str(error).splitlines()[0]}"}
    except Exception as error:  # noqa: BLE001 - recorded with its traceback
        return {"error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc()[-3000:]}
    return {**times, **_summary(name, value)}


def _log(log, name: str, value: dict) -> None:
    if log is not None:
        log(name, value)


def _summary(name: str, value) -> dict:
    if name == "lyapunov":
        return {"exponents": value.exponents.reshape(-1).tolist(), "stderr": value.stderr.reshape(-1).tolist()}
    if name == "spectral_norm":
        return {"value": float(torch.as_tensor(value.value).reshape(-1)[0]), "iterations": int(value.iterations)}
    moduli = value.values.abs().reshape(-1).tolist()
    return {"moduli": moduli, "converged": bool(value.converged), "matvecs": int(value.matvecs)}


def analyze_1b(device: torch.device, sizes: dict, log=None) -> dict:
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
        _log(log, f"layer {layer}", rows[-1])
    return {"seconds": seconds, "peak_bytes": peak, "parameters": sum(p.numel() for p in model.parameters()),
            "tokens": sizes["tokens"], "rows": rows, "skipped_layers": list(range(len(rows), sizes["layers"]))}


RUNNERS = {"agreement": agreement, "llama_layer": llama_layer, "analyze_1b": analyze_1b}
#: The goals the run reports PASS / FAIL on (issue 34): Llama-7B-shaped top-16 Lyapunov under a minute.
LYAPUNOV_GOAL_SECONDS = 60.0


def verdicts(record: dict) -> list[str]:
    """One ``PASS`` / ``FAIL`` line per goal, from what the record holds (a section not run says so)."""
    lines = []
    for name, judge in (("agreement", _agreement_verdict), ("llama_layer", _layer_verdict),
                        ("analyze_1b", _analyze_verdict)):
        section = record["sections"].get(name)
        if section is None:
            lines.append(f"SKIP {name}: not run")
            continue
        passed, text = judge(record, section)
        lines.append(f"{'PASS' if passed else 'FAIL'} {name}: {text}")
    return lines


def _agreement_verdict(record: dict, check: dict) -> tuple[bool, str]:
    if "checks" not in check:
        return False, check.get("error", "no checks")
    bad = [c["name"] for c in check["checks"] if not c["ok"]]
    return not bad, (f"{check['passed']}/{check['total']} {record['device']} float32 checks within tolerance of the "
                     f"float64 references ({check['references']})" + (f"; out of tolerance: {', '.join(bad)}" if bad
                                                                         else ""))


def _layer_verdict(record: dict, layer: dict) -> tuple[bool, str]:
    lyapunov = layer.get("lyapunov", {})
    if "median" not in lyapunov:
        return False, lyapunov.get("error") or layer.get("error", "not measured")
    state, goal = layer["state"], LYAPUNOV_GOAL_SECONDS
    return lyapunov["median"] < goal, (
        f"top-{len(lyapunov['exponents'])} Lyapunov of a Llama-7B-shaped layer ({state[1]} tokens x {state[2]}) in "
        f"{lyapunov['median']:.1f} s (median of {len(lyapunov['warm']) or 1}; goal < {goal:.0f} s)")


def _analyze_verdict(record: dict, big: dict) -> tuple[bool, str]:
    if "rows" not in big:
        return False, big.get("error", "not measured")
    done, total = len(big["rows"]), len(big["rows"]) + len(big["skipped_layers"])
    finite = all(row["lambda_max"] is not None and math.isfinite(row["lambda_max"]) for row in big["rows"])
    size = f"{big['parameters'] / 1e9:.2f}B" if big["parameters"] >= 1e8 else f"{big['parameters'] / 1e6:.2f}M"
    return done == total and finite, (f"analyze of a {size}-parameter Llama shape, {done}/{total} layers at "
                                      f"{big['tokens']} tokens in {big['seconds']:.1f} s"
                                      + ("" if finite else "; a lambda_max is not finite"))


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
                  "| measurement | seconds (median of warm runs) | cold run | peak memory | result |",
                  "|---|---|---|---|---|"]
        for name in ("forward", "lyapunov", "spectral_norm", "eigenvalues"):
            item = layer.get(name, {})
            if "error" in item:
                lines.append(f"| {name} | - | - | - | {item['error']} |")
            elif item:
                lines.append(f"| {name} | {item['median']:.3f} ({len(item['warm'])} runs) | {item['cold']:.3f} | "
                             f"{_bytes(item['peak_bytes'])} | {_layer_result(name, item)} |")
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
    lines += ["", *verdicts(record)]
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
    """Rewrite the JSON and the Markdown atomically (a kill never leaves half a file)."""
    _write_atomic(out / "gpu_check.json", json.dumps(record, indent=1, default=str))
    _write_atomic(out / "gpu_check.md", markdown(record))


class Recorder:
    """Appends each measurement to ``measurements.jsonl`` as it is taken (flushed and synced) and rewrites the
    outputs, so a run killed at any point keeps everything measured before."""

    def __init__(self, record: dict, out: Path):
        self.record, self.out = record, out
        self.path = out / "measurements.jsonl"

    def section(self, name: str):
        return lambda item, value: self.log(name, item, value)

    def log(self, section: str, item: str, value) -> None:
        line = json.dumps({"section": section, "item": item, "value": value,
                           "at": _dt.datetime.now().isoformat(timespec="seconds")}, default=str)
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(line + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        self.record["sections"].setdefault(section, {}).setdefault("partial", {})[item] = value
        write_outputs(self.record, self.out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="folder for gpu_check.json, gpu_check.md, measurements.jsonl, verdicts.txt")
    parser.add_argument("--tiny", action="store_true", help="hidden 64, 64 tokens, 2 layers: a CPU smoke run")
    parser.add_argument("--device", default="auto", help="auto (cuda when available), cpu, cuda, cuda:1, ...")
    parser.add_argument("--only", choices=SECTIONS, action="append", help="run only these sections")
    parser.add_argument("--budget", type=float, default=450.0,
                        help="seconds the run may take: later measurements are skipped (and said so) past it")
    parser.add_argument("--repeats", type=int, default=3, help="warm runs per timed measurement (median reported)")
    parser.add_argument("--prepare", metavar="DIR", help="compute the float64 references here, write them to DIR")
    parser.add_argument("--references", metavar="DIR", help="the references --prepare wrote (else computed here)")
    args = parser.parse_args(argv)
    if args.prepare:
        prepare(Path(args.prepare), args.tiny)
        return 0
    if not args.out:
        parser.error("--out DIR is required (where the measurements are written as they are taken)")
    _DEADLINE[0] = time.perf_counter() + args.budget
    device = pick_device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = False  # the agreement is about float32, not TF32's 10-bit mantissa
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sizes = {name: {**section, "repeats": args.repeats} for name, section in (TINY if args.tiny else FULL).items()}
    references = load_references(Path(args.references), args.tiny) if args.references else None
    record = {"date": _dt.datetime.now().isoformat(timespec="seconds"), "device": str(device),
              "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor()
              or "cpu", "tiny": args.tiny, "sizes": sizes, "budget": args.budget,
              "versions": {"torch": torch.__version__, "jacobiscope": js.__version__,
                           "transformers": _version("transformers"), "python": platform.python_version()},
              "threads": torch.get_num_threads(), "load": os.getloadavg(), "sections": {}, "section_seconds": {}}
    recorder = Recorder(record, out)
    for name in args.only or SECTIONS:
        started = time.perf_counter()
        if time_left() < 30:
            record["sections"][name] = {"error": f"skipped: {time_left():.0f} s of the --budget left"}
            continue
        try:
            if name == "agreement":
                result = agreement(device, sizes[name], references)
            else:
                result = RUNNERS[name](device, sizes[name], recorder.section(name))
            record["sections"][name] = result
        except Exception as error:  # noqa: BLE001 - recorded; the other sections still run
            record["sections"][name] = {"error": f"{type(error).__name__}: {error}",
                                        "traceback": traceback.format_exc()[-4000:]}
        record["section_seconds"][name] = time.perf_counter() - started
        recorder.log(name, "section", {"seconds": record["section_seconds"][name],
                                       "error": record["sections"][name].get("error")})
        record["sections"][name].pop("partial", None)
        write_outputs(record, out)
        print(f"{name}: {record['section_seconds'][name]:.1f} s", file=sys.stderr, flush=True)
    lines = verdicts(record)
    _write_atomic(out / "verdicts.txt", "\n".join(lines) + "\n")
    print(markdown(record))
    return 1 if any(line.startswith("FAIL") for line in lines) else 0


def _version(name: str) -> str | None:
    try:
        return __import__(name).__version__
    except Exception:  # noqa: BLE001 - a version string is only reported
        return None


if __name__ == "__main__":
    sys.exit(main())
