"""One character-level vocabulary shared by every text task, built offline (no hub download).

Example::

    >>> from jacobiscope.data.tasks import task_tokenizer
    >>> tok = task_tokenizer()
    >>> tok.convert_tokens_to_ids(list("12+")), tok.pad_token_id, tok.bos_token_id, tok.eos_token_id
    ([5, 6, 40], 0, 1, 2)
    >>> tok.decode(tok("ab,c>d=3")["input_ids"])
    'ab,c>d=3'
"""
from __future__ import annotations

import string

__all__ = ["SPECIAL_TOKENS", "CHARACTERS", "VOCAB", "task_tokenizer"]

SPECIAL_TOKENS = ("<pad>", "<bos>", "<eos>", "<unk>")
# Digits, lower-case letters (graph nodes) and the punctuation of every task's prompt. Append only: a checkpoint's
# embedding rows are indexed by these ids.
CHARACTERS = string.digits + string.ascii_lowercase + "+=,>?:;|-*"
VOCAB = {token: index for index, token in enumerate(SPECIAL_TOKENS + tuple(CHARACTERS))}


def task_tokenizer():
    """The character-level tokenizer of the tasks (a `transformers` fast tokenizer, no network).

    Every character of a task prompt is one token; ``<pad>`` is 0, ``<bos>`` 1, ``<eos>`` 2. The tokenizer adds no
    special tokens by itself (`encode` puts ``<bos>`` and ``<eos>`` where they belong). Save it with a checkpoint
    (``tok.save_pretrained(folder)``) and ``AutoTokenizer.from_pretrained(folder)`` loads it offline.

    Example::

        >>> from jacobiscope.data.tasks import task_tokenizer
        >>> len(task_tokenizer())
        50
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.WordLevel(vocab=dict(VOCAB), unk_token="<unk>"))
    # Each character is its own pre-token: the WordLevel model then maps it straight to its id.
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", bos_token="<bos>",
                                   eos_token="<eos>", unk_token="<unk>", model_max_length=4096)
