"""Layers a family spreads over parallel ``ModuleList``s instead of one block module (XLM, Flaubert).

Such a model has no module a hook could capture and a replay could call as "the layer": its forward loops over
``attentions[i]``, ``layer_norm1[i]``, ``ffns[i]``, ``layer_norm2[i]``. A `CompositeBlock` gathers one layer's
parts, names the modules whose calls carry the layer's input and arguments (`capture_targets`), and, once those
calls are captured, gives the layer's input and the map ``X -> layer(X)`` (`bind`). A spec selects one with
``"block_builder"``; `find_blocks` then returns a ``ModuleList`` of them.
"""
from __future__ import annotations

import sys

import torch
from torch import nn

from .spec import AdapterError

__all__ = ["CompositeBlock", "composite_blocks", "BLOCK_BUILDERS"]


class CompositeBlock(nn.Module):
    """One layer assembled from parallel lists. Subclasses define `capture_targets` and `bind`."""

    def capture_targets(self) -> list[nn.Module]:
        """The modules the model calls during this layer whose arguments `bind` needs (the first one's first
        argument is the layer's input)."""
        raise NotImplementedError

    def bind(self, records: list[tuple[tuple, dict]], model: nn.Module, model_kwargs: dict) -> nn.Module:
        """The map ``X -> layer(X)`` with the captured arguments."""
        raise NotImplementedError

    def forward(self, *args, **kwargs):
        raise AdapterError(f"{type(self).__name__} is assembled from the model's parallel lists and is not called "
                           "by the model; loop it through jacobiscope.looped_block(model, inputs, layer=...).")


class XLMLayer(CompositeBlock):
    """Layer ``index`` of XLM / Flaubert: attention, residual, LayerNorm, FFN, residual, LayerNorm (post-norm; or
    Flaubert's ``pre_norm``), then the padding mask, exactly as the model's own loop.

    Example::

        >>> import transformers
        >>> model = transformers.XLMModel(transformers.XLMConfig(vocab_size=40, emb_dim=16, n_layers=2, n_heads=2))
        >>> type(XLMLayer(model, 1).ffn).__name__
        'TransformerFFN'
    """

    def __init__(self, model: nn.Module, index: int):
        super().__init__()
        self.attention = model.attentions[index]
        self.norm1 = model.layer_norm1[index]
        self.ffn = model.ffns[index]
        self.norm2 = model.layer_norm2[index]
        self.pre_norm = bool(getattr(model, "pre_norm", False))

    def capture_targets(self) -> list[nn.Module]:
        # Pre-norm layers call the attention with the normalized state: the layer's input is the norm's input.
        return [self.norm1 if self.pre_norm else self.attention, self.attention]

    def bind(self, records, model, model_kwargs) -> nn.Module:
        (_, _), (attention_args, attention_kwargs) = records
        attention_kwargs = {k: v for k, v in attention_kwargs.items() if k != "output_attentions"}
        return _XLMReplay(self, tuple(attention_args[1:]), attention_kwargs, _xlm_padding_mask(model, model_kwargs))

    def step(self, x: torch.Tensor, attention_args: tuple, attention_kwargs: dict, mask: torch.Tensor) -> torch.Tensor:
        if self.pre_norm:
            x = x + self.attention(self.norm1(x), *attention_args, **attention_kwargs)[0]
            x = x + self.ffn(self.norm2(x))
        else:
            x = self.norm1(x + self.attention(x, *attention_args, **attention_kwargs)[0])
            x = self.norm2(x + self.ffn(x))
        return x * mask.unsqueeze(-1).to(device=x.device, dtype=x.dtype)


class _XLMReplay(nn.Module):
    def __init__(self, layer: XLMLayer, attention_args: tuple, attention_kwargs: dict, mask: torch.Tensor):
        super().__init__()
        self.layer = layer
        self._attention_args = attention_args
        self._attention_kwargs = attention_kwargs
        self._mask = mask

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from .capture import _like

        return self.layer.step(x, _like(self._attention_args, x), _like(self._attention_kwargs, x), self._mask)


def _xlm_padding_mask(model: nn.Module, model_kwargs: dict) -> torch.Tensor:
    """The ``[batch, tokens]`` mask the model multiplies every layer's output by, computed as its forward does
    (``attention_mask``, else ``lengths``, else the tokens that are not padding), with the family's own
    ``get_masks``."""
    ids, embeds = model_kwargs.get("input_ids"), model_kwargs.get("inputs_embeds")
    reference = ids if ids is not None else embeds
    if reference is None:
        raise AdapterError("An XLM-family layer needs input_ids or inputs_embeds to know its padding mask.")
    batch, tokens = reference.shape[:2]
    lengths = model_kwargs.get("lengths")
    if lengths is None:
        lengths = ((ids != model.pad_index).sum(dim=1).long() if ids is not None
                   else torch.full((batch,), tokens, dtype=torch.long, device=reference.device))
    get_masks = getattr(sys.modules[type(model).__module__], "get_masks", None)
    if get_masks is None:
        raise AdapterError(f"{type(model).__name__}'s module has no get_masks: the 'xlm' block builder does not fit it.")
    mask, _ = get_masks(tokens, lengths, model.causal, padding_mask=model_kwargs.get("attention_mask"))
    return mask


def _xlm_layers(model: nn.Module) -> tuple[str, nn.ModuleList]:
    needed = ("attentions", "layer_norm1", "ffns", "layer_norm2")
    missing = [name for name in needed if not isinstance(getattr(model, name, None), nn.ModuleList)]
    if missing:
        raise AdapterError(f"The 'xlm' block builder needs the parallel lists {needed} on {type(model).__name__}; "
                           f"missing {missing}. Pass the base model (e.g. model.transformer), or fix the spec.")
    return "attentions", nn.ModuleList(XLMLayer(model, i) for i in range(len(model.attentions)))


BLOCK_BUILDERS = {"xlm": _xlm_layers}


def composite_blocks(model: nn.Module, builder: str) -> tuple[str, nn.ModuleList]:
    """``(path, layers)`` of a family whose spec names a ``block_builder``; the base model is found under the
    wrapper (``model.transformer`` of the task heads)."""
    if builder not in BLOCK_BUILDERS:
        raise AdapterError(f"Unknown block_builder {builder!r} in the adapter spec; known: {sorted(BLOCK_BUILDERS)}.")
    base = model
    for _, module in model.named_modules():
        if all(isinstance(getattr(module, name, None), nn.ModuleList) for name in ("attentions", "ffns")):
            base = module
            break
    path, layers = BLOCK_BUILDERS[builder](base)
    prefix = next((name for name, module in model.named_modules() if module is base), "")
    return (f"{prefix}.{path}" if prefix else path), layers
