"""Does accuracy keep rising with the loop count? The test-time-scaling verdict of a checkpoint's per-loop results.

>>> import jacobiscope
>>> verdict = jacobiscope.recipes.loop_scaling({"16": 0.60, "17": 0.61, "32": 0.88, "33": 0.86, "64": 0.38, "128": 0.01})
>>> verdict["keeps_scaling"], verdict["peak_loops"], round(verdict["largest_drop"], 2), verdict["drop_loops"]
(False, 32, 0.87, 128)
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Mapping

from .._validation import tolerance as _tolerance
from ..errors import ArgumentError

__all__ = ["loop_scaling", "scaling_section", "SCALING_TOLERANCE"]

#: The issue's criterion: accuracy non-decreasing from T=16 on, within one point, odd and even T alike.
SCALING_TOLERANCE = 0.01


def _loop_count(loops) -> int:
    """A loop count key: an int (numpy ints too) or its decimal text, as results.json stores it; never a bool."""
    if not isinstance(loops, bool):
        if isinstance(loops, numbers.Integral):
            count = int(loops)
        elif isinstance(loops, str) and loops.strip().isdecimal():
            count = int(loops)
        else:
            count = None
        if count is not None and count >= 1:
            return count
    raise ArgumentError(f"loop_scaling: a loop count must be a whole number >= 1 (an int or its text such as '16'), "
                        f"got {loops!r} — key the mapping by loop count, e.g. {{16: 0.5, 32: 0.7}}")


def _accuracy(loops, value) -> float:
    """A board accuracy in [0, 1]: a number, or a dict holding ``board_accuracy``; never a bool, NaN or a percent."""
    if isinstance(value, Mapping):
        if "board_accuracy" not in value:
            raise ArgumentError(f"loop_scaling: the entry of loop count {loops!r} has no 'board_accuracy' (keys: "
                                f"{sorted(map(str, value))}) — pass accuracies, or the dicts sudoku eval writes")
        value = value["board_accuracy"]
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) \
            or not 0.0 <= value <= 1.0:
        raise ArgumentError(f"loop_scaling: the board accuracy at {loops!r} loops must be a finite fraction in [0, 1], "
                            f"got {value!r} — pass fractions (0.42, not 42 percent); a missing measurement is left "
                            "out, not written as NaN")
    return float(value)


def _accuracies(per_loop) -> list[tuple[int, float]]:
    """``{"16": 0.9 or {"board_accuracy": 0.9, ...}}`` as ``[(16, 0.9), ...]`` sorted by loop count."""
    if not isinstance(per_loop, Mapping):
        raise ArgumentError(f"loop_scaling takes a mapping of loop count -> board accuracy, got "
                            f"{type(per_loop).__name__} — pass e.g. {{16: 0.5, 32: 0.7}}")
    pairs = {}
    for loops, value in per_loop.items():
        count = _loop_count(loops)
        if count in pairs:
            raise ArgumentError(f"loop_scaling: loop count {count} appears twice (keys {loops!r} and another) — keep "
                                "one accuracy per loop count")
        pairs[count] = _accuracy(loops, value)
    if not pairs:
        raise ArgumentError("loop_scaling needs accuracies at one loop count at least, got an empty mapping — pass "
                            "e.g. {16: 0.5, 32: 0.7}")
    return sorted(pairs.items())


def loop_scaling(per_loop: dict, *, tolerance: float = SCALING_TOLERANCE) -> dict:
    """Test-time-scaling verdict of accuracies measured at several loop counts.

    Example::

        >>> import jacobiscope
        >>> jacobiscope.recipes.loop_scaling({16: 0.5, 17: 0.5, 32: 0.7, 64: 0.795})["keeps_scaling"]
        True

    Signature: ``loop_scaling(per_loop, *, tolerance=0.01) -> dict``.

    Args:
        per_loop: loop count (int or str) -> board accuracy in [0, 1], or -> a dict holding ``board_accuracy``
            (the shape of ``results.json``'s ``results[split]["votes=1"]``).

    Keywords:
        tolerance: the largest fall, in accuracy, still counted as "non-decreasing" (default one point).

    Returns:
        A dict: ``peak_loops`` / ``peak_accuracy`` (the best loop count, the smallest on ties), ``last_loops`` /
        ``last_accuracy`` (the largest loop count measured), ``largest_drop`` (the largest fall below the best
        accuracy of any smaller loop count) at ``drop_loops``, ``parity_gap`` (the largest difference between
        consecutive loop counts T and T+1, odd against even; None when no such pair was measured) at
        ``parity_loops`` (the pair ``(T, T + 1)``), and ``keeps_scaling``: True when the largest drop is at most
        ``tolerance`` (None when no loop count has any accuracy: there is no scaling to keep).
    """
    tolerance = _tolerance(tolerance, "tolerance", allow_none=False)
    pairs = _accuracies(per_loop)
    best_so_far, largest_drop, drop_loops = pairs[0][1], 0.0, None
    for loops, accuracy in pairs[1:]:
        if best_so_far - accuracy > largest_drop:
            largest_drop, drop_loops = best_so_far - accuracy, loops
        best_so_far = max(best_so_far, accuracy)
    peak_loops, peak_accuracy = max(pairs, key=lambda pair: (pair[1], -pair[0]))
    by_loops = dict(pairs)
    gaps = [(abs(by_loops[t] - by_loops[t + 1]), (t, t + 1)) for t in by_loops if t + 1 in by_loops]
    parity_gap, parity_loops = max(gaps) if gaps else (None, None)
    return {"peak_loops": peak_loops, "peak_accuracy": peak_accuracy, "last_loops": pairs[-1][0],
            "last_accuracy": pairs[-1][1], "largest_drop": largest_drop, "drop_loops": drop_loops,
            "parity_gap": parity_gap, "parity_loops": parity_loops,
            # nothing to keep when no board is solved; 1e-9: 10 boards of 1,000 fall exactly "one point"
            "keeps_scaling": None if peak_accuracy == 0 else largest_drop <= tolerance + 1e-9}


def _row(label: str, per_loop: dict) -> str:
    verdict = loop_scaling(per_loop)
    drop = (f"{100 * verdict['largest_drop']:.1f} at T={verdict['drop_loops']}" if verdict["drop_loops"] is not None
            else "0.0")
    parity = ("not measured" if verdict["parity_gap"] is None else
              "{:.1f} (T={} / {})".format(100 * verdict["parity_gap"], *verdict["parity_loops"]))
    keeps = {True: "yes", False: "**no**", None: "no board solved"}[verdict["keeps_scaling"]]
    return (f"| {label} | {100 * verdict['peak_accuracy']:.1f}% at T={verdict['peak_loops']} | "
            f"{100 * verdict['last_accuracy']:.1f}% at T={verdict['last_loops']} | {drop} | {parity} | {keeps} |")


_SPLITS = (("id", "SATNet test (ID)"), ("ood", "RRN (OOD)"), ("fresh", "fresh puzzles"))


def scaling_section(results: dict) -> str:
    """The model card's "Test-time scaling" section, computed from ``results.json`` (single-pass figures)."""
    rows = [_row(label, results[split]["votes=1"]) for split, label in _SPLITS if results.get(split)]
    return ("## Test-time scaling (single pass, from the tables above)\n\n"
            "Keeps scaling = accuracy never falls more than 1 point below its best at a smaller loop count.\n\n"
            "| split | best | at the largest T | largest fall (points) | largest odd/even gap (points) | keeps scaling |\n"
            "|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n")
