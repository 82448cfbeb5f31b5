"""The loop lens's cost per loop against the model's own forward, on small random HRM-Text, Dory and ALBERT.

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/bench_loop_lens.py [--rounds 5] [--figures]

Per family (random weights from a config, no downloads; one input of ``--tokens`` tokens), timed in interleaved
rounds (each round runs every variant once, in turn, so a load change on the machine hits them alike), medians:

- ``forward``: the model's own forward, divided by its configured loop count (its cost per loop, prelude and head
  included: an upper bound on one iteration);
- ``lens, readout only``: ``loop_lens(..., dynamics=False)`` over ``--loops`` loops, per loop (one step and one
  readout per loop, plus building the map: one captured forward);
- ``lens, ||J|| every N``: ``loop_lens(..., jacobian_every=N, spectral_radius=False)``, per loop, for N = 1 and
  N = the configured depth (one jvp per loop for the expansion rate, a Lanczos run at every N-th loop).

Prints RESULTS.md rows (seconds per loop and the multiple of the forward's per-loop cost) and writes
benchmarks/out/loop_lens.json; ``--figures`` also writes benchmarks/figures/loop_lens_<family>.png (the lens figure
at four times the configured depth) and loop_lens_intervention.png (ALBERT continued from another input's state).
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
import transformers

import jacobiscope

HERE = Path(__file__).resolve().parent


def hrm_text(hidden):
    config = transformers.HrmTextConfig(vocab_size=256, hidden_size=hidden, intermediate_size=2 * hidden,
                                        num_hidden_layers=2, num_attention_heads=4, head_dim=hidden // 4, H_cycles=2,
                                        L_cycles=4, max_position_embeddings=128)
    return transformers.HrmTextForCausalLM(config), 4


def dory(hidden):
    config = transformers.DoryConfig(vocab_size=256, hidden_size=hidden, intermediate_size=2 * hidden,
                                     num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                                     head_dim=hidden // 4, n_input_layers=1, n_recurrent_layers=2, n_output_layers=1,
                                     n_recurrent_loops=4, ngpt_alpha_init=0.4,
                                     layer_types=["full_attention"] * 4)
    return transformers.DoryForCausalLM(config), 4


def albert(hidden):
    config = transformers.AlbertConfig(vocab_size=256, embedding_size=hidden // 2, hidden_size=hidden,
                                       num_hidden_layers=6, num_attention_heads=4, intermediate_size=2 * hidden)
    return transformers.AlbertForMaskedLM(config), 6


FAMILIES = {"hrm_text": hrm_text, "dory": dory, "albert": albert}


def build(family, hidden):
    torch.manual_seed(0)
    model, configured = FAMILIES[family](hidden)
    return model.eval(), configured


def variants(model, ids, configured, loops):
    """name -> (callable, loops it covers)."""
    return {
        "forward": (lambda: model(input_ids=ids), configured),
        "lens, readout only": (lambda: jacobiscope.loop_lens(model, ids, loops=loops, dynamics=False), loops),
        "lens, ||J|| every loop": (lambda: jacobiscope.loop_lens(model, ids, loops=loops, jacobian_every=1,
                                                                 spectral_radius=False), loops),
        f"lens, ||J|| every {configured}": (lambda: jacobiscope.loop_lens(
            model, ids, loops=loops, jacobian_every=configured, spectral_radius=False), loops),
    }


def measure(family, hidden, tokens, rounds, loops_factor):
    model, configured = build(family, hidden)
    ids = torch.randint(0, 256, (1, tokens), generator=torch.Generator().manual_seed(1))
    loops = loops_factor * configured
    runs = variants(model, ids, configured, loops)
    times = {name: [] for name in runs}
    with torch.no_grad():
        for function, _ in runs.values():  # warm-up, not timed
            function()
    for _ in range(rounds):
        for name, (function, _) in runs.items():
            started = time.perf_counter()
            with torch.no_grad():
                function()
            times[name].append(time.perf_counter() - started)
    per_loop = {name: statistics.median(times[name]) / runs[name][1] for name in runs}
    return {"family": family, "hidden": hidden, "tokens": tokens, "configured": configured, "loops": loops,
            "rounds": rounds, "per_loop_seconds": per_loop,
            "multiple_of_forward": {name: per_loop[name] / per_loop["forward"] for name in runs}}


def figures():
    out = HERE / "figures"
    out.mkdir(exist_ok=True)
    ids = torch.tensor([[5, 17, 42, 9, 77, 3, 120, 64]])
    for family in FAMILIES:
        model, configured = build(family, 32)
        lens = jacobiscope.loop_lens(model, ids, loops=4 * configured)
        lens.plot(path=out / f"loop_lens_{family}.png",
                  title=f"loop lens: random tiny {family} (configured depth {configured}, dotted)")
    sudoku_figures(out)
    model, configured = build("albert", 32)
    pair = torch.cat([ids, torch.tensor([[8, 1, 99, 45, 12, 60, 2, 33]])])
    patched = jacobiscope.intervene(model, pair, at_loop=2, from_input=1, loops=4 * configured, baseline=True)
    patched.plot(0, path=out / "loop_lens_intervention.png",
                 title="ALBERT input 0 continued from input 1's state at loop 2")
    print("wrote", ", ".join(sorted(p.name for p in out.glob("loop_lens_*.png"))))


def sudoku_figures(out):
    """The shipped Sudoku solvers (local checkpoints, SATNet test puzzle 9000): the answer settles, the dynamics
    go on; written as loop_lens_<checkpoint>.png when the checkpoint and the data are on this machine."""
    from jacobiscope.data import sudoku
    from jacobiscope.hub import shipped_checkpoints

    try:
        _, test = sudoku.satnet_splits()
    except Exception as error:  # the data set is not on this machine: the tiny-model figures only
        print("no Sudoku figures:", error)
        return
    puzzle = sudoku.to_tensor(list(test["puzzle"][:1]))
    for name in ("itrsa-sudoku", "akorn-sudoku"):
        if name not in shipped_checkpoints():
            continue
        model = jacobiscope.load_pretrained(name).eval()
        configured = jacobiscope.native_loop(model, puzzle).info.loops
        lens = jacobiscope.loop_lens(model, puzzle, loops=4 * configured, jacobian_every=4, spectral_radius=False)
        lens.plot(path=out / f"loop_lens_{name}.png", title=f"loop lens: {name} on a SATNet test puzzle "
                  f"(trained depth {lens.configured}, dotted)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--loops-factor", type=int, default=2, help="lens loops = this x the configured depth")
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--figures", action="store_true")
    args = parser.parse_args()
    results = []
    print(f"| family (hidden {args.hidden}, {args.tokens} tokens) | forward / loop | lens readout only | "
          "lens ||J|| every loop | lens ||J|| every configured |")
    print("|---|---|---|---|---|")
    for family in args.families.split(","):
        result = measure(family, args.hidden, args.tokens, args.rounds, args.loops_factor)
        results.append(result)
        seconds, multiple = result["per_loop_seconds"], result["multiple_of_forward"]
        cells = [f"{1e3 * seconds[name]:.2f} ms ({multiple[name]:.1f}x)" for name in seconds if name != "forward"]
        print(f"| {family} (T={result['configured']}, lens to {result['loops']}) | "
              f"{1e3 * seconds['forward']:.2f} ms | " + " | ".join(cells) + " |", flush=True)
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    (out / "loop_lens.json").write_text(json.dumps(results, indent=1))
    if args.figures:
        figures()


if __name__ == "__main__":
    main()
