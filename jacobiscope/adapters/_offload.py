"""Models run with accelerate's big-model inference (``from_pretrained(..., device_map=..., offload_folder=...)``):
weights kept on the CPU or on disk and loaded into a layer only while it runs, the way a 40B looped model is run on
one GPU.

Example::

    >>> import torch, transformers, tempfile
    >>> from jacobiscope.adapters._offload import is_offloaded, materialized_copy
    >>> folder = tempfile.mkdtemp()
    >>> transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=2, n_embd=16, n_head=2, vocab_size=50,
    ...                                                      n_positions=32)).save_pretrained(folder)
    >>> where = {"transformer.wte": "cpu", "transformer.wpe": "cpu", "transformer.drop": "cpu",
    ...          "transformer.h": "disk", "transformer.ln_f": "cpu", "lm_head": "cpu"}
    >>> model = transformers.GPT2LMHeadModel.from_pretrained(folder, device_map=where,
    ...                                                      offload_folder=folder + "/offload")
    >>> is_offloaded(model), next(model.transformer.h[0].parameters()).is_meta
    (True, True)
    >>> layer = materialized_copy(model.transformer.h[0], torch.device("cpu"))
    >>> any(p.is_meta for p in layer.parameters()), hasattr(layer, "_hf_hook")
    (False, False)

A looped block's map is built on a *copy* of that one block with its weights loaded (`materialized_copy`): the map
owns plain tensors (so jvps, vjps, the traced Lyapunov loop and ``LoopedMap.to`` work as on any module), the model
stays offloaded, and only the block being measured is in memory. A model's own loop (HRM-Text, Ouro, ...) runs its
whole recurrence every loop, so its offloaded weights are loaded in place while a map of it is alive (`hold_loaded`)
and offloaded again when the last one is gone.
"""
from __future__ import annotations

import copy
import weakref

import torch
from torch import nn

__all__ = ["is_offloaded", "offload_gaps", "execution_device", "materialized_copy", "load_in_place", "hold_loaded",
           "weight_of"]

# model -> [holders, undo actions]: the weights stay loaded while any map of the model's own loop is alive
_HELD: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _offload_hook(module: nn.Module):
    """The module's accelerate hook that loads offloaded weights on each call, or None."""
    hook = getattr(module, "_hf_hook", None)
    if hook is None:
        return None
    hooks = getattr(hook, "hooks", None) or [hook]   # a SequentialHook holds several
    return next((h for h in hooks if getattr(h, "offload", False) and getattr(h, "weights_map", None) is not None),
                None)


def is_offloaded(model: nn.Module) -> bool:
    """Whether some of ``model``'s weights are offloaded by accelerate (meta in the module, loaded on call)."""
    return any(_offload_hook(module) is not None for module in model.modules())


def offload_gaps(model: nn.Module) -> list[str]:
    """Names of meta parameters that no offload hook will load (weights that are simply not there)."""
    covered = set()
    for name, module in model.named_modules():
        if _offload_hook(module) is not None:
            covered.update(f"{name}.{p}" if name else p for p, _ in module.named_parameters())
    return [name for name, parameter in model.named_parameters() if parameter.is_meta and name not in covered]


def execution_device(model: nn.Module) -> torch.device | None:
    """Where an offloaded model computes: its hooks' execution device, else the first parameter not on meta."""
    for module in model.modules():
        device = _hook_device(_offload_hook(module) or getattr(module, "_hf_hook", None))
        if device is not None:
            return device
    return next((p.device for p in model.parameters() if not p.is_meta), None)


def _hook_device(hook) -> torch.device | None:
    """A hook's execution device as a torch.device (accelerate may hold a bare GPU index)."""
    device = getattr(hook, "execution_device", None)
    if device is None:
        return None
    return torch.device(f"cuda:{device}" if isinstance(device, int) else device)


def materialized_copy(module: nn.Module, device: torch.device) -> nn.Module:
    """A copy of ``module`` without accelerate hooks, every offloaded weight loaded onto ``device`` (the original
    stays offloaded). Weights already in memory are shared with the model, as a plain module's would be."""
    from accelerate.hooks import remove_hook_from_module
    from accelerate.utils import set_module_tensor_to_device

    twin = copy.deepcopy(module, memo={id(p): p for p in module.parameters() if not p.is_meta})
    remove_hook_from_module(twin, recurse=True)
    for original, copied in zip(module.modules(), twin.modules()):
        hook = _offload_hook(original)
        if hook is None:
            continue
        # names relative to the hooked module, as its weights map keys them
        for name in [n for n, t in (*copied.named_parameters(), *copied.named_buffers()) if t.is_meta]:
            set_module_tensor_to_device(copied, name, device, value=_read(hook.weights_map, name))
    missing = [name for name, t in (*twin.named_parameters(), *twin.named_buffers()) if t.is_meta]
    if missing:
        from ..errors import AdapterError

        raise AdapterError(f"{type(module).__name__}: {len(missing)} weights stay on the meta device after loading "
                           f"the offloaded ones (first: {missing[0]!r}) — load the model without device_map or with "
                           "its weights complete")
    return twin


def _read(weights_map, name: str) -> torch.Tensor:
    try:
        return weights_map[name]
    except KeyError as error:
        from ..errors import AdapterError

        raise AdapterError(f"the offloaded weights have no {name!r} — the offload folder does not match the model; "
                           "load it again with from_pretrained(..., device_map=..., offload_folder=...)") from error


def load_in_place(model: nn.Module) -> list:
    """Load every offloaded weight of ``model`` into its module (its hooks then load nothing on call); returns the
    actions that offload them again (run in reverse order)."""
    undo = []
    for module in model.modules():
        hook = _offload_hook(module)
        if hook is None:
            continue
        hook.pre_forward(module)
        hook.offload = False

        def offload(module=module, hook=hook):
            hook.offload = True
            hook.post_forward(module, None)

        undo.append(offload)
    return undo


def hold_loaded(model: nn.Module):
    """Load ``model``'s offloaded weights in place (if no holder has yet) and return the release: the last release
    offloads them again. Each release counts once, however often it is called."""
    entry = _HELD.get(model)
    if entry is None:
        entry = _HELD[model] = [0, load_in_place(model)]
    entry[0] += 1
    released = []

    def release() -> None:
        if released or _HELD.get(model) is not entry:
            return
        released.append(True)
        entry[0] -= 1
        if entry[0] == 0:
            del _HELD[model]
            for action in reversed(entry[1]):
                action()

    return release


def weight_of(module: nn.Module, name: str = "weight"):
    """``module.<name>``, read from its offload store when accelerate offloads it (a constant there: an offloaded
    weight is not trained, accelerate's offload is for inference), else the live parameter (or None)."""
    tensor = getattr(module, name, None)
    if tensor is None or not tensor.is_meta:
        return tensor
    hook = _offload_hook(module)
    if hook is None:
        return tensor
    value = _read(hook.weights_map, name)
    return value.to(_hook_device(hook) or value.device)
