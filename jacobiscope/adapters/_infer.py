"""The attention sub-layer of a block that no spec describes, read off one traced call of the block.

Names differ from family to family (``input_layernorm``, ``ln_1``, ``norm_1``, ``layer.0.layer_norm``,
``attention.output.LayerNorm``); the dataflow does not. One call of the block, with the arguments the model gave it,
is traced through hooks and the sub-layer is accepted only when the tensors show it:

- pre-norm (Llama, Qwen, Phi, Gemma, GPT-NeoX, Falcon, MPT, T5, Whisper, DINOv2): the attention is called on the very
  tensor a norm module returned, and that norm was called on a tensor of the block's state shape;
- post-norm (BERT and its clones, BART, wav2vec2): the attention is called on the block's input ``h``, and a norm is
  then called on ``h + drive`` (checked by value), where the drive is the attention's output after its branch.

The branch is every single-input module called on the attention's output, in turn, that keeps the state's shape and
is no larger than a projection (BERT's ``attention.output.dense``, Gemma's sandwich norm, DINOv2's layer scale; never
an MLP). A pre-norm branch merged by a module of several inputs (a learned residual scaling) is refused: the ItrSA
form adds the drive. Last, the attention is replayed with the arguments it was given and must give the traced drive
again, so what the map runs is what the block ran.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .capture import ReplayedModule, first_output, hidden_state_of, strip_caches
from ..errors import JacobiscopeError, StepError
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


@dataclass(eq=False)
class _Call:
    """One traced call: which module, its first tensor argument and its output (kept alive, so no id is reused
    within the trace), how many tensor arguments it had, and an attention's full arguments for its replay."""

    kind: str  # "attention", "norm" or "module"
    path: str
    given: torch.Tensor
    output: torch.Tensor
    tensors: int = 1
    args: tuple = ()
    kwargs: dict | None = None


def _is_attention(path: str, module: nn.Module) -> bool:
    name = type(module).__name__.lower()
    return "attention" in name and not any(word in path.lower() or word in name for word in _CROSS)


def _is_norm(module: nn.Module) -> bool:
    return "norm" in type(module).__name__.lower()


def _tensor_count(args, kwargs) -> int:
    return sum(isinstance(value, torch.Tensor) for value in (*args, *kwargs.values()))


class _Trace:
    """Hooks on every submodule of a block, recording the calls in the order they end."""

    def __init__(self, block: nn.Module):
        self.modules = {p: m for p, m in block.named_modules() if p}
        self.attentions = {p: m for p, m in self.modules.items() if _is_attention(p, m)}
        self.norms = {p: m for p, m in self.modules.items() if _is_norm(m)}
        self.calls: list[_Call] = []
        self._handles = []
        for path, module in self.modules.items():
            kind = "attention" if path in self.attentions else "norm" if path in self.norms else "module"
            self._handles.append(module.register_forward_hook(self._hook(kind, path), with_kwargs=True))

    def _hook(self, kind, path):
        def hook(module, args, kwargs, output):
            if kind == "attention":
                try:
                    given = hidden_state_of(tuple(args), dict(kwargs))
                except AdapterError:
                    return
                output = first_output(output)
            elif not (args and isinstance(args[0], torch.Tensor)):
                return
            else:
                given = args[0]
            if isinstance(output, torch.Tensor):
                stripped = strip_caches(tuple(args), dict(kwargs)) if kind == "attention" else ((), None)
                self.calls.append(_Call(kind, path, given, output, _tensor_count(args, kwargs), *stripped))
        return hook

    def remove(self):
        for handle in self._handles:
            handle.remove()

    def returned(self, kind: str, tensor: torch.Tensor) -> _Call | None:
        """The first call of a ``kind`` module that returned ``tensor`` itself."""
        return next((call for call in self.calls if call.kind == kind and call.output is tensor), None)

    def consumers(self, tensor: torch.Tensor) -> list[_Call]:
        """The non-attention calls whose first argument is ``tensor`` itself."""
        return [call for call in self.calls if call.kind != "attention" and call.given is tensor]


def _outermost_first(calls):
    """Hooks fire when a call ends, so an attention nested in another comes first: try the outer ones first (an
    outer attention that is the whole sub-layer, with its projection), then the inner ones, in call order."""
    return sorted(calls, key=lambda call: call.path.count("."))


def _branch(trace: _Trace, attention: _Call, state_shape) -> tuple[list[str], torch.Tensor, _Call | None]:
    """``(paths, drive, merged_by)``: the branch modules after the attention (see the module docstring), the drive
    they give, and the multi-input call that took the drive on, if one did."""
    width = state_shape[-1]
    limit = width * width + width  # the parameters of a hidden x hidden projection
    paths, drive, used = [], attention.output, set()
    while len(paths) < 8:
        candidates = [call for call in trace.consumers(drive) if id(call) not in used
                      and not any(call.path.startswith(path + ".") for path in paths)]
        single = [call for call in candidates if call.tensors == 1 and call.output.shape == state_shape
                  and sum(t.numel() for t in trace.modules[call.path].parameters()) <= limit]
        if not single:
            merged = next((call for call in candidates if call.tensors > 1), None)
            return paths, drive, merged
        step = single[0]
        used.add(id(step))
        if step.output is drive:  # an identity in eval mode (dropout, drop-path)
            continue
        paths.append(step.path)
        drive = step.output
    return paths, drive, None


def _post_norm(trace: _Trace, hidden: torch.Tensor, drive: torch.Tensor) -> str | None:
    """The first norm called on ``hidden + drive`` (a new tensor, so compared by value)."""
    target = hidden + drive
    scale = float(target.abs().max()) or 1.0
    for call in trace.calls:
        if (call.kind == "norm" and call.given.shape == target.shape
                and float((call.given - target).abs().max()) <= 1e-5 * scale):
            return call.path
    return None


def _replays(trace: _Trace, attention: _Call, paths: list[str], drive: torch.Tensor) -> str | None:
    """None when replaying the attention with its captured arguments, then the branch, gives the traced drive
    again; else why not (a module that reads more than its arguments, a shape the replay does not keep)."""
    try:
        with torch.no_grad():
            out = ReplayedModule(trace.modules[attention.path], attention.args, attention.kwargs)(attention.given)
            for path in paths:
                out = trace.modules[path](out)
    except Exception as error:  # noqa: BLE001 - any failure means the replay is not the block's own computation
        return f"replaying '{attention.path}' with its captured arguments failed ({type(error).__name__}: " \
               f"{str(error).splitlines()[0][:120] if str(error) else ''})"
    if not isinstance(out, torch.Tensor) or out.shape != drive.shape:
        return f"replaying '{attention.path}' gave shape {tuple(getattr(out, 'shape', ()))}, not {tuple(drive.shape)}"
    scale = float(drive.abs().max()) or 1.0
    difference = float((out - drive).abs().max()) / scale
    return None if difference <= 1e-4 else f"replaying '{attention.path}' differs from its traced call by {difference:.1e}"


def infer_attention(block: nn.Module, block_args: tuple, block_kwargs: dict) -> TracedAttention:
    """Trace one call of ``block`` (with the arguments the model gave it) and return its attention sub-layer.

    Raises `AdapterError` naming the fix when the trace shows none (no attention module, an attention on a tensor
    of another shape than the block's state, an attention that adds the residual itself, a branch merged by a
    module, a replay that does not give the traced output again).
    """
    trace = _Trace(block)
    if not trace.attentions or not trace.norms:
        trace.remove()
        found = "no submodule whose class is an attention" if not trace.attentions else "no norm submodule"
        raise AdapterError(f"mode='attention' found {found} in {type(block).__name__} and no adapter spec names the "
                           "parts — register them: jacobiscope.register_adapter(model_type, attention=..., "
                           "attention_norm=..., norm_position=...), or use mode='block'.")
    hidden = hidden_state_of(block_args, block_kwargs)
    try:
        with torch.no_grad():
            ReplayedModule(block, block_args, block_kwargs)(hidden)
    except (JacobiscopeError, MemoryError):
        raise
    except Exception as error:  # noqa: BLE001 - the block fails on its own inputs: say so, not torch's internals
        first = (str(error).strip().splitlines() or [""])[0][:300]
        raise StepError(f"mode='attention': {type(block).__name__} raised {type(error).__name__} when called on the "
                        f"inputs the model gave it (state of shape {tuple(hidden.shape)}): {first} — check that the "
                        "model itself runs on these inputs (model(**inputs)); a config whose head counts do not "
                        "divide (num_key_value_heads, head_dim) fails this way.") from error
    finally:
        trace.remove()
    rejected = []
    attentions = [call for call in trace.calls if call.kind == "attention" and call.given.shape == hidden.shape]
    for call in _outermost_first(attentions):
        others = [*call.args, *(call.kwargs or {}).values()]
        if call.given is not hidden and any(value is hidden for value in others):
            rejected.append(f"'{call.path}' is handed the block's input as well and adds the residual itself")
            continue
        norm = trace.returned("norm", call.given)
        position = "pre" if norm is not None and norm.given.shape == hidden.shape else (
            "post" if call.given is hidden else None)
        if position is None:
            continue  # reads neither a norm's output nor the block's input: not this block's attention sub-layer
        paths, drive, merged = _branch(trace, call, hidden.shape)
        if drive.shape != hidden.shape:
            continue
        if position == "pre" and merged is not None:
            rejected.append(f"the output of '{call.path}' is merged into the stream by '{merged.path}', a module "
                            "of several inputs, not added")
            continue
        norm_path = norm.path if position == "pre" else _post_norm(trace, hidden, drive)
        if norm_path is None or norm_path in paths:
            continue
        why = _replays(trace, call, paths, drive)
        if why is not None:
            rejected.append(why)
            continue
        output = [trace.modules[path] for path in paths]
        return TracedAttention(trace.modules[call.path], call.args, call.kwargs or {},
                               None if not output else output[0] if len(output) == 1 else nn.Sequential(*output),
                               trace.modules[norm_path], position,
                               {"attention": call.path, "output": paths, "norm": norm_path})
    called = sorted({call.path for call in trace.calls if call.kind == "attention"}) or sorted(trace.attentions)
    reason = "; ".join(rejected) if rejected else (
        f"attentions {', '.join(called)}: none reads a norm's output on the block's state, and no norm sees the "
        "block's input plus the attention's output")
    raise AdapterError(f"mode='attention': the trace of {type(block).__name__} shows no attention sub-layer of the "
                       f"ItrSA form ({reason}); no adapter spec describes it — register one: "
                       "jacobiscope.register_adapter(model_type, attention=..., attention_norm=..., "
                       "norm_position=...), or use mode='block'.")
