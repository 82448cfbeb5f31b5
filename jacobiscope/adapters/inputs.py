"""Turn what a user hands `analyze` / `looped_block` (text, a tokenized batch, pixels, hidden states) into
keyword arguments for the model's forward."""
from __future__ import annotations

import difflib
import inspect
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch
from torch import nn

from ..errors import ArgumentError, InputError  # noqa: F401 - InputError's old import path

__all__ = ["ModelInputs", "prepare_inputs", "InputError"]


@dataclass
class ModelInputs:
    """Keyword arguments for ``model(**kwargs)``, with one label per example.

    ``initial_states`` is set when the user gave hidden states: they become every map's ``x0``.
    """

    kwargs: dict
    labels: list[str]
    initial_states: torch.Tensor | None = None
    notes: list[str] = field(default_factory=list)
    #: per example, what its rows must say (a text truncated to max_length): one list per example, or None
    flags: list | None = None

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
            flags = list(self.flags[index]) if self.flags and index < len(self.flags) else None
            out.append(ModelInputs(kwargs, [self.labels[index]], initial, list(self.notes), flags))
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


def _shape(tensor: torch.Tensor) -> tuple:
    return tuple(tensor.shape)


def prepare_inputs(model, inputs, tokenizer=None, max_length: int | None = None) -> ModelInputs:
    """Normalize ``inputs`` into `ModelInputs` for ``model``.

    Accepted: a string or list of strings (tokenized with ``tokenizer`` or the model's own), a tokenized batch
    (a mapping such as ``BatchEncoding`` with ``input_ids`` and optionally ``attention_mask``), an integer tensor
    of token ids ``[B, S]``, pixel values ``[B, C, H, W]``, or a float tensor of hidden states ``[B, S, hidden]``
    (fed as ``inputs_embeds`` and used as the initial states).

    Everything is checked here, before the model runs, so a mistake is named with its fix instead of surfacing
    as an error deep inside the model: keys the model's forward does not take (``attn_mask``), token ids outside
    the vocabulary or longer than the learned positions, masks that do not match the ids or are not 0/1, NaN in
    float inputs.
    """
    from .._validation import _is_int

    if max_length is not None and (not _is_int(max_length) or max_length < 1):
        raise ArgumentError(f"max_length must be a positive int or None, got {max_length!r} — pass e.g. max_length=512")
    max_length = None if max_length is None else int(max_length)  # numpy integers too (the tokenizer wants an int)
    if isinstance(inputs, str):
        inputs = [inputs]
    if isinstance(inputs, (list, tuple)):
        return _from_sequence(model, list(inputs), tokenizer, max_length)
    if isinstance(inputs, Mapping):
        return _from_mapping(model, dict(inputs), None, "mapping")
    if isinstance(inputs, torch.Tensor):
        return _from_tensor(model, inputs)
    raise InputError(
        f"Unsupported inputs of type {type(inputs).__name__}: pass text (str or list of str), a tokenized batch "
        "(dict / BatchEncoding), token ids, pixel values or hidden states."
    )


def _from_sequence(model, inputs: list, tokenizer, max_length) -> ModelInputs:
    if len(inputs) == 0:
        raise InputError("The list of texts is empty: pass at least one non-empty string.")
    others = [(i, item) for i, item in enumerate(inputs) if not isinstance(item, str)]
    if others:
        index, item = others[0]
        if len(others) < len(inputs):
            raise InputError(f"The list mixes text and other inputs (item {index} is a {type(item).__name__}) — "
                             "pass only strings, or token ids as one integer tensor [batch, tokens]")
        if all(isinstance(item, int) and not isinstance(item, bool) for _, item in others):
            raise InputError("A list of ints is ambiguous (one sequence or several?) — pass token ids as a tensor: "
                             "torch.tensor([ids]) for one sequence [1, tokens]")
        raise InputError(f"Unsupported inputs: a list of {type(item).__name__} — pass text (a list of str), or one "
                         "tensor (token ids [batch, tokens], pixel values or hidden states; torch.stack the items)")
    empty = [i for i, text in enumerate(inputs) if not text.strip()]
    if empty:
        raise InputError(f"Text number {empty[0]} is empty: every input needs at least one token.")
    if tokenizer is not None and not callable(tokenizer):
        # A string here is the tired user's model id: the tokenizer itself is needed.
        raise InputError(f"tokenizer must be a tokenizer object, got {type(tokenizer).__name__} {tokenizer!r:.60} — "
                         "pass AutoTokenizer.from_pretrained(<the model's folder>)")
    tokenizer = tokenizer or _find_tokenizer(model)
    try:
        encoded = tokenizer(list(inputs), return_tensors="pt", padding=True, truncation=max_length is not None,
                            max_length=max_length)
    except (ValueError, TypeError, KeyError) as error:
        reason = str(error).splitlines()[0][:200] if str(error) else type(error).__name__
        fix = ("set tokenizer.pad_token = tokenizer.eos_token (several texts are padded to one length)"
               if "pad" in reason.lower() else "pass the model's own tokenizer, or token ids instead of text")
        raise InputError(f"The tokenizer failed on the texts ({type(error).__name__}: {reason}) — {fix}") from None
    _check_tokens(tokenizer, encoded)
    labels = [text if len(text) <= 40 else text[:37] + "..." for text in inputs]
    prepared = _from_mapping(model, dict(encoded), labels, "mapping", tokenized=True)
    _say_truncation(tokenizer, inputs, encoded, max_length, prepared)
    _say_only_special_tokens(tokenizer, encoded, prepared)
    return prepared


def _say_only_special_tokens(tokenizer, encoded, prepared: "ModelInputs") -> None:
    """A text that is not blank to ``str.strip`` but that the tokenizer drops entirely (a zero-width space, control
    characters) reaches the model as its special tokens alone, [CLS] [SEP]: that is measured, and said in the notes
    and the example's rows, since the row's label shows a text the model never read."""
    ids, mask = encoded.get("input_ids"), encoded.get("attention_mask")
    special = set(getattr(tokenizer, "all_special_ids", None) or [])
    if not special or not isinstance(ids, torch.Tensor) or ids.dim() != 2:
        return
    flags = prepared.flags or [[] for _ in range(ids.shape[0])]
    for index in range(ids.shape[0]):
        kept = ids[index] if not isinstance(mask, torch.Tensor) or mask.shape != ids.shape else ids[index][
            mask[index].bool()]
        if kept.numel() and all(int(token) in special for token in kept):
            shown = " ".join(tokenizer.convert_ids_to_tokens(kept.tolist())) if hasattr(
                tokenizer, "convert_ids_to_tokens") else str(kept.tolist())
            flag = (f"input {index} became only the tokenizer's special tokens ({shown}): the model reads it as an "
                    "empty text — check the text (invisible characters?)")
            flags[index].append(flag)
            prepared.notes.append(flag)
    if any(flags):
        prepared.flags = flags


def _say_truncation(tokenizer, texts: list, encoded, max_length, prepared: "ModelInputs") -> None:
    """A text cut to ``max_length`` tokens is measured on its first tokens only: say so in the notes and in each of
    its rows (never a silent cut). The full lengths come from a second tokenization without truncation."""
    if max_length is None:
        return
    mask = encoded.get("attention_mask") if hasattr(encoded, "get") else None
    ids = encoded.get("input_ids") if hasattr(encoded, "get") else None
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2:
        return
    kept = (mask.sum(-1) if isinstance(mask, torch.Tensor) and mask.shape == ids.shape
            else torch.full((ids.shape[0],), ids.shape[1])).tolist()
    if max(kept) < max_length:
        return  # nothing reached the limit: nothing was cut
    try:
        full = tokenizer(list(texts), truncation=False)["input_ids"]
    except Exception:  # noqa: BLE001 - a tokenizer that cannot run untruncated: the limit itself is said instead
        full = [None] * len(texts)
    flags = []
    for index, (count, whole) in enumerate(zip(kept, full)):
        length = len(whole) if whole is not None else None
        if count >= max_length and (length is None or length > count):
            of = f" of its {length}" if length is not None else ""
            flag = (f"input {index} truncated to its first {int(count)}{of} tokens by max_length={max_length} — the "
                    "rest is not measured; pass a larger max_length (up to the model's positions) or a shorter text")
            flags.append([flag])
            prepared.notes.append(flag)
        else:
            flags.append([])
    if any(flags):
        prepared.flags = flags


def _check_tokens(tokenizer, encoded) -> None:
    """Refuse a tokenizer that turned a non-empty text into no tokens: transformers builds an empty tokenizer for a
    folder that has a config but no tokenizer files (a vocabulary of one), and every text then vanishes."""
    ids = encoded.get("input_ids") if hasattr(encoded, "get") else None
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2:
        return
    mask = encoded.get("attention_mask")
    counts = (mask.sum(-1) if isinstance(mask, torch.Tensor) and mask.shape == ids.shape
              else torch.full((ids.shape[0],), ids.shape[1]))
    empty = [i for i, count in enumerate(counts.tolist()) if count == 0]
    if empty:
        size = len(tokenizer) if hasattr(tokenizer, "__len__") else "?"
        raise InputError(f"The tokenizer ({type(tokenizer).__name__}, vocabulary of {size}) turned text number "
                         f"{empty[0]} into no tokens: the model's folder has no tokenizer files, or this is not the "
                         "model's tokenizer — pass the model's own tokenizer, or token ids instead of text "
                         "(CLI: --ids 1,2,3)")


def _from_tensor(model, inputs: torch.Tensor) -> ModelInputs:
    if inputs.dim() == 0:
        raise InputError(f"The input is a 0-d tensor ({inputs.item()!r}) — pass token ids as [batch, tokens], "
                         "e.g. torch.tensor([[ids]])")
    if inputs.numel() == 0 or inputs.shape[0] == 0:
        raise InputError(f"The input tensor is empty (shape {_shape(inputs)}) — pass at least one example with at "
                         "least one token.")
    if inputs.dtype == torch.bool or inputs.is_complex():
        raise InputError(f"A {inputs.dtype} tensor is neither token ids nor pixels nor hidden states — pass token "
                         "ids as an integer tensor (.long()) or features as a float tensor")
    if not inputs.dtype.is_floating_point:
        if inputs.dim() == 1:
            inputs = inputs.unsqueeze(0)
        return _from_mapping(model, {"input_ids": inputs}, None, "An integer tensor is read as token ids (input_ids)")
    _check_finite(inputs, "The input tensor")
    if inputs.dim() == 4:
        return _from_mapping(model, {"pixel_values": inputs}, [f"pixel_values[{i}]" for i in range(inputs.shape[0])],
                             "A float tensor [B, C, H, W] is read as pixel values (pixel_values)")
    if inputs.dim() == 3:
        hidden = getattr(getattr(model, "config", None), "hidden_size", None)
        if hidden is not None and inputs.shape[-1] != hidden:
            raise InputError(
                f"A float tensor [B, S, D] is read as hidden states, but D={inputs.shape[-1]} differs from the "
                f"model's hidden_size={hidden} — pass hidden states [B, S, {hidden}], or token ids as an integer tensor"
            )
        model_inputs = _from_mapping(model, {"inputs_embeds": inputs},
                                     [f"hidden_states[{i}]" for i in range(inputs.shape[0])],
                                     "A float tensor [B, S, D] is read as hidden states (inputs_embeds)")
        model_inputs.initial_states = inputs
        return model_inputs
    hint = " Token ids must be an integer tensor: pass ids.long()." if inputs.dim() <= 2 else ""
    raise InputError(
        f"Cannot read a float tensor of shape {_shape(inputs)}: expected pixel values [B, C, H, W] or hidden "
        f"states [B, S, hidden].{hint}"
    )


def _check_finite(tensor: torch.Tensor, what: str) -> None:
    if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
        count = int((~torch.isfinite(tensor)).sum())
        raise InputError(f"{what} contains NaN or Inf ({count} entries) — pass finite values")


def _accepted_keys(model) -> set | None:
    """The keyword arguments ``model.forward`` takes, or None when that cannot be known (``**kwargs`` of a
    module that is not a transformers model: it may take anything)."""
    try:
        parameters = inspect.signature(model.forward).parameters
    except (AttributeError, TypeError, ValueError):
        return None
    named = {name for name, p in parameters.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    variadic = [p for p in parameters.values() if p.kind == p.VAR_KEYWORD]
    if variadic:
        try:
            from transformers import PreTrainedModel
        except ImportError:  # pragma: no cover
            return None
        if not isinstance(model, PreTrainedModel):
            return None
        # transformers' forwards take **kwargs for attention back ends (``Unpack[TransformersKwargs]``): those
        # keys are accepted too; anything else would be swallowed silently, which is what this check prevents.
        for argument in typing.get_args(variadic[0].annotation):
            named |= set(getattr(argument, "__required_keys__", ())) | set(getattr(argument, "__optional_keys__", ()))
    return named


# What a tokenizer may add besides the model's inputs; dropped (with a note) when the model does not take them.
_TOKENIZER_EXTRAS = ("token_type_ids", "special_tokens_mask", "offset_mapping", "overflow_to_sample_mapping", "length")


def _check_keys(model, batch: dict, source: str, notes: list) -> dict:
    accepted = _accepted_keys(model)
    if accepted is None:
        return batch
    name = type(model).__name__
    main = getattr(model, "main_input_name", None)
    known = [k for k in (main, "input_ids", "pixel_values", "input_features", "attention_mask", "token_type_ids",
                         "position_ids", "inputs_embeds", "decoder_input_ids") if k in accepted]
    known = list(dict.fromkeys(known))  # the main input first, once
    takes = ", ".join(known or sorted(accepted))
    for key in list(batch):
        if key in accepted:
            continue
        if source == "mapping":
            if key in _TOKENIZER_EXTRAS and "input_ids" in batch:
                del batch[key]
                notes.append(f"input {key!r} dropped: {name}'s forward does not take it (a tokenizer by-product)")
                continue
            close = difflib.get_close_matches(str(key), sorted(accepted), n=1, cutoff=0.6)
            meant = f"did you mean {close[0]!r}? " if close else ""
            # A misspelled key would go into the forward's **kwargs and be ignored: padding measured as tokens.
            raise InputError(f"The inputs have the key {key!r}, which {name}'s forward does not take (it would be "
                             f"silently ignored) — {meant}pass only keys it takes: {takes}")
        raise InputError(f"{source}, which {name}'s forward does not take — pass what it takes: {takes}")
    return batch


def _input_embedding_size(model) -> int | None:
    getter = getattr(model, "get_input_embeddings", None)
    if not callable(getter):
        return None
    try:
        embedding = getter()
    except (NotImplementedError, AttributeError):
        return None
    return int(embedding.num_embeddings) if isinstance(embedding, nn.Embedding) else None


def _learned_positions(model) -> int | None:
    """How many positions the model's learned absolute position table has (None: rotary, relative or not found).

    GPT-2's ``wpe``, BERT's ``position_embeddings``, OPT's ``embed_positions`` (less its offset of 2): a longer
    input indexes past the table and fails deep in torch. The table is looked for next to the token embedding (a
    CLIP-style model's vision positions are not the text's). Families not recognized here fail in their forward,
    which `capture_calls` reports as an InputError with the model's own message.
    """
    getter = getattr(model, "get_input_embeddings", None)
    try:
        tokens = getter() if callable(getter) else None
    except (NotImplementedError, AttributeError):
        tokens = None
    if not isinstance(tokens, nn.Module):
        return None
    encoder_decoder = bool(getattr(getattr(model, "config", None), "is_encoder_decoder", False))
    named = list(model.named_modules(remove_duplicate=False))
    parents = {path.rpartition(".")[0] for path, module in named if module is tokens}
    limits = []
    for path, module in named:
        parent, _, leaf = path.rpartition(".")
        if parent not in parents or not isinstance(module, nn.Embedding) or not (leaf == "wpe" or "position" in leaf):
            continue
        if encoder_decoder and "decoder" in path:  # the decoder's positions count decoder_input_ids
            continue
        limits.append(int(module.num_embeddings) - int(getattr(module, "offset", 0) or 0))
    return min(limits) if limits else None


def _check_token_ids(model, ids: torch.Tensor, tokenized: bool) -> None:
    name = type(model).__name__
    if ids.is_floating_point() or ids.dtype == torch.bool or ids.is_complex():
        raise InputError(f"input_ids must be integer token ids, got a {ids.dtype} tensor — pass ids.long()")
    if ids.dim() > 2:
        raise InputError(f"input_ids must be [batch, tokens], got shape {_shape(ids)} — pass one row of ids per "
                         "example (reshape, or select the one you meant)")
    vocabulary = _input_embedding_size(model)
    if vocabulary is not None:
        low, high = int(ids.min()), int(ids.max())
        if low < 0 or high >= vocabulary:
            bad = low if low < 0 else high
            raise InputError(f"token id {bad} is outside the vocabulary of {name} (ids 0..{vocabulary - 1}) — "
                             "tokenize with the model's own tokenizer, or pass ids below "
                             f"{vocabulary}")
    positions = _learned_positions(model)
    if positions is not None and ids.shape[-1] > positions:
        fix = f"max_length={positions}" if tokenized else f"at most {positions} tokens (ids[:, :{positions}])"
        raise InputError(f"The input has {ids.shape[-1]} tokens, more than the {positions} positions {name} "
                         f"learned — pass {fix}")


def _check_mask(mask: torch.Tensor, tokens: torch.Tensor | None) -> None:
    if mask.dim() != 2:
        return  # 4-D masks are the model's own business (additive, per head): passed through as given
    if tokens is not None and tokens.dim() == 2 and mask.shape != tokens.shape:
        raise InputError(f"attention_mask has shape {_shape(mask)} but the inputs are {_shape(tokens)} [batch, "
                         "tokens] — pass one mask entry per token (the tokenizer's attention_mask)")
    values = torch.unique(mask)
    if not bool(((values == 0) | (values == 1)).all()):
        # An additive mask (0 = keep, -1e4 = padding) read as 0/1 would keep the padding and drop the tokens.
        raise InputError(f"attention_mask must hold 1 (token) and 0 (padding), got values {values[:4].tolist()} — "
                         "pass the tokenizer's 0/1 mask, not an additive one")
    lengths = mask.sum(1)
    if bool((lengths == 0).any()):
        raise InputError(f"Example {int((lengths == 0).nonzero()[0])} has an all-zero attention mask: no tokens to "
                         "analyse — drop that example or mark its tokens with 1")


def _from_mapping(model, batch: dict, labels, source: str, tokenized: bool = False):
    tensors = {k: v for k, v in batch.items() if isinstance(v, torch.Tensor)}
    if not tensors:
        raise InputError(f"The input mapping has no tensors (keys: {sorted(batch)}) — pass e.g. "
                         "{'input_ids': torch.tensor([[...]])} or the tokenizer's output with return_tensors='pt'")
    notes: list[str] = []
    batch = _check_keys(model, batch, source, notes)
    main_name = getattr(model, "main_input_name", None)
    accepted = _accepted_keys(model)
    # Some towers inherit the default main_input_name "input_ids" without taking it: only a real parameter counts.
    demanded = isinstance(main_name, str) and (accepted is None or main_name in accepted)
    if demanded and main_name not in batch and "inputs_embeds" not in batch:
        raise InputError(f"The inputs have no {main_name!r} (keys: {sorted(batch)}) — {type(model).__name__} needs "
                         f"it: pass {{{main_name!r}: ..., ...}}")
    tensors = {k: v for k, v in batch.items() if isinstance(v, torch.Tensor)}
    main = tensors.get("input_ids", tensors.get("pixel_values", tensors.get("inputs_embeds", next(iter(tensors.values())))))
    if main.dim() == 0:
        raise InputError("The main input is a 0-d tensor — pass [batch, tokens] (e.g. torch.tensor([[ids]]))")
    if main.dim() == 1:
        batch = {k: (v.unsqueeze(0) if isinstance(v, torch.Tensor) and v.dim() == 1 else v) for k, v in batch.items()}
        main = main.unsqueeze(0)
    if main.shape[0] == 0 or (main.dim() >= 2 and main.shape[1] == 0):
        raise InputError(f"The input batch is empty (shape {tuple(main.shape)}): every example needs at least one token.")
    ids = batch.get("input_ids")
    if isinstance(ids, torch.Tensor):
        _check_token_ids(model, ids, tokenized)
    for key in ("inputs_embeds", "pixel_values", "input_features"):
        if isinstance(batch.get(key), torch.Tensor):
            _check_finite(batch[key], key)
    mask = batch.get("attention_mask")
    if isinstance(mask, torch.Tensor):
        # the tokens the mask must match: the ids, or the [batch, tokens] of hidden states
        tokens = ids if isinstance(ids, torch.Tensor) else batch.get("inputs_embeds")
        _check_mask(mask, None if tokens is None else tokens[..., 0] if tokens.is_floating_point() else tokens)
    if labels is None:
        labels = [f"input[{i}]" for i in range(main.shape[0])]
    return ModelInputs(batch, labels, notes=notes)
