"""IQuest-Coder Loop's own loop: after a plain first pass, every later pass runs the decoder stack with each layer's
attention mixing (per head, by a learned gate) the first pass's keys and values with its own sliding window.

Example::

    >>> import jacobiscope
    >>> jacobiscope.list_recurrences("iquestloopcoder")
    ['loop']

IQuest-Coder-V1 Loop (IQuestLab, ``model_type`` "iquestloopcoder", loaded with ``trust_remote_code=True``) follows
the Hub repo's ``modeling_iquestloopcoder.py`` (IQuestLab/IQuest-Coder-V1-40B-Loop-Instruct; read in the copy at
GitHub luweigen/transformers commit 08a94ff, the revision whose layers own their ``gate_projection``).
``IQuestLoopCoderModel._forward_loop`` (prefill and training: no cache) runs loop 1 as a plain causal pass, keeping
each layer's keys and values ``K1, V1`` (``self_attn.get_qkv(input_layernorm(h_in))``), then for loops
``2..loop_num`` calls every layer's ``forward_loop2_mixed(h, k1=K1, v1=V1, attention_mask, position_ids,
loop_window_size)``; the final norm and ``lm_head`` read the last pass.

Loop 1 differs from the later loops (no gate, no K1/V1 to read), so it is not an application of the step: it makes
``x0``. Later loops all apply the same map with K1, V1 held (data of this input, like a mask), so:

- state: the hidden state after a pass; ``x0`` the output of loop 1;
- step: every layer's ``forward_loop2_mixed`` with its K1, V1 (computed, as the model does, from the layer's own
  loop-1 input, which is captured), the model's causal mask and position ids; loops ``loop_num - 1``;
- readout: ``lm_head(norm(h))``.

A model whose modules differ from that layout is refused, naming what differs.
"""
from __future__ import annotations

import torch
from torch import nn

from .capture import _like, capture_calls, first_output, hidden_state_of, in_dtype_of
from .native import Recurrence, register_recurrence
from .spec import AdapterError

__all__ = ["IQuestLoopStep", "IQuestReadout", "iquest_loop", "IQUEST_LOOP_SOURCE"]

#: The public code the recurrence follows (also in adapters/iquestloopcoder.json).
IQUEST_LOOP_SOURCE = ("modeling_iquestloopcoder.py of the Hub repo IQuestLab/IQuest-Coder-V1-40B-Loop-Instruct, as "
                      "copied at github.com/luweigen/transformers commit 08a94ffa19226015cd9e64a00cbf19aaa1271014")
_LAYER_PARTS = ("self_attn", "mlp", "input_layernorm", "post_attention_layernorm", "gate_projection",
                "forward_loop2_mixed")
_PROTOCOL = ("give the model class jacobiscope_recurrences and jacobiscope_recurrence(name, **inputs) (the public "
             "protocol: jacobiscope.adapters.native, README 'Looped models through their own loop')")


class IQuestLoopStep(nn.Module):
    """One IQuest pass after the first: ``h -> layer_n.forward_loop2_mixed(... layer_1.forward_loop2_mixed(h))``,
    each layer reading its loop-1 keys and values.

    Example::

        >>> step = IQuestLoopStep([], [], {}, 64)
        >>> import torch
        >>> step(torch.ones(2)).tolist()
        [1.0, 1.0]
    """

    def __init__(self, layers: list[nn.Module], loop1_kv: list[tuple], arguments: dict, window: int):
        super().__init__()
        self.layers, self.window = nn.ModuleList(layers), int(window)
        # Plain attributes, not buffers: data of this input (keys/values, mask, positions), cast on each call.
        self._kv, self._arguments = [tuple(t.detach() for t in kv) for kv in loop1_kv], arguments

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        arguments = _like(self._arguments, h)
        for layer, (k1, v1) in zip(self.layers, self._kv):
            h = first_output(layer.forward_loop2_mixed(h, k1=_like(k1, h), v1=_like(v1, h),
                                                       loop_window_size=self.window, **arguments))
        return h


class IQuestReadout(nn.Module):
    """``h -> lm_head(norm(h))``: what ``IQuestLoopCoderForCausalLM`` makes of the last pass.

    Example::

        >>> import torch
        >>> IQuestReadout(torch.nn.Identity(), torch.nn.Linear(2, 3))(torch.zeros(1, 2)).shape
        torch.Size([1, 3])
    """

    def __init__(self, norm: nn.Module, head: nn.Module):
        super().__init__()
        self.norm, self.head = norm, head

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(in_dtype_of(self.head, h))).float()


def _layout_differences(model: nn.Module) -> list[str]:
    """What in ``model`` differs from the IQuest Loop layout the recurrence follows (empty when it matches)."""
    base = getattr(model, "base_model", model)
    config = getattr(model, "config", None)
    differences = [f"no module {name!r} in its base model {type(base).__name__}"
                   for name in ("embed_tokens", "layers", "norm") if not isinstance(getattr(base, name, None), nn.Module)]
    for name in ("loop_num", "loop_window_size"):
        if not isinstance(getattr(config, name, None), int):
            differences.append(f"no config.{name} (an int)")
    layers = getattr(base, "layers", None)
    if isinstance(layers, nn.ModuleList) and len(layers):
        missing = [part for part in _LAYER_PARTS if not hasattr(layers[0], part)]
        if missing:
            differences.append(f"its decoder layer {type(layers[0]).__name__} has no {', '.join(missing)} (an older "
                               "revision kept the gates in model.gate_projections)" if "gate_projection" in missing
                               else f"its decoder layer {type(layers[0]).__name__} has no {', '.join(missing)}")
        elif not callable(getattr(layers[0].self_attn, "get_qkv", None)):
            differences.append("its attention has no get_qkv")
    return differences


def iquest_loop(model: nn.Module, model_kwargs: dict) -> Recurrence:
    """IQuest Loop's ``"loop"`` recurrence (module docstring): one pass after the first, loops ``loop_num - 1``.

    Example::

        >>> import jacobiscope
        >>> "loop" in jacobiscope.list_recurrences("iquestloopcoder")
        True

    Each layer's loop-1 input, causal mask and position ids are captured from its loop-1 call in the model's own
    run; K1, V1 and ``x0`` (the last layer's loop-1 output) are recomputed from them with the model's own modules.
    """
    differences = _layout_differences(model)
    if differences:
        raise AdapterError(f"{type(model).__name__} (model_type 'iquestloopcoder') does not match the IQuest Loop "
                           f"layout the built-in 'loop' recurrence follows ({IQUEST_LOOP_SOURCE}): "
                           f"{'; '.join(differences)} — {_PROTOCOL}")
    loops = int(model.config.loop_num) - 1
    if loops < 1:
        raise AdapterError(f"{type(model).__name__} has config.loop_num = {model.config.loop_num}: a single plain pass, "
                           "no loop to measure — analyse its layers with mode='block'")
    base = model.base_model if hasattr(model, "base_model") else model
    layers = list(base.layers)
    calls = capture_calls(model, model_kwargs, layers)
    arguments = {key: calls[0][1].get(key) for key in ("attention_mask", "position_ids")}
    with torch.no_grad():
        kv = [layer.self_attn.get_qkv(layer.input_layernorm(hidden_state_of(*call)), arguments["position_ids"])[1:]
              for layer, call in zip(layers, calls)]
        args, kwargs = calls[-1]
        x0 = first_output(layers[-1](*args, **kwargs)).detach()  # loop 1's output, as the model computes it
    head = getattr(model, "lm_head", None)
    return Recurrence(
        "loop", IQuestLoopStep(layers, kv, arguments, model.config.loop_window_size).eval(), x0, loops,
        f"h <- the {len(layers)} layers' gated mix of loop-1 and windowed attention, {loops} times (loop_num - 1)",
        readout=IQuestReadout(base.norm, head).eval() if isinstance(head, nn.Module) else None)


register_recurrence("iquestloopcoder", "loop", iquest_loop)
