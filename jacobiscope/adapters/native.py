"""`native_loop`: one iteration of a looped model's own recurrence as a `LoopedMap`.

Example::

    >>> import torch, transformers, jacobiscope
    >>> config = transformers.AlbertConfig(vocab_size=50, embedding_size=8, hidden_size=16, num_hidden_layers=6,
    ...                                    num_attention_heads=2, intermediate_size=32)
    >>> model = transformers.AlbertModel(config).eval()
    >>> jacobiscope.list_recurrences(model)
    ['loop']
    >>> looped = jacobiscope.native_loop(model, {"input_ids": torch.tensor([[1, 2, 3, 4]])})
    >>> out = model(input_ids=torch.tensor([[1, 2, 3, 4]]))
    >>> bool(torch.allclose(looped.trajectory(looped.x0, 6)[-1], out.last_hidden_state, atol=1e-5))
    True

Three ways a model tells jacobiscope its recurrence, tried in this order:

1. **The public protocol**, for any model class (remote-code Huginn / Ouro / TRM, your own): a class attribute
   ``jacobiscope_recurrences = ("name", ...)`` (the first is the default) and a method
   ``jacobiscope_recurrence(self, name, **model_kwargs) -> dict`` returning ``{"step": callable state -> state,
   "x0": the state entering the first iteration, "loops": the configured iteration count}`` (optionally
   ``"description"``, and for the loop-depth sweep ``"readout"``: state -> logits, ``"quality"``: state -> score).
   Plain torch: the model needs no jacobiscope import.
2. ``loop_map(input_ids)`` returning a `LoopedMap` (the reference Sudoku solvers): recurrence ``"loop"``.
3. **A family spec**: ``adapters/<family>.json`` with a ``"recurrences"`` entry, either data (a shared module
   called once per iteration: ``{"module": "encoder.albert_layer_groups.0", "loops": "num_hidden_layers"}``) or the
   name of a builder registered with `register_recurrence` (code, for families whose iteration adds injections or
   norms around the shared stack).

The shipped builders give a ``readout`` (state -> logits: what the model does to the state when its loop stops
there) when the model has an output head (``...ForCausalLM``, ``AlbertForMaskedLM``), so ``analyze(model, inputs,
diagnostics=["loop_depth"])`` sweeps the output along the loop; a bare base model gets none.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from ..maps import LoopedMap
from .capture import ReplayedModule, capture_calls, hidden_state_of
from .spec import AdapterError

__all__ = ["Recurrence", "native_loop", "list_recurrences", "register_recurrence", "shared_module_recurrence"]


@dataclass
class Recurrence:
    """One iteration of a model's own loop: ``step`` (pure: state -> next state, injected inputs captured), the
    state ``x0`` entering the first iteration, the configured ``loops``, and a one-line description."""

    name: str
    step: Callable[[torch.Tensor], torch.Tensor]
    x0: torch.Tensor
    loops: int
    description: str = ""
    readout: Callable | None = None  # state -> logits, for the loop-depth sweep
    quality: Callable | None = None  # state -> score (higher is better)


# model_type -> {recurrence name: builder(model, model_kwargs) -> Recurrence}; the first name is the default.
_BUILDERS: dict[str, dict[str, Callable]] = {}


def register_recurrence(model_type: str, name: str, builder: Callable, *, replace: bool = False) -> None:
    """Teach jacobiscope a family's recurrence: ``builder(model, model_kwargs) -> Recurrence``.

    The first name registered for a model type is its default recurrence.
    """
    names = _BUILDERS.setdefault(model_type, {})
    if name in names and not replace:
        raise AdapterError(f"a recurrence {name!r} is already registered for {model_type!r} — pass replace=True")
    names[name] = builder


def _family_builders(model_type: str) -> dict[str, Callable]:
    from . import _recurrences  # noqa: F401 - the shipped families register themselves on first use
    from .spec import shipped_recurrence_specs

    builders = dict(_BUILDERS.get(model_type, {}))
    for name, entry in shipped_recurrence_specs().get(model_type, {}).items():
        if name not in builders and "module" in entry:
            builders[name] = _data_builder(name, entry)
    return builders


def _model_type(model_or_type) -> str:
    if isinstance(model_or_type, str):
        return model_or_type
    return str(getattr(getattr(model_or_type, "config", None), "model_type", "") or "")


def list_recurrences(model_or_model_type) -> list[str]:
    """The recurrences a model (or a model type) offers, default first; empty when it has none."""
    if not isinstance(model_or_model_type, str):
        declared = getattr(model_or_model_type, "jacobiscope_recurrences", None)
        if declared:
            return [str(name) for name in declared]
        if callable(getattr(model_or_model_type, "loop_map", None)):
            return ["loop"]
    return list(_family_builders(_model_type(model_or_model_type)))


def native_loop(model, inputs, recurrence: str | None = None) -> LoopedMap:
    """The model's own loop on ``inputs`` as a `LoopedMap` whose step is one iteration, from the state entering
    the first (``looped.x0``); ``looped.meta["loops"]`` is the configured iteration count.

    Arguments:
        model: a looped model (ALBERT, HRM-Text, Dory, Inkling-2 loop, or any model following the protocol).
        inputs: the keyword arguments of ``model(**inputs)`` (a dict), or an ``input_ids`` tensor.
        recurrence: which recurrence (`list_recurrences`); default: the model's first.

    Raises `AdapterError` naming what the model offers when it has no recurrence or not the one asked for.
    """
    kwargs = dict(inputs) if isinstance(inputs, dict) else {"input_ids": inputs}
    offered = list_recurrences(model)
    if not offered:
        raise AdapterError(
            f"{type(model).__name__} (model_type {_model_type(model)!r}) declares no recurrence of its own — "
            "analyse its blocks with mode='block' or 'attention', or give the class jacobiscope_recurrences and "
            "jacobiscope_recurrence(name, **inputs) (see jacobiscope.adapters.native)")
    name = offered[0] if recurrence is None else recurrence
    if name not in offered:
        raise AdapterError(f"{type(model).__name__} has no recurrence {name!r} — it offers {', '.join(offered)}")
    found = _recurrence(model, name, kwargs)
    if not isinstance(found.x0, torch.Tensor) or not callable(found.step):
        raise AdapterError(f"{type(model).__name__}'s recurrence {name!r} must give a callable step and a tensor x0, "
                           f"got {type(found.step).__name__} and {type(found.x0).__name__}")
    looped = LoopedMap(found.step, x0=found.x0.detach(), name=f"{type(model).__name__}:{name}")
    looped.meta.update(mode="loop", recurrence=name, loops=int(found.loops), description=found.description)
    for key in ("readout", "quality"):
        if callable(getattr(found, key)):
            looped.meta[key] = getattr(found, key)
    return looped


def _recurrence(model, name: str, kwargs: dict) -> Recurrence:
    if getattr(model, "jacobiscope_recurrences", None):
        given = model.jacobiscope_recurrence(name, **kwargs)
        if isinstance(given, Recurrence):
            return given
        missing = [key for key in ("step", "x0", "loops") if key not in given]
        if missing:
            raise AdapterError(f"{type(model).__name__}.jacobiscope_recurrence({name!r}) returned no {missing} — it "
                               "must return a dict with step, x0 and loops")
        return Recurrence(name, given["step"], given["x0"], int(given["loops"]), str(given.get("description", "")),
                          given.get("readout"), given.get("quality"))
    if callable(getattr(model, "loop_map", None)) and not _family_builders(_model_type(model)):
        looped = model.loop_map(kwargs["input_ids"])
        loops = int(getattr(getattr(model, "config", None), "loops", 0) or 0)
        return Recurrence("loop", looped.step, looped.x0, loops, "the model's loop_map")
    return _family_builders(_model_type(model))[name](model, kwargs)


def shared_module_recurrence(model: nn.Module, kwargs: dict, module_path: str, loops: int, name: str = "loop",
                             description: str = "") -> Recurrence:
    """The recurrence of a model that calls one shared module once per iteration: the module replayed with the
    arguments the model gave it on its first call (masks, position ids), from the hidden state entering it."""
    module = _submodule(model, module_path)
    ((args, captured),) = capture_calls(model, kwargs, [module])
    return Recurrence(name, ReplayedModule(module, args, captured).eval(), hidden_state_of(args, captured).detach(),
                      int(loops), description or f"{module_path} applied {loops} times")


def _submodule(model: nn.Module, path: str) -> nn.Module:
    """``path`` in the model, else in its base model: a spec names the path in the bare model (``AlbertModel``),
    and a model with a head keeps that under its base model prefix (``AlbertForMaskedLM.albert``)."""
    for root in (model, getattr(model, "base_model", model)):
        try:
            return root.get_submodule(path)
        except AttributeError:
            continue
    raise AdapterError(f"{type(model).__name__} has no submodule {path!r} (the recurrence spec points at a module "
                       "this model does not have)")


def _data_builder(name: str, entry: dict) -> Callable:
    def build(model, kwargs):
        loops = entry["loops"]
        if isinstance(loops, str):
            loops = getattr(model.config, loops)
        for attribute, expected in (entry.get("require") or {}).items():
            value = getattr(model.config, attribute, None)
            if value != expected:
                raise AdapterError(f"the {name!r} recurrence needs config.{attribute} = {expected!r}, this model has "
                                   f"{value!r}: its iterations do not all apply the same module")
        return shared_module_recurrence(model, kwargs, entry["module"], loops, name, entry.get("description", ""))

    return build
