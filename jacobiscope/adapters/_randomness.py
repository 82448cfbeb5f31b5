"""The model's forward under a seed of its own: maps cut from a forward that draws random numbers are reproducible.

Example::

    >>> import torch
    >>> from jacobiscope.adapters._randomness import seeded_forward
    >>> with seeded_forward(seed=0) as drawn:
    ...     first = torch.rand(2)
    >>> with seeded_forward(seed=0) as again:
    ...     second = torch.rand(2)
    >>> bool(torch.equal(first, second)), drawn.any
    (True, True)

Some forwards draw random numbers in eval mode: ViT-MAE masks a random 75% of its patches, Huginn starts its loop
from a random state. Cut from the global random state, the same `analyze` call gave another state and other numbers
each time (ViT-MAE: state norm 0.81 one call, 0.91 the next), with nothing said. Here the forward runs with torch
seeded (the caller's random state forked, so it is left as it was), and whether it drew at all is recorded so the
report can say so.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

__all__ = ["seeded_forward", "Draws", "drawn_note"]


@dataclass
class Draws:
    any: bool = False  # whether the forward drew random numbers (its random state moved)


@contextlib.contextmanager
def seeded_forward(seed: int | None):
    """Run the block's code with torch seeded to ``seed`` (None: the global random state, as it is); yields a
    `Draws` whose ``any`` says, once the block ends, whether the code drew random numbers."""
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() and torch.cuda.is_initialized() else []
    draws = Draws()
    with torch.random.fork_rng(devices=devices, enabled=seed is not None):
        if seed is not None:
            torch.manual_seed(seed)
        before = _states(devices)
        yield draws
        draws.any = any(not torch.equal(a, b) for a, b in zip(before, _states(devices)))


def _states(devices: list[int]) -> list[torch.Tensor]:
    return [torch.random.get_rng_state(), *(torch.cuda.get_rng_state(device) for device in devices)]


def drawn_note(seed: int | None) -> str:
    """What a report says when a model's forward drew random numbers."""
    if seed is None:
        return ("the model's forward draws random numbers (random masking, a random initial state): its maps were cut "
                "from one draw of torch's global random state — seed torch first, or pass seed, to repeat it")
    return (f"the model's forward draws random numbers (random masking, a random initial state): its maps were cut "
            f"from a forward with torch seeded to {seed} (your random state untouched) — the same call repeats "
            "them; another seed, another draw")
