"""The attractor census: many starts, their end states sorted into fixed points, cycles and unsettled orbits.

Example::

    >>> import torch
    >>> from jacobiscope.dynamics import attractor_census
    >>> bistable = lambda x: torch.tanh(3.0 * x)                 # two stable fixed points, +-0.9949
    >>> starts = torch.linspace(-1.0, 3.0, 41, dtype=torch.float64).reshape(41, 1)   # 10 below 0, 30 above
    >>> census = attractor_census(bistable, starts[torch.arange(41) != 10], loops=60)
    >>> [(a.kind, a.period, a.starts, round(a.point.item(), 3)) for a in census.attractors]
    [('fixed point', 1, 30, 0.995), ('fixed point', 1, 10, -0.995)]

Each start runs ``loops`` loops; its end state ``x`` is then tested for a period: the smallest ``p <= max_period``
with ``||F^p(x) - x|| <= settle_rtol ||x||`` (``p`` more loops). A settled end state is on a fixed point
(``p = 1``) or a cycle (a fixed point of ``F^p``); two starts reach the same attractor when their periods agree and
one's end state is within ``rtol`` (relative RMS) of a point of the other's orbit (a cycle is reached at any of its
phases). End states with no period within ``max_period`` are "unsettled" (a slow approach, a long cycle, a
quasi-periodic or chaotic orbit) and grouped by proximity alone. Basin fractions come with 95% Wilson intervals.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from .._proportions import wilson_interval

__all__ = ["Attractor", "AttractorCensus", "attractor_census", "wilson_interval"]


@dataclass
class Attractor:
    """One attractor the starts reached.

    Attributes:
        kind: ``"fixed point"``, ``"cycle"`` or ``"unsettled"``.
        period: 1 for a fixed point, ``p`` for a cycle, 0 when unsettled.
        starts: how many starts reached it; ``members``: their indices.
        fraction, interval: the share of the starts and its 95% Wilson interval.
        residual: the smallest ``||F^p(x) - x|| / ||x||`` among its members (how exactly it repeats).
        point: one of its states (the member with the smallest residual); ``orbit``: the ``p`` states of its cycle.
    """

    kind: str
    period: int
    starts: int
    fraction: float
    interval: tuple
    residual: float
    point: torch.Tensor
    orbit: list = field(default_factory=list)
    members: list = field(default_factory=list)


@dataclass
class AttractorCensus:
    """The attractors (largest basin first), the starts counted and the forwards spent."""

    attractors: list
    starts: int
    loops: int
    forwards: int


def attractor_census(step, starts, *, loops: int, max_period: int = 8, settle_rtol: float = 1e-4,
                     rtol: float = 1e-2) -> AttractorCensus:
    """Run each start (``starts``: ``[K, *state]`` or a list of states) ``loops`` loops and sort the end states.

    ``step`` is the map (a `LoopedMap` or a callable on one state).
    """
    from ..errors import ArgumentError

    for name, value, low in (("loops", loops, 1), ("max_period", max_period, 1)):
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise ArgumentError(f"attractor_census needs {name} an int >= {low}, got {value!r} — pass e.g. "
                                f"{name}={64 if name == 'loops' else 8}")
    for name, value in (("settle_rtol", settle_rtol), ("rtol", rtol)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise ArgumentError(f"attractor_census needs {name} a finite number > 0, got {value!r} — pass e.g. "
                                f"{name}=1e-2")
    states = list(starts)
    if not states:
        raise ArgumentError("attractor_census got no starts — pass at least one start state")
    ends, forwards = [], 0
    with torch.no_grad():
        for start in states:
            x = start
            for _ in range(loops):
                x = step(x)
            forwards += loops
            period, residual, orbit, spent = _period(step, x, max_period, settle_rtol)
            forwards += spent
            ends.append((x.detach(), period, residual, orbit))
    groups = _group(ends, rtol)
    attractors = []
    for members in sorted(groups, key=lambda m: (-len(m), min(m))):
        best = min(members, key=lambda i: (ends[i][2], i))
        _, period, residual, orbit = ends[best]
        kind = "unsettled" if period == 0 else "fixed point" if period == 1 else "cycle"
        attractors.append(Attractor(kind, period, len(members), len(members) / len(states),
                                    wilson_interval(len(members), len(states)), residual, ends[best][0], orbit,
                                    sorted(members)))
    return AttractorCensus(attractors, len(states), loops, forwards)


def _period(step, x: torch.Tensor, max_period: int, settle_rtol: float) -> tuple[int, float, list, int]:
    """``(p, residual, orbit, forwards)``: the smallest period within ``max_period`` (0 when none), the relative
    return residual at it (at the best p when none), the orbit's states."""
    if not bool(torch.isfinite(x).all()):
        return 0, math.inf, [x], 0
    scale = float(x.norm()) or 1.0
    orbit, y, best = [x], x, math.inf
    for p in range(1, max_period + 1):
        y = step(y)
        if not bool(torch.isfinite(y).all()):
            return 0, math.inf, orbit, p
        residual = float((y - x).norm()) / scale
        if residual <= settle_rtol:
            return p, residual, orbit, p
        best = min(best, residual)
        orbit.append(y)
    return 0, best, [x], max_period


def _group(ends: list, rtol: float) -> list[list[int]]:
    """Starts on the same attractor: equal periods and an end state within ``rtol`` of a point of the orbit; the
    non-finite end states together; unsettled ones by proximity of their end states."""
    groups: list[list[int]] = []
    for index, (end, period, _, _) in enumerate(ends):
        for members in groups:
            anchor, anchor_period, _, anchor_orbit = ends[members[0]]
            if anchor_period != period:
                continue
            finite, anchor_finite = bool(torch.isfinite(end).all()), bool(torch.isfinite(anchor).all())
            if not finite or not anchor_finite:
                if not finite and not anchor_finite:
                    members.append(index)
                    break
                continue
            scale = float(anchor.pow(2).mean().sqrt()) or 1.0
            points = anchor_orbit if period > 0 else [anchor]
            if min(float((end - point).pow(2).mean().sqrt()) for point in points) <= rtol * scale:
                members.append(index)
                break
        else:
            groups.append([index])
    return groups
