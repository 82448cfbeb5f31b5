"""Restart-and-select test-time compute for the Sudoku solvers: K starts per puzzle, one answer chosen by a label-free
rule — the smallest fixed-point residual (EqR), the lowest pseudo-energy (AKOrN's votes) or the largest basin (the
answer most starts reach).

Example::

    >>> import torch
    >>> from jacobiscope.models import ItrSAConfig, ItrSAForSudoku
    >>> from jacobiscope.recipes import restart_select
    >>> model = ItrSAForSudoku(ItrSAConfig(hidden_size=16, num_heads=2, loops=4)).eval()
    >>> puzzle = "530070000600195000098000060800060003400803001700020006060000280000419005000080079"
    >>> picks = restart_select(model, [puzzle], loops=4, restarts=3, noise=0.5, seed=0)
    >>> sorted(picks), picks["all"].shape
    (['all', 'basin', 'energies', 'energy', 'first', 'residual', 'residuals'], torch.Size([1, 3, 81]))
    >>> torch.equal(picks["first"], model.solve([puzzle], loops=5))   # restart 0: the model's own start, 4 + 1 loops
    True

ItrSA's restart 0 is its own deterministic start, so one restart is the plain `solve`; its other starts are that
state plus ``noise`` x its RMS of Gaussian noise, normalized as the model normalizes states. AKOrN's starts are K
draws of its own random initial state (as ``solve(votes=K)`` draws them; ``noise`` is not used). Each start
runs ``loops`` loops, then one more to read its residual ``||F(x) - x|| / ||x||``, and answers from that last state:
each start is ``solve(loops=loops + 1)`` and the compute is ``restarts x (loops + 1)`` loops per puzzle. Givens are
kept as given.
"""
from __future__ import annotations

import torch

__all__ = ["restart_select", "select_among", "SELECTIONS"]

SELECTIONS = ("first", "residual", "energy", "basin")


@torch.no_grad()
def restart_select(model, puzzles, *, loops: int, restarts: int, noise: float = 0.5, seed: int = 0,
                   batch_size: int = 256) -> dict:
    """``{selection: [N, 81] grids}`` for every rule in `SELECTIONS`, plus ``"all"`` (every start's grid,
    ``[N, restarts, 81]``), ``"residuals"`` and ``"energies"`` (``[N, restarts]``: what the rules read, so a caller
    can select among the first k restarts without running them again)."""
    from ..errors import ArgumentError
    from .._validation import seed_int
    from ._eval_checks import check_batch_size, check_solver

    check_solver(model)
    for name, value in (("loops", loops), ("restarts", restarts)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ArgumentError(f"restart_select needs {name} an int >= 1, got {value!r} — pass e.g. {name}=16")
    if isinstance(noise, bool) or not isinstance(noise, (int, float)) or not noise >= 0 or noise == float("inf"):
        raise ArgumentError(f"restart_select needs noise a finite number >= 0, got {noise!r} — pass e.g. noise=0.5")
    seed = seed_int(seed, "seed")
    batch_size = check_batch_size(batch_size)
    from ..models.itrsa.modeling_itrsa import _as_puzzle_tensor  # the solvers' one puzzle parser (and its errors)

    ids = _as_puzzle_tensor(puzzles).to(model.device)
    per_chunk = max(1, batch_size // restarts)
    generator = torch.Generator(device=model.device).manual_seed(seed)
    parts = {name: [] for name in (*SELECTIONS, "all", "residuals", "energies")}
    for start in range(0, ids.shape[0], per_chunk):
        chunk = ids[start : start + per_chunk]
        grids, residual, energy = _run_starts(model, chunk, loops, restarts, float(noise), generator)
        for name, grid in _select(chunk, grids, residual, energy).items():
            parts[name].append(grid)
        parts["residuals"].append(residual)
        parts["energies"].append(energy)
    return {name: torch.cat(values) for name, values in parts.items()}


def _run_starts(model, chunk, loops, restarts, noise, generator):
    """Every start of every puzzle of the chunk: ``(grids [n, K, 81], residual [n, K], energy [n, K])``."""
    repeated = chunk.repeat_interleave(restarts, dim=0)
    injection = model.injection(repeated)
    if hasattr(model, "read"):  # AKOrN: its own random initial state, drawn for each start
        x = model.initial_state(repeated, injection, generator=generator)
        read = model.read
    else:  # ItrSA: the deterministic start, and noised copies of it
        own = model.initial_state(injection)
        kicks = torch.randn(own.shape, generator=generator, device=own.device, dtype=own.dtype)
        scale = own.pow(2).mean(dim=(-1, -2), keepdim=True).sqrt()
        x = own + noise * scale * kicks
        x = model.norm(x) if model.config.norm != "none" else x
        # restart 0 is the model's own start, untouched: normalizing it again would not be the identity once the
        # norm has learned gains (a trained model's restart 0 then differed from solve on 117 of 200 puzzles)
        x[0::restarts] = own[0::restarts]
        read = lambda state: model.readout(model.head_norm(state))  # noqa: E731
    for _ in range(loops):
        x = model.step(x, injection)
    following = model.step(x, injection)
    n = chunk.shape[0]
    residual = ((following - x).flatten(1).norm(dim=1) / x.flatten(1).norm(dim=1).clamp_min(1e-30)).reshape(n, restarts)
    energy = (-(x * model.drive(x, injection)).sum(dim=(-1, -2))).reshape(n, restarts)
    digits = read(following).argmax(-1) + 1  # the answer of the last state run: loops + 1 loops for everything
    grids = torch.where(repeated > 0, repeated, digits).reshape(n, restarts, 81)
    return grids, residual, energy


def select_among(grids, residual, energy) -> dict:
    """The picks of every rule among the given starts: ``grids [N, K, 81]``, ``residual`` and ``energy [N, K]``."""
    return _select(None, grids, residual, energy)


def _select(chunk, grids, residual, energy) -> dict:
    n, restarts, _ = grids.shape
    rows = torch.arange(n, device=grids.device)
    picks = {"first": grids[:, 0], "residual": grids[rows, residual.argmin(1)],
             "energy": grids[rows, energy.argmin(1)], "all": grids}
    # basin: the grid most starts end on (ties: the one with the smaller residual among them)
    basin = []
    for i in range(n):
        unique, inverse, counts = torch.unique(grids[i], dim=0, return_inverse=True, return_counts=True)
        best = max(range(len(unique)), key=lambda u: (int(counts[u]), -float(residual[i][inverse == u].min())))
        basin.append(unique[best])
    picks["basin"] = torch.stack(basin)
    return picks
