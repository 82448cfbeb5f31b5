"""Capture what a model passes to a block, and replay it with the state substituted.

The model computes masks, position ids and rotary tables once per forward and hands them to every block. A
forward pre-hook (with kwargs) records them; replaying the block with a new hidden state then gives the looped
map ``X -> block(X, <captured arguments>)`` exactly as the model would apply it.
"""
from __future__ import annotations

import inspect

import torch
from torch import nn

from ..errors import JacobiscopeError
from .inputs import InputError
from .spec import AdapterError

__all__ = ["capture_calls", "ReplayedModule", "strip_caches", "in_dtype_of", "first_output"]

_CACHE_KEYWORDS = ("past_key_values", "past_key_value", "cache", "layer_past")


class _CaptureComplete(Exception):
    """Raised inside the last hook to stop the forward: later layers need not run."""


def _is_cache(obj) -> bool:
    return any(cls.__name__.endswith("Cache") for cls in type(obj).__mro__) and not isinstance(obj, torch.Tensor)


def strip_caches(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """Replace every KV cache by ``None`` and turn ``use_cache`` off.

    A captured cache makes the replay append keys on every call: it crashes (eager) or, under sdpa without a
    mask, silently attends to the stale keys of the capture run.
    """
    args = tuple(None if _is_cache(a) else a for a in args)
    kwargs = {k: (None if (_is_cache(v) or (k in _CACHE_KEYWORDS and v is not None and not isinstance(v, torch.Tensor))) else v)
              for k, v in kwargs.items()}
    if "use_cache" in kwargs:
        kwargs["use_cache"] = False
    return args, kwargs


def _accepts(function, name: str) -> bool:
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return True
    return name in parameters or any(p.kind == p.VAR_KEYWORD for p in parameters.values())


def capture_calls(model: nn.Module, model_kwargs: dict, targets: list[nn.Module]) -> list[tuple[tuple, dict]]:
    """Run ``model(**model_kwargs)`` once and record ``(args, kwargs)`` of the first call of each target.

    The forward stops as soon as every target has been entered. Returns one record per target, in the order of
    ``targets``. Raises `AdapterError` when a target never runs.
    """
    records: dict[int, tuple[tuple, dict]] = {}
    handles = []

    def make_hook(position):
        def hook(module, args, kwargs):
            if position not in records:
                records[position] = strip_caches(tuple(args), dict(kwargs))
                if len(records) == len(targets):
                    raise _CaptureComplete
        return hook

    for position, target in enumerate(targets):
        handles.append(target.register_forward_pre_hook(make_hook(position), with_kwargs=True))
    kwargs = dict(model_kwargs)
    if _accepts(model.forward, "use_cache") and "use_cache" not in kwargs:
        config = getattr(model, "config", None)
        # Composite (vision-language) configs keep use_cache on their text config.
        if config is None or hasattr(config, "use_cache") or hasattr(getattr(config, "text_config", None), "use_cache"):
            kwargs["use_cache"] = False
    try:
        with torch.no_grad():
            model(**kwargs)
    except _CaptureComplete:
        pass
    except (JacobiscopeError, MemoryError, torch.OutOfMemoryError):
        raise  # ours already say what to do; running out of memory is not the inputs' fault
    except Exception as error:  # noqa: BLE001 - the model's own forward rejected the inputs: say so, in one line
        raise forward_failure(model, error) from None
    finally:
        for handle in handles:
            handle.remove()
    missing = [i for i in range(len(targets)) if i not in records]
    if missing:
        names = ", ".join(type(targets[i]).__name__ for i in missing)
        raise AdapterError(
            f"The forward of {type(model).__name__} never called {names}: the adapter points at modules this "
            "model does not use for these inputs. Check the spec with jacobiscope.check_adapter(model)."
        )
    return [records[i] for i in range(len(targets))]


def forward_failure(model: nn.Module, error: Exception) -> InputError:
    """The `InputError` for a model whose own forward failed on the inputs (before any block was replayed): the
    model's message in one line, and what to check. The original exception is kept as ``.original``."""
    reason = (str(error).strip().splitlines() or [""])[0][:240]
    config = getattr(model, "config", None)
    hint = ("check that the inputs are what the model takes (token ids below its vocabulary, no longer than its "
            "positions, images of its size) and that the model runs at all (a config whose sizes disagree fails "
            "here too: try model(**inputs))")
    if getattr(config, "is_encoder_decoder", False):
        hint = ("an encoder-decoder needs decoder inputs to run its decoder: pass {'input_ids': ..., "
                "'decoder_input_ids': ...}, or analyse its encoder (model.get_encoder())")
    failure = InputError(f"{type(model).__name__}'s own forward failed on these inputs ({type(error).__name__}: "
                         f"{reason}) — {hint}")
    failure.original = error
    return failure


def hidden_state_of(args: tuple, kwargs: dict) -> torch.Tensor:
    """The hidden state a captured call received (first positional argument, or ``hidden_states=``)."""
    if args and isinstance(args[0], torch.Tensor):
        return args[0]
    if isinstance(kwargs.get("hidden_states"), torch.Tensor):
        return kwargs["hidden_states"]
    raise AdapterError("The captured call has no hidden state (neither a first positional tensor nor hidden_states=).")


def _like(obj, x: torch.Tensor):
    """Move captured tensors to the state's device; floating ones also to its dtype (float64 mode, fp16 models)."""
    if isinstance(obj, torch.Tensor):
        if obj.is_floating_point():
            return obj if (obj.dtype == x.dtype and obj.device == x.device) else obj.to(device=x.device, dtype=x.dtype)
        return obj if obj.device == x.device else obj.to(x.device)
    if isinstance(obj, tuple):
        return tuple(_like(item, x) for item in obj)
    if isinstance(obj, list):
        return [_like(item, x) for item in obj]
    if isinstance(obj, dict):
        return {k: _like(v, x) for k, v in obj.items()}
    return obj


def in_dtype_of(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``x`` in the dtype of ``module``'s first parameter (unchanged when it has none).

    A readout runs the model's own modules, which ``LoopedMap.to(float64)`` does not copy or cast (only the step
    is), so a readout casts the state to the model's dtype rather than fail on a float64 state.
    """
    weight = next(module.parameters(), None)
    return x if weight is None or x.dtype == weight.dtype else x.to(weight.dtype)


class ReplayedModule(nn.Module):
    """``X -> module(X, <captured args>, <captured kwargs>)``, first output if the module returns a tuple.

    Example::

        >>> import torch
        >>> from jacobiscope.adapters.capture import ReplayedModule
        >>> replay = ReplayedModule(torch.nn.Linear(2, 2), (torch.zeros(1, 2),), {})
        >>> replay(torch.ones(1, 2)).shape
        torch.Size([1, 2])
    """

    def __init__(self, module: nn.Module, args: tuple, kwargs: dict):
        super().__init__()
        self.module = module
        if args and isinstance(args[0], torch.Tensor):
            self._hidden_keyword = False
            self._args = tuple(args[1:])
            self._kwargs = {k: v for k, v in kwargs.items()}
        else:
            self._hidden_keyword = True
            self._args = tuple(args)
            self._kwargs = {k: v for k, v in kwargs.items() if k != "hidden_states"}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        args, kwargs = _like(self._args, x), _like(self._kwargs, x)
        out = self.module(*args, hidden_states=x, **kwargs) if self._hidden_keyword else self.module(x, *args, **kwargs)
        return first_output(out)


def first_output(out):
    """The state a block returns: the first item of a tuple, ``last_hidden_state``, or the first value of a plain
    dict (SqueezeBERT's ``{"feature_map": ...}``)."""
    if isinstance(out, (tuple, list)):
        return out[0]
    if hasattr(out, "last_hidden_state"):
        return out.last_hidden_state
    if isinstance(out, dict) and out:
        return next(iter(out.values()))
    return out
