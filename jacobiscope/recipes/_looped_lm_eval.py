"""Scoring a looped language model on fresh task instances at several loop counts, all read from ONE trajectory
of the model's own loop per batch.

Example::

    >>> import torch, transformers
    >>> from jacobiscope.data.tasks import task_tokenizer
    >>> from jacobiscope.recipes._looped_lm_eval import evaluate_task
    >>> _ = torch.manual_seed(0)
    >>> config = transformers.DoryConfig(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=3,
    ...     num_attention_heads=2, num_key_value_heads=1, head_dim=8, n_input_layers=1, n_output_layers=1,
    ...     n_recurrent_loops=2)
    >>> model = transformers.DoryForCausalLM(config)
    >>> result = evaluate_task(model, "addition", loops=(1, 2, 4), n=8, tokenizer=task_tokenizer())
    >>> sorted(result.accuracy), result.configured, len(result.records)      # a random model: accuracy 0
    ([1, 2, 4], 2, 8)
    >>> sorted(result.records[0])
    ['answer', 'correct', 'index', 'level', 'predicted', 'prompt', 'solved_at', 'wrong_tokens']

Loop ``k`` is the model's own loop knob set to ``k`` (``H_cycles`` of HRM-Text, ``n_recurrent_loops`` of Dory,
``loop_num_passes`` of Inkling-2 loop; see `jacobiscope.recipes._looped_lm_eval_checks.LOOP_KNOBS`). Instead of one
forward per loop count, the evaluation runs the model's recurrence (`jacobiscope.native_loop`) once per batch to
``max(loops)`` and reads the model's own readout (the rest of its forward, its norm and ``lm_head``) at every
requested loop: the cost of ``max(loops)`` loops, not of their sum, and the same logits as the model's own
forward at that depth (tests/test_looped_lm_eval.py checks it against the forward for each family). It is the loop
lens's trajectory (`jacobiscope.loop_lens`) without the lens's per-row split and per-token statistics: one batched
trajectory, read out only at the requested loops, nothing kept but each instance's argmax.

Exact match: every supervised answer token and the ``<eos>`` after it is the argmax under teacher forcing
(`jacobiscope.data.tasks.exact_match`). That equals greedy decoding's exact match: when every teacher-forced argmax
is right, greedy decoding from the prompt feeds itself the same prefix at every step and produces the same tokens;
when one is wrong, greedy's output differs at the first wrong one.
"""
from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from dataclasses import dataclass, field

import torch

from ..errors import ArgumentError

logger = logging.getLogger(__name__)

__all__ = ["TaskEvaluation", "evaluate_task", "logits_along", "score_batch"]

#: The keys of `jacobiscope.data.tasks.encode`'s output that are model inputs (the rest are targets).
_MODEL_KEYS = ("input_ids", "attention_mask", "token_type_ids", "position_ids")


@dataclass
class TaskEvaluation:
    """What `evaluate_task` measured: exact-match accuracy per loop count (overall and per level), and one record
    per instance.

    Attributes:
        model: the model's public name. task: the task's name. loops: the loop counts scored (sorted).
        levels: the inclusive level range drawn from. n, seed: how many instances, and the generator's seed.
        configured: the model's own configured (trained) loop count, or None.
        accuracy: ``{loop: fraction exactly right}``. per_level: ``{loop: {level: fraction}}``.
        level_counts: ``{level: instances}``. records: one dict per instance (see `evaluate_task`).
        seconds: the wall time of the scoring (one trajectory per batch serves every loop count).
        notes: anything the caller should know (e.g. a family read with its default recurrence).
    """

    model: str
    task: str
    loops: list
    levels: tuple
    n: int
    seed: int
    configured: int | None
    accuracy: dict
    per_level: dict
    level_counts: dict
    records: list
    seconds: float
    notes: list = field(default_factory=list)

    @property
    def instances_per_second(self) -> float:
        return self.n / max(self.seconds, 1e-9)

    def examples(self) -> list:
        """The scored instances as `jacobiscope.data.tasks.TaskExample`, in record order: ``encode(result.examples(),
        tokenizer)`` is exactly what the evaluation fed the model, for `jacobiscope.analyze` / `jacobiscope.loop_lens`
        on the same instances (row i is record i)."""
        from ..data.tasks import TaskExample

        return [TaskExample(r["prompt"], r["answer"], r["level"]) for r in self.records]

    def to_dict(self) -> dict:
        """The JSON record, shaped like ``jacobiscope sudoku eval --json``'s: ``results`` and ``puzzles`` keyed by
        the split (here the task's name), so `jacobiscope.recipes.solved_from_sudoku_eval(record, task, loops)`
        reads which instances were solved and `jacobiscope.recipes.per_example` joins them with the diagnostics
        of the same inputs (`examples`, encoded)."""
        results = {str(loop): {"accuracy": self.accuracy[loop],
                               "per_level": {str(level): value for level, value in self.per_level[loop].items()},
                               "seconds": self.seconds, "instances_per_second": self.instances_per_second}
                   for loop in self.loops}
        return {"model": self.model, "task": self.task, "loops": list(self.loops), "levels": list(self.levels),
                "n": self.n, "seed": self.seed, "configured": self.configured,
                "level_counts": {str(level): count for level, count in self.level_counts.items()},
                "results": {self.task: results}, "puzzles": {self.task: self.records}, "notes": list(self.notes)}

    @classmethod
    def from_json(cls, path) -> "TaskEvaluation":
        """Read back a record written by `to_json` (or ``jacobiscope tasks eval --out``)."""
        from pathlib import Path

        try:
            record = json.loads(Path(path).read_text(encoding="utf-8-sig"))
            task, loops = record["task"], [int(loop) for loop in record["loops"]]
            scores = record["results"][task]
            return cls(model=record["model"], task=task, loops=loops, levels=tuple(record["levels"]), n=record["n"],
                       seed=record["seed"], configured=record["configured"],
                       accuracy={loop: scores[str(loop)]["accuracy"] for loop in loops},
                       per_level={loop: {int(level): value for level, value in scores[str(loop)]["per_level"].items()}
                                  for loop in loops},
                       level_counts={int(level): count for level, count in record["level_counts"].items()},
                       records=record["puzzles"][task], seconds=scores[str(loops[0])]["seconds"],
                       notes=list(record.get("notes", [])))
        except OSError as error:
            raise ArgumentError(f"cannot read the task evaluation {str(path)!r} ({error.strerror or error}) — pass "
                                "the file 'jacobiscope tasks eval ... --out FILE' wrote") from None
        except (ValueError, KeyError, TypeError, IndexError) as error:
            raise ArgumentError(f"{str(path)!r} is not a task evaluation record ({type(error).__name__}: {error}) — "
                                "pass the file 'jacobiscope tasks eval ... --out FILE' wrote") from None

    def to_json(self, path=None) -> str:
        """The record of `to_dict` as JSON text; with ``path`` also written there atomically (a crash leaves the
        old file or the new one, never half of one)."""
        text = json.dumps(self.to_dict(), indent=1, allow_nan=False)
        if path is not None:
            from .._io import atomic_write_text

            atomic_write_text(path, text)
            logger.info("task evaluation of %s on %s written to %s", self.model, self.task, path)
        return text

    def to_dataframe(self):
        """One row per (instance, loop): ``index``, ``level``, ``loop``, ``correct``, ``wrong_tokens``,
        ``predicted``, ``answer``, ``prompt``. Needs pandas."""
        import pandas as pd

        rows = [{"index": r["index"], "level": r["level"], "loop": loop, "correct": r["correct"][str(loop)],
                 "wrong_tokens": r["wrong_tokens"][str(loop)], "predicted": r["predicted"][str(loop)],
                 "answer": r["answer"], "prompt": r["prompt"]} for r in self.records for loop in self.loops]
        return pd.DataFrame(rows, columns=["index", "level", "loop", "correct", "wrong_tokens", "predicted", "answer",
                                           "prompt"])

    def table(self) -> str:
        """The accuracy per loop count, overall and per level, as a text table (what the CLI prints)."""
        levels = sorted(self.level_counts)
        head = f"{'loops':>6}{'exact':>9}" + "".join(f"{'L' + str(level):>8}" for level in levels)
        lines = [head]
        for loop in self.loops:
            mark = "*" if loop == self.configured else " "
            cells = "".join(f"{100 * self.per_level[loop][level]:>7.1f}%" for level in levels)
            lines.append(f"{loop:>5}{mark}{100 * self.accuracy[loop]:>8.1f}%{cells}")
        counts = ", ".join(f"L{level}: {self.level_counts[level]}" for level in levels)
        lines.append(f"{self.n} {self.task} instances ({counts}), seed {self.seed}; "
                     + (f"* the model's configured depth ({self.configured}); " if self.configured else "")
                     + f"one trajectory per batch to loop {max(self.loops)}, {self.seconds:.1f} s")
        return "\n".join(lines)


def logits_along(model, inputs: dict, loops, plan=None):
    """``(loop, logits)`` at every loop count of ``loops`` (ascending), read from ONE trajectory of the model's own
    loop on ``inputs`` (``model(**inputs)`` keywords): the model's own readout of the state it reaches there, equal
    to ``model(**inputs).logits`` with its loop knob set to that count (see the module).

    Example::

        >>> import torch, transformers
        >>> from jacobiscope.recipes._looped_lm_eval import logits_along
        >>> _ = torch.manual_seed(0)
        >>> config = transformers.HrmTextConfig(vocab_size=40, hidden_size=16, intermediate_size=32,
        ...     num_hidden_layers=1, num_attention_heads=2, head_dim=8, H_cycles=2, L_cycles=2)
        >>> model = transformers.HrmTextForCausalLM(config).eval()
        >>> ids = {"input_ids": torch.tensor([[1, 5, 7, 9]])}
        >>> read = dict(logits_along(model, ids, [1, 2]))
        >>> bool(torch.allclose(read[2], model(**ids).logits, atol=1e-5))   # H_cycles = 2: its own forward
        True
    """
    from ..adapters import native_loop
    from ._looped_lm_eval_checks import check_loops, loop_plan

    plan = loop_plan(model) if plan is None else plan
    counts = check_loops(loops)
    with _shallow(model, plan):
        looped = native_loop(model, inputs, plan.recurrence)
    readout = looped.info.readout
    if not callable(readout):
        raise ArgumentError(f"{type(model).__name__}'s loop has no readout (no lm_head to read the state through) — "
                            "load it with transformers.AutoModelForCausalLM.from_pretrained(folder)")
    wanted = {loop - plan.offset: loop for loop in counts}
    state = looped.x0
    with torch.no_grad():
        for step in range(max(wanted) + 1):
            if step > 0:
                state = looped.step(state)
            if step in wanted:
                yield wanted[step], readout(state)


@contextlib.contextmanager
def _shallow(model, plan):
    """The model's loop knob at 1 while `native_loop` captures what its layers are given: the capture runs the
    model's forward (Dory's to its output layers, past every loop), and the masks and rotary tables each layer
    receives do not depend on how often the loop runs — so one loop, not the configured depth, is paid for it."""
    if plan.attribute is None or plan.configured is None:
        yield
        return
    config = model.config
    configured = getattr(config, plan.attribute)
    setattr(config, plan.attribute, 1)
    try:
        yield
    finally:  # the model's own depth, whatever happened during the capture
        setattr(config, plan.attribute, configured)


def score_batch(model, batch: dict, loops, plan=None) -> dict:
    """One batch scored at every loop count from one trajectory (`logits_along`): ``{loop: (correct [B] bool,
    wrong [B] int, predicted [B, T-1] ids)}``; ``batch`` is `jacobiscope.data.tasks.encode`'s output. A NaN logit
    row predicts nothing right."""
    from ..data.tasks import IGNORE_INDEX

    device = next(model.parameters()).device
    inputs = {key: batch[key].to(device) for key in _MODEL_KEYS if key in batch}
    labels = batch["labels"].to(device)
    target, supervised = labels[:, 1:], labels[:, 1:] != IGNORE_INDEX
    out = {}
    for loop, logits in logits_along(model, inputs, loops, plan):
        # jacobiscope.data.tasks.exact_match, except that a position whose logits hold NaN predicts -1 (no token):
        # torch's argmax would point at the NaN, which can be the right token by chance
        finite = torch.isfinite(logits[:, :-1]).all(dim=-1)
        predicted = logits[:, :-1].argmax(dim=-1).masked_fill(~finite, -1)
        wrong = ((predicted != target) & supervised).sum(dim=1)
        out[loop] = ((wrong == 0).cpu(), wrong.cpu(), predicted.cpu())
    return out


def _records(examples, start: int, batch: dict, scored: dict, tokenizer) -> list[dict]:
    """One record per instance of a batch (see `evaluate_task`)."""
    from ..data.tasks import IGNORE_INDEX

    supervised = batch["labels"][:, 1:] != IGNORE_INDEX
    # the answer's tokens: every supervised position but the last one, which is <eos>
    positions = [supervised[row].nonzero().reshape(-1)[:-1] for row in range(len(examples))]
    unknown = tokenizer.unk_token_id if tokenizer.unk_token_id is not None else tokenizer.pad_token_id
    texts = {loop: tokenizer.batch_decode([[i if i >= 0 else unknown for i in values[2][row, where].tolist()]
                                           for row, where in enumerate(positions)])  # -1: NaN logits, no token
             for loop, values in scored.items()}
    records = []
    for row, ex in enumerate(examples):
        records.append({
            "index": start + row, "level": ex.level, "prompt": ex.prompt, "answer": ex.answer,
            "solved_at": [loop for loop, values in scored.items() if bool(values[0][row])],
            "correct": {str(loop): bool(values[0][row]) for loop, values in scored.items()},
            "wrong_tokens": {str(loop): int(values[1][row]) for loop, values in scored.items()},
            "predicted": {str(loop): texts[loop][row] for loop in scored}})
    return records


def _instances(task, n, levels, seed, examples):
    """The instances scored: ``examples`` as given (checked), or ``n`` fresh ones from the task's generator."""
    from ..data.tasks import TaskExample
    from .._validation import _is_int
    from ._looped_lm_eval_checks import MAX_INSTANCES

    if examples is not None:
        examples = list(examples)
        bad = next((i for i, ex in enumerate(examples) if not isinstance(ex, TaskExample)), None)
        if not examples or bad is not None:
            raise ArgumentError(f"examples must be a non-empty list of TaskExample, got "
                                f"{'an empty list' if not examples else type(examples[bad]).__name__} — pass "
                                "task.generate(n, levels=..., seed=...), or leave examples out")
        return examples
    if not _is_int(n) or not 1 <= n <= MAX_INSTANCES:
        raise ArgumentError(f"n must be a whole number of instances in 1..{MAX_INSTANCES:,}, got {n!r} — pass e.g. "
                            "n=500")
    return task.generate(int(n), levels=levels, seed=seed)


def evaluate_task(model, task, *, loops=(1, 2, 4, 8), n: int = 500, levels=None, seed: int = 0,
                  batch_size: int = 64, tokenizer=None, examples=None, progress: bool | None = False) -> TaskEvaluation:
    """Exact-match accuracy of a looped LM on ``n`` fresh instances of ``task`` at every loop count of ``loops``.

    Arguments:
        model: a looped causal LM (HRM-Text, Dory, Inkling-2 loop; `transformers.AutoModelForCausalLM`).
        task: a task name (`jacobiscope.data.tasks.list_tasks`) or a `Task`.
        loops: loop counts: the model's own loop knob (see the module); each a whole number >= 1.
        n, levels, seed: the instances: ``task.generate(n, levels=levels, seed=seed)``; ``levels`` None or
            ``"train"`` (the task's train levels), ``"harder"``, an int, an inclusive ``(low, high)`` or ``"A-B"``.
        batch_size: instances per trajectory. tokenizer: default the one saved in the model's folder.
        examples: score these `TaskExample` instead of generating (``n`` / ``levels`` / ``seed`` then describe
            nothing: ``n`` becomes their count). progress: a bar on stderr (``None``: after 2 s).

    Returns:
        `TaskEvaluation`; each record: ``index`` (the instance's position in the generated list), ``level``,
        ``prompt``, ``answer``, ``solved_at`` (the loop counts where it is exactly right, as ``sudoku eval``
        writes it), ``correct`` / ``wrong_tokens`` / ``predicted`` per loop count (keys are the loop counts as
        text, as in the JSON; ``predicted``: the teacher-forced argmax at the answer's positions).
    """
    from .._progress import progress_bar
    from .._resources import public_name
    from .._validation import seed_int
    from ..data.tasks import encode
    from ._eval_checks import check_batch_size
    from ._looped_lm_eval_checks import (check_loops, check_vocabulary, loop_plan, resolve_levels, resolve_task,
                                         resolve_tokenizer)

    plan = loop_plan(model)
    task = resolve_task(task)
    counts, levels, seed = check_loops(loops), resolve_levels(task, levels), seed_int(seed)
    batch_size = check_batch_size(batch_size)
    tokenizer = resolve_tokenizer(model, tokenizer)
    instances = _instances(task, n, levels, seed, examples)
    if examples is not None:  # the levels they hold, not the ones a generator would have drawn from
        levels = (min(ex.level for ex in instances), max(ex.level for ex in instances))
    check_vocabulary(model, tokenizer, instances)
    notes = [] if plan.attribute else [f"{type(model).__name__}: no known loop knob; loop k is step k of its "
                                       f"recurrence {plan.recurrence!r}"]
    was_training = model.training
    model.eval()
    records, started = [], time.perf_counter()
    try:
        with progress_bar(len(instances), f"{task.name} eval", unit="instance",
                          enabled=False if progress is False else None) as bar:
            for start in range(0, len(instances), batch_size):
                chunk = instances[start:start + batch_size]
                batch = encode(chunk, tokenizer)
                records.extend(_records(chunk, start, batch, score_batch(model, batch, counts, plan), tokenizer))
                bar.update(len(chunk))
    finally:  # the caller's mode is the caller's
        model.train(was_training)
    seconds = time.perf_counter() - started
    result = _summarize(records, counts)
    name = public_name(getattr(model, "name_or_path", "") or type(model).__name__)
    logger.info("%s on %d %s instances: exact match %s at loops %s (%.1f s)", name, len(records), task.name,
                [round(result[0][loop], 3) for loop in counts], counts, seconds)
    return TaskEvaluation(model=name, task=task.name, loops=counts, levels=tuple(levels), n=len(records),
                          seed=seed, configured=plan.configured, accuracy=result[0], per_level=result[1],
                          level_counts=result[2], records=records, seconds=seconds, notes=notes)


def _summarize(records: list, loops: list):
    """``(accuracy, per_level, level_counts)`` of the records."""
    counts = {}
    for record in records:
        counts[record["level"]] = counts.get(record["level"], 0) + 1
    counts = dict(sorted(counts.items()))
    accuracy, per_level = {}, {}
    for loop in loops:
        right = [r for r in records if r["correct"][str(loop)]]
        accuracy[loop] = len(right) / len(records) if records else math.nan
        per_level[loop] = {level: sum(1 for r in right if r["level"] == level) / count
                           for level, count in counts.items()}
    return accuracy, per_level, counts
