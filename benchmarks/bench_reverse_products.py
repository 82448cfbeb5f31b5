"""Cost of Jacobian products by double backward (steps with a custom autograd.Function that forward mode cannot
enter) against forward mode on the same block with the Function written in plain torch ops.

The block: layer 0 of a transformers Bloom model (hidden 128, 4 heads, 64 tokens), whose MLP runs its GELU through
``GeLUFunction`` (old style: no jvp, no setup_context). The plain variant patches ``BloomGelu.forward`` to
``bloom_gelu_forward``, the same formula in plain ops. Timed, interleaved (load from other processes hits both
alike): one forward, ``jvp`` (k = 1), ``jacobian_matmat`` of k = 8 tangents, ``vjp``, and ``lyapunov_spectrum``
(k = 4, 16 loops, eager). The exponents of both are compared in float64.

Usage (from the repository root)::

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 .venv/bin/python benchmarks/bench_reverse_products.py

Prints a markdown table and writes ``benchmarks/out/reverse_products.json``. Nothing is asserted: this measures.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
import warnings
from pathlib import Path

import torch
import transformers as T
from transformers.models.bloom import modeling_bloom

import jacobiscope as js
from jacobiscope.errors import SlowDerivativesWarning

_ORIGINAL_GELU = modeling_bloom.BloomGelu.forward


def _plain_gelu(self, x):
    return modeling_bloom.bloom_gelu_forward(x)


def _block_map(dtype):
    torch.manual_seed(0)
    model = T.BloomModel(T.BloomConfig(hidden_size=128, n_layer=2, n_head=4, vocab_size=500)).eval()
    ids = torch.randint(3, 500, (1, 64), generator=torch.Generator().manual_seed(1))
    return js.looped_block(model, {"input_ids": ids}, 0, dtype=dtype)


def _timed(function, repeats):
    function()  # warm-up (and, for the custom step, the switch to double backward)
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _operations(looped):
    x = looped.x0
    v = torch.randn(x.shape, dtype=x.dtype, generator=torch.Generator().manual_seed(2))
    V = torch.randn((8, *x.shape), dtype=x.dtype, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        return {
            "forward": lambda: looped(x),
            "jvp (k = 1)": lambda: js.linalg.jvp(looped, x, v),
            "jvp block (k = 8)": lambda: js.linalg.jacobian_matmat(looped, x, V),
            "vjp": lambda: js.linalg.vjp(looped, x, v),
            "Lyapunov k = 4, 16 loops": lambda: js.lyapunov_spectrum(looped, x, steps=16, k=4, compile=False),
        }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default="benchmarks/out/reverse_products.json")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore", SlowDerivativesWarning)
    modeling_bloom.BloomGelu.forward = _ORIGINAL_GELU
    custom = _block_map(torch.float32)
    modeling_bloom.BloomGelu.forward = _plain_gelu
    plain = _block_map(torch.float32)
    results = {}
    for _ in range(args.repeats):  # interleaved rounds
        for variant, looped, gelu in (("custom", custom, _ORIGINAL_GELU), ("plain", plain, _plain_gelu)):
            modeling_bloom.BloomGelu.forward = gelu
            for name, operation in _operations(looped).items():
                results.setdefault(variant, {}).setdefault(name, []).append(_timed(operation, 1))
    table = {variant: {name: statistics.median(times) for name, times in ops.items()}
             for variant, ops in results.items()}
    modeling_bloom.BloomGelu.forward = _ORIGINAL_GELU
    exponents_custom = js.lyapunov_spectrum(custom.to(torch.float64), custom.x0.double(), steps=16, k=4).exponents
    modeling_bloom.BloomGelu.forward = _plain_gelu
    exponents_plain = js.lyapunov_spectrum(plain.to(torch.float64), plain.x0.double(), steps=16, k=4).exponents
    modeling_bloom.BloomGelu.forward = _ORIGINAL_GELU
    difference = float((torch.as_tensor(exponents_custom) - torch.as_tensor(exponents_plain)).abs().max())
    machine = {"processor": platform.processor() or platform.machine(), "torch": torch.__version__,
               "threads": torch.get_num_threads(), "load": os.getloadavg()[0], "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    print(f"Machine: {machine}")
    print("| operation | forward mode, plain GELU | double backward, GeLUFunction | ratio |")
    print("|---|---|---|---|")
    for name in table["plain"]:
        a, b = table["plain"][name], table["custom"][name]
        print(f"| {name} | {a * 1e3:.2f} ms | {b * 1e3:.2f} ms | {b / a:.2f}x |")
    print(f"Lyapunov exponents (k = 4, float64), max |difference|: {difference:.1e}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": machine, "seconds": table, "max_exponent_difference": difference}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
