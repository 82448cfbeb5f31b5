"""The one registry of diagnostics that `measure`, `analyze`, `describe` and the report read: registration with
every check that can be made before a diagnostic runs, lookup, the run order with requirements, option checks.

Example::

    >>> from jacobiscope.diagnostics._registry import resolve
    >>> [d.name for d in resolve(["lyapunov"])]
    ['lyapunov', 'regime']
"""
from __future__ import annotations

import math

from .._validation import did_you_mean as _did_you_mean
from ..errors import ArgumentError
from ._base import MEASURE_ARGUMENTS, Diagnostic, DiagnosticDefinitionError
from ._option import Option, _is_real

__all__ = ["register_diagnostic", "unregister_diagnostic", "list_diagnostics", "get_diagnostic", "resolve",
           "check_options"]


_REGISTRY: dict[str, Diagnostic] = {}
_BUILTIN_NAMES: set = set()


def _check_definition(diagnostic: Diagnostic) -> None:
    """Everything about a diagnostic that can be known before it runs (the `register_diagnostic` checks)."""
    name = diagnostic.name
    kind = type(diagnostic).__name__
    if type(diagnostic).compute is Diagnostic.compute:
        raise DiagnosticDefinitionError(f"diagnostic {name!r} ({kind}) does not define compute — override "
                                        "compute(self, context) to return its result")
    for attribute in ("default", "always"):
        if not isinstance(getattr(diagnostic, attribute), bool):
            raise DiagnosticDefinitionError(f"diagnostic {name!r}: {attribute} must be True or False, got "
                                            f"{getattr(diagnostic, attribute)!r} — set {attribute} = True/False")
    requires = diagnostic.requires
    if isinstance(requires, str) or not isinstance(requires, (tuple, list)) or not all(
            isinstance(req, str) for req in requires):
        raise DiagnosticDefinitionError(f"diagnostic {name!r}: requires must be a tuple of diagnostic names, got "
                                        f"{requires!r} — write requires = ({requires!r},)" if isinstance(requires, str)
                                        else f"diagnostic {name!r}: requires must be a tuple of diagnostic names, got "
                                        f"{requires!r} — write e.g. requires = ('lyapunov',)")
    if name in requires:
        raise DiagnosticDefinitionError(f"diagnostic {name!r} requires itself — remove {name!r} from its requires "
                                        "(a diagnostic reads only the results of others)")
    unknown = [req for req in requires if req not in _REGISTRY]
    if unknown:
        raise DiagnosticDefinitionError(f"diagnostic {name!r} requires {unknown}, which are not registered — "
                                        f"register them first{_did_you_mean(unknown[0], _REGISTRY)}")
    if _cycle(name, requires):
        raise DiagnosticDefinitionError(f"diagnostic {name!r} requires {list(requires)}, which (through their own "
                                        f"requires) need {name!r} back — break the cycle")
    result_type = diagnostic.result_type
    from ._result import DiagnosticResult

    if result_type is not None and not (isinstance(result_type, type) and issubclass(result_type, DiagnosticResult)):
        raise DiagnosticDefinitionError(f"diagnostic {name!r}: result_type must be a DiagnosticResult dataclass or "
                                        f"None, got {result_type!r} — subclass jacobiscope.DiagnosticResult")
    options = diagnostic.options
    if not isinstance(options, dict) or not all(isinstance(key, str) and isinstance(spec, Option)
                                                 for key, spec in options.items()):
        raise DiagnosticDefinitionError(f"diagnostic {name!r}: options must be a dict of name -> "
                                        f"jacobiscope.diagnostics.Option, got {options!r} — declare e.g. "
                                        "options = {'window': Option('count', 4)}")
    _check_cost(diagnostic)
    for key, spec in options.items():
        for other in _REGISTRY.values():
            theirs = other.options.get(key)
            if other.name != name and theirs is not None and theirs.kind != spec.kind:
                raise DiagnosticDefinitionError(f"diagnostic {name!r} declares option {key!r} as {spec.kind}, but "
                                                f"{other.name!r} declares it as {theirs.kind} — rename the option")


_COST_KEYS = ("forward", "jvp", "vjp", "jvp_block")


def _check_cost(diagnostic: Diagnostic) -> None:
    """``cost`` on a small state with the declared defaults: what `describe` will price (run once here, so a cost
    that raises or returns junk is named now, not as a traceback from deep inside `describe`)."""
    name = diagnostic.name
    defaults = {"k": 4, "eigen_k": 4, "eigen_restarts": 4, "spectral_samples": 3, "seed": 0}
    defaults.update({key: spec.default for key, spec in diagnostic.options.items() if spec.default is not None})
    try:
        cost = diagnostic.cost(64, 8, defaults)
    except Exception as error:
        raise DiagnosticDefinitionError(f"diagnostic {name!r}: cost(state_size=64, loops=8, options) raised "
                                        f"{type(error).__name__}: {error} — make cost return a number of block "
                                        "forwards (or a dict of operation counts) for any state size and loops"
                                        ) from error
    counts = cost if isinstance(cost, dict) else {"forward": cost}
    bad = {key: value for key, value in counts.items()
           if key not in _COST_KEYS or not _is_real(value) or not math.isfinite(value) or value < 0}
    if bad:
        raise DiagnosticDefinitionError(f"diagnostic {name!r}: cost returned {cost!r} — return a finite number >= 0 "
                                        f"of block forwards, or a dict with keys among {', '.join(_COST_KEYS)} and "
                                        "finite counts >= 0")


def _cycle(name: str, requires) -> bool:
    seen, todo = set(), list(requires)
    while todo:
        current = todo.pop()
        if current == name:
            return True
        if current in seen or current not in _REGISTRY:
            continue
        seen.add(current)
        todo.extend(_REGISTRY[current].requires)
    return False


def register_diagnostic(diagnostic: Diagnostic, *, replace: bool = False) -> Diagnostic:
    """Add ``diagnostic`` to the registry that `measure`, `analyze`, `describe` and reports read; return it.

    Registering a name twice is an error unless ``replace=True`` (built-ins can be replaced that way too, never by
    accident: they are registered before any user registration, in every process). Everything that can be known
    before the diagnostic runs is checked here (`DiagnosticDefinitionError`): ``compute`` defined, ``requires``
    naming registered diagnostics (not itself, no cycle), ``options`` declared as `Option`.
    """
    if not isinstance(diagnostic, Diagnostic):
        hint = " (pass an instance: Diagnostic subclass called with ())" if isinstance(diagnostic, type) else ""
        raise DiagnosticDefinitionError(f"register_diagnostic takes a jacobiscope.Diagnostic instance, got "
                                        f"{type(diagnostic).__name__}{hint} — subclass jacobiscope.Diagnostic and "
                                        "pass an instance")
    if not isinstance(replace, bool):
        raise ArgumentError(f"replace must be True or False, got {replace!r} — pass replace=True to replace")
    list_diagnostics()  # the built-ins first: a user's "lyapunov" must clash with them, not be overwritten later
    name = diagnostic.name
    if not isinstance(name, str) or not name.isidentifier():
        raise ArgumentError(f"a diagnostic's name must be an identifier, got {name!r} — set the class attribute name")
    if name in _REGISTRY and not replace:
        builtin = " built-in" if name in _BUILTIN_NAMES else ""
        raise ArgumentError(f"a{builtin} diagnostic named {name!r} is already registered — choose another name, or "
                            "pass replace=True to replace it")
    _check_definition(diagnostic)
    _REGISTRY[name] = diagnostic
    return diagnostic


def _register_builtin(diagnostic: Diagnostic) -> None:
    """The built-ins' own registration (by `_builtin`, on first use of the registry)."""
    _REGISTRY[diagnostic.name] = diagnostic
    _BUILTIN_NAMES.add(diagnostic.name)


def unregister_diagnostic(name: str) -> Diagnostic:
    """Remove the diagnostic ``name`` from the registry (and return it); its results in old reports still load."""
    list_diagnostics()
    if not isinstance(name, str) or name not in _REGISTRY:
        raise ArgumentError(f"no diagnostic named {name!r} is registered{_did_you_mean(name, _REGISTRY)} — "
                            f"registered: {', '.join(_REGISTRY)}")
    dependants = [other.name for other in _REGISTRY.values() if name in other.requires and other.name != name]
    if dependants:
        raise ArgumentError(f"{dependants} require {name!r} — unregister them first")
    return _REGISTRY.pop(name)


def list_diagnostics() -> list[str]:
    """The registered diagnostics' names, in the order they run."""
    from . import _builtin  # noqa: F401 - the built-ins register themselves on first use

    return list(_REGISTRY)


def get_diagnostic(name: str) -> Diagnostic:
    """The registered diagnostic called ``name``; an error listing the known names otherwise."""
    names = list_diagnostics()
    if not isinstance(name, str) or name not in _REGISTRY:
        raise ArgumentError(f"unknown diagnostic {name!r}{_did_you_mean(name, names)} — choose from "
                            f"{', '.join(names)}")
    return _REGISTRY[name]


def resolve(diagnostics) -> list[Diagnostic]:
    """The diagnostics to run for a ``diagnostics=`` argument (None: every default one), with what they require,
    in registry order."""
    names = list_diagnostics()
    if diagnostics is None:
        wanted = [n for n in names if _REGISTRY[n].default]
    else:
        wanted = [diagnostics] if isinstance(diagnostics, str) else list(diagnostics)
        unknown = [n for n in wanted if not isinstance(n, str) or n not in _REGISTRY]
        if unknown:
            hint = _did_you_mean(unknown[0], names)
            raise ArgumentError(f"Unknown diagnostics {sorted(map(str, unknown))}{hint}; choose from {names}.")
    chosen = set()

    def add(name, path=()):
        if name in chosen:
            return
        if name in path:  # a cycle made by replacing a diagnostic after its dependants were registered
            raise DiagnosticDefinitionError(f"diagnostics {list(path)} require each other in a cycle — re-register "
                                            f"{name!r} without the cycle")
        if name not in _REGISTRY:
            raise DiagnosticDefinitionError(f"{path[-1]!r} requires {name!r}, which is no longer registered — "
                                            f"register {name!r} again or unregister {path[-1]!r}")
        for requirement in _REGISTRY[name].requires:
            add(requirement, path + (name,))
        chosen.add(name)

    for name in wanted + [n for n in names if _REGISTRY[n].always]:
        add(name)
    return [_REGISTRY[n] for n in names if n in chosen]


def check_options(chosen: list, options: dict | None) -> dict:
    """The ``options=`` of `measure` checked against what the ``chosen`` diagnostics declare, before any loop runs:
    known keys only ("did you mean"), each value of its declared kind and within its budget. Returns the options
    converted to plain values (declared defaults are left to each diagnostic).

    Example::

        >>> from jacobiscope.diagnostics._base import check_options, resolve
        >>> check_options(resolve(["fixed_points"]), {"basin_starts": 16})
        {'basin_starts': 16}
        >>> check_options(resolve(["fixed_points"]), {"basin_start": 16})
        Traceback (most recent call last):
        ...
        jacobiscope.errors.ArgumentError: unknown option 'basin_start' (did you mean 'basin_starts'?) — options of the chosen diagnostics: basin_noise, basin_rtol, basin_starts.
    """
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise ArgumentError(f"options must be a dict of diagnostic settings, got {type(options).__name__} — pass e.g. "
                            "options={'basin_starts': 16}.")
    declared = {}
    for diagnostic in chosen:
        for key, spec in diagnostic.options.items():
            declared.setdefault(key, (spec, diagnostic.name))
    everywhere = {key: other.name for other in _REGISTRY.values() for key in other.options}
    checked = {}
    for key, value in options.items():
        if not isinstance(key, str):
            raise ArgumentError(f"options has the key {key!r} ({type(key).__name__}); option names are str — pass "
                                "e.g. options={'basin_starts': 16}.")
        if key in MEASURE_ARGUMENTS:
            raise ArgumentError(f"options[{key!r}] would be overridden by measure's own argument {key} — pass "
                                f"{key}=... to measure instead of in options.")
        if key not in declared:
            owner = everywhere.get(key)
            if owner is not None:
                raise ArgumentError(f"option {key!r} belongs to the diagnostic {owner!r}, which this call does not run "
                                    f"— add {owner!r} to diagnostics=, or drop the option.")
            known = sorted(declared) or ["(none: the chosen diagnostics take no options)"]
            raise ArgumentError(f"unknown option {key!r}{_did_you_mean(key, list(declared) + list(everywhere))} — "
                                f"options of the chosen diagnostics: {', '.join(known)}.")
        spec, owner = declared[key]
        checked[key] = spec.check(value, key, owner)
    return checked
