"""What `evaluate_task` checks before a single loop runs: the task, its levels, the loop counts, the model's own
loop (which recurrence, which config knob it maps to) and the tokenizer — and loading a looped LM from a folder.

Example::

    >>> from jacobiscope.recipes._looped_lm_eval_checks import LOOP_KNOBS, parse_levels
    >>> LOOP_KNOBS["dory"]
    LoopKnob(recurrence='loop', attribute='n_recurrent_loops', offset=0)
    >>> parse_levels("2-5"), parse_levels("3"), parse_levels("harder")
    ((2, 5), (3, 3), 'harder')

Why a module of its own: loop ``k`` of the evaluation is the model's own knob set to ``k`` (``H_cycles=k`` for
HRM-Text, ``n_recurrent_loops=k`` for Dory, ``loop_num_passes=k`` for Inkling-2 loop), and the trajectory of the
model's recurrence reaches that state after ``k - offset`` steps (Inkling-2 loop's first pass is the recurrence's
``x0``). That table, and every refusal naming its fix, live here.
"""
from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path

from .._validation import _is_int, as_int, budget, did_you_mean
from ..errors import ArgumentError

logger = logging.getLogger(__name__)

__all__ = ["LoopKnob", "LOOP_KNOBS", "LoopPlan", "loop_plan", "check_loops", "resolve_task", "resolve_levels",
           "parse_levels", "resolve_tokenizer", "check_vocabulary", "looped_lm_type", "load_looped_lm",
           "MAX_INSTANCES"]

#: One evaluation's instances at most (each one a row of records in the JSON); more is almost surely a typo.
MAX_INSTANCES = 1_000_000


@dataclass(frozen=True)
class LoopKnob:
    """How a family's loop count ``k`` maps to its own recurrence: ``config.<attribute> = k`` is the state the
    recurrence ``recurrence`` reaches after ``k - offset`` steps from its ``x0``."""

    recurrence: str
    attribute: str
    offset: int


#: The native looped causal-LM families: model_type -> its loop knob. HRM-Text's outer H-cycle is the loop that
#: matters for depth ("cycle" recurrence; its L_cycles stay fixed); Inkling-2 loop's first pass is the map's x0.
LOOP_KNOBS = {
    "hrm_text": LoopKnob("cycle", "H_cycles", 0),
    "dory": LoopKnob("loop", "n_recurrent_loops", 0),
    "inkling2_loop_text": LoopKnob("pass", "loop_num_passes", 1),
    "inkling2_loop": LoopKnob("pass", "loop_num_passes", 1),
}

_FAMILIES = "an HRM-Text, Dory or Inkling-2 loop causal LM (AutoModelForCausalLM), e.g. a shipped task checkpoint"


@dataclass(frozen=True)
class LoopPlan:
    """A model's loop as the evaluation reads it: its recurrence, the knob and offset of `LoopKnob` (knob None
    for a family outside `LOOP_KNOBS`, read with its default recurrence and offset 0), and its configured depth."""

    recurrence: str
    attribute: str | None
    offset: int
    configured: int | None


def loop_plan(model) -> LoopPlan:
    """The `LoopPlan` of ``model``; `ArgumentError` naming the fix when it has no loop of its own or no head."""
    from torch import nn

    from ..adapters import list_recurrences

    if not isinstance(model, nn.Module):
        raise ArgumentError(f"model must be a looped language model (a torch module), got {type(model).__name__} — "
                            f"pass {_FAMILIES}")
    model_type = str(getattr(getattr(model, "config", None), "model_type", "") or "")
    offered = list_recurrences(model)
    if not offered:
        raise ArgumentError(f"{type(model).__name__} (model_type {model_type!r}) is not a looped model: it has no "
                            f"recurrence of its own, so no loop count to vary — pass {_FAMILIES}")
    if not callable(getattr(model, "get_output_embeddings", None)) or model.get_output_embeddings() is None:
        raise ArgumentError(f"{type(model).__name__} has no language-model head, so it predicts no tokens — load it "
                            "with transformers.AutoModelForCausalLM.from_pretrained(folder)")
    knob = LOOP_KNOBS.get(model_type)
    if knob is None:
        return LoopPlan(offered[0], None, 0, None)
    configured = getattr(model.config, knob.attribute, None)
    return LoopPlan(knob.recurrence, knob.attribute, knob.offset, as_int(configured) if _is_int(configured) else None)


def check_loops(loops) -> list[int]:
    """The sorted, distinct loop counts (each a whole number >= 1, within the loops budget)."""
    from ._eval_checks import loop_counts

    counts = loop_counts(loops)
    limit = budget("loops")
    if counts[-1] > limit:
        raise ArgumentError(f"loops={counts[-1]} is over the budget of {limit:,} loops — pass smaller loop counts, or "
                            f"raise the budget with JACOBISCOPE_MAX_LOOPS={counts[-1]}")
    return counts


def resolve_task(task):
    """A `jacobiscope.data.tasks` task from its name (or the task itself)."""
    from ..data.tasks import Task, get_task, list_tasks

    if isinstance(task, Task):
        return task
    if not isinstance(task, str) or not task.strip():
        raise ArgumentError(f"task must be a task name or a Task, got {task!r} — pass one of "
                            f"{', '.join(list_tasks())}")
    return get_task(task.strip())


_RANGE = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+)\s*)?$")


def parse_levels(text: str):
    """``"train"``, ``"harder"`` (kept as words), ``"N"`` or ``"A-B"`` (an inclusive pair) from the command line."""
    if not isinstance(text, str):
        raise ArgumentError(f"levels must be text here, got {type(text).__name__} — pass e.g. '1-4' or 'harder'")
    word = text.strip().lower()
    if word in ("train", "harder"):
        return word
    found = _RANGE.match(text)
    if not found:
        raise ArgumentError(f"levels must be N, A-B, train or harder, got {text!r} — pass e.g. 1-4 or harder")
    low = int(found.group(1))
    return low, int(found.group(2)) if found.group(2) is not None else low


def resolve_levels(task, levels) -> tuple[int, int]:
    """The inclusive level range: None or ``"train"`` (the task's `train_levels`), ``"harder"``, an int, a pair, or
    the text ``"A-B"``; checked against the task's levels."""
    if isinstance(levels, str):
        levels = parse_levels(levels)
    if levels is None or levels == "train":
        return tuple(task.train_levels)
    if levels == "harder":
        return tuple(task.harder_levels)
    return tuple(task._levels(levels))  # the task's own check: an int or (low, high) inside its levels


def resolve_tokenizer(model, tokenizer):
    """``tokenizer``, or the one saved in the model's folder (``model.name_or_path``)."""
    if tokenizer is not None:
        if not callable(getattr(tokenizer, "convert_tokens_to_ids", None)):
            raise ArgumentError(f"tokenizer must be a transformers tokenizer, got {type(tokenizer).__name__} — pass "
                                "jacobiscope.data.tasks.task_tokenizer() or AutoTokenizer.from_pretrained(folder)")
        return tokenizer
    folder = str(getattr(model, "name_or_path", "") or "")
    if not folder or not Path(folder).is_dir():
        raise ArgumentError(f"{type(model).__name__} was not loaded from a folder, so it has no tokenizer to read — "
                            "pass tokenizer=jacobiscope.data.tasks.task_tokenizer() (the tasks' tokenizer)")
    check_tokenizer_files(folder)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder)


def check_tokenizer_files(folder) -> None:
    """A model folder must hold its tokenizer (tokenizer.json or tokenizer_config.json)."""
    from .._resources import public_name

    if not any((Path(folder) / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json")):
        raise ArgumentError(f"model folder {public_name(folder)!r} has no tokenizer (no tokenizer.json) — save it "
                            "beside the weights: jacobiscope.data.tasks.task_tokenizer().save_pretrained(folder)")


def check_vocabulary(model, tokenizer, examples) -> None:
    """Every character of the instances is a token of the tokenizer, and every token id fits the model's
    embedding: otherwise the scores would measure the tokenizer, not the model."""
    unknown = getattr(tokenizer, "unk_token_id", None)
    characters = sorted({c for ex in examples for c in ex.prompt + ex.answer})
    ids = tokenizer.convert_tokens_to_ids(characters)
    missing = [c for c, i in zip(characters, ids) if i is None or (unknown is not None and i == unknown)]
    if missing:
        raise ArgumentError(f"the tokenizer has no token for {''.join(missing)!r} of the task's text — pass the "
                            "tokenizer the model was trained with (jacobiscope.data.tasks.task_tokenizer())")
    rows = model.get_input_embeddings().weight.shape[0] if callable(getattr(model, "get_input_embeddings", None)) \
        else None
    specials = [tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id]
    largest = max(i for i in ids + specials if i is not None)
    if rows is not None and largest >= rows:
        raise ArgumentError(f"the tokenizer's id {largest} is past the model's {rows} embedding rows: the model was "
                            "trained with another tokenizer — pass that one (the model folder's)")


def looped_lm_type(folder) -> str:
    """The model_type of a model folder's config.json, refused unless it is a native looped causal-LM family (read
    before the weights are loaded)."""
    from .._resources import public_name

    path = Path(folder) / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8-sig"))
    except (OSError, ValueError):
        return ""  # the loader names the problem with config.json
    model_type = config.get("model_type") if isinstance(config, dict) else None
    if model_type not in LOOP_KNOBS:
        shown = public_name(folder)
        raise ArgumentError(f"{shown!r} is a {model_type!r} model, not a looped language model the task evaluation "
                            f"knows ({', '.join(sorted(LOOP_KNOBS))}){did_you_mean(str(model_type), LOOP_KNOBS)} — "
                            f"pass {_FAMILIES}")
    return model_type


def load_looped_lm(name_or_folder):
    """A looped causal LM by shipped short name or checkpoint folder (``AutoModelForCausalLM``, safetensors only,
    offline), checked like `jacobiscope.hub.load_pretrained` checks a folder: config.json, weights, sizes, finite
    values; refused before the weights are read unless it is a family of `LOOP_KNOBS`. Its tokenizer loads with
    ``AutoTokenizer.from_pretrained(model.name_or_path)`` (what `evaluate_task` does by default)."""
    from transformers import AutoModelForCausalLM

    from .._hub_files import _check_finite, _check_model_folder, _loading_problems
    from .._resources import public_name
    from ..errors import HubError
    from ..hub import locate_model

    folder = Path(locate_model(str(name_or_folder))).expanduser()
    looped_lm_type(folder)  # first: a Sudoku solver's folder is named as what it is, not as an unknown model_type
    weight_files = _check_model_folder(folder)
    shown = public_name(folder)
    try:
        model, info = AutoModelForCausalLM.from_pretrained(str(folder), use_safetensors=True,
                                                           output_loading_info=True)
    except (OSError, ValueError, RuntimeError, KeyError) as error:
        first = (str(error).strip().splitlines() or [type(error).__name__])[0][:300]
        raise HubError(f"could not load {shown!r} ({type(error).__name__}: {first}) — re-save the model with "
                       "save_pretrained") from None
    problems = _loading_problems(model, info, False)
    if problems:
        raise HubError(f"config.json of {shown!r} does not match its weights: {problems} — pass the config.json "
                       "saved with these weights (save_pretrained writes both)")
    _check_finite(model, weight_files, shown)
    logger.debug("loaded %s (%s) for the task evaluation", shown, type(model).__name__)
    return model.eval()
