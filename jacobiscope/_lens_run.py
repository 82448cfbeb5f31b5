"""The engine under `jacobiscope.loop_lens` and `jacobiscope.intervene`: one map per input, its trajectory (patched
at one loop when intervening), the readout statistics and the dynamics at every loop, gathered into a `LoopLens`."""
from __future__ import annotations

import logging
import math
from collections.abc import Mapping

import torch

from ._lens_result import LoopLens
from ._validation import nonnegative_int, positive_int, seed_int, within_budget
from .errors import ArgumentError, StepOutputError

logger = logging.getLogger(__name__)


def lens_maps(model, inputs, recurrence, seed: int | None = None):
    """``[(label, looped, token_ids or None)]``: a `LoopedMap` (one trajectory from ``inputs`` or its ``x0``), or a
    model's own loop on each input row (`native_loop` per row: per-input dynamics, not one Jacobian of the batch),
    cut from a forward under ``seed`` where the model draws random numbers (Huginn's initial state)."""
    from .adapters import native_loop
    from .adapters._randomness import seeded_forward
    from .maps import LoopedMap

    if isinstance(model, LoopedMap):
        if recurrence is not None:
            raise ArgumentError("recurrence names a model's own loop; a LoopedMap is already one — leave it out")
        if inputs is not None and not isinstance(inputs, torch.Tensor):
            raise ArgumentError(f"for a LoopedMap, inputs is the initial state (a tensor) or None (its x0), got "
                                f"{type(inputs).__name__} — pass a state, or call with the model instead")
        looped = model
        x0 = looped.prepare_state(inputs)
        if x0 is not looped.x0:
            looped = _with_x0(looped, x0)
        return [("input 0", looped, None)]
    if inputs is None:
        raise ArgumentError("loop_lens needs the model's inputs — pass a dict of model(**inputs) keyword arguments "
                            "or an input_ids tensor")
    kwargs = dict(inputs) if isinstance(inputs, Mapping) else {"input_ids": inputs}
    ids = kwargs.get("input_ids")
    rows = int(ids.shape[0]) if isinstance(ids, torch.Tensor) and ids.dim() >= 2 else 1
    out = []
    for row in range(rows):
        one = {key: value[row: row + 1] if isinstance(value, torch.Tensor) and value.dim() >= 1
               and value.shape[0] == rows and rows > 1 else value for key, value in kwargs.items()}
        with seeded_forward(None if seed is None else seed + row):  # rows draw apart, each the same every call
            looped = native_loop(model, one, recurrence)
        tokens = one["input_ids"].reshape(-1) if isinstance(one.get("input_ids"), torch.Tensor) else None
        out.append((f"input {row}", looped, tokens))
    return out


def _with_x0(looped, x0):
    """A copy of the map starting at ``x0`` (its info and extras kept)."""
    from .maps import LoopedMap

    copy = LoopedMap(looped.step, batch_dims=looped.batch_dims, x0=x0, name=looped.name)
    copy.copy_info_from(looped)
    return copy


def checked_loops(loops, configured) -> int:
    """The loop count: ``loops`` (an int >= 0 within the loop budget) or the map's configured depth."""
    if loops is None:
        if configured is None:
            raise ArgumentError("the map says no configured depth (info.loops) — pass loops=N")
        return int(configured)
    loops = nonnegative_int(loops, "loops")
    return within_budget(loops, "loops") if loops > 0 else 0


def trajectory(looped, loops: int, patch=None, patch_loop: int | None = None) -> list:
    """States ``X_0 .. X_{loops + 1}`` (the extra one for the last step size), ``X_k`` replaced by ``patch(X_k)`` at
    ``patch_loop`` before the loop continues from it; stops early at a NaN/Inf state (the rest left out)."""
    x = looped.x0
    states = []
    with torch.no_grad():
        for t in range(loops + 2):
            if t == patch_loop:
                x = patch(x)
            states.append(x)
            if t == loops + 1 or not bool(torch.isfinite(x).all()):
                break
            x = looped.checked_step(x, t + 1) if t == 0 else looped.step(x)
    return states


def _padded(values: list, length: int) -> torch.Tensor:
    out = torch.full((length,), math.nan, dtype=torch.float64)
    out[: len(values)] = torch.tensor(values, dtype=torch.float64)
    return out


def read_one(looped, states: list, loops: int, top_k: int):
    """The readout at loops ``0..loops`` of one trajectory: ``(statistics, logits [loops + 1, *shape], gate)``."""
    from .diagnostics._loop_depth import readout_logits
    from .diagnostics._loop_lens import gate_function, readout_statistics

    readout = looped.info.readout
    if not callable(readout):
        raise ArgumentError(f"{looped.name} has no readout (info.readout: state -> logits) — load the model with its "
                            "output head (...ForCausalLM, AlbertForMaskedLM), or set looped.info.readout")
    if len(states) < loops + 1:
        raise StepOutputError(f"the state turned NaN/Inf at loop {len(states) - 1} of {loops} — the lens reads "
                              f"finite states only; pass loops <= {len(states) - 2}")
    with torch.no_grad():
        logits = [readout_logits(readout, states[t], t) for t in range(loops + 1)]  # checked, float64
        gate = gate_function(looped)
        gates = [torch.as_tensor(gate(states[t]), dtype=torch.float64).reshape(-1) for t in range(loops + 1)] if (
            gate is not None) else None
    flat = torch.stack([value.reshape(-1, value.shape[-1]) for value in logits])
    # kept in the state's precision: float64 logits would double the memory of a float32 model's lens
    kept = torch.stack(logits).to(states[0].dtype if states[0].is_floating_point() else torch.float32)
    return readout_statistics(flat, top_k), kept, gates


def run_lens(model, inputs, loops, *, recurrence=None, top_k=5, jacobian_every=1, spectral_radius=True,
             dynamics=True, keep_logits=True, seed=0, patch_for=None, patch_loop=None, labels=None,
             maps=None) -> LoopLens:
    """The lens over every input (see `jacobiscope.loop_lens`); ``patch_for(index, looped) -> patch`` (or None)
    gives the intervention of each input at ``patch_loop``; ``maps``: those of `lens_maps` when already built (an
    intervention's patched run, its baseline and its donor share them, so a model that draws a random initial state
    per forward, Huginn, starts all three from the same one)."""
    from .diagnostics._loop_lens import loop_dynamics

    top_k, jacobian_every, seed = positive_int(top_k, "top_k"), positive_int(jacobian_every, "jacobian_every"), \
        seed_int(seed)
    for name, flag in (("spectral_radius", spectral_radius), ("dynamics", dynamics), ("keep_logits", keep_logits)):
        if not isinstance(flag, bool):
            raise ArgumentError(f"{name} must be True or False, got {flag!r} — pass {name}=False to skip it")
    maps = maps if maps is not None else lens_maps(model, inputs, recurrence, seed)
    configured = maps[0][1].info.loops
    loops = checked_loops(loops, configured)
    if patch_loop is not None and patch_loop > loops:
        raise ArgumentError(f"at_loop={patch_loop} is past the last loop read out ({loops}) — pass at_loop <= loops")
    gathered = {name: [] for name in ("entropy", "kl_final", "kl_prev", "top_ids", "top_probs", "flip_loop", "gate",
                                      "step_size", "spectral_norm", "spectral_radius", "expansion_rate")}
    states_kept, logits_kept, readouts, tokens = [], [], [], []
    for index, (_, looped, token_ids) in enumerate(maps):
        patch = patch_for(index, looped) if patch_for is not None else None
        states = trajectory(looped, loops, patch, patch_loop if patch is not None else None)
        stats, raw, gates = read_one(looped, states, loops, top_k)
        for name in ("entropy", "kl_final", "kl_prev", "top_ids", "top_probs", "flip_loop"):
            gathered[name].append(stats[name])
        gathered["gate"].append(torch.stack([g.expand(stats["entropy"].shape[1]) if g.numel() == 1 else g
                                             for g in gates]) if gates is not None else None)
        sizes = [float((states[t + 1] - states[t]).norm() / states[t].norm()) for t in range(len(states) - 1)]
        gathered["step_size"].append(_padded(sizes[: loops + 1], loops + 1))
        found = loop_dynamics(looped, states[: loops + 1], jacobian_every=jacobian_every, radius=spectral_radius,
                              seed=seed) if dynamics else {}
        for name in ("spectral_norm", "spectral_radius", "expansion_rate"):
            gathered[name].append(_padded(found.get(name, []), loops + 1))
        states_kept.append(torch.stack(states[: loops + 1]))
        logits_kept.append(raw if keep_logits else None)
        readouts.append(looped.info.readout)
        tokens.append(token_ids if token_ids is not None and token_ids.numel() == stats["entropy"].shape[1] else None)
        logger.info("loop lens: input %d of %d read out over %d loops", index + 1, len(maps), loops)
    shapes = {tuple(value.shape) for value in gathered["entropy"]}
    if len(shapes) > 1:
        raise ArgumentError(f"the inputs give readouts of different sizes ({sorted(shapes)}) — run the lens on "
                            "inputs of one length (pad them with an attention_mask)")
    stacked = {name: torch.stack(values) for name, values in gathered.items() if name != "gate"}
    gate = torch.stack(gathered["gate"]) if all(g is not None for g in gathered["gate"]) else None
    return LoopLens(loops=loops, configured=configured, labels=list(labels) if labels else [m[0] for m in maps],
                    states=states_kept, gate=gate,
                    token_ids=torch.stack(tokens) if all(t is not None for t in tokens) else None,
                    _logits=logits_kept if keep_logits else None, _readouts=readouts, **stacked)
