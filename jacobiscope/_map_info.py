"""`MapInfo`: what jacobiscope knows about a `LoopedMap` (where it came from, how to read it), typed.

Example::

    >>> import jacobiscope
    >>> m = jacobiscope.LoopedMap(lambda x: 0.5 * x)
    >>> m.info.layer = 3
    >>> m.meta["layer"], "mode" in m.meta      # the old dict reads still work, forwarded to info
    (3, False)
    >>> m.meta["my_tag"] = "baseline"           # anything else is the user's own extra
    >>> m.info.layer, m.meta["my_tag"]
    (3, 'baseline')

`LoopedMap.info` holds the keys the package reads and writes (the adapters fill them: model, layer, mode, ...);
`LoopedMap.meta` is a dict-like view holding the user's own extras, through which a known key still reads and
writes ``info`` (code written against the old free-form ``meta`` dict keeps working).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Callable

__all__ = ["MapInfo", "MetaView", "KNOWN_KEYS"]


@dataclass
class MapInfo:
    """What jacobiscope knows about a map; every field is optional (``None``: not said).

    Example::

        >>> from jacobiscope.maps import MapInfo
        >>> info = MapInfo(layer=2, mode="block")
        >>> info.layer, info.present()
        (2, {'layer': 2, 'mode': 'block'})

    Attributes:
        model: the model the map was cut from (its Hub name or class name).
        layer: the block index of the map (0 for a model's own loop).
        mode: ``"block"``, ``"attention"`` or ``"loop"``.
        eta: the step size of an attention-form map (``Norm(X + eta * Attn(X))``); ``None`` for a block.
        adapter: the adapter that built the map (a family spec's name, ``"generic"`` or ``"traced"``).
        blocks_path: where the model keeps its blocks (``"h"``, ``"model.layers"``, ...).
        recurrence: the name of the model's own recurrence (`jacobiscope.list_recurrences`).
        description: a one-line description of the recurrence.
        loops: the configured (trained) iteration count of a model's own loop.
        readout: ``state -> logits``: what the model does to a state when its loop stops there (loop depth).
        quality: ``state -> score`` (higher is better), the model's own measure of a state.
        notes: what was changed on the model to build the map (eval mode, attention implementation, ...).
        derivatives: how the map's Jacobian products are taken when not by forward mode (double backward).
        power: loops of the underlying step per application (`LoopedMap.power`); 1 for the map itself.
        unbatched_original: the map is a batched copy of one whose readout takes a state without the batch axis.
        norm: ``"removed"`` for a map whose normalization was taken out (`jacobiscope.dynamics.without_norm`).
    """

    model: str | None = None
    layer: int | None = None
    mode: str | None = None
    eta: float | None = None
    adapter: str | None = None
    blocks_path: str | None = None
    recurrence: str | None = None
    description: str | None = None
    loops: int | None = None
    readout: Callable | None = None
    quality: Callable | None = None
    notes: list | None = None
    derivatives: str | None = None
    power: int = 1
    unbatched_original: bool = False
    norm: str | None = None
    # Known keys set through `meta` to their default (``meta["eta"] = None``): still present in the dict view.
    _said: set = field(default_factory=set, repr=False, compare=False)

    def present(self) -> dict:
        """The fields that say something (a value other than the default, or set explicitly through ``meta``)."""
        return {key: getattr(self, key) for key in KNOWN_KEYS if self.has(key)}

    def has(self, key: str) -> bool:
        """Whether ``key`` says something (the dict view's ``key in meta``)."""
        value, default = getattr(self, key), _DEFAULTS[key]
        if key in self._said or (default is None and value is not None):
            return True
        try:  # a user's value may be an array: compared as a whole, never element-wise
            return value is not default and bool(value != default)
        except (TypeError, ValueError, RuntimeError):
            return True

    def copy(self) -> "MapInfo":
        """An independent copy (the notes list copied too; readout and quality functions shared)."""
        new = dataclasses.replace(self, _said=set(self._said))
        if isinstance(new.notes, list):
            new.notes = list(new.notes)
        return new

    def set(self, key: str, value) -> None:
        setattr(self, key, value)
        self._said.add(key)

    def unset(self, key: str) -> None:
        setattr(self, key, _DEFAULTS[key])
        self._said.discard(key)


_DEFAULTS = {f.name: (f.default if f.default is not dataclasses.MISSING else None)
             for f in dataclasses.fields(MapInfo) if not f.name.startswith("_")}
#: The keys of `MapInfo`: through `LoopedMap.meta` they read and write ``info``.
KNOWN_KEYS = tuple(_DEFAULTS)


class MetaView(MutableMapping):
    """``LoopedMap.meta``: a dict-like view of a map's known info (forwarded to `MapInfo`) and the user's extras.

    Example::

        >>> from jacobiscope.maps import MapInfo, MetaView
        >>> info, extras = MapInfo(), {}
        >>> view = MetaView(info, extras)
        >>> view.update(layer=1, tag="x")
        >>> info.layer, extras, dict(view)
        (1, {'tag': 'x'}, {'layer': 1, 'tag': 'x'})
    """

    __slots__ = ("info", "extras")

    def __init__(self, info: MapInfo, extras: dict):
        self.info = info
        self.extras = extras

    def __getitem__(self, key):
        if key in _DEFAULTS:
            if not self.info.has(key):
                raise KeyError(key)
            return getattr(self.info, key)
        return self.extras[key]

    def __setitem__(self, key, value) -> None:
        if key in _DEFAULTS:
            self.info.set(key, value)
        else:
            self.extras[key] = value

    def __delitem__(self, key) -> None:
        if key in _DEFAULTS:
            if not self.info.has(key):
                raise KeyError(key)
            self.info.unset(key)
        else:
            del self.extras[key]

    def __iter__(self) -> Iterator:
        yield from self.info.present()
        yield from self.extras

    def __len__(self) -> int:
        return len(self.info.present()) + len(self.extras)

    def __contains__(self, key) -> bool:
        return self.info.has(key) if key in _DEFAULTS else key in self.extras

    def __eq__(self, other) -> bool:
        return isinstance(other, Mapping) and dict(self.items()) == dict(other.items())

    def copy(self) -> dict:
        """A plain dict of everything the view holds (as ``dict.copy`` gave)."""
        return dict(self.items())

    def __repr__(self) -> str:
        return repr(dict(self.items()))


def split_meta(meta: Mapping) -> tuple[MapInfo, dict]:
    """A mapping (an old ``meta`` dict) as ``(MapInfo of its known keys, dict of the rest)``."""
    info, extras = MapInfo(), {}
    for key, value in meta.items():
        if key in _DEFAULTS:
            info.set(key, value)
        else:
            extras[key] = value
    return info, extras


def info_of(looped_map) -> MapInfo:
    """The `MapInfo` of a map, or an empty one for an object that has none (a plain callable)."""
    info = getattr(looped_map, "info", None)
    return info if isinstance(info, MapInfo) else MapInfo()

