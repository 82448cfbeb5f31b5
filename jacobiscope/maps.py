"""`LoopedMap`: a looped (recurrent) map ``X_{t+1} = F(X_t)`` on a tensor state.

Everything downstream (Jacobian operators, spectra, Lyapunov exponents, energies) takes a `LoopedMap`, or any
callable that `as_looped_map` turns into one, and knows nothing about where the map came from.
"""
from __future__ import annotations

import copy
import math
from typing import Callable, Mapping

import torch
from torch import nn

from .errors import ArgumentError, JacobiscopeError, StateError, StepError
from ._map_checks import (check_independent_trajectories, check_step_output, check_trajectory_memory,  # noqa: F401
                          report_nonfinite, require_precision, _check_batch_dims, _check_state_shape, _default_name,
                          _rebind, _same_values, _warn_if_random, side_effect_refusal)
from ._map_info import KNOWN_KEYS, MapInfo, MetaView, split_meta
from ._validation import floating_dtype, positive_int, within_budget

__all__ = ["LoopedMap", "as_looped_map", "MapInfo", "MetaView", "KNOWN_KEYS"]


class LoopedMap:
    """A step function ``state -> state`` applied again and again.

    Example::

        >>> import torch, jacobiscope
        >>> logistic = jacobiscope.LoopedMap(lambda x: 4.0 * x * (1.0 - x))
        >>> logistic.trajectory(torch.tensor(0.3, dtype=torch.float64), steps=2)
        tensor([0.3000, 0.8400, 0.5376], dtype=torch.float64)

    Signature: ``LoopedMap(step, *, batch_dims=0, state_shape=None, drive=None, x0=None, name=None)``

    Arguments:
        step: an ``nn.Module`` (called with its parameters passed functionally through
            ``torch.func.functional_call``, so they are never baked in as constants and can be swapped with
            `with_params`, e.g. to differentiate through the map with respect to the weights) or any callable
            taking and returning one tensor of the same shape and dtype. The step must treat the leading
            ``batch_dims`` dimensions as independent trajectories (no batch-norm style mixing).
        batch_dims: how many leading dimensions of a state index independent trajectories. Every diagnostic
            then returns one result per trajectory.
        state_shape: the shape of one trajectory's state (without batch dimensions); checked when given.
        drive: optional callable ``X -> Y_t``, the drive of the update (for attention maps ``Y = Attn(X) + C``),
            used by `jacobiscope.pseudo_energy`. A bound method of ``step`` follows the map through `to`.
        x0: optional default initial state, used when a diagnostic is called without one.
        name: a label carried into results and reports.

    Calling the map, ``m(x)``, and ``m.step(x)`` both apply one loop. The constructor only stores its
    arguments; nothing is run until a state is given.
    """

    def __init__(
        self,
        step: Callable[[torch.Tensor], torch.Tensor] | nn.Module,
        *,
        batch_dims: int = 0,
        state_shape: tuple[int, ...] | torch.Size | None = None,
        drive: Callable[[torch.Tensor], torch.Tensor] | None = None,
        x0: torch.Tensor | None = None,
        name: str | None = None,
    ):
        if isinstance(step, LoopedMap):
            # Wrapping would hide the inner map's module, parameters and batch_dims from `to` / `detached`.
            raise StepError("step is already a LoopedMap — use it directly (or jacobiscope.as_looped_map(m, "
                            "batch_dims=...) to change its batch dims).")
        if not callable(step):
            raise StepError(
                f"LoopedMap needs a callable or an nn.Module as its step, got {type(step).__name__} — pass a "
                "function state -> state or the nn.Module of one loop."
            )
        batch_dims = _check_batch_dims(batch_dims)
        if state_shape is not None:
            state_shape = _check_state_shape(state_shape)
        if drive is not None and not callable(drive):
            raise StepError(f"drive must be a callable X -> Y_t (or None), got {type(drive).__name__} — pass e.g. "
                            "drive=block.drive, or leave it out")
        if name is not None and not isinstance(name, str):
            raise ArgumentError(f"name must be a str (a label for reports), got {type(name).__name__} {name!r:.40} — "
                                f"pass name=str(...)")
        self.module = step if isinstance(step, nn.Module) else None
        self._function = None if self.module is not None else step
        self.params: dict[str, torch.Tensor] | None = None
        if self.module is not None:
            self.params = {**dict(self.module.named_parameters()), **dict(self.module.named_buffers())}
            _warn_if_random(self.module)
        self.batch_dims = batch_dims
        self.state_shape = state_shape
        self.drive_function = drive
        self.x0 = x0
        self.name = name or _default_name(step)
        #: what jacobiscope knows about the map, typed (the adapters fill it: model, layer, mode, ...)
        self.info = MapInfo()
        self._extras: dict = {}  # the user's own entries of `meta`
        self._dtype: torch.dtype | None = None
        self._device: torch.device | None = None

    @property
    def meta(self) -> MetaView:
        """The user's own extras, as a dict; a known key (``meta["layer"]``, see `MapInfo`) reads and writes
        ``info``, so code written against the old free-form dict keeps working. Assigning a dict replaces both."""
        return MetaView(self.info, self._extras)

    @meta.setter
    def meta(self, value: Mapping) -> None:
        if not isinstance(value, Mapping):
            raise ArgumentError(f"meta must be a dict, got {type(value).__name__} — pass e.g. {{'tag': 'baseline'}}, or "
                                "set typed fields on looped.info")
        self.info, self._extras = split_meta(value)

    def copy_info_from(self, other: "LoopedMap") -> "LoopedMap":
        """Take a copy of ``other``'s info and extras (a map that wraps another says what the other says); returns
        ``self``."""
        self.info, self._extras = other.info.copy(), dict(other._extras)
        return self

    # ------------------------------------------------------------------ applying the map
    _power = 1  # loops of the underlying step per application (`power`)

    def step(self, x: torch.Tensor) -> torch.Tensor:
        """Apply one loop: return ``F(x)``. Pure, so it composes with ``torch.func`` transforms."""
        try:
            for _ in range(self._power):
                x = torch.func.functional_call(self.module, self.params, (x,)) if self.module is not None else (
                    self._function(x))
        except RuntimeError as error:
            refusal = side_effect_refusal(error, self.name)
            if refusal is None:
                raise
            raise refusal from error
        return x

    __call__ = step

    def drive(self, x: torch.Tensor) -> torch.Tensor:
        """The drive ``Y_t`` at state ``x`` (see `jacobiscope.pseudo_energy`)."""
        if self.drive_function is None:
            raise AttributeError(
                f"The map '{self.name}' exposes no drive Y_t, so its pseudo-energy -Tr(X^T Y) is undefined. "
                "Pass drive=... to LoopedMap (for attention maps, Y = Attn(X) + C)."
            )
        return self.drive_function(x)

    def trajectory(
        self,
        x0: torch.Tensor | None = None,
        steps: int = 1,
        *,
        every: int = 1,
        include_initial: bool = True,
        on_nonfinite: str = "warn",
    ) -> torch.Tensor:
        """Iterate the map and return the visited states.

        Example::

            >>> import torch, jacobiscope
            >>> m = jacobiscope.LoopedMap(lambda x: 0.5 * x)
            >>> m.trajectory(torch.ones(2), steps=4, every=2)
            tensor([[1.0000, 1.0000],
                    [0.2500, 0.2500],
                    [0.0625, 0.0625]])

        Arguments:
            x0: initial state (``[*batch, *state]``); defaults to ``self.x0``.
            steps: number of loops (> 0).
            every: keep only every ``every``-th state, to bound memory on long runs.
            include_initial: whether ``x0`` is the first returned state.
            on_nonfinite: ``"warn"`` (default: stop at the first NaN/Inf state, warn with its step index, and
                return the states up to and including it), ``"raise"`` (`NonFiniteStateError`), or ``"ignore"``.

        Returns:
            A tensor ``[n_kept, *batch, *state]``; state ``t`` of the orbit is row ``t // every`` (with the
            initial state included).
        """
        # Sizes first (a typo such as steps=10**9 would run for hours), then the state.
        # A power map runs p steps per loop; info.power also survives wrappers that copy meta (measure's batching).
        per_loop = max(self._power, _info_power(self.info))
        steps = within_budget(steps, "steps", "loops", per_unit=per_loop, unit="loops of the step")
        every = _positive_int(every, "every")
        if not isinstance(include_initial, bool):
            raise ArgumentError(f"include_initial must be True or False, got {include_initial!r} — pass "
                                "include_initial=False to drop x0 from the result.")
        if on_nonfinite not in ("warn", "raise", "ignore"):
            raise ArgumentError(f"on_nonfinite must be 'warn', 'raise' or 'ignore', got {on_nonfinite!r} — pass one "
                                "of them (default 'warn').")
        if not include_initial and every > steps:
            raise ArgumentError(f"every={every} is larger than steps={steps} and include_initial=False: no state "
                                f"would be kept — pass every <= {steps}, or include_initial=True.")
        x = self.prepare_state(x0)
        check_trajectory_memory(x, steps // every + int(include_initial) + 1, f"trajectory of '{self.name}'",
                                "lower steps, or keep fewer states with every=")
        kept = [x] if include_initial else []
        with torch.no_grad():
            for t in range(1, steps + 1):
                x = self.checked_step(x, t) if t == 1 else self.step(x)
                if t % every == 0:
                    kept.append(x)
                if on_nonfinite != "ignore" and not bool(torch.isfinite(x).all()):
                    if t % every != 0:
                        kept.append(x)
                    report_nonfinite(self, t, on_nonfinite)
                    break
        return torch.stack(kept)

    # ------------------------------------------------------------------ dtype / device / parameters
    def to(self, dtype: torch.dtype | None = None, device: torch.device | str | None = None) -> "LoopedMap":
        """Return a copy of the map computing in ``dtype`` on ``device`` (the original is untouched).

        For an ``nn.Module`` step the module is copied and its parameters cast, so ``m.to(torch.float64)``
        gives reference-quality numbers. A plain callable cannot be cast from outside: the copy casts the
        states it is given, and the callable must follow the dtype of its input.
        """
        if dtype is not None and not isinstance(dtype, torch.dtype):
            floating_dtype(dtype, "dtype")  # a string such as "float64": ArgumentError naming torch.float64
        if dtype is not None and (not dtype.is_floating_point):
            raise StateError(f"LoopedMap.to needs a floating dtype, got {dtype}. Use torch.float32 or torch.float64.")
        if device is not None:
            try:
                device = torch.device(device)
            except (RuntimeError, TypeError) as error:
                raise ArgumentError(f"device must be a torch.device or a name such as 'cpu' or 'cuda:0', got "
                                    f"{device!r} — pass device='cpu'.") from error
        new = copy.copy(self)
        new.info, new._extras = self.info.copy(), dict(self._extras)
        if self.module is not None:
            module = copy.deepcopy(self.module)
            module.to(device=device, dtype=dtype)
            new.module = module
            new.params = {**dict(module.named_parameters()), **dict(module.named_buffers())}
            new.drive_function = _rebind(self.drive_function, self.module, module)
        new._dtype = dtype or self._dtype
        new._device = torch.device(device) if device is not None else self._device
        if self.x0 is not None:
            new.x0 = self.x0.to(device=new._device or self.x0.device, dtype=new._dtype or self.x0.dtype)
        return new

    def power(self, p: int) -> "LoopedMap":
        """The ``p``-loop map ``F^p = F o ... o F`` as a map of its own: a period-``p`` orbit of ``F`` is a fixed
        point of ``F^p``, and the eigenvalues of its Jacobian there are the orbit's Floquet multipliers.

        Example::

            >>> import torch, jacobiscope
            >>> m = jacobiscope.systems.logistic_map(3.2)                # a stable period-2 orbit
            >>> x = m.trajectory(m.x0, 200)[-1]                           # a point of the orbit
            >>> twice = m.power(2)
            >>> round(float((twice(x) - x).abs()), 12)                     # a fixed point of F o F
            0.0
            >>> row = jacobiscope.measure(twice, x, loops=8, diagnostics=["eigenvalues"], eigen_k=1)
            >>> round(row.eigenvalues[0][0], 6)                            # the multiplier 4 + 2r - r^2
            0.16

        The copy shares the step's module and parameters (``to`` and ``with_params`` work on it as on the map);
        it has no drive (the pseudo-energy of a composed map is not defined) and is named ``"<name>^p"``.
        """
        if not _is_count(p) or p < 1:
            raise ArgumentError(f"power needs a positive int number of loops, got {p!r} — pass e.g. power(2) for "
                                "F o F (a period-2 orbit's map).")
        # One application of F^p runs p steps: power(10**9) would hang on its first call, so it is refused here.
        p = within_budget(p, "power p", "power", per_unit=self._power, unit="steps per application")
        new = copy.copy(self)
        new.info, new._extras = self.info.copy(), dict(self._extras)
        new.info.power = self._power * p
        new._power = self._power * p
        new.drive_function = None
        new.name = f"{self.name}^{p}"
        return new

    def with_params(self, params: Mapping[str, torch.Tensor]) -> "LoopedMap":
        """Return a map that calls the module with ``params`` (a name -> tensor dict, possibly partial).

        This is how gradients flow to the weights, e.g. ``torch.func.grad`` of a Jacobian penalty.
        """
        if self.module is None:
            raise StepError("with_params needs a LoopedMap built from an nn.Module; this one wraps a plain callable "
                            "— build the map from the module (LoopedMap(module)), or close over new weights yourself.")
        if not isinstance(params, Mapping):
            raise ArgumentError(f"with_params takes a dict name -> tensor, got {type(params).__name__} — pass e.g. "
                                f"{{{next(iter(self.params), 'weight')!r}: tensor}}")
        unknown = [name for name in params if name not in self.params]
        if unknown:
            from ._validation import did_you_mean

            raise _ParamNameError(f"Unknown parameter names {sorted(map(str, unknown))[:5]}"
                                  f"{did_you_mean(unknown[0], self.params)}; the module has e.g. "
                                  f"{sorted(self.params)[:5]} — use names from dict(module.named_parameters())")
        for name, value in params.items():
            old = self.params[name]
            if not isinstance(value, torch.Tensor):
                raise ArgumentError(f"with_params: {name!r} must be a torch.Tensor of shape {tuple(old.shape)}, got "
                                    f"{type(value).__name__} — pass torch.as_tensor(...) of that shape")
            if value.shape != old.shape:
                raise ArgumentError(f"with_params: {name!r} must have shape {tuple(old.shape)} (the module's), got "
                                    f"{tuple(value.shape)} — pass a tensor shaped like the parameter it replaces")
        new = copy.copy(self)
        new.params = {**self.params, **params}
        return new

    def detached(self) -> "LoopedMap":
        """Return a map whose parameters are detached from autograd (diagnostics need no weight gradients).

        Without this, every jvp/vjp through a module with ``requires_grad`` weights would also record a graph
        for the weights. A plain callable is returned as is.
        """
        if self.module is None:
            return self
        new = copy.copy(self)
        new.params = {name: tensor.detach() for name, tensor in self.params.items()}
        return new

    @property
    def dtype(self) -> torch.dtype | None:
        """The dtype the map computes in (``None``: whatever the state brings)."""
        return self._dtype

    # ------------------------------------------------------------------ states
    def prepare_state(self, x: torch.Tensor | None) -> torch.Tensor:
        """Validate a state (or fall back to ``self.x0``) and cast it to the map's dtype/device.

        Raises `StateError` for a non-tensor, an integer or complex dtype, too few dimensions, a shape that
        disagrees with ``state_shape``, or NaN/Inf entries.
        """
        if x is None:
            if self.x0 is None:
                raise StateError(
                    f"No initial state: pass x0, or build the map '{self.name}' with x0=... "
                    "(adapters set it to the hidden state entering the layer)."
                )
            x = self.x0
        if not isinstance(x, torch.Tensor):
            raise StateError(f"A state must be a torch.Tensor, got {type(x).__name__}. Wrap it with torch.as_tensor(...).")
        if x.layout != torch.strided:
            raise StateError(f"A state must be a dense tensor, got layout {x.layout} — pass x.to_dense().")
        if x.device.type == "meta":
            # A meta tensor has a shape but no values: every check below would fail inside torch.
            raise StateError("A state must hold values, got a tensor on the 'meta' device — pass a real tensor "
                             "(e.g. on 'cpu').")
        if not x.dtype.is_floating_point:
            raise StateError(
                f"A state must have a floating dtype to be differentiated, got {x.dtype}. "
                "Pass x.float() or x.double() (float64 for reference-quality numbers)."
            )
        if x.dim() < self.batch_dims:
            raise StateError(
                f"The map '{self.name}' has batch_dims={self.batch_dims}, but the state has only {x.dim()} "
                f"dimension(s) (shape {tuple(x.shape)})."
            )
        if x.numel() == 0:
            # An empty state has no Jacobian (D = 0) and no trajectories to measure; the solvers would fail deep
            # inside (Lanczos's "unreachable", reshape of 0 elements), so refuse it here with its shape.
            what = "no trajectories" if x.shape[: self.batch_dims].numel() == 0 else "no entries per trajectory"
            raise StateError(
                f"The state of '{self.name}' is empty: shape {tuple(x.shape)} with batch_dims={self.batch_dims} has "
                f"{what} — pass a state with at least one entry (and one trajectory)."
            )
        if self.state_shape is not None and x.shape[self.batch_dims:] != self.state_shape:
            raise StateError(
                f"Expected a state of shape [*batch({self.batch_dims} dims), {', '.join(map(str, self.state_shape))}], "
                f"got {tuple(x.shape)}."
            )
        if self._dtype is not None or self._device is not None:
            x = x.to(dtype=self._dtype or x.dtype, device=self._device or x.device)
        if not bool(torch.isfinite(x).all()):
            raise StateError(
                f"The initial state contains NaN or Inf ({int((~torch.isfinite(x)).sum())} entries). "
                "Check the inputs that produced it."
            )
        return x

    def checked_step(self, x: torch.Tensor, t: int = 1) -> torch.Tensor:
        """Apply one loop outside any transform and check that the result is a state like ``x``.

        The step runs on a copy of ``x``, so a step that works in place cannot overwrite the caller's state before
        it is caught (`StepError`); an exception the step raises comes back as `StepError` naming the state it
        was given, with the original chained.
        """
        probe = x.detach().clone()
        version = probe._version
        try:
            out = self.step(probe)
        except (JacobiscopeError, MemoryError, _OutOfMemoryError):
            raise
        except Exception as error:  # noqa: BLE001 - re-raised with the state it failed on, the cause chained
            first = (str(error).strip().splitlines() or [""])[0]
            failure = StepError(
                f"The step of '{self.name}' raised {type(error).__name__} (loop {t}) on a state of shape "
                f"{tuple(x.shape)}, {x.dtype}, on {x.device}: {first} — fix the step, or pass a state it accepts "
                f"(one tensor [*batch({self.batch_dims} dims), *state])."
            )
            failure.loop = t  # read by analyze: a block that fails on the model's own state (loop 1)
            raise failure from error
        # An in-place step (x.mul_(0.5)) returns its input: a trajectory would hold one tensor many times and the
        # caller's x0 would be overwritten. The version counter catches in-place ops, the comparison `.data` ones.
        if probe._version != version or not _same_values(probe, x):
            raise StepError(
                f"The step of '{self.name}' modified its input state in place (loop {t}); a looped map must leave "
                "its input untouched — return a new tensor (x * 0.5, not x.mul_(0.5); no inplace=True activations "
                "on the input)."
            )
        check_step_output(self, x, out, t)
        return out

    def batch_shape(self, x: torch.Tensor) -> torch.Size:
        return x.shape[: self.batch_dims]

    def state_size(self, x: torch.Tensor) -> int:
        """Number of entries of one trajectory's state, ``D``: the Jacobian is ``D x D``."""
        return math.prod(x.shape[self.batch_dims :])

    def __repr__(self) -> str:
        kind = type(self.module).__name__ if self.module is not None else "callable"
        return f"LoopedMap(name={self.name!r}, step={kind}, batch_dims={self.batch_dims}, dtype={self._dtype})"


def as_looped_map(step, *, batch_dims: int | None = None) -> LoopedMap:
    """Return ``step`` as a `LoopedMap` (unchanged if it already is one).

    Example::

        >>> import jacobiscope
        >>> jacobiscope.as_looped_map(lambda x: x, batch_dims=1).batch_dims
        1
    """
    if batch_dims is not None:
        batch_dims = _check_batch_dims(batch_dims)
    if isinstance(step, LoopedMap):
        if batch_dims is not None and batch_dims != step.batch_dims:
            new = copy.copy(step)
            new.batch_dims = batch_dims
            return new
        return step
    return LoopedMap(step, batch_dims=batch_dims or 0)


_positive_int = positive_int


def steps_per_loop(looped_map) -> int:
    """How many applications of the underlying step one loop of ``looped_map`` runs (``p`` for ``power(p)``): the
    unit the loop budget counts in."""
    own = getattr(looped_map, "_power", 1)
    own = own if isinstance(own, int) and own >= 1 else 1
    info = getattr(looped_map, "info", None)
    if isinstance(info, MapInfo):
        return max(own, _info_power(info))
    meta = getattr(looped_map, "meta", None)  # a map-like object of the user's, with a plain dict
    return max(own, _info_power(MapInfo(power=meta.get("power", 1)) if isinstance(meta, dict) else MapInfo()))


class _ParamNameError(ArgumentError, KeyError):
    """An unknown parameter name in `LoopedMap.with_params` (a KeyError too, as it always was)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


def _info_power(info: MapInfo) -> int:
    power = info.power
    return power if isinstance(power, int) and not isinstance(power, bool) and power >= 1 else 1


def _is_count(value) -> bool:
    from ._validation import _is_int

    return _is_int(value)



# torch.OutOfMemoryError (a RuntimeError) must pass through `checked_step` unwrapped, as MemoryError does.
_OutOfMemoryError = getattr(torch, "OutOfMemoryError", MemoryError)


