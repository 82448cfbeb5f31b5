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
   ``"description"``, for the loop-depth sweep ``"readout"``: state -> logits, ``"quality"``: state -> score, and
   for a state with a batch axis ``"batch_dims"``: leading dimensions of independent trajectories (default 0),
   ``"drive"``: state -> ``Y_t`` for the pseudo-energy, ``"eta"``: the step size, ``"gate"``: state -> the
   probability of exiting there, for a model with an early-exit gate). Plain torch: the model needs no
   jacobiscope import (the reference solvers, `jacobiscope.models`, speak it).
2. ``loop_map(input_ids)`` returning a `LoopedMap` (a model written for jacobiscope): recurrence ``"loop"``.
3. **A family spec**: ``adapters/<family>.json`` with a ``"recurrences"`` entry, either data (a shared module
   called once per iteration: ``{"module": "encoder.albert_layer_groups.0", "loops": "num_hidden_layers"}``) or the
   name of a builder registered with `register_recurrence` (code, for families whose iteration adds injections or
   norms around the shared stack).

The shipped builders give a ``readout`` (state -> logits: what the model does to the state when its loop stops
there) when the model has an output head (``...ForCausalLM``, ``AlbertForMaskedLM``), so ``analyze(model, inputs,
diagnostics=["loop_depth"])`` sweeps the output along the loop; a bare base model gets none.
"""
from __future__ import annotations

import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from .._validation import _is_int, as_int, budget, did_you_mean
from ..errors import InputError, JacobiscopeError
from ..maps import LoopedMap
from ._offload import hold_loaded, is_offloaded
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
    batch_dims: int = 0  # leading dimensions of the state that index independent trajectories
    drive: Callable | None = None  # state -> Y_t, for the pseudo-energy
    eta: float | None = None  # the step size of the loop, when it has one
    gate: Callable | None = None  # state -> exit probability (an early-exit gate: Ouro), as looped.meta['gate']


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


def looped_model_types() -> list[str]:
    """Every model type with a built-in recurrence (transformers' looped families and the remote-code ones)."""
    from . import _recurrences  # noqa: F401 - the shipped families register themselves on first use
    from .spec import shipped_recurrence_specs

    return sorted(set(_BUILDERS) | set(shipped_recurrence_specs()))


def _check_model_type(model_type: str) -> None:
    from transformers import CONFIG_MAPPING

    from .. import models  # noqa: F401 - registers jacobiscope's own model types (itrsa_sudoku, akorn_sudoku)
    from .spec import shipped_adapter_specs

    looped = looped_model_types()
    known = set(looped) | set(CONFIG_MAPPING.keys()) | {
        kind for spec in shipped_adapter_specs().values() for kind in getattr(spec, "model_types", ())}
    if model_type not in known:
        raise AdapterError(f"no model type {model_type!r} is known here{did_you_mean(model_type, looped)} — pass a "
                           f"loaded model or one of the looped families: {', '.join(looped)}")


def _model_type(model_or_type) -> str:
    if isinstance(model_or_type, str):
        return model_or_type
    return str(getattr(getattr(model_or_type, "config", None), "model_type", "") or "")


def list_recurrences(model_or_model_type) -> list[str]:
    """The recurrences a model (or a model type) offers, default first; empty when it has none.

    Example::

        >>> import jacobiscope
        >>> jacobiscope.list_recurrences("ouro"), jacobiscope.list_recurrences("gpt2")
        (['loop'], [])

    A string that names no model type known here (neither a looped family nor a transformers model type) is
    refused, with the closest looped family."""
    if isinstance(model_or_model_type, str):
        _check_model_type(model_or_model_type)
    else:
        declared = getattr(model_or_model_type, "jacobiscope_recurrences", None)
        if declared is not None and not (isinstance(declared, (tuple, list)) and not declared):
            return _declared_names(model_or_model_type, declared)
        if callable(getattr(model_or_model_type, "loop_map", None)):
            return ["loop"]
    return list(_family_builders(_model_type(model_or_model_type)))


def native_loop(model, inputs, recurrence: str | None = None) -> LoopedMap:
    """The model's own loop on ``inputs`` as a `LoopedMap` whose step is one iteration, from the state entering
    the first (``looped.x0``); ``looped.info.loops`` is the configured iteration count.

    Arguments:
        model: a looped model (ALBERT, HRM-Text, Dory, Inkling-2 loop, or any model following the protocol).
        inputs: the keyword arguments of ``model(**inputs)`` (a dict), or an ``input_ids`` tensor.
        recurrence: which recurrence (`list_recurrences`); default: the model's first.

    Raises `AdapterError` naming what the model offers when it has no recurrence or not the one asked for.
    """
    kwargs = dict(inputs) if isinstance(inputs, Mapping) else {"input_ids": inputs}
    for key, value in kwargs.items():  # an empty batch would surface as the recurrence's empty x0, misnamed
        if key in ("input_ids", "inputs_embeds", "pixel_values") and isinstance(value, torch.Tensor) and (
                value.numel() == 0):
            raise InputError(f"The input {key!r} is empty (shape {tuple(value.shape)}) — pass at least one example "
                             "with at least one token.")
    offered = list_recurrences(model)
    if not offered:
        raise AdapterError(
            f"{type(model).__name__} (model_type {_model_type(model)!r}) declares no recurrence of its own — "
            "analyse its blocks with mode='block' or 'attention', or give the class jacobiscope_recurrences and "
            "jacobiscope_recurrence(name, **inputs) (see jacobiscope.adapters.native)")
    name = offered[0] if recurrence is None else recurrence
    if not isinstance(name, str):
        raise AdapterError(f"recurrence must be a name (str), got {type(name).__name__} {name!r} — pass one of "
                           f"{', '.join(offered)}")
    if name not in offered:
        raise AdapterError(f"{type(model).__name__} has no recurrence {name!r}{did_you_mean(name, offered)} — it "
                           f"offers {', '.join(offered)}")
    protocol = bool(getattr(model, "jacobiscope_recurrences", None))
    owner = (f"{type(model).__name__}.jacobiscope_recurrence({name!r})" if protocol
             else f"{type(model).__name__}'s recurrence {name!r}")
    if not protocol and _loop_map_only(model):
        return _from_loop_map(model, kwargs, owner)
    # Offloaded weights (accelerate's device_map) are loaded in place while the map lives: its loop runs them all.
    release = hold_loaded(model) if is_offloaded(model) else None
    try:
        found = _checked(owner, _recurrence(model, name, kwargs), user_code=protocol)
        looped = LoopedMap(found.step, batch_dims=found.batch_dims, drive=found.drive, x0=found.x0.detach(),
                           name=f"{type(model).__name__}:{name}")
    except BaseException:
        if release is not None:
            release()
        raise
    if release is not None:
        weakref.finalize(looped, release)
        looped.info.notes = [*(looped.info.notes or []), "offloaded weights loaded in place while this map lives"]
    info = looped.info
    info.mode, info.layer, info.recurrence, info.loops = "loop", 0, name, found.loops
    info.description, info.readout, info.quality, info.eta = found.description, found.readout, found.quality, found.eta
    if callable(getattr(found, "gate", None)):  # the loop lens reads it (diagnostics/_loop_lens.gate_function)
        looped.meta["gate"] = found.gate
    if protocol:
        _probe(owner, looped, found)
    return looped


def _loop_map_only(model) -> bool:
    return callable(getattr(model, "loop_map", None)) and not _family_builders(_model_type(model))


def _from_loop_map(model, kwargs: dict, owner: str) -> LoopedMap:
    """The `LoopedMap` a model's own ``loop_map(input_ids)`` returns, checked, its info said (recurrence ``"loop"``,
    layer 0, the configured loops from ``config.loops`` unless the map says them)."""
    if "input_ids" not in kwargs:
        raise AdapterError(f"{owner} is the model's loop_map(input_ids): the inputs hold no input_ids (keys "
                           f"{sorted(kwargs)}) — pass {{'input_ids': tensor}}")
    looped = model.loop_map(kwargs["input_ids"])
    if not isinstance(looped, LoopedMap):
        raise AdapterError(f"{type(model).__name__}.loop_map returned {_shown(looped)}, expected a jacobiscope."
                           "LoopedMap — return LoopedMap(step, x0=...)")
    info = looped.info
    loops = info.loops if info.loops is not None else int(getattr(getattr(model, "config", None), "loops", 0) or 0)
    _checked(owner, Recurrence("loop", looped.step, looped.x0, loops, "the model's loop_map"), user_code=False)
    info.mode, info.recurrence, info.loops = "loop", "loop", loops
    if info.layer is None:
        info.layer = 0
    if info.description is None:
        info.description = "the model's loop_map"
    return looped


#: The keys a protocol model's ``jacobiscope_recurrence`` may return (the first three are required).
PROTOCOL_KEYS = ("step", "x0", "loops", "description", "readout", "quality", "batch_dims", "drive", "eta", "gate")


def _declared_names(model, declared) -> list[str]:
    """The names a model's ``jacobiscope_recurrences`` declares, checked: a tuple of distinct non-empty str (a bare
    string would otherwise be read letter by letter: 'core' as c, o, r, e)."""
    cls = type(model).__name__
    if isinstance(declared, str) or not isinstance(declared, (tuple, list)):
        shown = f"the {type(declared).__name__} {declared!r:.60}"
        raise AdapterError(f"{cls}.jacobiscope_recurrences must be a tuple of recurrence names, got {shown} — write "
                           f"jacobiscope_recurrences = ({str(declared)!r:.40},) (the first is the default)")
    bad = [name for name in declared if not isinstance(name, str) or not name.strip()]
    if bad:
        raise AdapterError(f"{cls}.jacobiscope_recurrences must hold non-empty names (str), got {bad[0]!r} — write "
                           "e.g. jacobiscope_recurrences = ('core',)")
    repeated = sorted({name for name in declared if list(declared).count(name) > 1})
    if repeated:
        raise AdapterError(f"{cls}.jacobiscope_recurrences names {repeated[0]!r} more than once — name each "
                           "recurrence once")
    if not callable(getattr(model, "jacobiscope_recurrence", None)):
        raise AdapterError(f"{cls} declares jacobiscope_recurrences = {tuple(declared)!r} but has no method "
                           "jacobiscope_recurrence(name, **inputs) — add it, returning {'step': ..., 'x0': ..., "
                           "'loops': ...}")
    return list(declared)


def _shown(value) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:60] + '...' if len(text) > 60 else text}"


def _checked(owner: str, found: "Recurrence", *, user_code: bool) -> "Recurrence":
    """Every field of a recurrence checked, each refusal naming the key and what came (`AdapterError`)."""
    if not callable(found.step):
        raise AdapterError(f"{owner}: 'step' must be a callable state -> state, got {_shown(found.step)} — return "
                           "e.g. 'step': lambda s: self.core(s)")
    x0 = found.x0
    if not isinstance(x0, torch.Tensor):
        raise AdapterError(f"{owner}: 'x0' must be a torch.Tensor (the state entering the first iteration), got "
                           f"{_shown(x0)} — return a tensor, e.g. torch.zeros_like(embedded)")
    if not x0.dtype.is_floating_point:
        raise AdapterError(f"{owner}: 'x0' must be a floating tensor, got {x0.dtype} — return x0.float() (a state is "
                           "differentiated)")
    if x0.numel() == 0:
        raise AdapterError(f"{owner}: 'x0' is empty (shape {tuple(x0.shape)}) — return the state entering the first "
                           "iteration, with at least one entry")
    if x0.device.type != "meta" and not bool(torch.isfinite(x0).all()):
        raise AdapterError(f"{owner}: 'x0' holds {int((~torch.isfinite(x0)).sum())} NaN/Inf entries — check the "
                           "layers that produced it (the prelude or the embedding)")
    loops = found.loops
    if not _is_int(loops) or loops < (1 if user_code else 0):  # a loop_map model without config.loops says 0
        raise AdapterError(f"{owner}: 'loops' must be the configured iteration count, an int >= 1, got "
                           f"{_shown(loops)} — return e.g. 'loops': self.config.num_iterations")
    limit = budget("loops")
    if loops > limit:
        raise AdapterError(f"{owner}: 'loops'={loops} is over the budget of {limit} loops (analyze and loop_depth "
                           f"sweep up to the configured depth) — return the model's real iteration count, or raise "
                           f"the budget with JACOBISCOPE_MAX_LOOPS={loops}")
    for key in ("readout", "quality", "drive", "gate"):
        value = getattr(found, key)
        if value is not None and not callable(value):
            what = {"readout": "state -> logits", "quality": "state -> a number (higher is better)",
                    "drive": "state -> Y_t (a tensor like the state)",
                    "gate": "state -> exit probability (per token, or one number)"}[key]
            raise AdapterError(f"{owner}: {key!r} must be a callable {what}, or absent, got {_shown(value)} — "
                               f"return a function, or leave {key!r} out")
    description = found.description
    if description is None:
        description = ""
    elif not isinstance(description, str):
        raise AdapterError(f"{owner}: 'description' must be a str, got {_shown(description)} — return a one-line "
                           "str, or leave it out")
    batch_dims = found.batch_dims
    if not _is_int(batch_dims) or not 0 <= batch_dims < x0.dim():
        raise AdapterError(f"{owner}: 'batch_dims' must be an int in 0..{x0.dim() - 1} (leading dimensions of 'x0' "
                           f"that index independent trajectories), got {_shown(batch_dims)} — return e.g. "
                           "'batch_dims': 1, or leave it out")
    eta = found.eta
    if eta is not None and not (_is_number(eta) and not isinstance(eta, bool)):
        raise AdapterError(f"{owner}: 'eta' must be a number (the loop's step size), got {_shown(eta)} — return e.g. "
                           "'eta': self.config.eta, or leave it out")
    return Recurrence(found.name, found.step, x0, as_int(loops), description, found.readout, found.quality,
                      as_int(batch_dims), found.drive, None if eta is None else float(eta), found.gate)


def _probe(owner: str, looped: LoopedMap, found: "Recurrence") -> None:
    """One iteration, the readout and the quality score at ``x0``, run now: a protocol model's step that returns
    a wrong shape, None or a non-tensor is named as its 'step' here, not as a map deep inside a diagnostic."""
    from ..errors import StepError

    try:
        with torch.no_grad():
            out = looped.checked_step(looped.x0)
    except StepError as error:
        raise type(error)(f"{owner}: 'step' failed its first iteration from 'x0' (shape {tuple(looped.x0.shape)}): "
                          f"{error}") from error.__cause__
    targets = (("readout", found.readout), ("quality", found.quality))
    for key, function in targets:
        if function is None:
            continue
        try:
            with torch.no_grad():
                value = function(out)
        except Exception as error:  # noqa: BLE001 - the user's function: named, its error chained
            first = (str(error).strip().splitlines() or [""])[0][:200]
            raise StepError(f"{owner}: {key!r} raised {type(error).__name__} on the state after one iteration (shape "
                            f"{tuple(out.shape)}): {first} — fix {key!r}: it takes a state like 'x0'") from error
        if key == "readout":
            if not isinstance(value, torch.Tensor) or not value.is_floating_point() or value.dim() == 0:
                raise AdapterError(f"{owner}: 'readout' returned {_shown(value)}, expected a float tensor of logits "
                                   "[..., classes] — return the logits tensor (e.g. self.coda(state), not the model "
                                   "output object)")
        elif not _is_number(value):
            raise AdapterError(f"{owner}: 'quality' returned {_shown(value)}, expected one real number (higher is "
                               "better) — return e.g. float(accuracy)")


def _is_number(value) -> bool:
    import numbers

    if isinstance(value, torch.Tensor):
        return value.numel() == 1 and not value.is_complex()
    if isinstance(value, (bool, numbers.Real)):
        return True
    return type(value).__module__ == "numpy" and getattr(value, "size", 0) == 1 and "complex" not in str(
        getattr(value, "dtype", ""))


def _recurrence(model, name: str, kwargs: dict) -> Recurrence:
    if getattr(model, "jacobiscope_recurrences", None):
        owner = f"{type(model).__name__}.jacobiscope_recurrence({name!r})"
        try:
            given = model.jacobiscope_recurrence(name, **kwargs)
        except JacobiscopeError:
            raise
        except Exception as error:  # noqa: BLE001 - the model's own code: named, its error chained
            first = (str(error).strip().splitlines() or [""])[0][:200]
            raise AdapterError(f"{owner} raised {type(error).__name__}: {first} — fix the method; it is called with "
                               f"the recurrence name and the inputs as keywords ({', '.join(sorted(kwargs))})"
                               ) from error
        if isinstance(given, Recurrence):
            return given
        if not isinstance(given, Mapping):
            raise AdapterError(f"{owner} returned {_shown(given)}; it must return a dict — return {{'step': ..., "
                               "'x0': ..., 'loops': ...}")
        unknown = [key for key in given if key not in PROTOCOL_KEYS]
        if unknown:
            raise AdapterError(f"{owner} returned the unknown key {unknown[0]!r}{did_you_mean(unknown[0], PROTOCOL_KEYS)}"
                               f" — the keys are {', '.join(PROTOCOL_KEYS)}")
        missing = [key for key in ("step", "x0", "loops") if key not in given]
        if missing:
            raise AdapterError(f"{owner} returned no {', '.join(map(repr, missing))} — it must return a dict with "
                               "step, x0 and loops")
        return Recurrence(name, given["step"], given["x0"], given["loops"], given.get("description", ""),
                          given.get("readout"), given.get("quality"), given.get("batch_dims", 0), given.get("drive"),
                          given.get("eta"), given.get("gate"))
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
