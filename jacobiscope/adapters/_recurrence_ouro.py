"""Ouro's own loop: ``h <- norm(L(h))``, ``L`` the whole decoder stack, ``total_ut_steps`` times, read by
``lm_head`` and an early-exit gate after every pass.

Example::

    >>> import jacobiscope
    >>> jacobiscope.list_recurrences("ouro")
    ['loop']

Ouro (ByteDance, ``model_type`` "ouro", loaded with ``trust_remote_code=True``) follows the Hub repo's
``modeling_ouro.py`` (ByteDance/Ouro-1.4B; read at the GitHub mirror Eagle4398/ouro-nixpkgs, commit d4f815e):
``OuroModel.forward`` embeds the tokens once, then ``total_ut_steps`` times runs every decoder layer in order and
closes the pass with the final norm, so the state carried from one pass to the next is normalized; after each
pass ``early_exit_gate`` (a ``Linear(hidden, 1)``) gives the per-token exit logit, ``lambda_t = sigmoid(.)`` the
probability of stopping at pass ``t`` given it was reached. ``OuroForCausalLM`` returns ``lm_head`` of the last
pass (or of pass ``exit_at_step``; with ``early_exit_threshold`` set, of the pass where the cumulative exit
probability first reaches it). Nothing is injected: the input enters only as the first state.

- state: the hidden state after a pass (``[batch, tokens, hidden]``); ``x0`` the token embeddings;
- step: every layer of ``model.layers[:num_hidden_layers]``, each replayed with the mask and rotary table the model
  gave it, then ``model.norm``; loops ``config.total_ut_steps``;
- readout: ``lm_head(h)`` (the norm already closed the pass); ``looped.meta["gate"]``: ``h -> lambda`` per token.

A model whose modules differ from that layout is refused, naming what differs.
"""
from __future__ import annotations

import logging

import torch
from torch import nn

from .capture import ReplayedModule, capture_calls, hidden_state_of, in_dtype_of
from .native import Recurrence, register_recurrence
from .spec import AdapterError

__all__ = ["OuroLoopStep", "OuroReadout", "OuroExitGate", "ouro_loop", "OURO_SOURCE"]

logger = logging.getLogger(__name__)

#: The public code the recurrence follows (also in adapters/ouro.json).
OURO_SOURCE = ("modeling_ouro.py of the Hub repo ByteDance/Ouro-1.4B, as mirrored at github.com/Eagle4398/"
               "ouro-nixpkgs commit d4f815eca3d1f9c7dcde6b5e274bd45fd67a5af6")
_LAYER_PARTS = ("self_attn", "mlp", "input_layernorm", "input_layernorm_2", "post_attention_layernorm",
                "post_attention_layernorm_2")
_PROTOCOL = ("give the model class jacobiscope_recurrences and jacobiscope_recurrence(name, **inputs) (the public "
             "protocol: jacobiscope.adapters.native, README 'Looped models through their own loop')")


class OuroLoopStep(nn.Module):
    """One Ouro pass: ``h -> norm(layer_n(... layer_1(h)))``, each layer replayed with its captured arguments.

    Example::

        >>> import torch
        >>> from jacobiscope.adapters.capture import ReplayedModule
        >>> step = OuroLoopStep([ReplayedModule(torch.nn.Identity(), (torch.zeros(2),), {})], torch.nn.Identity())
        >>> step(torch.ones(2))
        tensor([1., 1.])
    """

    def __init__(self, layers: list[ReplayedModule], norm: nn.Module):
        super().__init__()
        self.layers, self.norm = nn.ModuleList(layers), norm

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            h = layer(h)
        return self.norm(h)


class OuroReadout(nn.Module):
    """``h -> lm_head(h)``: what ``OuroForCausalLM`` makes of the state after a pass.

    Example::

        >>> import torch
        >>> OuroReadout(torch.nn.Linear(2, 3))(torch.zeros(1, 2)).shape
        torch.Size([1, 3])
    """

    def __init__(self, head: nn.Module):
        super().__init__()
        self.head = head

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.head(in_dtype_of(self.head, h))


class OuroExitGate(nn.Module):
    """``h -> sigmoid(early_exit_gate(h))`` per token: the probability of exiting at this pass, given it was reached
    (the model's own exit distribution is ``p_t = lambda_t prod_{s<t} (1 - lambda_s)``, the rest on the last pass).

    Example::

        >>> import torch
        >>> gate = torch.nn.Linear(2, 1)
        >>> _ = torch.nn.init.zeros_(gate.weight), torch.nn.init.zeros_(gate.bias)
        >>> OuroExitGate(gate)(torch.ones(1, 3, 2)).tolist()
        [[0.5, 0.5, 0.5]]
    """

    def __init__(self, gate: nn.Module):
        super().__init__()
        self.gate = gate

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.gate(in_dtype_of(self.gate, h))).squeeze(-1)


def _layout_differences(model: nn.Module) -> list[str]:
    """What in ``model`` differs from the Ouro layout the recurrence follows (empty when it matches)."""
    base = getattr(model, "base_model", model)
    config = getattr(model, "config", None)
    differences = []
    for name in ("embed_tokens", "layers", "norm", "early_exit_gate"):
        if not isinstance(getattr(base, name, None), nn.Module):
            differences.append(f"no module {name!r} in its base model {type(base).__name__}")
    if not isinstance(getattr(config, "total_ut_steps", None), int):
        differences.append(f"no config.total_ut_steps (an int), got {getattr(config, 'total_ut_steps', None)!r}")
    layers = getattr(base, "layers", None)
    if isinstance(layers, nn.ModuleList) and len(layers):
        missing = [part for part in _LAYER_PARTS if not hasattr(layers[0], part)]
        if missing:
            differences.append(f"its decoder layer {type(layers[0]).__name__} has no {', '.join(missing)}")
    elif "no module 'layers'" not in " ".join(differences):
        differences.append("model.layers is not a non-empty nn.ModuleList")
    gate = getattr(base, "early_exit_gate", None)
    if isinstance(gate, nn.Linear) and gate.out_features != 1:
        differences.append(f"early_exit_gate gives {gate.out_features} outputs, not 1")
    return differences


def ouro_loop(model: nn.Module, model_kwargs: dict) -> Recurrence:
    """Ouro's ``"loop"`` recurrence (module docstring): the state after a pass, one step one pass of the stack.

    Example::

        >>> import jacobiscope
        >>> "loop" in jacobiscope.list_recurrences("ouro")
        True

    Each layer's masks, rotary table and ``current_ut`` are captured from its first call in the model's own run
    (the cache stripped: the model passes every pass the same masks and rotary table without one).
    """
    differences = _layout_differences(model)
    if differences:
        raise AdapterError(f"{type(model).__name__} (model_type 'ouro') does not match the Ouro layout the built-in "
                           f"'loop' recurrence follows ({OURO_SOURCE}): {'; '.join(differences)} — {_PROTOCOL}")
    base = model.base_model if hasattr(model, "base_model") else model
    config = model.config
    layers = list(base.layers[: int(config.num_hidden_layers)])
    calls = capture_calls(model, model_kwargs, layers)
    replays = [ReplayedModule(layer, args, kwargs).eval() for layer, (args, kwargs) in zip(layers, calls)]
    loops = int(config.total_ut_steps)
    head = getattr(model, "lm_head", None)
    readout = OuroReadout(head).eval() if isinstance(head, nn.Module) else None
    if readout is not None and (getattr(config, "early_exit_threshold", None) is not None
                                or getattr(config, "early_exit_step", None) is not None):
        logger.info("%s exits early by its config (early_exit_threshold / early_exit_step): its own logits come "
                    "from the exit pass; the readout reads lm_head at every pass", type(model).__name__)
    return Recurrence(
        "loop", OuroLoopStep(replays, base.norm).eval(), hidden_state_of(*calls[0]).detach(), loops,
        f"h <- norm(L(h)) over the {len(layers)} shared decoder layers, {loops} times (total_ut_steps); "
        "early-exit gate after each pass", readout=readout, gate=OuroExitGate(base.early_exit_gate).eval())


register_recurrence("ouro", "loop", ouro_loop)
