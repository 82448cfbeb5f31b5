"""The first report format (``format_version`` 1) and its upgrade: rows whose six original diagnostics were fields
of the row (``spectral_norm``, ``eigenvalues`` / ``eigen_loop`` / ``oscillation``, ``lyapunov``, ``clusters``,
``energy``, ``regime`` / ``evidence``) and whose other diagnostics sat in ``extra``.

Example::

    >>> from jacobiscope.diagnostics._legacy import upgrade_row
    >>> row = upgrade_row({"input_index": 0, "input_label": "x", "layer": 1, "mode": "block", "eta": None,
    ...     "loops": 1, "state_shape": [2], "state_norm": [1.0, None], "step_size": [0.5], "spectral_norm": [],
    ...     "eigenvalues": None, "eigen_loop": None, "oscillation": None, "lyapunov": None, "clusters": None,
    ...     "energy": [2.0, 1.0], "regime": "converging", "evidence": {}, "flags": [], "seconds": 0.1})
    >>> row["state_norm"], row["results"]
    ([1.0, nan], {'energy': {'values': [2.0, 1.0]}, 'regime': {'regime': 'converging', 'evidence': {}}})
"""
from __future__ import annotations

import math

from .._values import _nulls_to_nan, _plain

#: The diagnostics that were fields of a first-format row (``extra`` held the others).
LEGACY_DIAGNOSTICS = ("spectral_norm", "eigenvalues", "lyapunov", "clusters", "energy", "regime")
#: The first format's diagnostic fields.
LEGACY_FIELDS = ("spectral_norm", "eigenvalues", "eigen_loop", "oscillation", "lyapunov", "clusters", "energy",
                 "regime", "evidence")
#: The first format's constructor order (20 required fields, then the optional ones).
OLD_ORDER = ("input_index", "input_label", "layer", "mode", "eta", "loops", "state_shape", "state_norm", "step_size",
             "spectral_norm", "eigenvalues", "eigen_loop", "oscillation", "lyapunov", "clusters", "energy", "regime",
             "evidence", "flags", "seconds", "dtype", "outcome", "extra", "timings")
_OLD_OPTIONAL = ("dtype", "outcome", "extra", "timings")

# Where the first format promised floats: a null there was written for NaN (no "nonfinite" entry).
_FLOAT_LIST_FIELDS = ("state_norm", "step_size", "eigenvalues", "energy")
_FLOAT_DICT_KEYS = {
    "oscillation": ("spectral_radius", "complex_fraction", "max_imag", "max_rotation_angle", "mean_rotation_angle",
                    "outside_unit_circle_fraction"),
    "lyapunov": ("exponents", "stderr", "history", "kaplan_yorke"),
    "clusters": ("top_eigenvalue", "effective_clusters", "cluster_count"),
}


def results_from_legacy(values: dict) -> dict:
    """The ``results`` dict of a first-format row; the legacy fields are taken out of ``values``."""
    results = dict(values.pop("results", None) or {})
    samples = values.pop("spectral_norm", None)
    eigen = {key: values.pop(field, None) for key, field in (("loop", "eigen_loop"), ("values", "eigenvalues"),
                                                             ("oscillation", "oscillation"))}
    if samples is not None and samples != []:
        results["spectral_norm"] = {"samples": samples}
    if any(value is not None for value in eigen.values()):
        results["eigenvalues"] = eigen
    for name in ("lyapunov", "clusters"):
        value = values.pop(name, None)
        if value is not None:
            results[name] = value
    energy = values.pop("energy", None)
    if energy is not None:
        results["energy"] = {"values": energy}
    regime, evidence = values.pop("regime", None), values.pop("evidence", None)
    if regime is not None or evidence is not None:
        results["regime"] = {"regime": "unknown" if regime is None else regime,
                             "evidence": {} if evidence is None else evidence}
    extra = values.pop("extra", None)
    if extra is not None and not isinstance(extra, dict):
        raise ValueError(f"extra is {type(extra).__name__}, expected an object or null (the results of the other "
                         "diagnostics, by name)")
    for name, value in (extra or {}).items():
        results.setdefault(name, value)
    return results


def upgrade_row(data: dict) -> dict:
    """A row dict of either format, in the current one (a current row is returned as is)."""
    if "results" in data or not any(key in data for key in LEGACY_FIELDS + ("extra",)):
        return data
    missing = [name for name in OLD_ORDER if name not in data and name not in _OLD_OPTIONAL]
    if missing:
        raise ValueError(f"LayerResult.from_dict: missing field(s) {', '.join(missing)}; a row of format 1 needs "
                         f"all of {', '.join(n for n in OLD_ORDER if n not in _OLD_OPTIONAL)} (eta, eigenvalues, "
                         "eigen_loop, oscillation, lyapunov, clusters and energy may be null)")
    unknown = [key for key in data if key not in OLD_ORDER]
    if unknown:
        raise ValueError(f"LayerResult.from_dict: unknown field(s) {', '.join(map(repr, unknown))}; expected exactly "
                         f"{', '.join(OLD_ORDER)}. A file written by a newer jacobiscope needs that version to read it.")
    row = dict(data)
    for name in _FLOAT_LIST_FIELDS:
        if row.get(name) is not None:
            row[name] = _nulls_to_nan(row[name])
    if row.get("seconds") is None:
        row["seconds"] = math.nan
    for name, keys in _FLOAT_DICT_KEYS.items():
        if isinstance(row.get(name), dict):
            row[name] = {k: (_nulls_to_nan(v) if k in keys else v) for k, v in row[name].items()}
    if isinstance(row.get("spectral_norm"), list):
        row["spectral_norm"] = [{k: (_nulls_to_nan(v) if k in ("value", "tolerance") else v) for k, v in e.items()}
                                if isinstance(e, dict) else e for e in row["spectral_norm"]]
    row["results"] = results_from_legacy(row)
    return row


def _field(value, key, default=None):
    if value is None:
        return default
    if isinstance(value, dict):
        return value.get(key, default)
    return getattr(value, key, default)


def _plain_result(value):
    if value is None:
        return None
    try:
        return _plain(value.to_dict() if hasattr(value, "to_dict") else value, "result")
    except TypeError:
        return value


_GETTERS = {
    "spectral_norm": lambda r: _field(r.get("spectral_norm"), "samples", []),
    "eigenvalues": lambda r: _field(r.get("eigenvalues"), "values"),
    "eigen_loop": lambda r: _field(r.get("eigenvalues"), "loop"),
    "oscillation": lambda r: _field(r.get("eigenvalues"), "oscillation"),
    "lyapunov": lambda r: _plain_result(r.get("lyapunov")),
    "clusters": lambda r: _plain_result(r.get("clusters")),
    "energy": lambda r: _field(r.get("energy"), "values"),
    "regime": lambda r: _field(r.get("regime"), "regime", "unknown"),
    "evidence": lambda r: _field(r.get("regime"), "evidence", {}),
    "extra": lambda r: {name: _plain_result(value) for name, value in r.items()
                        if name not in LEGACY_DIAGNOSTICS} or None,
}


def legacy_view(name: str) -> property:
    """A property reading (and writing) the first format's field ``name`` through ``row.results``."""

    def read(row):
        return _GETTERS[name](row.results if isinstance(row.results, dict) else {})

    def write(row, value):
        from ._row import typed_result

        fields = {field: getattr(row, field) for field in LEGACY_FIELDS + ("extra",)}
        fields[name] = value
        row.results = {key: typed_result(key, item) for key, item in results_from_legacy(fields).items()}

    return property(read, write, doc=f"The first report format's ``{name}``, read through ``results``.")
