"""The diagnostics and their options, for ``jacobiscope analyze --help`` and ``--option``: read from the registry
when it is loaded, else from the built-in diagnostics' source (no torch import, so ``--help`` stays instant; a new
built-in appears by itself).

Example::

    >>> from jacobiscope.cli._catalogue import diagnostic_catalogue
    >>> [entry.name for entry in diagnostic_catalogue()][:3]
    ['spectral_norm', 'eigenvalues', 'lyapunov']
"""
from __future__ import annotations

import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["CatalogueEntry", "diagnostic_catalogue", "option_names", "describe_diagnostics"]

_DIAGNOSTICS = Path(__file__).resolve().parent.parent / "diagnostics"

#: `analyze`'s own sizes that ``--option`` sets too (kept in step with `jacobiscope._analyze_options.ANALYZE_SETTINGS`
#: by the tests; repeated here so that ``--help`` imports no torch).
ANALYZE_OPTIONS = {"eigen_k": "eigenvalues of largest modulus summarized (Arnoldi)",
                   "eigen_restarts": "Arnoldi restarts before the eigenvalues are flagged inaccurate",
                   "spectral_samples": "loops at which ||J||_2 is measured (evenly spaced)"}


@dataclass
class CatalogueEntry:
    """One diagnostic: its name, a one-line description, whether it runs by default, its options (name -> doc)."""

    name: str
    description: str
    default: bool = True
    always: bool = False
    options: dict = field(default_factory=dict)


def diagnostic_catalogue() -> list[CatalogueEntry]:
    """Every registered diagnostic, in the order they run."""
    registry = sys.modules.get("jacobiscope.diagnostics._registry")
    if registry is not None:
        return [_from_instance(registry._REGISTRY[name]) for name in registry.list_diagnostics()]
    return _from_source()


def option_names() -> dict:
    """Every name ``--option`` takes: ``{name: (owner, doc)}`` (``owner`` "analyze" for analyze's own sizes)."""
    names = {name: ("analyze", doc) for name, doc in ANALYZE_OPTIONS.items()}
    for entry in diagnostic_catalogue():
        for name, doc in entry.options.items():
            names.setdefault(name, (entry.name, doc))
    return names


def describe_diagnostics(width: int = 100) -> str:
    """The help text's list: one line per diagnostic, then the ``--option`` names."""
    lines = ["diagnostics (--diagnostics NAME,...; * = run by default, the verdict always runs):"]
    for entry in diagnostic_catalogue():
        mark = "*" if entry.default or entry.always else " "
        lines.append(_cut(f"  {mark} {entry.name:<14} {entry.description}", width))
    lines.append("options (--option NAME=VALUE, repeatable):")
    for name, (owner, doc) in option_names().items():
        lines.append(_cut(f"    {name:<20} {owner}: {doc}", width))
    return "\n".join(lines)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3].rstrip() + "..."


def _one_line(text: str) -> str:
    """The first sentence of a description, without reST markup."""
    paragraph = " ".join((text or "").strip().split("\n\n")[0].split()).replace("``", "").replace("`", "")
    end = paragraph.find(". ")
    return paragraph[: end + 1] if end >= 0 else paragraph


def _from_instance(diagnostic) -> CatalogueEntry:
    description = getattr(diagnostic, "description", None) or type(diagnostic).__doc__ or ""
    options = {name: spec.doc or spec.kind for name, spec in diagnostic.options.items()}
    return CatalogueEntry(diagnostic.name, _one_line(description), bool(diagnostic.default), bool(diagnostic.always),
                          options)


def _from_source() -> list[CatalogueEntry]:
    """The built-ins as `_builtin.BUILTIN` lists them, each read from its class's source."""
    classes = {}
    for path in sorted(_DIAGNOSTICS.glob("_*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef):
                classes[node.name] = node
    order = _builtin_order()
    return [_from_class(classes[name]) for name in order if name in classes]


def _builtin_order() -> list[str]:
    tree = ast.parse((_DIAGNOSTICS / "_builtin.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "BUILTIN" for t in node.targets):
            return [call.func.id for call in node.value.elts if isinstance(call, ast.Call)]
    return []


def _from_class(node: ast.ClassDef) -> CatalogueEntry:
    values, options = {}, {}
    for statement in node.body:
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
            target = getattr(statement.targets[0], "id", "")
            if target == "options" and isinstance(statement.value, ast.Dict):
                options = _options(statement.value)
            elif isinstance(statement.value, ast.Constant):
                values[target] = statement.value.value
    description = values.get("description") or ast.get_docstring(node) or ""
    return CatalogueEntry(values.get("name", node.name), _one_line(description), values.get("default", True) is True,
                          values.get("always", False) is True, options)


def _options(node: ast.Dict) -> dict:
    options = {}
    for key, value in zip(node.keys, node.values):
        if not isinstance(key, ast.Constant):
            continue
        doc = ""
        if isinstance(value, ast.Call):
            keywords = {keyword.arg: keyword.value for keyword in value.keywords}
            if isinstance(keywords.get("doc"), ast.Constant):
                doc = keywords["doc"].value
            elif value.args and isinstance(value.args[0], ast.Constant):
                doc = value.args[0].value
        options[key.value] = doc
    return options
