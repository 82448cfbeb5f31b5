"""Per-example diagnostics joined with correctness: does a model's largest Lyapunov exponent on an input say
whether it solves that input?

Example::

    >>> import torch, jacobiscope
    >>> from jacobiscope.models.itrsa import ItrSAConfig, ItrSAForSudoku
    >>> model = ItrSAForSudoku(ItrSAConfig(hidden_size=8, num_heads=2, loops=4)).eval()
    >>> puzzles = jacobiscope.data.sudoku.generate_many(4, givens=40, seed=0)[0]
    >>> table = jacobiscope.recipes.per_example(model, puzzles, [True, False, True, False], loops=4, progress=False)
    >>> len(table.rows), table.rows[0].solved, table.summary.solved
    (4, True, 2)
    >>> -1.0 <= table.summary.r <= 1.0
    True

The statistic is the point-biserial correlation of ``lambda_max`` with solved (Pearson's r against a 0/1
variable: positive when solved inputs have the larger exponents), with a percentile bootstrap 95% interval over
examples, and the mean exponent of the solved and of the unsolved inputs.
"""
from __future__ import annotations

import json
import math
import numbers
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from .errors import ArgumentError
from ._validation import did_you_mean, seed_int, within_budget

__all__ = ["per_example", "per_example_from_report", "solved_from_sudoku_eval", "point_biserial", "PerExample",
           "ExampleRow", "CorrelationSummary"]

#: The per-example numbers a summary can correlate with solved.
STATISTICS = ("lambda_max", "lambda_late", "spectral_norm")

_DEFAULT_DIAGNOSTICS = ("lyapunov", "spectral_norm")


@dataclass
class ExampleRow:
    """One example: its diagnostics at ``loops`` loops and whether the model got it right there.

    ``lambda_max`` is the exponent averaged over all loops, ``lambda_late`` the verdict's late-half estimate,
    ``spectral_norm`` the largest sampled ``||J||_2``; NaN where not measured (or where the orbit diverged)."""

    index: int
    label: str
    lambda_max: float
    lambda_stderr: float
    lambda_late: float
    spectral_norm: float
    regime: str
    solved: bool | None
    flags: list = field(default_factory=list)


@dataclass
class CorrelationSummary:
    """The point-biserial correlation ``r`` of ``statistic`` with solved, its bootstrap 95% interval, the class
    means. ``r`` and the interval are NaN when one class is empty or the statistic does not vary (``reason`` says
    which); ``excluded`` counts examples left out for a non-finite statistic or an unknown outcome."""

    statistic: str
    n: int
    solved: int
    unsolved: int
    excluded: int
    r: float
    ci_low: float
    ci_high: float
    resamples: int
    mean_solved: float
    mean_unsolved: float
    reason: str = ""

    def sentence(self) -> str:
        if math.isnan(self.r):
            return f"{self.statistic} vs solved: r undefined ({self.reason}); {self.n} examples, {self.solved} solved."
        return (f"{self.statistic} vs solved: point-biserial r = {self.r:+.3f} (bootstrap 95% CI "
                f"{self.ci_low:+.3f} .. {self.ci_high:+.3f}, {self.resamples} resamples); mean {self.statistic} "
                f"{_fmt(self.mean_solved)} solved ({self.solved}) vs {_fmt(self.mean_unsolved)} unsolved "
                f"({self.unsolved}); {self.excluded} excluded.")


@dataclass
class PerExample:
    """What `per_example` returns: one `ExampleRow` per example, the `CorrelationSummary`, the report's provenance.

    ``str(result)`` is a table with the summary sentence under it; `to_dict` / `to_json` give plain values."""

    rows: list
    summary: CorrelationSummary
    loops: int
    provenance: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"loops": self.loops, "rows": [asdict(row) for row in self.rows], "summary": asdict(self.summary),
                "provenance": self.provenance}

    def to_json(self, path=None) -> str:
        """The result as JSON (NaN written as null); written to ``path`` when given."""
        text = json.dumps(_nulls(self.to_dict()), indent=1)
        if path is not None:
            from ._io import atomic_write_text

            atomic_write_text(path, text)
        return text

    def table(self, max_label: int = 20) -> str:
        # Both exponents, named by their window: the verdict's (late half) and the whole-run one with its s.e.
        lines = [f"{'#':>4}  {'input':<{max_label}}  {'lambda late':>11}  {'lambda all':>10}  {'+/- se':>8}  "
                 f"{'||J||2':>8}  regime        solved"]
        for row in self.rows:
            label = row.label if len(row.label) <= max_label else row.label[: max_label - 3] + "..."
            solved = "-" if row.solved is None else ("yes" if row.solved else "no")
            lines.append(f"{row.index:>4}  {label:<{max_label}}  {_fmt(row.lambda_late):>11}  {_fmt(row.lambda_max):>10}  "
                         f"{_fmt(row.lambda_stderr):>8}  {_fmt(row.spectral_norm):>8}  {row.regime:<12}  {solved}")
        return "\n".join(lines + [self.summary.sentence()])

    def __str__(self) -> str:
        return self.table()

    def __repr__(self) -> str:
        return (f"<PerExample: {len(self.rows)} examples at {self.loops} loops, {self.summary.solved} solved, "
                f"r = {_fmt(self.summary.r)}>")


def per_example(model, inputs, correct=None, *, loops: int = 32, diagnostics=_DEFAULT_DIAGNOSTICS, layer=None,
                statistic: str = "lambda_max", resamples: int = 2000, bootstrap_seed: int = 0, k: int = 1,
                **analyze_options) -> PerExample:
    """Measure every input with `jacobiscope.analyze` and join each with whether the model got it right.

    Example::

        >>> import torch, jacobiscope
        >>> from jacobiscope.models.itrsa import ItrSAConfig, ItrSAForSudoku
        >>> model = ItrSAForSudoku(ItrSAConfig(hidden_size=8, num_heads=2, loops=4)).eval()
        >>> puzzles = jacobiscope.data.sudoku.generate_many(2, givens=40, seed=0)[0]
        >>> table = jacobiscope.recipes.per_example(model, puzzles, loops=4, progress=False)  # its own loop_outcome
        >>> [row.solved for row in table.rows]       # a random model solves nothing
        [False, False]

    Arguments:
        model, inputs: as for `jacobiscope.analyze` (a transformers model and texts / ids, or a looped model such
            as the shipped Sudoku solvers and its puzzles).
        correct: one bool per input (a list, or a bool tensor / array): whether the model's answer on it is right.
            ``None``: the model's own ``loop_outcome`` at ``loops`` (the Sudoku solvers: a valid completed grid).
        loops: the loop count both the diagnostics and correctness refer to.
        diagnostics: passed to analyze (default: the Lyapunov exponent and ``||J||_2``; the verdict always runs).
        layer: the block to join, for a model analysed layer by layer (required when it has several blocks).
        statistic: the number correlated with solved: ``"lambda_max"``, ``"lambda_late"`` or ``"spectral_norm"``.
        resamples, bootstrap_seed: the percentile bootstrap of the 95% interval.
        k, analyze_options: passed to analyze (``k=1``: only the largest exponent is needed).

    Returns:
        `PerExample`: the rows (lambda_max, its standard error, the late-half estimate, max ||J||_2, verdict,
        solved) and the `CorrelationSummary`.
    """
    _check_statistic(statistic)
    _check_resamples(resamples, bootstrap_seed)
    from ._analyze import analyze

    layers = None if layer is None else [layer]
    report = analyze(model, inputs, layers=layers, loops=loops, diagnostics=diagnostics, k=k, **analyze_options)
    return per_example_from_report(report, correct, layer=layer, statistic=statistic, resamples=resamples,
                                   bootstrap_seed=bootstrap_seed)


def per_example_from_report(report, correct=None, *, layer=None, statistic: str = "lambda_max",
                            resamples: int = 2000, bootstrap_seed: int = 0) -> PerExample:
    """Join the rows of an analyze `Report` (one per input, at one layer) with correctness.

    Example::

        >>> import jacobiscope
        >>> report = jacobiscope.Report.from_json("report.json")                      # doctest: +SKIP
        >>> record = "eval.json"                     # from: jacobiscope sudoku eval ... --json eval.json
        >>> solved = jacobiscope.recipes.solved_from_sudoku_eval(record, split="id", loops=32)  # doctest: +SKIP
        >>> jacobiscope.recipes.per_example_from_report(report, solved)                        # doctest: +SKIP

    ``correct`` and ``layer`` as for `per_example`; with ``correct=None`` each row's ``outcome["solved"]`` is used.
    """
    _check_statistic(statistic)
    _check_resamples(resamples, bootstrap_seed)
    rows = _rows_of_layer(report, layer)
    flags = _correctness(rows, correct)
    examples = [_example_row(row, solved) for row, solved in zip(rows, flags)]
    summary = point_biserial([getattr(e, statistic) for e in examples], [e.solved for e in examples],
                             statistic=statistic, resamples=resamples, seed=bootstrap_seed)
    loops = rows[0].loops if rows else 0
    return PerExample(rows=examples, summary=summary, loops=loops, provenance=dict(report.provenance))


def solved_from_sudoku_eval(record, split: str = "id", loops: int = 32) -> list[bool]:
    """Per puzzle, whether it was solved at ``loops`` in a ``jacobiscope sudoku eval --json`` record (a path or
    the parsed dict), in the order of the evaluated split.

    Example::

        >>> import jacobiscope
        >>> record = {"loops": [16, 32], "puzzles": {"id": [{"index": 0, "solved_at": [16, 32]},
        ...                                                   {"index": 1, "solved_at": [32]}]}}
        >>> jacobiscope.recipes.solved_from_sudoku_eval(record, "id", loops=16)
        [True, False]
    """
    if isinstance(record, (str, Path)):
        path = Path(record)
        if not path.is_file():
            raise ArgumentError(f"no sudoku eval record at {str(path)!r} — pass the file written by "
                                "'jacobiscope sudoku eval MODEL --json FILE', or its parsed dict")
        try:  # utf-8-sig: a record re-saved by an editor that adds a byte-order mark still reads
            record = json.loads(path.read_text(encoding="utf-8-sig"))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise ArgumentError(f"{str(path)!r} is not a sudoku eval record: not JSON ({error}) — pass the file "
                                "written by 'jacobiscope sudoku eval MODEL --json FILE'") from None
    if not isinstance(record, dict) or not isinstance(record.get("puzzles"), dict):
        raise ArgumentError("the record has no per-puzzle results ('puzzles') — pass the JSON that "
                            "'jacobiscope sudoku eval MODEL --json FILE' writes")
    splits = record["puzzles"]
    if split not in splits:
        raise ArgumentError(f"split {split!r} is not in the record (it has {sorted(splits)}) — pass one of them")
    evaluated = record.get("loops")
    if isinstance(evaluated, list) and loops not in evaluated:
        raise ArgumentError(f"the record was evaluated at loops {evaluated}, not {loops!r} — pass one of them, or "
                            f"rerun 'jacobiscope sudoku eval' with --loops {loops}")
    entries = splits[split]
    if not isinstance(entries, list) or not all(
            isinstance(entry, dict) and isinstance(entry.get("index"), int) and isinstance(entry.get("solved_at"), list)
            for entry in entries):
        raise ArgumentError(f"the record's puzzles[{split!r}] must be a list of {{'index': int, 'solved_at': [loop "
                            "counts]} entries — the file was edited or written by another tool; rerun 'jacobiscope "
                            "sudoku eval MODEL --json FILE'")
    puzzles = sorted(entries, key=lambda entry: entry["index"])
    return [loops in entry["solved_at"] for entry in puzzles]


def point_biserial(values, solved, *, statistic: str = "value", resamples: int = 2000,
                   seed: int = 0) -> CorrelationSummary:
    """Pearson's r between ``values`` and the 0/1 ``solved`` flags, with a percentile bootstrap 95% interval.

    Example::

        >>> from jacobiscope._per_example import point_biserial
        >>> s = point_biserial([0.1, 0.2, -0.3, -0.5], [True, True, False, False], resamples=200)
        >>> round(s.r, 3), round(s.mean_solved, 2), round(s.mean_unsolved, 2)
        (0.961, 0.15, -0.4)

    Examples whose value is not finite or whose flag is None are left out (counted in ``excluded``). A resample
    with one class only, or a constant value, has no r and is skipped (``resamples`` counts the kept ones).
    """
    _check_resamples(resamples, seed)
    values, solved = _sequence(values, "values"), _sequence(solved, "solved")
    for flag in solved:
        if flag is not None and not isinstance(flag, (bool, numbers.Integral)) or (
                isinstance(flag, numbers.Integral) and not isinstance(flag, bool) and flag not in (0, 1)):
            raise ArgumentError(f"solved flags must be True / False (or 1 / 0, None for unknown), got {flag!r} — "
                                "'no' or 2 is never read as a flag; pass one bool per value")
    for value in values:
        if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Real)):
            raise ArgumentError(f"values must be numbers (None or NaN for a missing one), got {value!r} — pass the "
                                "statistic of each example as a float")
    if len(values) != len(solved):
        raise ArgumentError(f"{len(values)} values for {len(solved)} solved flags — pass one flag per value")
    kept = [(float(v), bool(s)) for v, s in zip(values, solved)
            if s is not None and v is not None and math.isfinite(float(v))]
    excluded = len(values) - len(kept)
    x = torch.tensor([v for v, _ in kept], dtype=torch.float64)
    y = torch.tensor([1.0 if s else 0.0 for _, s in kept], dtype=torch.float64)
    n_solved = int(y.sum())
    means = (_mean(x[y == 1]), _mean(x[y == 0]))
    base = dict(statistic=statistic, n=len(kept), solved=n_solved, unsolved=len(kept) - n_solved, excluded=excluded,
                mean_solved=means[0], mean_unsolved=means[1])
    reason = _undefined_reason(x, y)
    if reason:
        return CorrelationSummary(r=math.nan, ci_low=math.nan, ci_high=math.nan, resamples=0, reason=reason, **base)
    r = float(_pearson(x.unsqueeze(0), y.unsqueeze(0))[0])
    generator = torch.Generator().manual_seed(seed)
    index = torch.randint(len(kept), (resamples, len(kept)), generator=generator)
    boot = _pearson(x[index], y[index])
    boot = boot[torch.isfinite(boot)]
    if boot.numel() == 0:
        return CorrelationSummary(r=r, ci_low=math.nan, ci_high=math.nan, resamples=0,
                                  reason="no resample had both classes", **base)
    low, high = torch.quantile(boot, torch.tensor([0.025, 0.975], dtype=torch.float64)).tolist()
    return CorrelationSummary(r=r, ci_low=low, ci_high=high, resamples=int(boot.numel()), **base)


# ---------------------------------------------------------------------------------------------- helpers
def _sequence(items, name: str) -> list:
    """A list of plain Python items from a list, tuple, 1-d tensor or array (tensor items as Python numbers)."""
    if isinstance(items, (str, bytes, dict)) or not hasattr(items, "__iter__"):
        raise ArgumentError(f"{name} must be a sequence (a list, tuple, 1-d tensor or array), got "
                            f"{type(items).__name__} — pass one entry per example")
    if hasattr(items, "tolist"):
        items = items.tolist()
        if not isinstance(items, list):
            raise ArgumentError(f"{name} must be 1-d, got a 0-d array — pass one entry per example")
    return list(items)


def _pearson(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Row-wise Pearson r of ``[B, n]`` samples; NaN where either row is constant."""
    dx = x - x.mean(-1, keepdim=True)
    dy = y - y.mean(-1, keepdim=True)
    denominator = (dx.square().sum(-1) * dy.square().sum(-1)).sqrt()
    return torch.where(denominator > 0, (dx * dy).sum(-1) / denominator, torch.full_like(denominator, math.nan))


def _undefined_reason(x: torch.Tensor, y: torch.Tensor) -> str:
    if x.numel() < 3:
        return f"{x.numel()} usable examples, at least 3 needed"
    if bool((y == 1).all()) or bool((y == 0).all()):
        return "every usable example is " + ("solved" if bool(y[0] == 1) else "unsolved")
    if bool((x == x[0]).all()):
        return "the statistic is the same on every example"
    return ""


def _mean(values: torch.Tensor) -> float:
    return float(values.mean()) if values.numel() else math.nan


def _rows_of_layer(report, layer):
    from .report import Report

    if not isinstance(report, Report):
        raise ArgumentError(f"report must be a jacobiscope Report (from jacobiscope.analyze), got "
                            f"{type(report).__name__} — pass the result of analyze, or Report.from_json(path)")
    layers = sorted({row.layer for row in report.rows})
    if layer is None and len(layers) > 1:
        raise ArgumentError(f"the report measures layers {layers}: per-example rows need one — pass layer=<one of "
                            "them>")
    chosen = layers[0] if layer is None and layers else layer
    rows = sorted((row for row in report.rows if row.layer == chosen), key=lambda row: row.input_index)
    if not rows:
        raise ArgumentError(f"the report has no rows at layer {layer!r} (it has {layers}) — pass one of them")
    return rows


def _correctness(rows, correct) -> list:
    if correct is None:
        outcomes = [row.outcome.get("solved") if isinstance(row.outcome, dict) else None for row in rows]
        if all(flag is None for flag in outcomes):
            raise ArgumentError("no correctness to join: the model reports no outcome (no loop_outcome) — pass "
                                f"correct=[...], one bool per input ({len(rows)})")
        return outcomes
    if isinstance(correct, torch.Tensor):
        correct = correct.reshape(-1).tolist()
    elif hasattr(correct, "tolist") and not isinstance(correct, (list, tuple)):
        correct = correct.tolist()  # a NumPy array
    if isinstance(correct, (str, bytes, dict)) or not hasattr(correct, "__len__"):
        raise ArgumentError(f"correct must be one bool per input, got {type(correct).__name__} — pass e.g. "
                            "[True, False, ...] or a bool tensor")
    correct = list(correct)
    if len(correct) != len(rows):
        raise ArgumentError(f"correct has {len(correct)} values for {len(rows)} inputs — pass one bool per input")
    bad = [value for value in correct if not (isinstance(value, bool) or value in (0, 1) or value is None)]
    if bad:
        raise ArgumentError(f"correct must hold bools (or 0/1), got {bad[0]!r} — pass whether each answer is right")
    return [None if value is None else bool(value) for value in correct]


def _example_row(row, solved) -> ExampleRow:
    scalars = row.scalars()
    late = row.evidence.get("lambda_late") if isinstance(row.evidence, dict) else None
    return ExampleRow(index=row.input_index, label=row.input_label, lambda_max=_float(scalars["lambda_max"]),
                      lambda_stderr=_float(scalars["lambda_max_stderr"]), lambda_late=_float(late),
                      spectral_norm=_float(scalars["max_spectral_norm"]), regime=row.regime, solved=solved,
                      flags=list(row.flags))


def _float(value) -> float:
    return math.nan if value is None else float(value)


def _check_statistic(statistic) -> None:
    if not isinstance(statistic, str) or statistic not in STATISTICS:
        raise ArgumentError(f"statistic must be one of {list(STATISTICS)}, got {statistic!r}"
                            f"{did_you_mean(statistic, STATISTICS) if isinstance(statistic, str) else ''} — pass e.g. "
                            "statistic='lambda_max'")


def _check_resamples(resamples, seed) -> None:
    within_budget(resamples, "resamples", unit="resamples")  # resamples=10**9 would bootstrap for hours
    seed_int(seed, "bootstrap_seed")


def _fmt(value) -> str:
    return "nan" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.4g}"


def _nulls(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _nulls(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_nulls(item) for item in value]
    return value
