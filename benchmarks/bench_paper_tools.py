"""The paper's tools on the shipped Sudoku solvers: the Prop. 5.1 bound against the measured Jacobian norm, and the
state's overlap with the top eigenvectors of the Jacobian's symmetric part, along the loop.

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/bench_paper_tools.py [--puzzles 20] \
        [--loops 16] [--k 4]

For each shipped checkpoint, on SATNet test rows 9000.. (the in-distribution test puzzles, float32, the model's own
dtype): `jacobiscope.dynamics.norm_bound` at the states x_0 .. x_{loops-1} each loop is applied to (bound, measured ||J||_2,
their ratio, and ||J||_2 of the same loop with its norm removed, `jacobiscope.dynamics.without_norm`); then
`jacobiscope.dynamics.symmetric_overlap_along_loop` over x_0 .. x_loops (top-k eigenvectors of S = (J + J^T) / 2, the state
against its own eigenvectors and against those of the last state) and `jacobiscope.dynamics.energy_split` along the same
trajectory. Printed as RESULTS.md rows and written to benchmarks/out/paper_tools.json.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

import jacobiscope
from jacobiscope.data import sudoku
from jacobiscope.hub import shipped_checkpoints

CHECKPOINTS = ("itrsa-sudoku", "akorn-sudoku")


def bound_along_loop(m, states) -> dict:
    """Per loop t: the bound's terms, each ``[puzzles]``, and ||J|| of the loop with its norm removed."""
    bare = jacobiscope.dynamics.without_norm(m)
    rows = {key: [] for key in ("bound", "measured", "ratio", "R", "max_gamma", "inner_norm", "eta", "without_norm")}
    for x in states:
        result = jacobiscope.dynamics.norm_bound(m, x)
        for key in ("bound", "measured", "ratio", "R", "max_gamma", "inner_norm", "eta"):
            rows[key].append(getattr(result, key).tolist())
        rows["without_norm"].append(jacobiscope.spectral_norm(bare, x).value.tolist())
    return rows


def overlap_along_loop(m, x0, loops: int, k: int) -> dict:
    along = jacobiscope.dynamics.symmetric_overlap_along_loop(m, x0, loops=loops, k=k)
    states = m.trajectory(x0, loops)
    split = jacobiscope.dynamics.energy_split(states, m)
    return {"values": along.values.tolist(), "own": along.own.tolist(), "fixed": along.fixed.tolist(),
            "chance": along.chance, "converged": along.converged, "reference": along.reference,
            "energy_total": split.total.tolist(), "energy_parts": {k: v.tolist() for k, v in split.parts.items()},
            "injection": split.injection}


def summary_rows(name: str, bound: dict, overlap: dict) -> list[str]:
    ratio = torch.tensor(bound["ratio"])  # [loops, puzzles]
    measured, without = torch.tensor(bound["measured"]), torch.tensor(bound["without_norm"])
    own, fixed = torch.tensor(overlap["own"]), torch.tensor(overlap["fixed"])  # [loops + 1, puzzles, k]
    last = own.shape[0] - 1
    top_value = torch.tensor(overlap["values"])[..., 0]  # [loops + 1, puzzles]
    energy = {key: torch.tensor(value) for key, value in overlap["energy_parts"].items()}
    return [
        f"| {name} | {ratio.mean():.3f} | {ratio.min():.3f} / {ratio.max():.3f} | "
        f"{ratio[0].mean():.3f} / {ratio[-1].mean():.3f} | {measured.mean():.3f} | "
        f"{torch.tensor(bound['bound']).mean():.3f} | {torch.tensor(bound['R']).mean():.3f} | "
        f"{torch.tensor(bound['max_gamma']).mean():.3f} | {torch.tensor(bound['inner_norm']).mean():.3f} | "
        f"{without.mean():.2f} |",
        f"| {name} | {own[0, :, 0].mean():.4f} / {own[last // 2, :, 0].mean():.4f} / {own[last, :, 0].mean():.4f} | "
        f"{own[last].max(-1).values.mean():.4f} | {fixed[0].max(-1).values.mean():.4f} / "
        f"{fixed[last // 2].max(-1).values.mean():.4f} | {overlap['chance']:.4f} | "
        f"{top_value[0].mean():.3f} / {top_value[last].mean():.3f} | "
        + " / ".join(f"{key} {value[0].mean():.1f} -> {value[-1].mean():.1f}" for key, value in energy.items()) + " |",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--puzzles", type=int, default=20)
    parser.add_argument("--loops", type=int, default=16)
    parser.add_argument("--k", type=int, default=4, help="eigenpairs of the symmetric part per state")
    args = parser.parse_args()
    torch.set_num_threads(1)
    _, test = sudoku.satnet_splits()
    puzzles = sudoku.to_tensor(list(test["puzzle"][: args.puzzles]))
    results, bound_rows, overlap_rows = {}, [], []
    for name in CHECKPOINTS:
        if name not in shipped_checkpoints():
            continue
        model = jacobiscope.load_pretrained(name).eval()
        m = model.loop_map(puzzles)
        states = m.trajectory(m.x0, args.loops)
        started = time.perf_counter()
        bound = bound_along_loop(m, states[: args.loops])
        bound_seconds = time.perf_counter() - started
        started = time.perf_counter()
        overlap = overlap_along_loop(m, m.x0, args.loops, args.k)
        results[name] = {"bound": bound, "overlap": overlap, "puzzles": args.puzzles, "loops": args.loops,
                         "k": args.k, "bound_seconds": bound_seconds,
                         "overlap_seconds": time.perf_counter() - started}
        rows = summary_rows(name, bound, overlap)
        bound_rows.append(rows[0])
        overlap_rows.append(rows[1])
        print(f"{name}: bound {bound_seconds:.0f} s, overlaps {results[name]['overlap_seconds']:.0f} s", flush=True)
    print("\n| checkpoint | bound / ||J|| mean | min / max | at x_0 / x_last | ||J|| mean | bound mean | R mean | "
          "max|gamma| | ||J_MSA|| mean | ||J|| without norm |")
    print("|---|" + "---|" * 9)
    print("\n".join(bound_rows))
    print("\n| checkpoint | top-1 own overlap x_0 / x_mid / x_last | best of top-k own at x_last | best top-k overlap "
          "with x_last's eigvecs at x_0 / x_mid | chance | top eigenvalue of S at x_0 / x_last | "
          "energy parts x_0 -> x_last |")
    print("|---|" + "---|" * 6)
    print("\n".join(overlap_rows))
    out = Path(__file__).resolve().parent / "out"
    out.mkdir(exist_ok=True)
    (out / "paper_tools.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
