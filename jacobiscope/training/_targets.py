"""The linear maps the spectral regularizer acts on: `LinearTarget` and `spectral_targets` (fused QKV split)."""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Iterable

import torch
from torch import nn

from ..adapters._offload import weight_of
from ..errors import ArgumentError, ArgumentTypeError
from ._model_parts import DEFAULT_FUSED, _conv1d_class, _declared, _is_linear

__all__ = ["LinearTarget", "spectral_targets"]

_PART_NAMES = {2: ("k", "v"), 3: ("q", "k", "v")}


@dataclass(frozen=True)
class LinearTarget:
    """One linear map ``x -> W x + b`` the spectral regularizer acts on (a module, or one part of a fused one).

    Example::

        >>> import torch
        >>> from jacobiscope.training import LinearTarget
        >>> qkv = torch.nn.Linear(4, 12)
        >>> LinearTarget("qkv[k]", qkv, part=1, parts=3).weight().shape
        torch.Size([4, 4])

    Attributes:
        name: qualified module name, with ``[q]``/``[k]``/``[v]`` for the parts of a fused projection.
        module: the ``nn.Linear`` or transformers ``Conv1D`` holding the weight (live: gradients reach it).
        part, parts: which of ``parts`` equal slices of the output dimension this target is (``parts=1``: all).
        transposed: the module stores ``[in, out]`` (``Conv1D``); `weight` always returns ``[out, in]``.
    """

    name: str
    module: nn.Module
    part: int = 0
    parts: int = 1
    transposed: bool = False

    def weight(self) -> torch.Tensor:
        """The matrix ``W`` as ``[out, in]`` (a differentiable view of the module's weight)."""
        weight = weight_of(self.module)   # the live parameter; read from the store when accelerate offloads it
        if self.transposed:
            weight = weight.t()
        if self.parts > 1:
            rows = weight.shape[0] // self.parts
            weight = weight[self.part * rows : (self.part + 1) * rows]
        return weight

    def bias(self) -> torch.Tensor | None:
        """The bias slice matching `weight`, or ``None``."""
        bias = weight_of(self.module, "bias")
        if bias is None:
            return None
        if self.parts > 1:
            size = bias.shape[0] // self.parts
            bias = bias[self.part * size : (self.part + 1) * size]
        return bias


def _auto_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The linear maps of the looped blocks: the submodules a looped model declares in ``_looped_modules``, or the
    blocks an HF model repeats (found by `jacobiscope.adapters.find_blocks`)."""
    named = list(model.named_modules())
    prefixes = _declared(model, "_looped_modules")
    if prefixes is None:
        from ..adapters.spec import find_blocks

        path, _, _ = find_blocks(model)
        prefixes = (path,)
    found = [(name, module) for name, module in named if _is_linear(module)
             and any(name == p or name.startswith(p + ".") for p in prefixes)]
    if not found:
        raise ArgumentError(
            f"No nn.Linear / Conv1D found in the looped blocks of {type(model).__name__} (looked under "
            f"{list(prefixes)}). Pass modules=[...] (module names or glob patterns) to choose the weights."
        )
    return found


def _select(model: nn.Module, modules) -> list[tuple[str, nn.Module]]:
    if modules is None:
        return _auto_modules(model)
    if isinstance(modules, (str, nn.Module)):
        modules = [modules]
    named = list(model.named_modules())
    names_of = {id(module): name for name, module in named}
    linear = [(name, module) for name, module in named if _is_linear(module)]
    chosen: dict[int, tuple[str, nn.Module]] = {}
    for item in modules:
        if isinstance(item, nn.Module):
            base = names_of.get(id(item), type(item).__name__)
            inside = [(f"{base}.{n}" if n else base, m) for n, m in item.named_modules() if _is_linear(m)]
            if not inside:
                raise ArgumentError(f"The module {base} ({type(item).__name__}) holds no nn.Linear / Conv1D.")
            hits = [(names_of.get(id(m), n), m) for n, m in inside]
        elif isinstance(item, str):
            hits = [(n, m) for n, m in linear if fnmatch.fnmatchcase(n, item) or n.startswith(item + ".")]
            if not hits:
                examples = ", ".join(n for n, _ in linear[:8]) or "none"
                raise ArgumentError(
                    f"The pattern {item!r} matches no nn.Linear / Conv1D of {type(model).__name__} (names are "
                    f"matched as globs or as a container prefix). Linear modules are e.g.: {examples}."
                )
        else:
            raise ArgumentTypeError(f"modules must hold module names (str) or nn.Module objects, got {type(item).__name__}.")
        for name, module in hits:
            chosen.setdefault(id(module), (name, module))
    return list(chosen.values())


def spectral_targets(model: nn.Module, modules=None, *, fused: Iterable[str] | None = None) -> list[LinearTarget]:
    """The linear maps a spectral regularizer acts on, with fused QKV projections split.

    Example::

        >>> import transformers
        >>> from jacobiscope.training import spectral_targets
        >>> gpt2 = transformers.GPT2Model(transformers.GPT2Config(n_embd=16, n_layer=1, n_head=2))
        >>> [t.name for t in spectral_targets(gpt2)][:4]
        ['h.0.attn.c_attn[q]', 'h.0.attn.c_attn[k]', 'h.0.attn.c_attn[v]', 'h.0.attn.c_proj']

    Arguments:
        model: the model (unwrapped: not DDP / DeepSpeed).
        modules: ``None`` (default): the linear maps of the looped blocks — for `ItrSAForSudoku` the looped
            attention's ``nn.Linear`` layers (and the looped MLP's when ``mlp_ratio > 0``), for `AKOrNForSudoku`
            the coupling attention's, for a Hugging Face model every ``nn.Linear`` / ``Conv1D`` of the blocks
            `jacobiscope.adapters.find_blocks` finds. Or a list of module names / glob patterns (``"*.attn.*"``; a
            container's name selects the linear maps inside it) and/or ``nn.Module`` objects.
        fused: leaf names of fused query/key/value projections, split into equal parts of the output dimension
            (default ``c_attn``, ``qkv``, ``qkv_proj``, ``Wqkv``; ``()`` to keep them whole). A fused weight must
            have 3x (Q, K, V) or 2x (K, V: GPT-2 cross-attention) as many outputs as inputs.

    Returns:
        A list of `LinearTarget`, in module order.
    """
    fused = DEFAULT_FUSED if fused is None else tuple(fused)
    conv1d = _conv1d_class()
    targets = []
    for name, module in _select(model, modules):
        transposed = bool(conv1d) and isinstance(module, conv1d)
        out_features, in_features = (module.weight.shape[1], module.weight.shape[0]) if transposed else module.weight.shape
        if name.rsplit(".", 1)[-1] in fused:
            parts = out_features // in_features if out_features % in_features == 0 else 0
            if parts not in _PART_NAMES:
                raise ArgumentError(
                    f"Cannot split the fused projection {name} ({out_features} outputs, {in_features} inputs) into "
                    "equal Q/K/V parts: expected 3x (or 2x for K/V) as many outputs as inputs (grouped-query fused "
                    "projections differ). Pass fused=() to keep it whole, or modules=[...] to leave it out."
                )
            for index, part in enumerate(_PART_NAMES[parts]):
                targets.append(LinearTarget(f"{name}[{part}]", module, index, parts, transposed))
        else:
            targets.append(LinearTarget(name, module, 0, 1, transposed))
    return targets
