"""The attention sub-layer of a block that no spec describes, read off one traced call of the block.

Names differ from family to family (``input_layernorm``, ``ln_1``, ``norm_1``, ``layer.0.layer_norm``,
``attention.output.LayerNorm``); the dataflow does not. One call of the block, with the arguments the model gave it,
is traced through hooks and the sub-layer is accepted only when the tensors show it:

- pre-norm (Llama, Qwen, Phi, Gemma, GPT-NeoX, Falcon, MPT, GPT-J, T5): the attention is called on the very tensor a
  norm module returned;
- post-norm (BERT and its clones): the attention is called on the block's input ``h``, and a norm is then called on
  ``h + drive`` (checked numerically), where the drive is the attention's output or its output projection.

An output projection (a linear layer called on the attention's output: BERT's ``attention.output.dense``) and a norm
on the branch before the residual (Gemma's sandwich norm) join the drive when the trace shows them.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .capture import ReplayedModule, first_output, hidden_state_of, strip_caches
from .spec import AdapterError

__all__ = ["TracedAttention", "infer_attention"]

_CROSS = ("cross", "encdec", "enc_dec", "encoder_attn")


@dataclass
class TracedAttention:
    """The attention sub-layer one traced call of a block showed: the attention (and the arguments it received),
    the modules applied to its output before the residual (``output``: a projection, a norm, both, or ``None``),
    the norm of the ItrSA form, and where it sits (``"pre"`` or ``"post"``). ``paths`` name them inside the block."""

    attention: nn.Module
    attention_args: tuple
    attention_kwargs: dict
    output: nn.Module | None
    norm: nn.Module
    norm_position: str
    paths: dict

    def describe(self) -> str:
        through = " and ".join(repr(path) for path in self.paths["output"])
        if self.norm_position == "pre":
            after = f"; its output goes through {through} before the residual" if through else ""
            return f"pre-norm: attention '{self.paths['attention']}' reads the output of norm '{self.paths['norm']}'{after}"
        after = f" (its output through {through})" if through else ""
        return f"post-norm: attention '{self.paths['attention']}'{after}, then norm '{self.paths['norm']}' on the residual sum"


def _is_attention(path: str, module: nn.Module) -> bool:
    name = type(module).__name__.lower()
    return "attention" in name and not any(word in path.lower() or word in name for word in _CROSS)


def _is_norm(module: nn.Module) -> bool:
    return "norm" in type(module).__name__.lower()


class _Trace:
    """Hooks on every submodule of a block (attentions with their arguments); every traced tensor is kept with its
    id, so no id is reused by a later tensor within the trace."""

    def __init__(self, block: nn.Module):
        self.modules = {p: m for p, m in block.named_modules() if p}
        self.attentions = {p: m for p, m in self.modules.items() if _is_attention(p, m)}
        self.norms = {p: m for p, m in self.modules.items() if _is_norm(m)}
        self.calls = []  # (kind, path, input, output, args, kwargs), in the order the calls end
        self._handles = []
        for path, module in self.modules.items():
            if path in self.attentions:
                self._handles.append(module.register_forward_hook(self._attention(path), with_kwargs=True))
            else:
                kind = "norm" if path in self.norms else "module"
                self._handles.append(module.register_forward_hook(self._plain(kind, path)))

    def _plain(self, kind, path):
        def hook(module, args, output):
            if args and isinstance(args[0], torch.Tensor) and isinstance(output, torch.Tensor):
                self.calls.append((kind, path, args[0], output, None, None))
        return hook

    def _attention(self, path):
        def hook(module, args, kwargs, output):
            try:
                hidden = hidden_state_of(tuple(args), dict(kwargs))
            except AdapterError:
                return
            out = first_output(output)
            if isinstance(out, torch.Tensor):
                self.calls.append(("attention", path, hidden, out, *strip_caches(tuple(args), dict(kwargs))))
        return hook

    def remove(self):
        for handle in self._handles:
            handle.remove()

    def returned(self, kind: str, tensor: torch.Tensor):
        """The first call of a ``kind`` module that returned ``tensor`` itself."""
        return next((call for call in self.calls if call[0] == kind and call[3] is tensor), None)


def _outermost_first(calls):
    """Hooks fire when a call ends, so an attention nested in another comes first: try the outer ones first (an
    outer attention that is the whole sub-layer, with its projection), then the inner ones, in call order."""
    return sorted(calls, key=lambda call: call[1].count("."))


def _branch(trace: _Trace, attention_call, hidden: torch.Tensor):
    """The modules applied to the attention's output before the residual, in order: each is called on the previous
    one's output, keeps the state's shape and is at most a projection (no more parameters than a hidden x hidden
    linear layer: an output projection, a sandwich norm, DINOv2's layer scale; never an MLP). Identities (dropout in
    eval mode) are passed over."""
    width = hidden.shape[-1]
    limit = width * width + width
    modules, paths, drive, used = [], [], attention_call[3], set()
    while len(paths) < 8:
        step = next((call for call in trace.calls if call[0] != "attention" and call[2] is drive and id(call) not in used
                     and call[3].shape == hidden.shape and not any(call[1].startswith(p + ".") for p in paths)
                     and sum(t.numel() for t in trace.modules[call[1]].parameters()) <= limit), None)
        if step is None:
            break
        used.add(id(step))
        if step[3] is drive:  # an identity in eval mode (dropout, drop-path)
            continue
        modules.append(trace.modules[step[1]])
        paths.append(step[1])
        drive = step[3]
    return modules, paths, drive


def _post_norm(trace: _Trace, hidden: torch.Tensor, drive: torch.Tensor):
    """The first norm called on ``hidden + drive`` (a new tensor, so compared by value)."""
    target = hidden + drive
    scale = float(target.abs().max()) or 1.0
    for kind, path, given, *_ in trace.calls:
        if kind == "norm" and given.shape == target.shape and float((given - target).abs().max()) <= 1e-5 * scale:
            return path
    return None


def infer_attention(block: nn.Module, block_args: tuple, block_kwargs: dict) -> TracedAttention:
    """Trace one call of ``block`` (with the arguments the model gave it) and return its attention sub-layer.

    Raises `AdapterError` naming the fix when the trace shows none (no attention module, an attention on a mixed
    stream, a post-norm block whose norm does not see ``h + drive``).
    """
    trace = _Trace(block)
    if not trace.attentions or not trace.norms:
        found = "no submodule whose class is an attention" if not trace.attentions else "no norm submodule"
        raise AdapterError(f"mode='attention' found {found} in {type(block).__name__} and no adapter spec names the "
                           "parts — register them: jacobiscope.register_adapter(model_type, attention=..., "
                           "attention_norm=..., norm_position=...), or use mode='block'.")
    hidden = hidden_state_of(block_args, block_kwargs)
    try:
        with torch.no_grad():
            ReplayedModule(block, block_args, block_kwargs)(hidden)
    finally:
        trace.remove()
    attention_calls = [call for call in trace.calls if call[0] == "attention"]
    # An attention handed the residual stream as well (BLOOM adds it inside) returns h + Attn: no drive to replay.
    adds_residual = [call for call in attention_calls if _receives(call, hidden)]
    shaped = [call for call in attention_calls
              if call[3].shape[:-1] == call[2].shape[:-1] and call not in adds_residual]
    pre = _outermost_first([call for call in shaped if trace.returned("norm", call[2]) is not None])
    for call in pre:
        modules, paths, drive = _branch(trace, call, call[2])
        if drive.shape == call[2].shape:
            norm_path = trace.returned("norm", call[2])[1]
            return _traced(trace, call, modules, paths, norm_path, "pre")
    for call in _outermost_first([call for call in shaped if call[2] is hidden]):
        modules, paths, drive = _branch(trace, call, hidden)
        norm_path = _post_norm(trace, hidden, drive) if drive.shape == hidden.shape else None
        if norm_path is not None and norm_path not in paths:
            return _traced(trace, call, modules, paths, norm_path, "post")
    if adds_residual:
        raise AdapterError(f"mode='attention': the attention '{adds_residual[0][1]}' of {type(block).__name__} is "
                           "handed the block's input as well and adds the residual itself, so its output is not a "
                           "drive the ItrSA form can replay; no adapter spec describes it — use mode='block', or "
                           "register_adapter(model_type, attention=..., attention_norm=...) for a module that "
                           "returns the attention alone.")
    called = sorted({call[1] for call in attention_calls}) or sorted(trace.attentions)
    raise AdapterError(f"mode='attention': the trace of {type(block).__name__} shows no attention sub-layer of the "
                       f"ItrSA form (attentions {', '.join(called)}: none reads a norm's output, and no norm sees the "
                       "block's input plus the attention's output); no adapter spec describes it — register one: "
                       "jacobiscope.register_adapter(model_type, attention=..., attention_norm=..., "
                       "norm_position=...), or use mode='block'.")


def _receives(call, hidden: torch.Tensor) -> bool:
    """Whether an attention call got the block's input ``hidden`` besides its own hidden state."""
    _, _, own, _, args, kwargs = call
    others = [*args, *kwargs.values()]
    return own is not hidden and any(value is hidden for value in others)


def _traced(trace, call, modules, paths, norm_path, position) -> TracedAttention:
    output = None if not modules else modules[0] if len(modules) == 1 else nn.Sequential(*modules)
    return TracedAttention(trace.attentions[call[1]], call[4], call[5], output, trace.norms[norm_path], position,
                           {"attention": call[1], "output": paths, "norm": norm_path})
