"""`plan_maps`: how a model loops, decided once — the model unwrapped, its mode (blocks, the ItrSA attention form, or
its own recurrence), the recurrence, the layers, the blocks (found once) — every choice checked before any input is
prepared or the model runs. `map_source` builds on it; `analyze`, `describe`, `depth_dynamics` and the Jacobian
regularizer all go through it.

Example::

    >>> import transformers
    >>> from jacobiscope.adapters import plan_maps
    >>> model = transformers.GPT2Model(transformers.GPT2Config(n_embd=16, n_layer=3, n_head=2, vocab_size=50))
    >>> plan = plan_maps(model, layers=[0, -1])
    >>> plan.mode, plan.layers, plan.blocks, plan.adapter
    ('block', [0, -1], 3, 'gpt2')
"""
from __future__ import annotations

import math
import numbers
import operator
from dataclasses import dataclass, field

import torch
from torch import nn

from ..errors import ArgumentError
from .._validation import did_you_mean
from .looped import attention_is_traced, block_index, unwrap_model
from .native import list_recurrences
from .spec import AdapterError, find_blocks

__all__ = ["MapPlan", "plan_maps", "MODES"]

#: The ways a model's layer becomes a looped map.
MODES = ("block", "attention", "loop")


@dataclass
class MapPlan:
    """What will be measured, decided before any input is touched.

    Attributes:
        model: the model the maps are cut from (a training wrapper unwrapped).
        mode: ``"block"``, ``"attention"`` or ``"loop"``.
        own_loop: the model hands out its loop through ``loop_map`` (one looped block, no blocks to choose; its
            inputs go through its own ``loop_inputs``).
        recurrences: the recurrences the model offers (`list_recurrences`), default first.
        recurrence: the recurrence measured in loop mode (``None`` otherwise).
        layers: the block indices as given (negatives count from the end); ``[0]`` in loop mode.
        found: ``find_blocks(model)`` — ``(path, blocks, spec)`` — in block and attention modes, else ``None``.
        eta: the step size the maps run with (attention mode; the model's own for a model with ``loop_map``).
        notes: what was said so far (a wrapper unwrapped).
    """

    model: nn.Module
    mode: str
    own_loop: bool
    recurrences: list
    recurrence: str | None
    layers: list
    found: tuple | None = None
    eta: float | None = None
    notes: list = field(default_factory=list)

    @property
    def blocks(self) -> int:
        """How many blocks the model has (1 for a model's own loop: the loop is the one block)."""
        return len(self.found[1]) if self.found is not None else 1

    @property
    def adapter(self) -> str:
        """How the maps are built, for a report's provenance."""
        if self.mode == "loop":
            return f"native recurrence {self.recurrence!r}"
        spec = self.found[2]
        name = spec.name if spec is not None else "generic"
        # attention parts read off a block call (the notes say which)
        return name + " blocks, traced attention" if self.mode == "attention" and attention_is_traced(spec) else name


def plan_maps(model, *, mode: str | None = None, layers=None, recurrence: str | None = None,
              eta: float | None = None) -> MapPlan:
    """Check the choices that decide what is measured (one wording for every caller) and return the `MapPlan`.

    ``mode=None`` chooses ``"loop"`` for a model with a recurrence of its own, ``"block"`` otherwise; ``layers=None``
    all blocks. Raises `ArgumentError` / `AdapterError` naming the problem and the fix (a mode the model does not
    have, a misspelled recurrence, a layer out of range, eta outside the attention mode, ...).
    """
    model, unwrapped = unwrap_model(model)
    if not isinstance(model, nn.Module):
        loaded = (f"jacobiscope.hub.load_pretrained({model!r})" if isinstance(model, str) else "the model object")
        raise ArgumentError(f"model must be a torch nn.Module (a transformers model), got {type(model).__name__} — "
                            f"pass {loaded}")
    own_loop = callable(getattr(model, "loop_map", None))
    recurrences = list_recurrences(model)
    mode = _checked_mode(model, mode, own_loop, recurrences)
    _check_recurrence(model, recurrence, mode, own_loop, recurrences)
    if mode == "loop" and layers is not None and not all(_is_index(i) and operator.index(i) == 0
                                                         for i in _as_list(layers) or [None]):
        raise ArgumentError(f"layers={layers!r} selects blocks, but mode='loop' measures {type(model).__name__}'s own "
                            "loop as one map (layer 0) — drop layers" + ("" if own_loop else
                                                                         ", or pass mode='block' to measure blocks"))
    _check_eta(eta, mode)
    notes = [unwrapped] if unwrapped else []
    if mode == "loop":
        model_eta = getattr(getattr(model, "config", None), "eta", None) if own_loop else None
        return MapPlan(model, mode, own_loop, recurrences, recurrence or recurrences[0], [0], None, model_eta, notes)
    # The blocks (and the layer indices) are checked before the inputs: a bare module or a bad index is named
    # before any tokenizer or forward runs. Found once: every map of the run is cut from these.
    found = find_blocks(model)
    return MapPlan(model, mode, own_loop, recurrences, None, _resolve_layers(found, layers), found,
                   (1.0 if eta is None else eta) if mode == "attention" else None, notes)


def _checked_mode(model, mode, own_loop: bool, recurrences: list) -> str:
    if mode is not None and (not isinstance(mode, str) or mode not in MODES):
        hint = did_you_mean(mode, MODES) if isinstance(mode, str) else ""
        raise ArgumentError(f"mode must be 'block', 'attention' or 'loop', got {mode!r}{hint} — pass one of them (or "
                            "None)")
    if mode is None:
        mode = "loop" if recurrences else "block"
    if mode == "loop" and not recurrences:
        raise ArgumentError(f"mode='loop' needs a model with a recurrence of its own; {type(model).__name__} has "
                            "none — use mode='block' or 'attention' (or give it the jacobiscope_recurrence protocol)")
    if own_loop and mode != "loop":
        raise ArgumentError(f"{type(model).__name__} is measured through its own loop_map (one looped block): "
                            f"mode={mode!r} does not apply — pass mode='loop' or leave it None")
    return mode


def _check_recurrence(model, recurrence, mode: str, own_loop: bool, recurrences: list) -> None:
    if recurrence is None:
        return
    if not isinstance(recurrence, str):
        raise ArgumentError(f"recurrence must be a name (str), got {recurrence!r} — choose from "
                            f"{recurrences or 'none'}")
    if own_loop and recurrence not in recurrences:
        raise ArgumentError(f"{type(model).__name__} has one recurrence, its loop_map ('loop'): recurrence="
                            f"{recurrence!r} does not exist — drop recurrence")
    if mode == "loop" and recurrence not in recurrences:
        # Named now, before the inputs are prepared or the model runs: a typo gets its closest name.
        raise AdapterError(f"{type(model).__name__} has no recurrence {recurrence!r}"
                           f"{did_you_mean(recurrence, recurrences)} — it offers {', '.join(recurrences)} (pass "
                           "one of them, or recurrence=None for the first)")
    if mode != "loop":
        offered = ", ".join(recurrences) if recurrences else "none"
        raise ArgumentError(f"recurrence={recurrence!r} chooses a looped model's recurrence in mode='loop', but "
                            f"this run is mode={mode!r} on {type(model).__name__} (recurrences: {offered}) — drop "
                            "recurrence" + (" or pass mode='loop'" if recurrences else ""))


def _check_eta(eta, mode: str) -> None:
    if eta is None:
        return
    if mode != "attention":
        raise ArgumentError(f"eta is the step size of mode='attention'; mode={mode!r} would ignore eta={eta!r} — "
                            "drop eta or pass mode='attention'")
    if isinstance(eta, bool) or not isinstance(eta, numbers.Real) or not math.isfinite(eta) or eta <= 0:
        raise ArgumentError(f"eta must be a finite number > 0, got {eta!r} — pass e.g. eta=0.5 (default 1.0)")


def _resolve_layers(found: tuple, layers) -> list[int]:
    """Block indices as ints, each in range and named once (negatives count from the end)."""
    path, blocks, _ = found
    count = len(blocks)
    if layers is None:
        return list(range(count))
    items = _as_list(layers)
    if not items:
        raise ArgumentError(f"layers is empty, which would measure nothing — pass None for all {count} blocks, or "
                            f"indices in 0..{count - 1}")
    indices = []
    for item in items:
        if not _is_index(item):
            hint = " (for all blocks pass layers=None)" if isinstance(item, str) else ""
            raise ArgumentError(f"layers must be int block indices, got {type(item).__name__} {item!r}{hint} — pass "
                                f"e.g. layers=[0, {count - 1}]")
        indices.append(operator.index(item))
    resolved = [block_index(index, count, path) for index in indices]
    repeated = sorted({block for block in resolved if resolved.count(block) > 1})
    if repeated:
        given = [index for index, block in zip(indices, resolved) if block == repeated[0]]
        raise ArgumentError(f"layers names block {repeated[0]} more than once ({', '.join(map(str, given))}) — pass "
                            "each layer once")
    return indices


def _as_list(layers):
    if isinstance(layers, (str, bytes)) or not hasattr(layers, "__iter__") or _is_index(layers):
        return [layers]
    return list(layers)


def _is_index(value) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, torch.Tensor):
        return value.dim() == 0 and not value.is_floating_point() and value.dtype != torch.bool
    try:
        operator.index(value)  # int, numpy integers
    except TypeError:
        return False
    return True
