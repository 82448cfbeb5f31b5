"""Adapter specs: where a Hugging Face family keeps its repeated blocks, its attention and the norm around it.

Specs are data (JSON files in the top-level ``adapters/`` folder, shipped inside the wheel). Users add their own
with `register_adapter`; a generic fallback finds the blocks of families without a spec.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from functools import lru_cache

from torch import nn

from .._resources import shipped_folder
from ..errors import AdapterError  # noqa: F401 - its old import path

__all__ = ["AdapterSpec", "AdapterError", "register_adapter", "get_adapter_spec", "shipped_adapter_specs", "find_blocks"]


@dataclass(frozen=True)
class AdapterSpec:
    """How to find the looped parts of one model family.

    Attributes:
        name: the spec's name (e.g. ``"llama"``).
        model_types: ``config.model_type`` values it applies to.
        block_class: class name(s) of the repeated block, found as the members of an ``nn.ModuleList``.
        attention: path of the attention submodule inside a block (replayed in ``mode="attention"``).
        attention_output: path of a projection applied after ``attention`` (BERT's ``attention.output.dense``),
            or ``None`` when the attention module already projects.
        attention_norm: path of the norm the ItrSA form uses (the block's own).
        norm_position: ``"pre"`` (norm before attention: the map's state is the normalized stream) or ``"post"``
            (norm after the residual, as BERT), or a dict ``{"config_flag", "if_true", "if_false"}`` read from
            the config.
        returns: what the block returns (``"tensor"`` or ``"tuple"``); both are handled, this documents it.
        recurrences: the family's own loop(s), by name (default first), for `jacobiscope.native_loop`: data
            ``{"module": path, "loops": config attribute or int, "require": {config attribute: value}}`` for a
            shared module called once per iteration, or ``{"builder": name}`` for one registered in code.
        state_layout: how the blocks hold the state: ``"batch_first"`` ``[batch, tokens, hidden]`` (default),
            ``"time_major"`` ``[tokens, batch, hidden]`` (XLNet, FSMT) or ``"channels_first"``
            ``[batch, hidden, tokens]`` (SqueezeBERT). Maps always see it batch-first.
        block_builder: for families without a block module (XLM, Flaubert: a layer is spread over parallel lists),
            the name of the code that assembles each layer (`jacobiscope.adapters._composite.BLOCK_BUILDERS`).
        capture_at: path of a submodule that the block calls first with its own arguments, for families whose
            model calls ``block.forward(...)`` directly, which skips hooks (SqueezeBERT); the block's arguments
            are captured there.
    """

    name: str
    model_types: tuple[str, ...] = ()
    block_class: tuple[str, ...] = ()
    attention: str | None = None
    attention_output: str | None = None
    attention_norm: str | None = None
    norm_position: str | dict = "pre"
    returns: str = "tensor"
    notes: str = ""
    recurrences: dict = field(default_factory=dict, compare=False, hash=False)
    state_layout: str = "batch_first"
    block_builder: str | None = None
    capture_at: str | None = None
    source: str = field(default="user", compare=False)

    @classmethod
    def from_dict(cls, data: dict, source: str = "user") -> "AdapterSpec":
        known = {f for f in cls.__dataclass_fields__}
        unknown = set(data) - known
        if unknown:
            raise AdapterError(f"Unknown adapter spec fields {sorted(unknown)}; expected some of {sorted(known - {'source'})}.")
        if "name" not in data:
            raise AdapterError("An adapter spec needs a 'name'.")
        values = dict(data)
        for key in ("model_types", "block_class"):
            value = values.get(key, ())
            values[key] = (value,) if isinstance(value, str) else tuple(value or ())
        values["source"] = source
        return cls(**values)

    def resolved_norm_position(self, config) -> str:
        position = self.norm_position
        if isinstance(position, dict):
            flag = bool(getattr(config, position["config_flag"], True))
            position = position["if_true"] if flag else position["if_false"]
        if position not in ("pre", "post"):
            raise AdapterError(f"Adapter '{self.name}': norm_position must be 'pre' or 'post', got {position!r}.")
        return position

    def as_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items() if k != "source"}


def shipped_recurrence_specs() -> dict[str, dict]:
    """The ``recurrences`` entries of the shipped specs, keyed by model type."""
    return {model_type: dict(spec.recurrences) for model_type, spec in shipped_adapter_specs().items()
            if spec.recurrences}


_USER_SPECS: dict[str, AdapterSpec] = {}


@lru_cache(maxsize=1)
def shipped_adapter_specs() -> dict[str, AdapterSpec]:
    """The specs shipped in ``adapters/*.json``, keyed by model type."""
    specs = {}
    for path in sorted(shipped_folder("adapters").glob("*.json")):
        try:
            spec = AdapterSpec.from_dict(json.loads(path.read_text()), source=str(path))
        except (json.JSONDecodeError, TypeError) as error:
            raise AdapterError(f"The shipped adapter spec {path} is unreadable: {error}. Reinstall jacobiscope.") from error
        for model_type in spec.model_types:
            specs[model_type] = spec
    return specs


def register_adapter(
    model_type: str,
    *,
    block_class: str | list[str] | None = None,
    attention: str | None = None,
    attention_output: str | None = None,
    attention_norm: str | None = None,
    norm_position: str = "pre",
    name: str | None = None,
) -> AdapterSpec:
    """Teach jacobiscope a model family (takes precedence over the shipped specs).

    Example::

        >>> import jacobiscope
        >>> spec = jacobiscope.register_adapter("my_looped_lm", block_class="MyBlock", attention="attn",
        ...                                     attention_norm="norm1", norm_position="pre")
        >>> jacobiscope.adapters.get_adapter_spec("my_looped_lm").attention
        'attn'

    Arguments mirror `AdapterSpec`. ``block_class=None`` keeps the generic block discovery and only adds the
    attention-mode paths. Run `jacobiscope.check_adapter(model)` afterwards to verify the spec on a real model.
    """
    spec = AdapterSpec.from_dict(
        {
            "name": name or model_type,
            "model_types": [model_type],
            "block_class": block_class or (),
            "attention": attention,
            "attention_output": attention_output,
            "attention_norm": attention_norm,
            "norm_position": norm_position,
        }
    )
    if isinstance(norm_position, str):
        spec.resolved_norm_position(None)  # validates 'pre' / 'post' now rather than at first use
    _USER_SPECS[model_type] = spec
    return spec


def get_adapter_spec(model_or_type) -> AdapterSpec | None:
    """The spec for a model (or a ``model_type`` string): user-registered first, then shipped; ``None`` if none."""
    model_type = model_or_type if isinstance(model_or_type, str) else getattr(getattr(model_or_type, "config", None), "model_type", None)
    if model_type is None:
        return None
    return _USER_SPECS.get(model_type) or shipped_adapter_specs().get(model_type)


def _module_lists(model: nn.Module):
    for path, module in model.named_modules():
        if isinstance(module, nn.ModuleList) and len(module) > 0:
            yield path, module


def _generic_block_names(model: nn.Module) -> set[str]:
    names = set(getattr(model, "_no_split_modules", None) or ())
    recorded = (getattr(model, "_can_record_outputs", None) or {}).get("hidden_states")
    # A class, a recorder, or a list of them (wav2vec2: the plain and the stable-layer-norm encoder layer).
    for recorded in recorded if isinstance(recorded, (tuple, list)) else (recorded,):
        if isinstance(recorded, type):
            names.add(recorded.__name__)
        elif recorded is not None and getattr(recorded, "target_class", None) is not None:
            target = recorded.target_class
            # Some families record hidden states from several block classes (a tuple): each is a candidate.
            names.update(cls.__name__ for cls in (target if isinstance(target, (tuple, list)) else (target,)))
    return names


def _longest(matching):
    return max(matching, key=lambda item: len(item[1]))


def _in_decoder(model: nn.Module, matching: list) -> list:
    """A multimodal model holds several block lists (vision or audio towers beside the language model); a text
    forward runs only the language model's, which ``get_decoder()`` names. Prefer the lists inside it when there
    are several and it is a submodule (a vision tower with more blocks would otherwise win and never be called)."""
    if len(matching) < 2 or not callable(getattr(model, "get_decoder", None)):
        return matching
    if getattr(getattr(model, "config", None), "is_encoder_decoder", False):
        return matching  # encoder-decoders keep their convention: the (longer) stack, encoder first on a tie
    try:
        decoder = model.get_decoder()
    except Exception:  # noqa: BLE001 - families without a decoder raise all kinds of errors here
        return matching
    if not isinstance(decoder, nn.Module) or decoder is model:
        return matching
    inside = {id(module) for module in decoder.modules()}
    preferred = [(path, ml) for path, ml in matching if id(ml) in inside]
    return preferred or matching


def find_blocks(model: nn.Module) -> tuple[str, nn.ModuleList, AdapterSpec | None]:
    """Locate the model's repeated blocks: ``(path, module_list, spec_or_None)``.

    Order: the family's spec (its ``block_class``); then the generic fallback — classes named by
    ``_no_split_modules`` / ``_can_record_outputs["hidden_states"]``, then subclasses of transformers'
    ``GradientCheckpointingLayer`` — restricted to members of an ``nn.ModuleList`` (the longest such list wins).
    """
    spec = get_adapter_spec(model)
    if spec is not None and spec.block_builder:
        from ._composite import composite_blocks

        path, layers = composite_blocks(model, spec.block_builder)
        return path, layers, spec
    lists = list(_module_lists(model))
    candidates: list[tuple[str, set[str]]] = []
    if spec is not None and spec.block_class:
        candidates.append(("spec", set(spec.block_class)))
    candidates.append(("generic", _generic_block_names(model)))
    for _, names in candidates:
        if not names:
            continue
        matching = [(path, ml) for path, ml in lists if all(type(m).__name__ in names for m in ml)]
        if matching:
            path, module_list = _longest(_in_decoder(model, matching))
            return path, module_list, spec
    try:
        from transformers.modeling_layers import GradientCheckpointingLayer
    except ImportError:  # pragma: no cover - older transformers
        GradientCheckpointingLayer = ()
    if GradientCheckpointingLayer:
        matching = [(p, ml) for p, ml in lists if all(isinstance(m, GradientCheckpointingLayer) for m in ml)]
        if matching:
            path, module_list = _longest(_in_decoder(model, matching))
            return path, module_list, spec
    found = ", ".join(f"{p or '<root>'} ({len(ml)} x {type(ml[0]).__name__})" for p, ml in lists[:6]) or "no nn.ModuleList at all"
    if getattr(model, "config", None) is None and not lists:
        # A bare module (nn.Linear, a torch MLP): no config to register an adapter under, no blocks to loop.
        raise AdapterError(
            f"{type(model).__name__} is not a transformers model (no config) and has no repeated blocks (no "
            "nn.ModuleList) — pass a transformers model, a model with a loop of its own (loop_map or "
            "jacobiscope_recurrences), or measure a plain map with jacobiscope.measure(step, x0)."
        )
    model_type = getattr(getattr(model, "config", None), "model_type", "?")
    raise AdapterError(
        f"Could not find the repeated blocks of {type(model).__name__} (model_type '{model_type}'): no spec in "
        f"adapters/, and the generic search (_no_split_modules, _can_record_outputs, GradientCheckpointingLayer) "
        f"matched no nn.ModuleList. Found: {found}. Register an adapter: "
        f"jacobiscope.register_adapter('{model_type}', block_class='<BlockClassName>', attention='<attn path>', "
        "attention_norm='<norm path>'), then check it with jacobiscope.check_adapter(model)."
    )
