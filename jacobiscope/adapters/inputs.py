"""Turn what a user hands `analyze` / `looped_block` (text, a tokenized batch, pixels, hidden states) into
keyword arguments for the model's forward."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import torch

from ..errors import JacobiscopeError

__all__ = ["ModelInputs", "prepare_inputs", "InputError"]


class InputError(JacobiscopeError, ValueError):
    """The inputs cannot be fed to the model (empty, wrong kind, no tokenizer for text, ...)."""


@dataclass
class ModelInputs:
    """Keyword arguments for ``model(**kwargs)``, with one label per example.

    ``initial_states`` is set when the user gave hidden states: they become every map's ``x0``.
    """

    kwargs: dict
    labels: list[str]
    initial_states: torch.Tensor | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def batch_size(self) -> int:
        return len(self.labels)

    def examples(self) -> list["ModelInputs"]:
        """One `ModelInputs` per example, padding removed (the state is then exactly the example's tokens)."""
        mask = self.kwargs.get("attention_mask")
        out = []
        for index in range(self.batch_size):
            keep = None
            if mask is not None and mask.dim() == 2:
                keep = mask[index].bool()
            kwargs = {}
            for key, value in self.kwargs.items():
                if isinstance(value, torch.Tensor) and value.dim() >= 1 and value.shape[0] == self.batch_size:
                    value = value[index : index + 1]
                    if keep is not None and value.dim() >= 2 and value.shape[1] == keep.shape[0]:
                        value = value[:, keep]
                kwargs[key] = value
            initial = None
            if self.initial_states is not None:
                initial = self.initial_states[index : index + 1]
                if keep is not None:
                    initial = initial[:, keep]
            out.append(ModelInputs(kwargs, [self.labels[index]], initial, list(self.notes)))
        return out


def _find_tokenizer(model):
    path = getattr(model, "name_or_path", None) or getattr(getattr(model, "config", None), "_name_or_path", None)
    if path:
        try:
            from transformers import AutoTokenizer

            return AutoTokenizer.from_pretrained(path, local_files_only=True)
        except Exception as error:  # noqa: BLE001 - any failure means "not found"; the message says what to do
            reason = f"{type(error).__name__}: {str(error).splitlines()[0][:160]}"
        else:  # pragma: no cover
            pass
    else:
        reason = "the model has no name_or_path"
    raise InputError(
        f"Text inputs need a tokenizer and none was found for this model ({reason}). Pass tokenizer=... "
        "(e.g. AutoTokenizer.from_pretrained(<the model's folder>)) or give token ids instead of text."
    )


def prepare_inputs(model, inputs, tokenizer=None, max_length: int | None = None) -> ModelInputs:
    """Normalize ``inputs`` into `ModelInputs` for ``model``.

    Accepted: a string or list of strings (tokenized with ``tokenizer`` or the model's own), a tokenized batch
    (a mapping such as ``BatchEncoding`` with ``input_ids`` and optionally ``attention_mask``), an integer tensor
    of token ids ``[B, S]``, pixel values ``[B, C, H, W]``, or a float tensor of hidden states ``[B, S, hidden]``
    (fed as ``inputs_embeds`` and used as the initial states).
    """
    if isinstance(inputs, str):
        inputs = [inputs]
    if isinstance(inputs, (list, tuple)) and all(isinstance(item, str) for item in inputs):
        if len(inputs) == 0:
            raise InputError("The list of texts is empty: pass at least one non-empty string.")
        empty = [i for i, text in enumerate(inputs) if not text.strip()]
        if empty:
            raise InputError(f"Text number {empty[0]} is empty: every input needs at least one token.")
        tokenizer = tokenizer or _find_tokenizer(model)
        encoded = tokenizer(list(inputs), return_tensors="pt", padding=True, truncation=max_length is not None,
                            max_length=max_length)
        labels = [text if len(text) <= 40 else text[:37] + "..." for text in inputs]
        return _from_mapping(dict(encoded), labels)
    if isinstance(inputs, Mapping):
        return _from_mapping(dict(inputs), None)
    if isinstance(inputs, torch.Tensor):
        if inputs.numel() == 0 or inputs.shape[0] == 0:
            raise InputError(f"The input tensor is empty (shape {tuple(inputs.shape)}).")
        if not inputs.dtype.is_floating_point:
            if inputs.dim() == 1:
                inputs = inputs.unsqueeze(0)
            return _from_mapping({"input_ids": inputs}, None)
        if inputs.dim() == 4:
            return ModelInputs({"pixel_values": inputs}, [f"pixel_values[{i}]" for i in range(inputs.shape[0])])
        if inputs.dim() == 3:
            hidden = getattr(getattr(model, "config", None), "hidden_size", None)
            if hidden is not None and inputs.shape[-1] != hidden:
                raise InputError(
                    f"A float tensor [B, S, D] is read as hidden states, but D={inputs.shape[-1]} differs from the "
                    f"model's hidden_size={hidden}."
                )
            return ModelInputs(
                {"inputs_embeds": inputs},
                [f"hidden_states[{i}]" for i in range(inputs.shape[0])],
                initial_states=inputs,
            )
        raise InputError(
            f"Cannot read a float tensor of shape {tuple(inputs.shape)}: expected pixel values [B, C, H, W] or hidden "
            "states [B, S, hidden]."
        )
    raise InputError(
        f"Unsupported inputs of type {type(inputs).__name__}: pass text (str or list of str), a tokenized batch "
        "(dict / BatchEncoding), token ids, pixel values or hidden states."
    )


def _from_mapping(batch: dict, labels):
    tensors = {k: v for k, v in batch.items() if isinstance(v, torch.Tensor)}
    if not tensors:
        raise InputError(f"The input mapping has no tensors (keys: {sorted(batch)}).")
    main = tensors.get("input_ids", tensors.get("pixel_values", tensors.get("inputs_embeds", next(iter(tensors.values())))))
    if main.dim() == 1:
        batch = {k: (v.unsqueeze(0) if isinstance(v, torch.Tensor) and v.dim() == 1 else v) for k, v in batch.items()}
        main = main.unsqueeze(0)
    if main.shape[0] == 0 or (main.dim() >= 2 and main.shape[1] == 0):
        raise InputError(f"The input batch is empty (shape {tuple(main.shape)}): every example needs at least one token.")
    mask = batch.get("attention_mask")
    if isinstance(mask, torch.Tensor) and mask.dim() == 2:
        lengths = mask.sum(1)
        if bool((lengths == 0).any()):
            raise InputError(f"Example {int((lengths == 0).nonzero()[0])} has an all-zero attention mask: no tokens to analyse.")
    if labels is None:
        labels = [f"input[{i}]" for i in range(main.shape[0])]
    return ModelInputs(batch, labels)
