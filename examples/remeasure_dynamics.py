"""Re-measure the loop dynamics of every shipped Sudoku checkpoint (cards and zoo) the way cards measure them now:
the model and its start state in float64, per puzzle kept, median / IQR / outliers beside the mean.

    OMP_NUM_THREADS=1 .venv/bin/python examples/remeasure_dynamics.py              # every shipped solver
    OMP_NUM_THREADS=1 .venv/bin/python examples/remeasure_dynamics.py --only zoo/itrsa-no-norm

For each checkpoint: its ``results.json`` gets the new ``dynamics_id`` (the other fields as they were; the old
summary is kept as ``dynamics_id_float32_start`` when the start state was float32), and its card's dynamics section
is rewritten from it; both files are replaced atomically. The puzzles are the cards' own: the first
``dynamics_puzzles`` (16) SATNet test puzzles. ~2-5 s a checkpoint on one CPU thread.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def shipped_solvers(root: Path = ROOT / "hub_configs") -> dict[str, Path]:
    """``{name: folder}`` of every shipped checkpoint whose results.json carries Sudoku dynamics."""
    found = {}
    for results in sorted(root.glob("**/results.json")):
        record = json.loads(results.read_text())
        if "dynamics_id" in record and "loops_trained" in record:
            found[results.parent.relative_to(root).as_posix()] = results.parent
    return found


def remeasure(name: str, folder: Path) -> dict:
    import jacobiscope
    from jacobiscope._io import atomic_write_text
    from jacobiscope.data import sudoku
    from jacobiscope.recipes._sudoku_dynamics import measure_dynamics, refresh_dynamics_section

    record = json.loads((folder / "results.json").read_text())
    old = record["dynamics_id"]
    _, test = sudoku.satnet_splits(limit=int(old.get("puzzles", 16)))
    model = jacobiscope.load_pretrained(name).eval()
    new = measure_dynamics(model, sudoku.to_tensor(list(test["puzzle"])), int(old.get("loops", model.config.loops)))
    if old.get("start_state") != "float64":
        record["dynamics_id_float32_start"] = {k: v for k, v in old.items() if not isinstance(v, (dict, list))}
    record["dynamics_id"] = new
    atomic_write_text(folder / "results.json", json.dumps(record, indent=1))
    refresh_dynamics_section(folder)
    return {"name": name, "max_lyapunov": (old["max_lyapunov_mean"], new["max_lyapunov_mean"]),
            "norm_end": (old["spectral_norm_end_mean"], new["spectral_norm_end_mean"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", help="checkpoint names (default: every shipped solver)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    solvers = shipped_solvers()
    unknown = sorted(set(args.only or []) - set(solvers))
    if unknown:
        raise SystemExit(f"remeasure_dynamics.py: not shipped solvers: {unknown} — pick from {sorted(solvers)}")
    for name in args.only or solvers:
        change = remeasure(name, solvers[name])
        print(f"{name}: max LE {change['max_lyapunov'][0]:.4f} -> {change['max_lyapunov'][1]:.4f}, ||J|| at T "
              f"{change['norm_end'][0]:.3f} -> {change['norm_end'][1]:.3f}", flush=True)


if __name__ == "__main__":
    main()
