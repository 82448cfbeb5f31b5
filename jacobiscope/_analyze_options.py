"""The numeric and naming options of `jacobiscope.analyze` / `describe`, checked before any forward: a wrong one
fails now, not after minutes of measuring.

Example::

    >>> from jacobiscope._analyze_options import resolve_diagnostics
    >>> resolve_diagnostics(["lyapunov"])[-1]
    'regime'
"""
from __future__ import annotations

import torch

from .errors import ArgumentError
from .diagnostics._base import resolve
from ._validation import nonnegative_int, within_budget

__all__ = ["resolve_diagnostics", "check_options", "check_device", "check_diagnostic_options", "ANALYZE_SETTINGS"]


def resolve_diagnostics(diagnostics) -> tuple[str, ...]:
    """The registered diagnostics to run (names, in registry order; requirements and the verdict included)."""
    if diagnostics is not None and not isinstance(diagnostics, str):
        try:
            diagnostics = list(diagnostics)
        except TypeError:
            raise ArgumentError(f"diagnostics must be a list of names, got {type(diagnostics).__name__} "
                                f"{diagnostics!r} — pass e.g. ['lyapunov'], or None for all") from None
        if not diagnostics:
            # An empty subset would measure nothing but the state norms: a silently empty report.
            raise ArgumentError("diagnostics is empty — pass None for the default set, or names such as ['lyapunov']")
        bad = [name for name in diagnostics if not isinstance(name, str)]
        if bad:
            raise ArgumentError(f"diagnostics must be names (str), got {bad[0]!r} — pass e.g. ['lyapunov']")
    return tuple(diagnostic.name for diagnostic in resolve(diagnostics))


def check_options(k, eigen_k, spectral_samples, loops, seed=0, eigen_restarts=0, dtype=None, device=None,
                   input_labels=None, progress=None):
    """The numeric settings, before any forward: a wrong one fails now, not after minutes of measuring."""
    # Each size a user controls against its budget (`jacobiscope._validation.BUDGETS`): loops=10**9 is refused
    # here, before the model runs, not after hours of looping.
    within_budget(loops, "loops", state_bytes=4)  # the state size is not known yet: one float32 value per state
    within_budget(k, "k", unit="tangent vectors")
    within_budget(eigen_k, "eigen_k", unit="eigenvalues")
    within_budget(spectral_samples, "spectral_samples", unit="samples")
    nonnegative_int(eigen_restarts, "eigen_restarts")
    if eigen_restarts > 10_000:
        raise ArgumentError(f"eigen_restarts={eigen_restarts} is over the budget of 10000 Arnoldi restarts (each "
                            "one a basis of jvps) — pass e.g. eigen_restarts=4 (the default)")
    nonnegative_int(seed, "seed")
    if dtype is not None and not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise ArgumentError(f"dtype must be a floating torch dtype, got {dtype!r} — pass torch.float32 or "
                            "torch.float64 (or None for the model's own)")
    if device is not None:
        check_device(device)
    if progress is not None and not isinstance(progress, bool):
        # progress="no" is truthy: the bar would show for the very call that asked for none
        raise ArgumentError(f"progress must be None (a bar after 2 s), True or False, got {progress!r} — pass "
                            "progress=False for no bar")
    if input_labels is not None and (isinstance(input_labels, str) or not hasattr(input_labels, "__len__")):
        raise ArgumentError(f"input_labels must be a list of names (one per input), got {type(input_labels).__name__} "
                            f"{input_labels!r:.40} — pass e.g. [{input_labels!r:.40}]")


def check_device(device) -> None:
    """``device`` names a device this machine has (``"cuda"`` without CUDA fails here, not inside torch)."""
    if not isinstance(device, (str, torch.device)):
        raise ArgumentError(f"device must be a str or torch.device, got {type(device).__name__} {device!r} — pass "
                            "e.g. 'cpu' or 'cuda:0'")
    try:
        parsed = torch.device(device)
    except RuntimeError as error:
        raise ArgumentError(f"device={device!r} is not a device name ({str(error).splitlines()[0]}) — pass e.g. "
                            "'cpu' or 'cuda:0'") from None
    if parsed.type == "meta":
        raise ArgumentError("device='meta' holds no numbers, so nothing can be measured on it — pass 'cpu' or 'cuda'")
    try:
        torch.empty(1, device=parsed)
    except (RuntimeError, AssertionError) as error:  # torch says "not compiled with CUDA" with an AssertionError
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0][:160]
        raise ArgumentError(f"device={device!r} is not available on this machine ({reason}) — pass device='cpu' or "
                            "leave device=None (the model's own device)") from None


def check_diagnostic_options(diagnostics, options) -> dict:
    """The ``options=`` of `analyze` (settings of diagnostics that take their own, such as ``basin_starts``), checked
    against the chosen diagnostics' `Option` table before the model runs ("did you mean", budgets); returns plain
    values. ``eigen_k``, ``eigen_restarts`` and ``spectral_samples`` are `analyze`'s own arguments and are taken
    from ``options`` too (the command line's ``--option NAME=VALUE`` sets either kind)."""
    from .diagnostics._base import check_options as check_table

    if options is None:
        return {}
    if not isinstance(options, dict):
        raise ArgumentError(f"options must be a dict of diagnostic settings, got {type(options).__name__} — pass "
                            "e.g. options={'basin_starts': 16}")
    own = [key for key in options if key in ANALYZE_SETTINGS]
    if own:
        raise ArgumentError(f"options[{own[0]!r}] is an argument of analyze itself — pass {own[0]}=... instead "
                            "(command line: --option sets either kind)")
    return check_table(resolve(list(diagnostics)), options)


#: The sizes `analyze` takes as arguments that the command line sets with ``--option NAME=VALUE`` (the other option
#: names come from the diagnostics' `Option` tables).
ANALYZE_SETTINGS = {"eigen_k": "eigenvalues of largest modulus summarized (Arnoldi)",
                    "eigen_restarts": "Arnoldi restarts before the eigenvalues are flagged inaccurate",
                    "spectral_samples": "loops at which ||J||_2 is measured (evenly spaced)"}
