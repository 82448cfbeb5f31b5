"""Tensors for causal language models: prompt + answer + ``<eos>``, the answer supervised, and exact match.

Example::

    >>> from jacobiscope.data.tasks import TaskExample, encode, task_tokenizer
    >>> batch = encode([TaskExample("1+2=", "3", 0), TaskExample("10+2=", "12", 0)], task_tokenizer())
    >>> batch["input_ids"].tolist()[0]
    [1, 5, 40, 6, 41, 7, 2, 0, 0]
    >>> batch["labels"].tolist()[0]
    [-100, -100, -100, -100, -100, 7, 2, -100, -100]
    >>> batch["answer_mask"].sum(dim=1).tolist()
    [2, 3]
"""
from __future__ import annotations

import torch

from ...errors import ArgumentError
from ._base import TaskExample, _is_int

__all__ = ["encode", "exact_match", "IGNORE_INDEX"]

IGNORE_INDEX = -100   # the label of unsupervised tokens (transformers' causal-LM losses skip it)


def encode(examples, tokenizer, *, max_length: int | None = None) -> dict[str, torch.Tensor]:
    """Right-padded ``input_ids``, ``attention_mask``, ``labels`` and ``answer_mask`` of ``examples``.

    Each row is ``<bos> prompt answer <eos>`` then ``<pad>``; ``labels`` equals ``input_ids`` on the answer and
    its ``<eos>`` and is -100 elsewhere (transformers' causal-LM loss shifts it: the logits at position i predict
    the label at i + 1). ``answer_mask`` is True exactly where ``labels`` is supervised. ``max_length`` pads every
    row to that length (an example longer than it is an error, never cut).
    """
    examples = list(examples)
    if not examples:
        raise ArgumentError("encode needs at least one example, got none — pass a non-empty list of TaskExample")
    rows, answer_starts = [], []
    for index, ex in enumerate(examples):
        if not isinstance(ex, TaskExample):
            raise ArgumentError(f"examples[{index}] is {type(ex).__name__}, not a TaskExample — pass the output of "
                                f"Task.generate")
        prompt, answer = _ids(tokenizer, ex.prompt, index), _ids(tokenizer, ex.answer, index)
        rows.append([tokenizer.bos_token_id] + prompt + answer + [tokenizer.eos_token_id])
        answer_starts.append(1 + len(prompt))
    longest = max(len(row) for row in rows)
    if max_length is not None:
        if not _is_int(max_length) or max_length < longest:
            raise ArgumentError(f"max_length={max_length!r} is shorter than the longest example ({longest} tokens "
                                f"with <bos> and <eos>) — pass max_length >= {longest} or None")
        longest = int(max_length)
    input_ids = torch.full((len(rows), longest), tokenizer.pad_token_id, dtype=torch.long)
    labels = torch.full((len(rows), longest), IGNORE_INDEX, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), longest), dtype=torch.long)
    for i, (row, start) in enumerate(zip(rows, answer_starts)):
        input_ids[i, :len(row)] = torch.tensor(row)
        attention_mask[i, :len(row)] = 1
        labels[i, start:len(row)] = input_ids[i, start:len(row)]
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels,
            "answer_mask": labels != IGNORE_INDEX}


def exact_match(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Per row, True when every supervised answer token (and ``<eos>``) is the argmax under teacher forcing.

    ``logits`` is ``[batch, length, vocab]`` from one forward on ``input_ids``; ``labels`` is `encode`'s. This
    equals greedy decoding's exact match: when every teacher-forced argmax is right, greedy decoding from the
    prompt feeds itself exactly the teacher-forced prefix at every step and so produces the same tokens; when one
    is wrong, greedy's output differs at the first wrong one.

    Example::

        >>> import torch
        >>> from jacobiscope.data.tasks import exact_match
        >>> labels = torch.tensor([[-100, 7, 2], [-100, 7, 2]])
        >>> logits = torch.nn.functional.one_hot(torch.tensor([[7, 2, 0], [7, 3, 0]]), 50).float()
        >>> exact_match(logits, labels).tolist()
        [True, False]
    """
    predicted = logits[:, :-1].argmax(dim=-1)
    target = labels[:, 1:]
    supervised = target != IGNORE_INDEX
    return ((predicted == target) | ~supervised).all(dim=1)


def _ids(tokenizer, text: str, index: int) -> list[int]:
    ids = tokenizer.convert_tokens_to_ids(list(text))
    unknown = sorted({ch for ch, i in zip(text, ids) if i is None or i == tokenizer.unk_token_id})
    if unknown:
        raise ArgumentError(f"examples[{index}] has characters outside the task vocabulary: {unknown} — use the "
                            f"characters of task_tokenizer() (digits, a-z, +=,>?:;|-*)")
    return ids
