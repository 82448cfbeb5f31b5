"""Random probe vectors from a generator of their own: jacobiscope never moves the caller's global random stream.

Example::

    >>> import torch
    >>> from jacobiscope._probes import probe_like
    >>> state = torch.random.get_rng_state()
    >>> v = probe_like(torch.zeros(2, 3))
    >>> v.shape, bool(torch.equal(state, torch.random.get_rng_state())), bool(torch.equal(v, probe_like(v)))
    (torch.Size([2, 3]), True, True)

A probe (the vector a graph is recorded with, a timing's tangent, a Lanczos restart) drawn with ``torch.randn``
advanced the user's stream: the second `analyze` of a model that draws its own random numbers (Huginn) then started
from another state than a script without the analysis would have. Drawn here in float64 on the CPU, the same
numbers on every device, then cast.
"""
from __future__ import annotations

import torch

__all__ = ["probe_like"]


def probe_like(like: torch.Tensor, seed: int = 0, *, count: int | None = None) -> torch.Tensor:
    """Standard normal numbers shaped like ``like`` (``[count, *like.shape]`` with ``count``), from ``seed``."""
    shape = tuple(like.shape) if count is None else (count, *like.shape)
    generator = torch.Generator(device="cpu").manual_seed(seed)
    return torch.randn(shape, generator=generator, dtype=torch.float64).to(device=like.device, dtype=like.dtype)
