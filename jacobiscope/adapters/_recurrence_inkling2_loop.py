"""The Inkling-2 loop family's own recurrence: one message-receiving pass through its looped layers.

Example::

    >>> import torch, transformers, jacobiscope
    >>> config = transformers.Inkling2LoopTextConfig(
    ...     vocab_size=32, unpadded_vocab_size=32, eos_token_id=None, hidden_size=8, num_hidden_layers=3,
    ...     num_attention_heads=2, num_key_value_heads=1, head_dim=4, swa_num_attention_heads=2,
    ...     swa_num_key_value_heads=1, swa_head_dim=4, sliding_window_size=4, d_rel=2, rel_extent=4,
    ...     moe_intermediate_size=8, n_routed_experts=2, num_experts_per_tok=1, n_layers_per_attn_res_block=1,
    ...     loop_layer_index_start=1, loop_layer_index_end=2, loop_num_passes=3, loop_gate_rank=2)
    >>> model = transformers.Inkling2LoopForCausalLM(config).eval()
    >>> jacobiscope.list_recurrences(model)
    ['pass']
    >>> looped = jacobiscope.native_loop(model, {"input_ids": torch.tensor([[1, 2, 3]])})
    >>> looped.x0.shape, looped.info.loops  # [batch, tokens, blocks of one pass, hidden]; passes 2 and 3
    (torch.Size([1, 3, 1, 8]), 2)

How the model loops (``Inkling2LoopTextModel.forward``): layers ``loop_layer_index_start:loop_layer_index_end`` run
``loop_num_passes`` times. Every pass restarts from the same input (the hidden state and block states leaving the
layer before the range); a pass after the first also receives, in each looped layer, gated messages that
``message_input`` reads from the previous pass: from its output and the block states it appended (all but the
first, which is the restart input itself).

The state is what one pass hands to the next: ``X = cat([previous_block_states, previous_hidden_states[..., None,
:]], -2)`` of shape ``[batch, tokens, blocks per pass, hidden]`` (exactly the stack ``message_input`` attends
over). The step is one message-receiving pass, with the restart input, masks, relative distances, position ids
and the convolution mask captured from the model's own run and caches off. The first pass is not an application
of this step: it takes no messages and skips the four gates (``(1 - f) * h + g * m`` with ``m = 0`` still scales
``h`` by ``1 - f``), so it is the map's source: ``x0`` is the state the first pass hands to the second, and
``loops = loop_num_passes - 1`` steps reach the state the last pass hands to the layers after the range.

With an ``lm_head`` (``Inkling2LoopForCausalLM``, ``...ForConditionalGeneration``) the readout is what the model does
after its last pass: it continues from the hidden state ``X[..., -1, :]`` and the block states ``restart blocks +
the restart hidden state + X[..., :-1, :]`` (the last pass appended the restart hidden state at the range's first
boundary, the one block the state drops), runs the layers after the range, ``final_input``, the norm, ``lm_head``
and the logit softcap. When the range's first layer is not a block boundary that dropped block depends on the pass
and is not in the state: no readout then.
"""
from __future__ import annotations

import copy
from contextlib import contextmanager

import torch
from torch import nn

from .capture import _like, capture_calls, in_dtype_of
from .native import Recurrence, register_recurrence
from .spec import AdapterError

__all__ = ["InklingMessagePass", "InklingReadout", "inkling2_loop_recurrence"]

MODEL_TYPES = ("inkling2_loop_text", "inkling2_loop")


def _text_model(model: nn.Module) -> nn.Module:
    """The module running the loop: the model itself, ``model.model`` (causal LM) or its ``language_model``."""
    for module in model.modules():
        if hasattr(module, "message_input") and hasattr(module, "layers") and hasattr(module, "config"):
            return module
    raise AdapterError(f"{type(model).__name__} holds no Inkling-2 loop text model (a module with layers and "
                       "message_input): the 'pass' recurrence needs one")


class InklingMessagePass(nn.Module):
    """``X -> the state after one more pass``: the looped layers run from the captured restart input, each given
    the messages ``message_input`` reads from ``X`` (the previous pass), exactly as the model's passes after the
    first. ``first_pass()`` replays the model's first pass (no messages) and returns the state it hands on."""

    def __init__(self, text_model: nn.Module, calls: list[tuple[tuple, dict]]):
        super().__init__()
        config = text_model.config
        self.layers = nn.ModuleList(text_model.layers[config.loop_layer_index_start:config.loop_layer_index_end])
        self.message_input = text_model.message_input
        args, _ = calls[0]
        if len(args) < 2 or not all(isinstance(a, torch.Tensor) for a in args[:2]):
            raise AdapterError("the first looped layer was not called as layer(hidden_states, block_states, ...): "
                               "this transformers version loops differently from the one the 'pass' recurrence reads")
        # The restart input: every pass starts again from the states leaving the layer before the range.
        self._restart = (args[0], args[1])
        # Masks, relative distances, position ids and conv mask per layer (caches already stripped to None).
        self._kwargs = [dict(kwargs) for _, kwargs in calls]

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        # message_input stacks (block states, hidden) itself; the state is that stack, so split it back.
        with _eager_experts(self):
            return self._run(state[..., :-1, :], state[..., -1, :], like=state)

    def first_pass(self) -> torch.Tensor:
        """The state the model's first pass (no messages, no gates) hands to the second."""
        with _eager_experts(self):
            return self._run(None, None, like=self._restart[0])

    def _run(self, previous_blocks, previous_hidden, like: torch.Tensor) -> torch.Tensor:
        hidden, blocks = _like(self._restart, like)
        appended = []
        for index, layer in enumerate(self.layers):
            messages = () if previous_hidden is None else (self.message_input(previous_blocks, previous_hidden,
                                                                              index),)
            # cache_offset (the model passes one per pass) only indexes caches, which are off here.
            new_hidden = layer(hidden, blocks, *messages, **_like(self._kwargs[index], like))
            if layer.is_block_boundary:
                blocks = torch.cat([blocks, hidden.unsqueeze(-2)], dim=-2)
                appended.append(hidden)
            hidden = new_hidden
        # The model drops the first appended block (the restart input, the same in every pass) from the messages.
        return torch.stack(appended[1:] + [hidden], dim=-2)


class InklingReadout(nn.Module):
    """``X -> logits``: the layers after the looped range from the state the last pass hands on, then the model's
    ``final_input``, norm, ``lm_head`` and softcap, each layer given the arguments the model gave it."""

    def __init__(self, text_model: nn.Module, restart: tuple, calls: list[tuple[tuple, dict]], head: nn.Module,
                 softcap: nn.Module):
        super().__init__()
        config = text_model.config
        self.layers = nn.ModuleList(text_model.layers[config.loop_layer_index_end:])
        self.final_input, self.norm, self.head, self.softcap = text_model.final_input, text_model.norm, head, softcap
        self._restart = restart  # (hidden, block states) entering the range: data of this input, as in the step
        self._kwargs = [dict(kwargs) for _, kwargs in calls]
        looped = text_model.layers[config.loop_layer_index_start:config.loop_layer_index_end]
        # Whether the last pass appended a block the state drops (the restart hidden state; see the module doc).
        self._dropped_block = any(layer.is_block_boundary for layer in looped)

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        x = in_dtype_of(self.head, state)
        restart_hidden, blocks = _like(self._restart, x)
        if self._dropped_block:
            blocks = torch.cat([blocks, restart_hidden.unsqueeze(-2), x[..., :-1, :]], dim=-2)
        hidden = x[..., -1, :]
        for layer, kwargs in zip(self.layers, self._kwargs):  # the model's own post-loop statements
            new_hidden = layer(hidden, blocks, **_like(kwargs, x))
            if layer.is_block_boundary:
                blocks = torch.cat([blocks, hidden.unsqueeze(-2)], dim=-2)
            hidden = new_hidden
        hidden = self.norm(self.final_input(blocks, hidden)[0]).to(x.dtype)
        return self.softcap(self.head(hidden).float())


def _readout(model: nn.Module, text_model: nn.Module, step: InklingMessagePass, calls) -> InklingReadout | None:
    """The readout when the model has an ``lm_head`` and its state determines what follows the range, else None."""
    head = getattr(model, "lm_head", None)
    config = text_model.config
    looped = text_model.layers[config.loop_layer_index_start:config.loop_layer_index_end]
    if not isinstance(head, nn.Module) or (any(layer.is_block_boundary for layer in looped)
                                           and not looped[0].is_block_boundary):
        return None
    softcap = getattr(model, "logit_softcap", None)
    return InklingReadout(text_model, step._restart, calls, head,
                          softcap if isinstance(softcap, nn.Module) else nn.Identity()).eval()


@contextmanager
def _eager_experts(module: nn.Module):
    """Run the experts with their own per-expert loop ("eager") while inside the step.

    The experts dispatch on ``config._experts_implementation`` at call time; the default ``grouped_mm`` has no
    forward-mode AD (jvp), the eager loop computes the same sums and supports both modes. Each experts module
    gets an eager copy of its config for the call only, so the model itself keeps its implementation.
    """
    swapped = []
    for sub in module.modules():
        config = getattr(sub, "config", None)
        # transformers' use_experts_implementation wrapper marks every experts module with _is_expert_parallel.
        if hasattr(sub, "_is_expert_parallel") and getattr(config, "_experts_implementation", "eager") != "eager":
            eager = copy.copy(config)
            eager._experts_implementation_internal = "eager"
            swapped.append((sub, config))
            sub.config = eager
    try:
        yield
    finally:
        for sub, config in swapped:
            sub.config = config


def inkling2_loop_recurrence(model: nn.Module, model_kwargs: dict) -> Recurrence:
    """The ``"pass"`` recurrence of an Inkling-2 loop model (text-only or multimodal) on ``model_kwargs``."""
    text_model = _text_model(model)
    config = text_model.config
    start, end, count = config.loop_layer_index_start, config.loop_layer_index_end, len(text_model.layers)
    if not 0 <= start < end <= count:
        raise AdapterError(f"{type(model).__name__} loops layers {start}..{end - 1} but has {count} layers: its config's "
                           "loop_layer_index_start/end must satisfy 0 <= start < end <= num_hidden_layers")
    looped_layers = list(text_model.layers[start:end])
    # The layers after the range are captured too when there is a head to read out through (the same forward).
    after = list(text_model.layers[config.loop_layer_index_end:]) if hasattr(model, "lm_head") else []
    calls = capture_calls(model, model_kwargs, looped_layers + after)
    step = InklingMessagePass(text_model, calls[:len(looped_layers)])
    step.eval()  # deterministic, as the ALBERT replay: attention dropout off
    with torch.no_grad():
        x0 = step.first_pass()
    passes = int(config.loop_num_passes)
    description = (f"one message-receiving pass through layers {config.loop_layer_index_start}-"
                   f"{config.loop_layer_index_end - 1} (passes 2..{passes}); state: the previous pass's block states "
                   "and output, stacked [batch, tokens, blocks, hidden]; x0: what the first pass hands on")
    return Recurrence("pass", step, x0, passes - 1, description,
                      readout=_readout(model, text_model, step, calls[len(looped_layers):]))


for _model_type in MODEL_TYPES:
    register_recurrence(_model_type, "pass", inkling2_loop_recurrence, replace=True)
