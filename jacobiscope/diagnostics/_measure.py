"""`measure(looped_map, x0)`: every registered diagnostic on one trajectory of one map, one typed result."""
from __future__ import annotations

import math
import operator
import os
import time
import warnings

import torch

from ..errors import (
    ArgumentError, ConvergenceWarning, JacobiscopeError, MemoryBudgetError, NonFiniteWarning, SlowDerivativesWarning,
)
from ..linalg._reverse_products import REVERSE, uses_reverse_products
from .._values import _plain
from ._base import DiagnosticError, MeasureContext, check_options, resolve, token_rows
from ._row import LayerResult
from .._validation import floating_dtype, nonnegative_int, positive_int, seed_int, within_budget

__all__ = ["measure"]


class _OneTrajectory(torch.nn.Module):
    """``X [1, *state] -> F(X[0])[None]`` for a single-trajectory module map. A module, not a closure: the map keeps
    its weights as parameters, so recorded product graphs take them as inputs and are shared by every call on a
    module of this structure (a closure's graph would bake them in and serve one call)."""

    def __init__(self, inner: torch.nn.Module, power: int):
        super().__init__()
        self.inner, self.power = inner, power
        self.train(inner.training)

    @classmethod
    def of(cls, looped) -> "_OneTrajectory":
        return cls(looped.module, looped._power)

    def extra_repr(self) -> str:
        return f"power={self.power}"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        state = x[0]
        for _ in range(self.power):
            state = self.inner(state)
        return state.unsqueeze(0)


def _one_trajectory(looped, x0, dtype=None):
    """The map (a copy in ``dtype`` when given) with exactly one leading batch dimension of size 1, and its initial
    state ``[1, *state]``."""
    from ..maps import LoopedMap, as_looped_map

    looped = as_looped_map(looped)
    if dtype is not None:
        # Cast before the batch wrapper below: a cast of the wrapper (a plain callable) would leave the map's module
        # in its own dtype, and a float32 model's own loop failed on float64 states ("mat1 and mat2 ... Double").
        looped = looped.to(dtype=dtype)
        x0 = x0.to(dtype) if isinstance(x0, torch.Tensor) and x0.is_floating_point() else x0
    x0 = looped.prepare_state(x0)
    if looped.batch_dims == 1:
        if x0.shape[0] != 1:
            raise ArgumentError(f"measure takes one trajectory, got a batch of {x0.shape[0]} — pass x0[i:i+1] for "
                                "trajectory i (analyze runs several)")
        return looped, x0
    if looped.batch_dims > 1:
        raise ArgumentError(f"measure takes maps with at most one batch dimension, got batch_dims={looped.batch_dims} "
                            "— reshape the batch into one dimension")
    # A single-trajectory map: give it a batch dimension of size 1, so every diagnostic sees one convention. One
    # checked step first, on the state as the user gave it: a step that fails, or returns a tuple, another shape or
    # dtype, is named in the user's shapes ((3,), not the wrapper's (1, 3)).
    looped.checked_step(x0)
    drive = looped.drive_function
    with warnings.catch_warnings():  # the user's map warned already (dropout / batch norm in training mode)
        warnings.simplefilter("ignore", RuntimeWarning)
        batched = LoopedMap(_OneTrajectory.of(looped) if looped.module is not None else (
                                lambda x: looped.step(x[0]).unsqueeze(0)), batch_dims=1,
                            drive=(lambda x: drive(x[0]).unsqueeze(0)) if drive is not None else None,
                            x0=x0.unsqueeze(0), name=looped.name)
    if looped.module is not None:  # the map's own tensors (a detached or cast copy), under the wrapper's names
        batched.params = {f"inner.{name}": tensor for name, tensor in looped.params.items()}
    batched.info, batched._extras = looped.info.copy(), dict(looped._extras)
    batched.info.unbatched_original = True  # readouts take the original map's own layout
    return batched, x0.unsqueeze(0)


def measure(looped_map, x0=None, *, loops: int = 32, diagnostics=None, k: int = 4, eigen_k: int = 4,
            eigen_restarts: int = 4, spectral_samples: int = 3, seed: int = 0, dtype: torch.dtype | None = None,
            label: str | None = None, input_index: int = 0, mode: str | None = None, options: dict | None = None):
    """Run the registered diagnostics on one trajectory of ``looped_map`` from ``x0``; return a `LayerResult`.

    Example::

        >>> import torch, jacobiscope
        >>> row = jacobiscope.measure(lambda x: torch.tanh(0.5 * x) + 1, torch.ones(3, dtype=torch.float64), loops=20)
        >>> row.regime, round(row.lyapunov["exponents"][0], 2)   # log F'(x*) = -1.334 at the fixed point
        ('converging', -1.3)

    Arguments:
        looped_map: a `LoopedMap` (one trajectory: no batch dimension, or one of size 1) or any callable
            ``state -> state``.
        x0: the initial state (default: the map's ``x0``).
        loops: how many times the map is applied.
        diagnostics: names of registered diagnostics (`list_diagnostics`; default: every default one, with what
            they require). The regime verdict always runs.
        k: Lyapunov exponents; eigen_k, eigen_restarts: eigenvalues and Arnoldi restarts; spectral_samples: loops
            at which ``||J||_2`` is measured; seed: of every random start vector.
        dtype: compute in this dtype (a copy of the map; float64 for reference-quality numbers).
        label, input_index, mode: how the row is named in reports (a label that is not a str is stored as its
            text, ``str(label)``; ``mode`` is one of ``"block"``, ``"attention"``, ``"loop"``).
        options: settings of diagnostics that take their own (``{"basin_starts": 16, "basin_noise": 0.05}`` for
            ``fixed_points``; ``{"halting_thresholds": [...]}`` for ``halting``), read from ``context.options``.
            Each diagnostic declares the options it takes (`Diagnostic.options`); an unknown key, a value of the
            wrong kind or over its budget is refused before any loop runs.

    Returns:
        A `jacobiscope.LayerResult`: state norms and step sizes along the loop, every diagnostic's typed result in
        ``row.results[name]`` (the regime verdict with its evidence among them; a diagnostic that had nothing to
        measure, e.g. energy on a map without a drive, is absent), and flags (a trajectory that went NaN/Inf is flagged with its loop; the finite part is still measured; a
        result holding NaN/Inf is flagged with where; a size clamped to the state, e.g. ``k`` larger than it, is
        said).

    Raises:
        ArgumentError: a bad argument or option, or a size over its budget (before any loop runs).
        MemoryBudgetError: the trajectory and tangents would not fit in memory.
        DiagnosticError: a registered (user) diagnostic raised, returned what a report cannot hold, or modified
            the trajectory — naming it and what it returned.
    """
    options = _check_arguments(loops, diagnostics, k, eigen_k, eigen_restarts, spectral_samples, seed, dtype, options,
                               label, input_index, mode)
    input_index = operator.index(input_index)  # a numpy int is stored as a plain int
    chosen = resolve(diagnostics)
    options = check_options(chosen, options)
    started = time.perf_counter()
    looped, x0 = _one_trajectory(looped_map, x0, dtype)
    layer, eta = _row_identity(looped)
    settings = dict(options, k=k, eigen_k=eigen_k, eigen_restarts=eigen_restarts, spectral_samples=spectral_samples,
                    seed=seed)
    clamps = _check_budgets(chosen, x0, loops, settings)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", NonFiniteWarning)
        warnings.simplefilter("always", ConvergenceWarning)
        context = _context(looped, x0, loops, settings)
        context.flags.extend(clamps)
        timings = {}
        for diagnostic in chosen:
            begun = time.perf_counter()
            context.results[diagnostic.name] = _run(diagnostic, context)
            timings[diagnostic.name] = time.perf_counter() - begun
    for warning in caught:
        if issubclass(warning.category, ConvergenceWarning):
            # the first sentence ("tol=1.0e-03" holds a dot that is not a sentence end)
            context.flags.append(f"not converged: {str(warning.message).split('. ')[0]}")
        elif issubclass(warning.category, SlowDerivativesWarning):
            warnings.warn(warning.message, SlowDerivativesWarning, stacklevel=2)
    if uses_reverse_products(looped) and hasattr(looped_map, "info"):
        looped_map.info.derivatives = REVERSE  # the caller's map (measured through a copy) learns it too
    if label is None or (isinstance(label, str) and not label):
        label = looped.name
    return LayerResult(
        input_index=input_index, input_label=label if isinstance(label, str) else str(label), layer=layer,
        mode=mode or looped.info.mode or "loop", eta=eta, loops=loops,
        state_shape=list(context.states.shape[1:]), dtype=str(context.states.dtype).replace("torch.", ""),
        state_norm=context.state_norm, step_size=context.step_size,
        results={diagnostic.name: context.results[diagnostic.name] for diagnostic in chosen
                 if context.results[diagnostic.name] is not None},
        flags=context.flags, seconds=time.perf_counter() - started, timings=timings)


#: measure's own sizes: their defaults (a clamp of a value the caller chose is said on the row). Their budgets are the
#: library's shared ones (`jacobiscope._validation.BUDGETS`, raised by ``JACOBISCOPE_MAX_<NAME>``).
MEASURE_DEFAULTS = {"loops": 32, "k": 4, "eigen_k": 4, "eigen_restarts": 4, "spectral_samples": 3}

_MODES = ("block", "attention", "loop")

# The built-ins whose NaN/Inf the regime verdict already flags ("Jacobian NaN/Inf at loop t", "NaN/Inf at loop t").
_FLAGGED_BY_REGIME = ("spectral_norm", "eigenvalues", "lyapunov", "regime")


def _check_arguments(loops, diagnostics, k, eigen_k, eigen_restarts, spectral_samples, seed, dtype, options, label,
                     input_index, mode) -> dict | None:
    """Every argument of `measure`, named as measure knows it, before any loop runs (a bad ``eigen_k`` used to
    surface as "k must be ..." from the eigen solver, spectral_samples=0 as an empty list)."""
    positive_int(loops, "loops")
    if diagnostics is not None:
        names = [diagnostics] if isinstance(diagnostics, str) else diagnostics
        if not isinstance(names, (list, tuple)) or not all(isinstance(name, str) for name in names):
            raise ArgumentError(f"diagnostics must be None, a name or a list of names, got {diagnostics!r} — pass "
                                "e.g. diagnostics=['spectral_norm', 'lyapunov'] (jacobiscope.list_diagnostics()).")
        if not names:
            raise ArgumentError("diagnostics=[] selects nothing to measure — pass None for the defaults, names from "
                                "jacobiscope.list_diagnostics(), or ['regime'] for state norms and the verdict only.")
    for value, name in ((k, "k"), (eigen_k, "eigen_k"), (spectral_samples, "spectral_samples")):
        positive_int(value, name)
    nonnegative_int(eigen_restarts, "eigen_restarts")
    # the budgets, before any loop runs (loops=10**9 would run for hours, spectral_samples=10**9 never return)
    within_budget(loops, "loops", unit="loops")
    within_budget(k, "k", unit="tangent vectors")
    within_budget(eigen_k, "eigen_k", unit="eigenvalues")
    within_budget(spectral_samples, "spectral_samples", unit="Lanczos runs")
    if eigen_restarts:
        within_budget(eigen_restarts, "eigen_restarts", "iterations", unit="restarts")
    seed_int(seed)
    if not -(2**63) <= operator.index(seed) < 2**64:
        raise ArgumentError(f"seed={seed} is outside the range torch's generators take (-2**63 .. 2**64 - 1) — pass a "
                            "smaller int such as seed=0")
    floating_dtype(dtype, "dtype")
    if options is not None and not isinstance(options, dict):
        raise ArgumentError(f"options must be a dict of diagnostic settings, got {type(options).__name__} — pass e.g. "
                            "options={'basin_starts': 16}.")
    if mode is not None and (not isinstance(mode, str) or mode not in _MODES):
        raise ArgumentError(f"mode must be None or one of {', '.join(map(repr, _MODES))}, got {mode!r} — pass e.g. "
                            "mode='loop' (reports read only these)")
    if isinstance(input_index, bool) or not isinstance(input_index, int) and not hasattr(input_index, "__index__"):
        raise ArgumentError(f"input_index must be an int >= 0, got {input_index!r} — pass e.g. input_index=0")
    if int(input_index) < 0:
        raise ArgumentError(f"input_index must be an int >= 0, got {input_index!r} — pass e.g. input_index=0")
    if label is not None and not isinstance(label, str) and len(str(label)) > 10_000:
        raise ArgumentError(f"label's text is {len(str(label)):,} characters — pass a short str label")
    return options


def _row_identity(looped) -> tuple[int, float | None]:
    """The row's layer and eta from the map's metadata, checked now (a report with a str layer would be written and
    then refused by Report.from_json)."""
    layer, eta = looped.info.layer, looped.info.eta
    layer = 0 if layer is None else layer
    if isinstance(layer, bool) or not isinstance(layer, int):
        try:
            layer = operator.index(layer)
        except TypeError:
            raise ArgumentError(f"the map's info.layer is {layer!r} ({type(layer).__name__}), expected an int — "
                                "set looped.info.layer to the block index, or delete it") from None
    if eta is not None and (isinstance(eta, bool) or not isinstance(eta, (int, float))):
        try:
            eta = float(eta)
        except (TypeError, ValueError):
            raise ArgumentError(f"the map's info.eta is {eta!r} ({type(eta).__name__}), expected a number or None "
                                "— set looped.info.eta to the step size, or delete it") from None
    return int(layer), eta


def _check_budgets(chosen, x0, loops: int, settings: dict) -> list[str]:
    """Memory and work budgets before any loop runs; returns the clamps to say on the row."""
    state_size = int(x0[0].numel())
    names = {diagnostic.name for diagnostic in chosen}
    k = min(settings["k"], state_size) if "lyapunov" in names else 0
    eigen = min(settings["eigen_k"], state_size) if "eigenvalues" in names else 0
    basis = max(2 * eigen + 1, eigen + 20) if eigen else 0
    # every state of the trajectory, the k tangents (and their QR), the Arnoldi basis
    needed = ((loops + 1) + 3 * k + basis) * state_size * x0.element_size()
    budget = _memory_budget(x0)
    if budget is not None and needed > budget:
        raise MemoryBudgetError(
            f"measure would hold {needed / 1e9:.3g} GB ({loops + 1} states, {k} tangents and {basis} Krylov vectors "
            f"of {state_size:,} values), more than the {budget / 1e9:.3g} GB of memory on {x0.device.type} — lower "
            "loops, k or eigen_k", needed, budget)
    for diagnostic in chosen:
        diagnostic.check_budget(state_size, loops, settings)
    clamps = []
    for name, owner in (("k", "lyapunov"), ("eigen_k", "eigenvalues")):
        value = settings[name]
        if owner in names and value > state_size and value != MEASURE_DEFAULTS[name]:
            clamps.append(f"{name}={value} clamped to {state_size} (the state has {state_size} entries)")
    samples = settings["spectral_samples"]
    if "spectral_norm" in names and samples > loops + 1 and samples != MEASURE_DEFAULTS["spectral_samples"]:
        clamps.append(f"spectral_samples={samples} clamped to {loops + 1} (loops + 1 distinct loops)")
    return clamps


def _memory_budget(x0) -> int | None:
    try:
        if x0.device.type == "cuda":
            return int(torch.cuda.mem_get_info(x0.device)[0])
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError, RuntimeError):  # pragma: no cover - unknown platform: no check
        return None


def _run(diagnostic, context: MeasureContext):
    """One diagnostic's result. A user's (not built-in) diagnostic is held to the protocol: what it raises, returns
    or does to the trajectory is named as its own (`DiagnosticError`); NaN/Inf in any result is flagged on the row."""
    from ._builtin import BUILTIN

    name = diagnostic.name
    if any(diagnostic is builtin for builtin in BUILTIN):
        before = len(context.flags)
        result = diagnostic.compute(context)
        # a built-in that said why its result holds NaN (its own flag, "<name>: ...") is not flagged again with a
        # generic cause that may be the wrong one ("compute in float64")
        explained = any(flag.startswith(f"{name}:") for flag in context.flags[before:])
        if name not in _FLAGGED_BY_REGIME and not explained:
            _flag_nonfinite(name, result, context)
        return result
    version, flags = context.states._version, len(context.flags)
    try:
        result = diagnostic.compute(context)
    except JacobiscopeError as error:
        if isinstance(error, (ArgumentError, MemoryBudgetError)):
            raise  # the user's diagnostic checked its own options: its message stands
        raise DiagnosticError(f"diagnostic {name!r} ({type(diagnostic).__name__}.compute) failed: "
                              f"{type(error).__name__}: {error} — fix the diagnostic, or leave it out of "
                              "diagnostics=") from error
    except Exception as error:
        raise DiagnosticError(f"diagnostic {name!r} ({type(diagnostic).__name__}.compute) raised "
                              f"{type(error).__name__}: {error} — fix its compute, or leave it out of diagnostics="
                              ) from error
    if context.states._version != version:
        raise DiagnosticError(f"diagnostic {name!r} modified context.states in place — the diagnostics after it would "
                              "read a changed trajectory; compute on a copy (context.states.clone())")
    bad = [flag for flag in context.flags[flags:] if not isinstance(flag, str)]
    if bad:
        raise DiagnosticError(f"diagnostic {name!r} added the flag {bad[0]!r} ({type(bad[0]).__name__}) — flags are "
                              "sentences: append a str")
    try:
        plain = result.to_dict() if hasattr(result, "to_dict") else _plain(result, f"diagnostic {name!r} result")
    except (TypeError, ValueError) as error:
        raise DiagnosticError(f"diagnostic {name!r} returned {_shown(result)} ({type(result).__name__}), which a "
                              f"report cannot hold ({error}) — return plain values: numbers, str, bool, None, "
                              "lists and dicts with str keys") from None
    _flag_nonfinite(name, plain, context)
    return result if hasattr(result, "to_dict") else plain


def _shown(value) -> str:
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - e.g. an int too long to print: say what it is instead
        return f"<{type(value).__name__} too long to print>"
    return text if len(text) <= 60 else text[:57] + "..."


def _flag_nonfinite(name: str, result, context: MeasureContext) -> None:
    """A NaN/Inf anywhere in ``result`` is said on the row with where it sits (never passed on as a plain number)."""
    if result is None:
        return
    plain = result.to_dict() if hasattr(result, "to_dict") else result
    where = []

    def walk(value, path):
        if len(where) > 3:
            return
        if isinstance(value, float) and not math.isfinite(value):
            where.append(path or "the result")
        elif isinstance(value, dict):
            for key, item in value.items():
                walk(item, f"{path}.{key}" if path else str(key))
        elif isinstance(value, (list, tuple)):
            for index, item in enumerate(value):
                walk(item, f"{path}[{index}]")
        elif hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
            walk(value.tolist(), path)

    walk(plain, "")
    if where:
        shown = ", ".join(where[:3]) + (", ..." if len(where) > 3 else "")
        context.flags.append(f"{name}: NaN/Inf in its result ({shown}) — those entries are not measurements; see the "
                             "other flags, or compute in float64")


def _context(looped, x0, loops: int, options: dict) -> MeasureContext:
    states = looped.trajectory(x0, loops, on_nonfinite="ignore")[:, 0]  # [loops + 1, *state]
    finite = torch.isfinite(states.reshape(loops + 1, -1)).all(1)
    nonfinite_loop = int((~finite).nonzero()[0]) if not bool(finite.all()) else -1
    flags = [f"NaN/Inf at loop {nonfinite_loop}"] if nonfinite_loop >= 0 else []
    # RMS per token, the token axes read as every diagnostic reads them: a model's own loop keeps its batch axis of
    # one in the state ([1, T, H]), whose first axis is not the tokens (the norms were sqrt(T) too large there).
    tokens = token_rows(states[:1]).shape[1]
    flat = states.reshape(loops + 1, -1)
    frobenius = flat.norm(dim=1)
    return MeasureContext(
        looped=looped, x0=x0, states=states, loops=loops,
        last_finite=loops if nonfinite_loop < 0 else nonfinite_loop - 1, nonfinite_loop=nonfinite_loop,
        state_norm=(frobenius / math.sqrt(tokens)).tolist(),
        step_size=((flat[1:] - flat[:-1]).norm(dim=1) / frobenius[:-1].clamp_min(1e-30)).tolist(),
        options=options, flags=flags)
