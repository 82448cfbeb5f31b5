"""The shipped looped LMs side by side: accuracy per loop count (in-range and harder than trained), where each peaks
and collapses, and the dynamics at the trained depth — the figure and the RESULTS.md table, read from each shipped
folder's results.json (written by `ship_looped_lm`; re-measured there, not here).

    .venv/bin/python benchmarks/looped_lms.py        # writes benchmarks/figures/looped_lms_accuracy.png, prints rows
"""
from __future__ import annotations

import json
from pathlib import Path

from jacobiscope._figures import new_figure, save_figure
from jacobiscope.hub import shipped_checkpoints

HERE = Path(__file__).resolve().parent


def shipped_looped_lms() -> dict[str, dict]:
    """Short name -> results.json of every shipped checkpoint that is a looped LM with a task card."""
    found = {}
    for name, folder in shipped_checkpoints().items():
        path = folder / "results.json"
        if path.is_file():
            results = json.loads(path.read_text())
            if "task" in results and "train" in results:
                found[name] = results
    return found


def figure(all_results: dict[str, dict], path: Path):
    fig = new_figure(10, 4)
    axes = fig.subplots(1, 2, sharey=True)
    for ax, split, title in ((axes[0], "train", "in-range instances"), (axes[1], "harder", "harder than trained")):
        for name, results in all_results.items():
            curve = {int(k): v for k, v in results[split]["accuracy"].items()}
            loops = sorted(curve)
            line, = ax.plot(loops, [100 * curve[t] for t in loops], marker="o", ms=3, label=name)
            ax.axvline(results["configured"], color=line.get_color(), ls=":", lw=1)
        ax.set_title(title)
        ax.set_xlabel("loops (the model's own loop knob)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("exact match (%)")
    axes[1].legend(fontsize=8)
    fig.suptitle("Shipped looped LMs: accuracy per loop count (trained depth dotted)")
    save_figure(fig, path)
    return fig


def rows(all_results: dict[str, dict]) -> list[str]:
    out = ["| checkpoint | family, params | task | trained depth | in-range at depth | peak (loop) | collapse | "
           "harder at depth | harder peak (loop) | past depth | verdicts | lambda_max late | ||J|| at depth |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in all_results.items():
        c, tr, hd, dy = r["configured"], r["train"]["summary"], r["harder"]["summary"], r["dynamics"]
        verdicts = ", ".join(f"{n} {v}" for v, n in sorted(dy["verdicts"].items()))
        lam = dy["lambda_max_late_median"]
        out.append(f"| {name} | {r['family']}, {r['parameters'] / 1e6:.2f}M | {r['task']} | {c} | "
                   f"{100 * tr['at_configured']:.1f}% | {100 * tr['peak']:.1f}% ({tr['peak_loop']}) | "
                   f"{tr['collapse_loop'] or '-'} | {100 * hd['at_configured']:.1f}% | {100 * hd['peak']:.1f}% "
                   f"({hd['peak_loop']}) | {tr['past_depth']} / {hd['past_depth']} | {verdicts} | "
                   f"{'-' if lam is None else f'{lam:+.3f}'} | {dy['spectral_norm_at_depth_median']:.3g} |")
    return out


def main() -> None:
    found = shipped_looped_lms()
    if not found:
        raise SystemExit("no shipped looped LM (hub_configs/*/results.json with a task) — ship one first")
    figure(found, HERE / "figures" / "looped_lms_accuracy.png")
    print("\n".join(rows(found)))


if __name__ == "__main__":
    main()
