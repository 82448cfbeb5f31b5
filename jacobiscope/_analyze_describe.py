"""`jacobiscope.describe`: the dry run of `analyze` — what would be measured, the state sizes, an estimated cost."""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from .adapters._source import map_source
from .diagnostics._base import resolve
from .errors import ArgumentError
from ._analyze_options import check_options, resolve_diagnostics

__all__ = ["describe", "LayerPlan", "LayerPlans"]


@dataclass
class LayerPlan:
    """One line of `describe`: what `analyze` would measure for one (input, layer)."""

    input_index: int
    input_label: str
    layer: int
    state_shape: list[int]
    state_size: int
    forward_seconds: float
    forward_equivalents: float
    estimated_seconds: float
    #: estimated seconds of each diagnostic (compare with `LayerResult.timings` after `analyze`)
    per_diagnostic_seconds: dict | None = None

    def __str__(self) -> str:
        return (f"input {self.input_index} layer {self.layer}: state {self.state_shape} (D={self.state_size}), "
                f"~{self.forward_equivalents:.0f} block forwards, ~{self.estimated_seconds:.1f} s")


class LayerPlans(list):
    """What `describe` returns: a list of `LayerPlan` (one per input and layer) that also gives a DataFrame.

    Example::

        >>> import torch, transformers, jacobiscope
        >>> model = transformers.GPT2Model(transformers.GPT2Config(n_embd=16, n_layer=2, n_head=2, vocab_size=50))
        >>> plans = jacobiscope.describe(model, torch.tensor([[1, 2, 3]]), loops=8, diagnostics=["lyapunov"])
        >>> plans.to_dataframe()[["layer", "state_size"]].values.tolist()
        [[0, 48], [1, 48]]

    Still a plain list (indexing, iteration, ``len``, ``==`` with a list), so code written for the list keeps
    working. ``total_seconds`` is the estimate of the whole `analyze` run.
    """

    @property
    def total_seconds(self) -> float:
        return float(sum(plan.estimated_seconds for plan in self))

    def to_dataframe(self):
        """One row per plan: ``input_index``, ``input_label``, ``layer``, ``state_shape`` (a tuple),
        ``state_size``, ``forward_seconds``, ``forward_equivalents``, ``estimated_seconds``, then each
        diagnostic's estimate as ``seconds.<name>``. Needs pandas, imported only when called."""
        try:
            import pandas
        except ImportError:
            raise ImportError("describe(...).to_dataframe needs pandas, which is not installed: pip install "
                              "pandas") from None
        fields = ["input_index", "input_label", "layer", "state_shape", "state_size", "forward_seconds",
                  "forward_equivalents", "estimated_seconds"]
        columns, records = list(fields), []
        for plan in self:
            record = {name: getattr(plan, name) for name in fields}
            record["state_shape"] = tuple(plan.state_shape)
            record.update({f"seconds.{name}": value for name, value in (plan.per_diagnostic_seconds or {}).items()})
            columns += [key for key in record if key not in columns]
            records.append(record)
        return pandas.DataFrame(records, columns=columns)


def _operation_seconds(looped, x0, k: int) -> dict:
    """Seconds of one forward, jvp, vjp and k-tangent vmapped jvp of this map at ``x0`` (each the fastest of three
    after a warm-up call, so dispatch set-up is not counted)."""
    from .linalg.operators import jacobian_matmat, jvp, vjp

    tangent = torch.randn_like(x0)
    block = torch.randn(max(1, min(k, int(x0[0].numel()))), *x0.shape, dtype=x0.dtype, device=x0.device)
    operations = {"forward": lambda: looped(x0), "jvp": lambda: jvp(looped, x0, tangent),
                  "vjp": lambda: vjp(looped, x0, tangent), "jvp_block": lambda: jacobian_matmat(looped, x0, block)}
    prices = {}
    for name, operation in operations.items():
        with torch.no_grad() if name == "forward" else torch.enable_grad():
            operation()
            runs = []
            for _ in range(3):  # the fastest of three: a busy moment of the machine is not the block's cost
                start = time.perf_counter()
                operation()
                runs.append(time.perf_counter() - start)
            prices[name] = min(runs)
    return prices


def _seconds(cost, prices: dict) -> float:
    if isinstance(cost, dict):
        unknown = set(cost) - set(prices)
        if unknown:
            raise ArgumentError(f"a diagnostic's cost names unknown operations {sorted(unknown)} — use forward, jvp, "
                                "vjp and jvp_block")
        return sum(count * prices[name] for name, count in cost.items())
    return float(cost) * prices["forward"]


def describe(model, inputs, tokenizer=None, layers=None, mode: str | None = None, loops: int = 32, diagnostics=None,
             k: int = 4, *, eigen_k: int = 4, spectral_samples: int = 3, max_length: int | None = 512,
             recurrence: str | None = None) -> LayerPlans:
    """Dry run of `analyze`: what would be measured, the state sizes, and an estimated cost.

    Example::

        >>> import torch, transformers, jacobiscope
        >>> model = transformers.GPT2Model(transformers.GPT2Config(n_embd=16, n_layer=2, n_head=2, vocab_size=50))
        >>> plans = jacobiscope.describe(model, torch.tensor([[1, 2, 3]]), loops=8)
        >>> [(p.layer, p.state_size) for p in plans]
        [(0, 48), (1, 48)]

    Each diagnostic states its cost as counts of block operations (forwards, jvps, vjps, k-tangent vmapped jvps:
    `Diagnostic.cost`); describe times each operation once on each block (after a warm-up) and prices the counts.
    ``per_diagnostic_seconds`` holds each diagnostic's estimate, to compare with `LayerResult.timings`.
    The result is a `LayerPlans` list: ``plans.to_dataframe()`` gives one row per plan.
    """
    diagnostics = resolve_diagnostics(diagnostics)
    check_options(k, eigen_k, spectral_samples, loops)
    plans = LayerPlans()
    with map_source(model, inputs, tokenizer=tokenizer, layers=layers, mode=mode, recurrence=recurrence,
                    max_length=max_length) as source:
        for item in source:  # the maps analyze would measure, built the same way
            for looped in item.maps:
                plans.append(_plan_of(looped, item, loops, diagnostics, k, eigen_k, spectral_samples))
    return plans


def _plan_of(looped, item, loops: int, diagnostics, k: int, eigen_k: int, spectral_samples: int) -> LayerPlan:
    """One map's plan: each operation timed on it, each diagnostic's cost priced."""
    x0 = looped.x0
    prices = _operation_seconds(looped, x0, k)
    options = {"k": k, "eigen_k": eigen_k, "spectral_samples": spectral_samples}
    # The trajectory itself, then each diagnostic's own estimate (registered ones included).
    costs = {diagnostic.name: _seconds(diagnostic.cost(int(x0[0].numel()), loops, options), prices)
             for diagnostic in resolve(diagnostics)}
    total = loops * prices["forward"] + sum(costs.values())
    return LayerPlan(item.index, item.label, looped.info.layer, list(x0.shape[1:]), int(x0[0].numel()),
                     prices["forward"], total / prices["forward"], total, costs)
