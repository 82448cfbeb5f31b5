"""The dynamics a Sudoku solver's card reports: the loop's max Lyapunov exponent and Jacobian spectral norms on ID
puzzles, in float64 from the start state on, per puzzle and summarized by median, quartiles and outliers.

Example::

    >>> from jacobiscope.recipes._sudoku_dynamics import summarize
    >>> summary = summarize([6.7, 7.9, 8.4, 9.1, 10.2, 12.0, 17328.0])
    >>> summary["median"], summary["outliers"], round(summary["mean"])
    (9.1, [6], 2483)

A mean over 16 puzzles can be carried by one of them (an unnormalized solver whose start state overflowed float32:
15 puzzles at 7-12 and one at 17,328 averaged 1,092); the card shows the median and the interquartile range beside
the mean, and names the puzzles beyond 3 interquartile ranges of the quartiles.
"""
from __future__ import annotations

import copy
import warnings

import torch

from .._io import atomic_write_text
from ._card_files import read_shipped_card

__all__ = ["measure_dynamics", "summarize", "dynamics_section", "refresh_dynamics_section"]

_TITLE = "## Dynamics of the loop"
_OUTLIER_REACH = 3.0


def summarize(values) -> dict:
    """Mean, s.d., median, quartiles and the indices beyond 3 interquartile ranges of the quartiles (4+ values)."""
    v = torch.as_tensor(list(values), dtype=torch.float64)
    q1, median, q3 = (float(q) for q in torch.quantile(v, torch.tensor([0.25, 0.5, 0.75], dtype=torch.float64)))
    spread = q3 - q1
    far = (v < q1 - _OUTLIER_REACH * spread) | (v > q3 + _OUTLIER_REACH * spread)
    return {"mean": float(v.mean()), "std": float(v.std()) if v.numel() > 1 else 0.0, "median": median, "q1": q1,
            "q3": q3, "outliers": [int(i) for i in far.nonzero().flatten()] if v.numel() >= 4 else []}


def measure_dynamics(model, puzzles, loops: int) -> dict:
    """Max Lyapunov exponent and Jacobian spectral norms of ``model``'s loop on ``puzzles``, the model and its start
    state in float64 (a float32 start state that overflows is not the float64 map's start), per puzzle."""
    from ..dynamics.lyapunov import lyapunov_spectrum
    from ..linalg.svd import spectral_norm

    model64 = copy.deepcopy(model).to(dtype=torch.float64)
    looped = model64.loop_map(puzzles).to(dtype=torch.float64)
    lyapunov = lyapunov_spectrum(looped, looped.x0, steps=loops, k=1, seed=0)
    final = looped.trajectory(looped.x0, loops)[-1]
    # A residual of 1e-4 gives sigma to ~1e-8 (Ritz values converge quadratically); the slowest puzzle of the
    # batch sets the iteration count, so the cap keeps the card's measurement cheap.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start_result = spectral_norm(looped, looped.x0, tol=1e-4, max_iter=60)
        end_result = spectral_norm(looped, final, tol=1e-4, max_iter=60)
    exponents = lyapunov.exponents[:, 0].tolist()
    start, end = start_result.value.reshape(-1).tolist(), end_result.value.reshape(-1).tolist()
    lyapunov_summary, start_summary, end_summary = summarize(exponents), summarize(start), summarize(end)
    return {
        "puzzles": int(puzzles.shape[0]),
        "loops": loops,
        "start_state": "float64",
        "max_lyapunov_mean": lyapunov_summary["mean"],
        "max_lyapunov_std": lyapunov_summary["std"],
        "max_lyapunov_median": lyapunov_summary["median"],
        "max_lyapunov_iqr": [lyapunov_summary["q1"], lyapunov_summary["q3"]],
        "max_lyapunov_outliers": lyapunov_summary["outliers"],
        "spectral_norm_start_mean": start_summary["mean"],
        "spectral_norm_start_median": start_summary["median"],
        "spectral_norm_end_mean": end_summary["mean"],
        "spectral_norm_end_median": end_summary["median"],
        "spectral_norm_end_iqr": [end_summary["q1"], end_summary["q3"]],
        "spectral_norm_end_max": max(end),
        "spectral_norm_end_outliers": end_summary["outliers"],
        "spectral_norm_max_residual": float(max(start_result.tolerance.max(), end_result.tolerance.max())),
        "per_puzzle": {"max_lyapunov": exponents, "spectral_norm_start": start, "spectral_norm_end": end},
    }


def _outlier_words(dynamics: dict, key: str) -> str:
    found = dynamics.get(f"{key}_outliers") or []
    values = dynamics.get("per_puzzle", {}).get(key, [])
    if not found:
        return "none"
    return ", ".join(f"puzzle {i} ({values[i]:.4g})" if i < len(values) else f"puzzle {i}" for i in found)


def dynamics_section(results: dict) -> str:
    """The card's dynamics section from ``results["dynamics_id"]`` (a card measured before medians were kept shows
    its means only, and says so)."""
    d = results["dynamics_id"]
    start = "float64 from the start state on" if d.get("start_state") == "float64" else "float64"
    lines = [f"{_TITLE} (measured by jacobiscope, {start}, {d['puzzles']} ID test puzzles, T={d['loops']})", "",
             "| quantity | mean +- s.d. | median [IQR] | outliers (beyond 3 IQR) |", "|---|---|---|---|"]
    if "max_lyapunov_median" in d:
        low, high = d["max_lyapunov_iqr"]
        lines.append(f"| max Lyapunov exponent, nats/loop | {d['max_lyapunov_mean']:.4f} +- {d['max_lyapunov_std']:.4f} "
                     f"| {d['max_lyapunov_median']:.4f} [{low:.4f}, {high:.4f}] | "
                     f"{_outlier_words(d, 'max_lyapunov')} |")
        lines.append(f"| Jacobian spectral norm at the initial state | {d['spectral_norm_start_mean']:.3f} | "
                     f"{d['spectral_norm_start_median']:.3f} | - |")
        low, high = d["spectral_norm_end_iqr"]
        lines.append(f"| Jacobian spectral norm at loop T (max {d['spectral_norm_end_max']:.3f}) | "
                     f"{d['spectral_norm_end_mean']:.3f} | {d['spectral_norm_end_median']:.3f} [{low:.3f}, {high:.3f}] | "
                     f"{_outlier_words(d, 'spectral_norm_end')} |")
    else:
        lines.append(f"| max Lyapunov exponent, nats/loop | {d['max_lyapunov_mean']:.4f} +- {d['max_lyapunov_std']:.4f} "
                     "| not kept (measured before medians) | - |")
        lines.append(f"| Jacobian spectral norm at the initial state | {d['spectral_norm_start_mean']:.3f} | - | - |")
        lines.append(f"| Jacobian spectral norm at loop T (max {d['spectral_norm_end_max']:.3f}) | "
                     f"{d['spectral_norm_end_mean']:.3f} | - | - |")
    return "\n".join(lines) + "\n"


def refresh_dynamics_section(folder) -> bool:
    """Rewrite the dynamics section of the card in ``folder`` from its ``results.json``; returns whether the card
    changed. The card is replaced atomically."""
    card_path, card, results = read_shipped_card(folder, "refresh_dynamics_section")
    if f"\n{_TITLE}" not in card:
        raise ValueError(f"{card_path} has no '{_TITLE}' section to rewrite")
    start = card.index(f"\n{_TITLE}") + 1
    end = card.find("\n## ", start + 1) + 1  # 0: the section is the card's last
    section = dynamics_section(results)
    updated = card[:start] + section + ("\n" + card[end:] if end else "")
    if updated != card:
        atomic_write_text(card_path, updated)
    return updated != card
