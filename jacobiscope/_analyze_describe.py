"""`jacobiscope.describe`: the dry run of `analyze` — what would be measured, the state sizes, an estimated cost."""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from .adapters._source import map_source
from .diagnostics._base import resolve
from .errors import ArgumentError, StateError
from ._analyze_options import check_options, resolve_diagnostics
from ._probes import probe_like

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
    #: seconds of each timed operation on this block (``forward``, ``jvp``, ``vjp``, ``jvp_block``; with a recorded
    #: split graph also ``state_part``: the forward's part of a recorded product, once per state)
    operation_seconds: dict | None = None
    #: how jvps are priced: ``"linearized"`` (on the split graph `analyze` reuses) or ``"eager"`` (none recordable)
    product_path: str = "eager"
    #: seconds describe spent recording that graph (0 when a block of the same structure had it recorded): paid
    #: once per structure and process, so an `analyze` in this process skips it and one in a new process pays it
    recording_seconds: float = 0.0

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
        ``state_size``, ``forward_seconds``, ``forward_equivalents``, ``estimated_seconds``, ``product_path``,
        ``recording_seconds``, then each diagnostic's estimate as ``seconds.<name>``. Needs pandas, imported only when called."""
        try:
            import pandas
        except ImportError:
            raise ImportError("describe(...).to_dataframe needs pandas, which is not installed: pip install "
                              "pandas") from None
        fields = ["input_index", "input_label", "layer", "state_shape", "state_size", "forward_seconds",
                  "forward_equivalents", "estimated_seconds", "product_path", "recording_seconds"]
        columns, records = list(fields), []
        for plan in self:
            record = {name: getattr(plan, name) for name in fields}
            record["state_shape"] = tuple(plan.state_shape)
            record.update({f"seconds.{name}": value for name, value in (plan.per_diagnostic_seconds or {}).items()})
            columns += [key for key in record if key not in columns]
            records.append(record)
        return pandas.DataFrame(records, columns=columns)


def _fastest(operation, x0) -> float:
    """Seconds of the fastest of three calls after a warm-up (dispatch set-up and a busy moment of the machine are
    not the block's cost)."""
    operation()
    runs = []
    for _ in range(3):
        _synchronize(x0)
        start = time.perf_counter()
        operation()
        _synchronize(x0)
        runs.append(time.perf_counter() - start)
    return min(runs)


def _synchronize(x0) -> None:
    if x0.device.type == "cuda":  # kernels run asynchronously: time their work, not their launch
        torch.cuda.synchronize(x0.device)


def _operation_seconds(looped, x0, k: int) -> dict:
    """Seconds of one forward, jvp, vjp and k-tangent vmapped jvp of this map at ``x0``, each run eagerly."""
    from .linalg.operators import jacobian_matmat, jvp, vjp

    tangent = probe_like(x0)
    block = probe_like(x0, seed=1, count=max(1, min(k, int(x0[0].numel()))))
    operations = {"forward": lambda: looped(x0), "jvp": lambda: jvp(looped, x0, tangent),
                  "vjp": lambda: vjp(looped, x0, tangent), "jvp_block": lambda: jacobian_matmat(looped, x0, block)}
    prices = {}
    for name, operation in operations.items():
        with torch.no_grad() if name == "forward" else torch.enable_grad():
            prices[name] = _fastest(operation, x0)
    return prices


def _recorded_prices(looped, x0, k: int, eager: dict) -> tuple[dict, float]:
    """The prices `analyze` pays once its jvps run on the recorded split graph (`jacobiscope.linalg._linearized`):
    recorded here, as `analyze` would record it, unless a block of the same structure already was (then `analyze`
    reuses it from its first product). ``jvp``: the part linear in the vector; ``state_part``: the forward's part,
    once per state a Krylov solve starts at; ``jvp_block``: per loop the forward's part plus k linear parts, or the
    eager vmapped block where that is faster (the Lyapunov loop times both and keeps the faster). Returns
    ``(prices, recording seconds)``; ``({}, seconds)`` when the graph cannot be recorded or disagrees with the eager
    jvp here (then `analyze` runs its products eagerly, as priced)."""
    from .linalg._linearized import SplitSlot, graph_leaves
    from .linalg._trace import agrees
    from .linalg.operators import jvp

    owner = looped.module if looped.module is not None else looped._function  # JacobianOperator's default
    slot = SplitSlot(looped, x0, owner)
    _synchronize(x0)
    start = time.perf_counter()
    cached = slot.graph(x0, record=False) is not None
    graph = slot.graph(x0, record=True)
    _synchronize(x0)
    recording = 0.0 if cached else time.perf_counter() - start
    if graph is None:
        return {}, recording
    constant, linear = graph
    leaves = graph_leaves(looped, x0)
    tangent = probe_like(x0)
    try:
        with torch.no_grad():
            saved = constant(*leaves)
            recorded = linear(*saved, tangent)[1]
        if not agrees([recorded], [jvp(looped, x0, tangent)], x0.dtype):
            return {}, recording
        with torch.no_grad():
            state_part = _fastest(lambda: constant(*leaves), x0)
            product = _fastest(lambda: linear(*saved, tangent), x0)
    except Exception:  # noqa: BLE001 - a graph that cannot run here: analyze drops it too and runs eagerly
        return {}, recording
    vectors = max(1, min(k, int(x0[0].numel())))
    return {"jvp": product, "state_part": state_part,
            "jvp_block": min(eager["jvp_block"], state_part + vectors * product)}, recording


def _seconds(cost, prices: dict) -> float:
    if isinstance(cost, dict):
        unknown = set(cost) - {"forward", "jvp", "vjp", "jvp_block"}
        if unknown:
            raise ArgumentError(f"a diagnostic's cost names unknown operations {sorted(unknown)} — use forward, jvp, "
                                "vjp and jvp_block")
        seconds = sum(count * prices[name] for name, count in cost.items())
        # recorded products: the forward's part runs once at the state a diagnostic's Krylov solve starts from
        return seconds + (prices.get("state_part", 0.0) if cost.get("jvp") else 0.0)
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
    `Diagnostic.cost`); describe times each operation on each block (the fastest of three after a warm-up) and
    prices the counts. jvps are priced as `analyze` runs them: on the split graph of the block's jvp
    (``product_path="linearized"``), which describe records once per block structure — `analyze` in the same
    process then reuses it, and ``recording_seconds`` says what a new process would pay for it — or eagerly where
    the graph cannot be recorded (``"eager"``).
    ``per_diagnostic_seconds`` holds each diagnostic's estimate, to compare with `LayerResult.timings`.
    The result is a `LayerPlans` list: ``plans.to_dataframe()`` gives one row per plan.
    """
    from .hub import model_or_loaded

    diagnostics = resolve_diagnostics(diagnostics)
    check_options(k, eigen_k, spectral_samples, loops)
    model = model_or_loaded(model)  # a name loads as in analyze
    plans = LayerPlans()
    with map_source(model, inputs, tokenizer=tokenizer, layers=layers, mode=mode, recurrence=recurrence,
                    max_length=max_length) as source:
        for item in source:  # the maps analyze would measure, built the same way
            for looped in item.maps:
                plans.append(_plan_of(looped, item, loops, diagnostics, k, eigen_k, spectral_samples))
    return plans


def _plan_of(looped, item, loops: int, diagnostics, k: int, eigen_k: int, spectral_samples: int) -> LayerPlan:
    """One map's plan: each operation timed on it, each diagnostic's cost priced."""
    from .diagnostics._measure import _one_trajectory

    # Timed on the map measure runs (one trajectory with a batch axis of one), so the recording keyed by it is the
    # one analyze's products find.
    try:
        batched, batched_x0 = _one_trajectory(looped, looped.x0)
        finite = True
    except StateError:  # a non-finite start (analyze flags that layer): timed as it is, no recording to price
        (batched, batched_x0), finite = (looped, looped.x0), False
    prices = _operation_seconds(batched, batched_x0, k)
    recorded, recording = _recorded_prices(batched, batched_x0, k, prices) if finite else ({}, 0.0)
    prices.update(recorded)
    options = {"k": k, "eigen_k": eigen_k, "spectral_samples": spectral_samples}
    # The trajectory itself, then each diagnostic's own estimate (registered ones included).
    x0 = looped.x0
    costs = {diagnostic.name: _seconds(diagnostic.cost(int(x0[0].numel()), loops, options), prices)
             for diagnostic in resolve(diagnostics)}
    total = loops * prices["forward"] + sum(costs.values())
    return LayerPlan(item.index, item.label, looped.info.layer, list(x0.shape[1:]), int(x0[0].numel()),
                     prices["forward"], total / prices["forward"], total, costs, prices,
                     "linearized" if recorded else "eager", recording)
