"""ALBERT's loop (the shared layer group of ``adapters/albert.json``) with its masked-LM head as the readout.

Example::

    >>> import torch, transformers, jacobiscope
    >>> config = transformers.AlbertConfig(vocab_size=50, embedding_size=8, hidden_size=16, num_hidden_layers=3,
    ...                                    num_attention_heads=2, intermediate_size=32)
    >>> model = transformers.AlbertForMaskedLM(config).eval()
    >>> looped = jacobiscope.native_loop(model, {"input_ids": torch.tensor([[1, 2, 3, 4]])})
    >>> looped.info.loops, looped.info.readout(looped.x0).shape
    (3, torch.Size([1, 4, 50]))

The data spec names the loop (module, count, the one-group requirement) but cannot name a readout, so this builder
runs the spec's own entry and adds one: ``AlbertForMaskedLM`` (and ``AlbertForPreTraining``) turn the encoder
output, which is the shared group's last output, into logits with ``predictions``; the readout is that head.
Registered in code, it takes precedence over the data builder; a model without ``predictions`` gets no readout.
"""
from __future__ import annotations

import torch
from torch import nn

from .capture import in_dtype_of
from .native import Recurrence, _data_builder, register_recurrence
from .spec import shipped_recurrence_specs

__all__ = ["MaskedLMReadout", "albert_loop"]


class MaskedLMReadout(nn.Module):
    """``state -> head(state)``, the state cast to the head's dtype (see `in_dtype_of`)."""

    def __init__(self, head: nn.Module):
        super().__init__()
        self.head = head

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        return self.head(in_dtype_of(self.head, state))


def albert_loop(model: nn.Module, model_kwargs: dict) -> Recurrence:
    """The ``"loop"`` recurrence of the shipped spec, with ``readout = model.predictions`` when the model has it."""
    # The spec stays the one description of the loop: read it, do not restate it here.
    recurrence = _data_builder("loop", shipped_recurrence_specs()["albert"]["loop"])(model, model_kwargs)
    head = getattr(model, "predictions", None)
    if isinstance(head, nn.Module):
        recurrence.readout = MaskedLMReadout(head)
    return recurrence


register_recurrence("albert", "loop", albert_loop)
