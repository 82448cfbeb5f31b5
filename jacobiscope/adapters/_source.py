"""`map_source`: the one place a model and its inputs become looped maps.

Example::

    >>> import torch, transformers
    >>> from jacobiscope.adapters import map_source
    >>> model = transformers.GPT2Model(transformers.GPT2Config(n_embd=16, n_layer=2, n_head=2, vocab_size=50))
    >>> with map_source(model, torch.tensor([[1, 2, 3], [4, 5, 6]])) as source:
    ...     [(item.label, [m.info.layer for m in item.maps]) for item in source]
    [('input[0]', [0, 1]), ('input[1]', [0, 1])]

It does, once and in this order, what a measurement needs: unwrap a training wrapper, decide the mode and the
recurrence (`plan_maps`: `list_recurrences`, `find_blocks` exactly once), put the model in a measurable state
(`prepare_model`: eval mode, an attention implementation forward-mode AD passes through), turn the inputs into one
example each (`prepare_inputs`, or the model's own ``loop_inputs``), and — lazily, one input at a time, so a caller
can shard first — build each input's maps (`build_maps` for blocks, `native_loop` for a model's own recurrence,
the reference solvers included). On exit, also on an error or KeyboardInterrupt, the model is restored.
"""
from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Iterator

import torch

from .._resources import public_name
from ..errors import ArgumentError
from ._plan import MapPlan, plan_maps
from ._randomness import drawn_note, seeded_forward
from .inputs import InputError, ModelInputs, prepare_inputs
from .looped import PreparedModel, _model_device_and_dtype, build_maps, prepare_model
from ._offload import hold_loaded, is_offloaded
from .native import native_loop

__all__ = ["map_source", "MapSource", "InputMaps", "MapProvenance"]


@dataclass
class MapProvenance:
    """Where an input's maps came from: enough to rebuild them.

    Attributes:
        model: the model's Hub name (a local path shortened to its last part) or class name.
        model_class: the model's class.
        adapter: how the maps were built (a family spec's name, ``"generic"``, ``"... traced attention"``, or
            ``"native recurrence '<name>'"``).
        mode: ``"block"``, ``"attention"`` or ``"loop"``.
        recurrence: the recurrence in loop mode, else ``None``.
        blocks: how many blocks the model has (1 for its own loop).
        layers: the block indices of the maps.
        eta: the attention-form step size (the model's own for a reference solver), else ``None``.
    """

    model: str
    model_class: str
    adapter: str
    mode: str
    recurrence: str | None
    blocks: int
    layers: list
    eta: float | None = None


@dataclass
class InputMaps:
    """One input's looped maps (one per requested layer, or the model's own loop), and what they come with.

    Attributes:
        index: the input's position among the inputs.
        label: a short name of the input (a snippet of the text, ``input[i]``, or a given label).
        maps: the `LoopedMap` of each layer, in the order asked for; ``maps[i].info`` says layer, mode, ...
        inputs: the keyword arguments the model ran on for this input (``model(**inputs)``).
        flags: what the rows of this input must say (a text truncated to max_length).
        notes: everything the source has said so far (what was changed on the model, how the maps compute).
        provenance: where the maps came from (`MapProvenance`).
    """

    index: int
    label: str
    maps: list
    inputs: dict
    flags: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    provenance: MapProvenance | None = None


class MapSource:
    """The inputs of a `map_source`, each turned into its maps when asked (``for item in source``, ``source[i]``);
    ``len(source)`` inputs, ``source.labels``, ``source.plan`` (`MapPlan`), ``source.notes`` (cumulative)."""

    def __init__(self, plan: MapPlan, prepared: PreparedModel, examples: list, *, dtype=None, device=None,
                 seed: int | None = None):
        self.plan = plan
        self._seed = seed
        self.notes = list(plan.notes)
        self._prepared = prepared
        self._examples = examples
        self._dtype, self._device = dtype, device
        self._say(prepared.notes)
        for example in examples:
            self._say(example.notes)

    @property
    def model(self):
        """The (unwrapped, prepared) model the maps are cut from."""
        return self.plan.model

    @property
    def labels(self) -> list[str]:
        return [str(example.labels[0]) if example.batch_size == 1 else f"batch of {example.batch_size}"
                for example in self._examples]

    def __len__(self) -> int:
        return len(self._examples)

    def __iter__(self) -> Iterator[InputMaps]:
        for index in range(len(self)):
            yield self[index]

    def __getitem__(self, index: int) -> InputMaps:
        return self.get(index)

    def get(self, index: int, layers: list | None = None) -> InputMaps:
        """Input ``index``'s maps (of ``layers`` when given, block indices; default the planned ones)."""
        example = self._examples[index]
        plan = self.plan
        with seeded_forward(self._seed) as draws:  # a forward that draws (MAE masking) is cut from a seeded one
            if plan.mode == "loop":
                kwargs = _on_device(example.kwargs, plan.model)
                looped = native_loop(self._prepared.model, kwargs, plan.recurrence)
                maps = [looped.to(dtype=self._dtype) if self._dtype is not None else looped]
            else:
                maps = build_maps(self._prepared, example, list(plan.layers if layers is None else layers), plan.mode,
                                  plan.eta if plan.mode == "attention" else None, self._dtype, found=plan.found)
        if draws.any:
            self._say([drawn_note(self._seed)])
        if self._device is not None:
            maps = [looped.to(device=self._device) for looped in maps]
        self._say(self._prepared.notes)  # what building said (float32 copies, traced attention)
        flags = _flags(example)
        return InputMaps(index, self.labels[index], maps, dict(example.kwargs), flags, list(self.notes),
                         self.provenance([looped.info.layer for looped in maps]))

    def provenance(self, layers: list | None = None) -> MapProvenance:
        """Where the maps come from (`MapProvenance`), for ``layers`` (default: the planned ones)."""
        plan, model = self.plan, self.plan.model
        return MapProvenance(public_name(getattr(model, "name_or_path", "") or type(model).__name__),
                             type(model).__name__, plan.adapter, plan.mode, plan.recurrence, plan.blocks,
                             list(plan.layers if layers is None else layers), plan.eta)

    def _say(self, notes) -> None:
        for note in notes:
            if note not in self.notes:
                self.notes.append(note)


@contextlib.contextmanager
def map_source(model, inputs, *, tokenizer=None, layers=None, mode: str | None = None,
               recurrence: str | None = None, eta: float | None = None, dtype: torch.dtype | None = None,
               device=None, max_length: int | None = 512, input_labels=None, split: bool = True,
               attn_implementation: str | None = None, seed: int | None = None) -> Iterator[MapSource]:
    """The looped maps of ``model`` on ``inputs``, one `InputMaps` per input, the model restored on exit.

    Example::

        >>> import torch, transformers
        >>> from jacobiscope.adapters import map_source
        >>> config = transformers.AlbertConfig(vocab_size=50, embedding_size=8, hidden_size=16, num_hidden_layers=3,
        ...                                    num_attention_heads=2, intermediate_size=32)
        >>> with map_source(transformers.AlbertModel(config), torch.tensor([[1, 2, 3]])) as source:
        ...     (item,) = source
        ...     item.provenance.adapter, item.maps[0].info.loops
        ("native recurrence 'loop'", 3)

    Arguments:
        model, inputs, tokenizer, layers, mode, recurrence, eta, dtype, device, max_length, input_labels: as for
            `jacobiscope.analyze` (``device``: each map is copied there; the model is not moved).
        split: one input per example (default; padding removed, so each state is exactly its tokens), or
            ``False``: the whole batch as one input (a training step's batch).
        attn_implementation: force an attention implementation (default: keep eager / sdpa, switch others).
        seed: the model's forwards that cut the maps run with torch seeded to it (the caller's random state left
            as it was), so a forward that draws random numbers (ViT-MAE's masking, Huginn's initial state) gives
            the same maps each call; None: the global random state as it is. A forward that drew is said in
            ``notes`` either way.

    Everything that can be checked is checked on entry, before any map is built (`plan_maps`, the inputs);
    maps are built when an input is asked for. The model is restored when the block ends, however it ends.
    """
    plan = plan_maps(model, mode=mode, layers=layers, recurrence=recurrence, eta=eta)
    prepared = prepare_model(plan.model, attn_implementation)
    try:
        if plan.mode == "loop" and is_offloaded(plan.model):
            # a model's own loop runs its whole recurrence every loop: its weights are loaded for the measurement
            prepared.add_restore([hold_loaded(plan.model)])
            prepared.notes.append("the model's own loop runs every looped block each loop: its offloaded weights are "
                                  "loaded in place while it is measured, and offloaded again after")
        examples = _examples(plan, inputs, tokenizer, max_length, split)
        _label(examples, input_labels)
        yield MapSource(plan, prepared, examples, dtype=dtype, device=device, seed=seed)
    finally:
        prepared.restore()


def _examples(plan: MapPlan, inputs, tokenizer, max_length, split: bool) -> list[ModelInputs]:
    if plan.own_loop:
        # A model written for jacobiscope (the reference solvers) takes its own inputs: puzzles, not text.
        examples = own_examples(plan.model, inputs)
        if split or len(examples) == 1:
            return examples
        ids = torch.cat([example.kwargs["input_ids"] for example in examples])
        return [ModelInputs({"input_ids": ids}, [label for example in examples for label in example.labels])]
    model_inputs = prepare_inputs(plan.model, inputs, tokenizer, max_length=max_length)
    if not split:
        return [model_inputs]
    return model_inputs.examples()


def _flags(example: ModelInputs) -> list[str]:
    """An input's flags: one example's list, or for a whole batch each example's, once."""
    flags = []
    for flag in example.flags or []:
        for item in ([flag] if isinstance(flag, str) else flag):
            if item not in flags:
                flags.append(item)
    return flags


def _label(examples: list, input_labels) -> None:
    if input_labels is None:
        return
    if len(input_labels) != len(examples):
        raise ArgumentError(f"input_labels has {len(input_labels)} names for {len(examples)} inputs — give one per "
                            "input")
    for example, name in zip(examples, input_labels):
        example.labels[0] = str(name)


def _on_device(kwargs: dict, model) -> dict:
    if next(model.parameters(), None) is None:
        return dict(kwargs)
    device, _ = _model_device_and_dtype(model)   # an offloaded model's: its hooks' execution device
    return {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in kwargs.items()}


def own_examples(model, inputs) -> list[ModelInputs]:
    """One example per input for a model with its own loop: a tensor is split along its first dimension; anything
    else goes through the model's ``loop_inputs`` (the reference solvers turn puzzle strings into ids)."""
    if isinstance(inputs, Mapping) and isinstance(inputs.get("input_ids"), torch.Tensor):
        inputs = inputs["input_ids"]  # a batch as a training loop holds it: the loop takes its ids
    if isinstance(inputs, torch.Tensor):
        tensor = inputs if inputs.dim() >= 2 else inputs.unsqueeze(0)
        labels = [f"input[{i}]" for i in range(tensor.shape[0])]
    elif callable(getattr(model, "loop_inputs", None)):
        items = [inputs] if isinstance(inputs, str) else list(inputs)
        if not items:
            raise InputError(f"No inputs given to {type(model).__name__} — pass at least one")
        try:
            tensor = model.loop_inputs(items)
        except (ValueError, TypeError, KeyError) as error:  # the model's own words (a malformed puzzle, ...)
            raise InputError(f"{type(model).__name__}.loop_inputs rejected the inputs: "
                             f"{(str(error).strip().splitlines() or [type(error).__name__])[0]}") from None
        labels = [(str(item)[:20] + "...") if len(str(item)) > 20 else str(item) for item in items]
    else:
        raise InputError(f"{type(model).__name__} runs its own loop on tensors: pass its loop_map inputs as a tensor "
                         f"[N, ...], got {type(inputs).__name__} — or give the model a loop_inputs(inputs) method")
    if tensor.shape[0] == 0:
        raise InputError("The input tensor is empty — pass at least one example.")
    return [ModelInputs({"input_ids": tensor[i : i + 1]}, [labels[i]]) for i in range(tensor.shape[0])]

