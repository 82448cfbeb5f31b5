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
from collections.abc import Iterator, Mapping
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


class MetaView(dict):
    """``LoopedMap.meta``: a dict of a map's known info (forwarded to `MapInfo`) and the user's extras.

    Example::

        >>> from jacobiscope.maps import MapInfo, MetaView
        >>> info, extras = MapInfo(), {}
        >>> view = MetaView(info, extras)
        >>> view.update(layer=1, tag="x")
        >>> info.layer, extras, dict(view)
        (1, {'tag': 'x'}, {'layer': 1, 'tag': 'x'})

    A real ``dict`` (``isinstance(meta, dict)`` holds, ``json.dumps`` and ``{**meta}`` work, as for the old free-form
    dict): reads answer from ``info`` and the extras as they are now; writes go to them, and the dict's own copy
    (what C-level readers see) follows.
    """

    __slots__ = ("info", "extras")

    def __init__(self, info: MapInfo, extras: dict):
        super().__init__()
        self.info = info
        self.extras = extras
        dict.update(self, self._live())

    def _live(self) -> dict:
        return {**self.info.present(), **self.extras}

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
        dict.__setitem__(self, key, value)

    def __delitem__(self, key) -> None:
        if key in _DEFAULTS:
            if not self.info.has(key):
                raise KeyError(key)
            self.info.unset(key)
        else:
            del self.extras[key]
        dict.pop(self, key, None)

    def __contains__(self, key) -> bool:
        return self.info.has(key) if key in _DEFAULTS else key in self.extras

    def __iter__(self) -> Iterator:
        return iter(self._live())

    def __len__(self) -> int:
        return len(self._live())

    def __eq__(self, other) -> bool:
        return isinstance(other, Mapping) and self._live() == dict(other.items())

    def __ne__(self, other) -> bool:
        return not self == other

    def __repr__(self) -> str:
        return repr(self._live())

    def __or__(self, other):
        return {**self._live(), **other}

    def __ror__(self, other):
        return {**other, **self._live()}

    def __ior__(self, other):
        self.update(other)
        return self

    def __reduce__(self):  # a copy or pickle of the view is a plain dict of what it holds
        return (dict, (self._live(),))

    def keys(self):
        return self._live().keys()

    def values(self):
        return self._live().values()

    def items(self):
        return self._live().items()

    def get(self, key, default=None):
        return self[key] if key in self else default

    def setdefault(self, key, default=None):
        if key not in self:
            self[key] = default
        return self[key]

    def update(self, *args, **kwargs) -> None:
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def pop(self, key, *default):
        if key in self:
            value = self[key]
            del self[key]
            return value
        if default:
            return default[0]
        raise KeyError(key)

    def popitem(self):
        if not len(self):
            raise KeyError("popitem(): meta is empty")
        key = list(self._live())[-1]
        return key, self.pop(key)

    def clear(self) -> None:
        for key in list(self._live()):
            del self[key]

    def copy(self) -> dict:
        """A plain dict of everything the view holds (as ``dict.copy`` gave)."""
        return self._live()


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

