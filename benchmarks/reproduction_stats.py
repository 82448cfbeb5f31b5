"""The statistics inside a reproduction verdict: the effect, its 95% interval, its test, and the word its rule gives.

    from reproduction_stats import difference_of_means, verdict
    effect = difference_of_means(spec_seeds, base_seeds, what="best OOD accuracy, Spec - base")
    word, why = verdict(effect, claimed="greater")

A claim about models is decided on an effect with an interval, never on a difference of means alone:

- `difference_of_means` (independent groups: seeds of two recipes): percentile bootstrap of the difference of means,
  each group resampled on its own, and a two-sided permutation test of that difference (exact when the
  relabellings number at most `EXACT_LIMIT`, else `resamples` random ones).
- `paired_difference` (the same inputs scored twice: puzzles with and without votes): bootstrap over the pairs and
  a sign-flip permutation test (exact up to `EXACT_LIMIT` sign patterns).
- `rank_correlation` (Spearman's rho over checkpoints): bootstrap over the pairs and a permutation test.
- `seed_difference` (seeds of two recipes): `difference_of_means` when an exact permutation test of that many
  seeds can reach p < 0.05 (4 + 4 and more); below that (3 + 3: its smallest two-sided p is 0.1, so no effect could
  ever decide) Welch's t interval and test on the seed values, which can — the choice is made by the sample sizes
  alone, before any value is seen.
- `proportion` (k of n runs did something: escaped, solved): the exact Clopper-Pearson interval and the exact
  two-sided binomial test against a coin flip (``null`` 1/2 in `verdict`: "most runs do it", beyond the interval).
- `verdict`: "reproduced" when the whole interval lies beyond ``margin`` in the claimed direction and the test's
  p < 0.05, "refuted" when both hold the other way, else "inconclusive at this budget" with the sample size that
  would decide (the standard error shrinks as 1/sqrt(n); a t interval's quantile shrinks too as its degrees of
  freedom grow), shown in the evidence table's verdict cell. Too few values for an interval: "not testable here",
  with what was missing.
- `median_iqr` and `outliers` (beyond 3 interquartile ranges of the quartiles): a table cell carried by one value is
  named, never averaged away unnoticed.

Everything is seeded and uses NumPy only; the tests check it against SciPy's own bootstrap and permutation tests.
"""
from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass

import numpy as np

REPRODUCED, REFUTED, INCONCLUSIVE, NOT_TESTABLE = ("reproduced", "refuted", "inconclusive at this budget",
                                                   "not testable here")
EXACT_LIMIT = 20_000   # enumerate every relabelling / sign pattern up to this many (seed counts of a zoo: always)
CONFIDENCE = 0.95
PROPORTION_TEST = "Clopper-Pearson interval, exact binomial test against 1/2"


@dataclass(frozen=True)
class Effect:
    """An effect with its interval and test. ``sizes``: the sample size of each group (pairs: one entry)."""

    what: str
    estimate: float
    low: float
    high: float
    p_value: float
    test: str
    sizes: tuple
    signed: bool = True   # a difference prints its sign; a share (`proportion`) does not
    df: float | None = None  # a t interval's degrees of freedom: `needed_sizes` then lets its quantile shrink too

    def words(self, scale: float = 1.0, unit: str = "") -> str:
        """``+4.0 [-1.2, +9.1]<unit> (n = 5 / 5; <test>, p = 0.21)``, values times ``scale``."""
        sizes = " / ".join(str(size) for size in self.sizes)
        form = "+.3g" if self.signed else ".3g"
        return (f"{scale * self.estimate:{form}} [{scale * self.low:{form}}, {scale * self.high:{form}}]{unit} "
                f"(n = {sizes}; {self.test}, p = {self.p_value:.3g})")


def difference_of_means(first, second, *, what: str = "mean difference", resamples: int = 10_000,
                        seed: int = 0) -> Effect:
    """``mean(first) - mean(second)`` with a 95% percentile-bootstrap interval and a two-sided permutation test."""
    a, b = _values(first, "first"), _values(second, "second")
    rng = np.random.default_rng(seed)
    boot = (rng.choice(a, (resamples, a.size)).mean(axis=1) - rng.choice(b, (resamples, b.size)).mean(axis=1))
    low, high = _interval(boot)
    observed = a.mean() - b.mean()
    pooled, n = np.concatenate([a, b]), a.size
    total = math.comb(pooled.size, n)
    if total <= EXACT_LIMIT:
        masks = np.zeros((total, pooled.size), dtype=bool)
        for row, chosen in enumerate(itertools.combinations(range(pooled.size), n)):
            masks[row, list(chosen)] = True
        test = "exact permutation test"
    else:
        masks = np.zeros((resamples, pooled.size), dtype=bool)
        order = np.argsort(rng.random((resamples, pooled.size)), axis=1)[:, :n]
        np.put_along_axis(masks, order, True, axis=1)
        test = f"permutation test ({resamples:,} relabellings)"
    statistics = (masks * pooled).sum(1) / n - (~masks * pooled).sum(1) / (pooled.size - n)
    p_value = _two_sided(statistics, observed, exact=total <= EXACT_LIMIT)
    return Effect(what, float(observed), low, high, p_value, f"bootstrap interval, {test}", (a.size, b.size))


def seed_difference(first, second, *, what: str = "mean difference over seeds") -> Effect:
    """``mean(first) - mean(second)`` over training seeds: an exact permutation test where one can decide (its
    smallest two-sided p, 2 / C(n1 + n2, n1), below 0.05), else Welch's t on the seed values."""
    a, b = _values(first, "first"), _values(second, "second")
    if 2 / math.comb(a.size + b.size, a.size) < 1 - CONFIDENCE:
        return difference_of_means(a, b, what=what)
    effect = summary_difference((float(a.mean()), float(a.std(ddof=1)), a.size),
                                (float(b.mean()), float(b.std(ddof=1)), b.size), what=what)
    return Effect(what, effect.estimate, effect.low, effect.high, effect.p_value,
                  "Welch t interval over seeds (a permutation test of so few cannot reach p < 0.05)", effect.sizes,
                  df=effect.df)


def paired_difference(first, second, *, what: str = "paired difference", resamples: int = 10_000,
                      seed: int = 0) -> Effect:
    """``mean(first - second)`` over pairs (the same inputs twice), a 95% bootstrap interval over the pairs and a
    two-sided sign-flip permutation test."""
    a, b = _values(first, "first"), _values(second, "second")
    if a.size != b.size:
        raise ValueError(f"paired_difference needs pairs: {a.size} first values against {b.size} second ones — "
                         "score the same inputs in both, in the same order")
    d = a - b
    rng = np.random.default_rng(seed)
    low, high = _interval(rng.choice(d, (resamples, d.size)).mean(axis=1))
    if 2 ** d.size <= EXACT_LIMIT:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=d.size)))
        test = "exact sign-flip test"
    else:
        signs = rng.choice((1.0, -1.0), (resamples, d.size))
        test = f"sign-flip test ({resamples:,} patterns)"
    p_value = _two_sided((signs * d).mean(axis=1), d.mean(), exact=2 ** d.size <= EXACT_LIMIT)
    return Effect(what, float(d.mean()), low, high, p_value, f"bootstrap interval over pairs, {test}", (d.size,))


def rank_correlation(xs, ys, *, what: str = "Spearman rho", resamples: int = 10_000, seed: int = 0) -> Effect:
    """Spearman's rho with a 95% bootstrap interval over the pairs and a two-sided permutation test."""
    x, y = _values(xs, "xs"), _values(ys, "ys")
    if x.size != y.size or x.size < 3:
        raise ValueError(f"rank_correlation needs 3 or more pairs, got {x.size} xs and {y.size} ys")
    rng = np.random.default_rng(seed)
    observed = _spearman(x, y)
    rows = rng.choice(x.size, (resamples, x.size))
    boot = np.array([_spearman(x[r], y[r]) for r in rows])
    low, high = _interval(boot[np.isfinite(boot)])
    shuffled = np.array([_spearman(x, rng.permutation(y)) for _ in range(resamples)])
    p_value = _two_sided(shuffled, observed, exact=False)
    return Effect(what, float(observed), low, high, p_value,
                  f"bootstrap interval over pairs, permutation test ({resamples:,} shuffles)", (x.size,))


def verdict(effect: Effect | None, claimed: str, *, margin: float = 0.0, null: float = 0.0, scale: float = 1.0,
            unit: str = "") -> tuple[str, str]:
    """The word for ``effect`` against a claim that it is ``"greater"`` (or ``"less"``) than ``null`` (0: no
    difference; 1/2 for a `proportion`) by more than ``margin``, and why; None (too few values): "not testable
    here"."""
    if claimed not in ("greater", "less"):
        raise ValueError(f"claimed must be 'greater' or 'less', got {claimed!r}")
    if effect is None:
        return NOT_TESTABLE, "too few values for an interval"
    sign = 1.0 if claimed == "greater" else -1.0
    low, high = sorted((sign * (effect.low - null), sign * (effect.high - null)))
    interval = f"95% interval [{scale * effect.low:+.3g}, {scale * effect.high:+.3g}]{unit}"
    margin_said, null_said = f"{scale * margin:g}{unit}", f"{scale * null:g}"  # the table's scale and unit
    # A bootstrap interval of two or three values is the range of their means and can sit off zero while no
    # arrangement of so few values can be significant: the test has to agree before a word is given.
    significant = effect.p_value < 1 - CONFIDENCE
    edge = margin_said if null == 0 else null_said if margin == 0 else f"{null_said} +/- {margin_said}"
    if low > margin and significant:
        return REPRODUCED, f"{interval} lies beyond {edge} in the claimed direction, p = {effect.p_value:.3g}"
    if high < -margin and significant:
        return REFUTED, f"{interval} lies beyond {edge} against the claimed direction, p = {effect.p_value:.3g}"
    if low > margin or high < -margin:
        return INCONCLUSIVE, (f"{interval} lies off {edge} but the test does not (p = {effect.p_value:.3g}): too "
                              f"few values for the test to decide ({'/'.join(map(str, effect.sizes))})")
    reference = "zero" if null == 0 else null_said
    return INCONCLUSIVE, (f"{interval} includes {reference if margin == 0 else f'{reference} +/- {margin_said}'}; "
                          f"{needed_sizes(effect, null=null, scale=scale, unit=unit)}")


def needed_sizes(effect: Effect, *, null: float = 0.0, scale: float = 1.0, unit: str = "") -> str:
    """About how many values per group would decide, if the effect (its distance from ``null``) and spread stayed
    as measured (the interval's half-width shrinks as 1/sqrt(n)); the effect is said times ``scale`` in ``unit``, as
    the evidence table's effect cell says it."""
    half = (effect.high - effect.low) / 2
    if effect.estimate == null or half <= 0:
        return "no effect measured: no sample size decides it"
    if effect.test == PROPORTION_TEST:  # an exact interval: the smallest n at which this share would decide
        for trials in range(effect.sizes[0] + 1, 100_001):
            share = proportion(round(effect.estimate * trials), trials)
            if (share.low > null or share.high < null) and share.p_value < 1 - CONFIDENCE:
                return f"about n = {trials} would decide it if the share stayed {effect.estimate:.3g}"
        return f"no n up to 100,000 decides a share of {effect.estimate:.3g} against {null:g}"
    factor = (half / abs(effect.estimate - null)) ** 2
    if effect.df is not None and math.isfinite(effect.df) and effect.df > 0:
        factor = _t_factor(half, abs(effect.estimate - null), effect.df)
    sizes = " / ".join(str(math.ceil(size * factor)) for size in effect.sizes)
    return f"about n = {sizes} would decide it if the effect stayed {scale * effect.estimate:+.3g}{unit}"


def _t_factor(half: float, distance: float, df: float) -> float:
    """How many times the groups must grow for a t interval of half-width ``half`` (``df`` degrees of freedom) to
    shrink below ``distance``: the standard error falls as 1/sqrt(k), and the t quantile falls too as the degrees of
    freedom grow (about (df + 2) k - 2 for groups k times larger) — at 2 + 2 seeds (t = 4.3 or more) the plain
    1/sqrt(n) rule would ask for many times too many seeds."""
    from scipy import stats as scipy_stats

    quantile = lambda freedom: float(scipy_stats.t.ppf(0.5 + CONFIDENCE / 2, freedom))  # noqa: E731
    error = half / quantile(df)
    factor = (half / distance) ** 2
    for _ in range(100):  # a fixed point: the quantile at the grown df, then the growth it needs
        grown = max(1.0, (quantile(max(df, (df + 2) * factor - 2)) * error / distance) ** 2)
        if abs(grown - factor) < 1e-9 * factor:
            break
        factor = grown
    return factor


def proportion(successes: int, trials: int, *, what: str = "share of runs") -> Effect:
    """``successes / trials`` with its exact (Clopper-Pearson) 95% interval and the exact two-sided binomial test
    against 1/2; test it with ``verdict(..., null=0.5)``. The interval never needs a normal approximation, so it
    holds at the handful of runs a theory check affords (10 of 10: [0.69, 1])."""
    from scipy import stats as scipy_stats

    if not (isinstance(trials, int) and trials >= 1 and isinstance(successes, int) and 0 <= successes <= trials):
        raise ValueError(f"proportion needs 0 <= successes <= trials with trials >= 1 (integers), got "
                         f"{successes!r} of {trials!r}")
    tail = (1 - CONFIDENCE) / 2
    low = 0.0 if successes == 0 else float(scipy_stats.beta.ppf(tail, successes, trials - successes + 1))
    high = 1.0 if successes == trials else float(scipy_stats.beta.ppf(1 - tail, successes + 1, trials - successes))
    p_value = float(scipy_stats.binomtest(successes, trials, 0.5).pvalue)
    return Effect(what, successes / trials, low, high, p_value, PROPORTION_TEST, (trials,), signed=False)


def median_iqr(values) -> tuple[float, float, float]:
    """``(median, first quartile, third quartile)``."""
    v = _values(values, "values", minimum=1)
    q1, median, q3 = np.percentile(v, (25, 50, 75))
    return float(median), float(q1), float(q3)


def outliers(values, *, reach: float = 3.0) -> list[int]:
    """Indices of values beyond ``reach`` interquartile ranges outside the quartiles (4 or more values)."""
    v = _values(values, "values", minimum=1)
    if v.size < 4:
        return []
    q1, q3 = np.percentile(v, (25, 75))
    spread = q3 - q1
    return [int(i) for i in np.flatnonzero((v < q1 - reach * spread) | (v > q3 + reach * spread))]


def _values(values, name: str, minimum: int = 2) -> np.ndarray:
    array = np.asarray(list(values), dtype=float)
    if array.ndim != 1 or array.size < minimum or not np.isfinite(array).all():
        raise ValueError(f"{name} must be {minimum} or more finite numbers, got {list(array.ravel())[:8]}")
    return array


def _interval(samples: np.ndarray) -> tuple[float, float]:
    tail = (1 - CONFIDENCE) / 2
    low, high = np.quantile(samples, (tail, 1 - tail))
    return float(low), float(high)


def _two_sided(statistics: np.ndarray, observed: float, exact: bool) -> float:
    """P(|T| >= |t|): over every arrangement (exact: the observed one is among them), or over random ones counting
    the observed arrangement too (never 0). Ties count as extreme, up to rounding of sums over the same values."""
    extreme = int((np.abs(statistics) >= abs(observed) - 1e-12 * max(1.0, abs(observed))).sum())
    return extreme / statistics.size if exact else (extreme + 1) / (statistics.size + 1)


def _spearman(x: np.ndarray, y: np.ndarray) -> float:
    rx, ry = _ranks(x), _ranks(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    denominator = math.sqrt(float((rx * rx).sum() * (ry * ry).sum()))
    return float((rx * ry).sum() / denominator) if denominator > 0 else math.nan


def _ranks(v: np.ndarray) -> np.ndarray:
    """Average ranks (ties share the mean of their positions)."""
    order = np.argsort(v, kind="mergesort")
    ranks = np.empty(v.size)
    ranks[order] = np.arange(1, v.size + 1)
    for value in np.unique(v):
        tied = v == value
        if tied.sum() > 1:
            ranks[tied] = ranks[tied].mean()
    return ranks


def summary_difference(first: tuple, second: tuple, *, what: str = "difference of means") -> Effect:
    """``mean1 - mean2`` from summaries ``(mean, sd, n)`` (a card keeps the mean and s.d. over its puzzles, not each
    value): Welch's t interval (Welch-Satterthwaite degrees of freedom) and its two-sided p-value."""
    from scipy import stats as scipy_stats

    (m1, s1, n1), (m2, s2, n2) = first, second
    if min(n1, n2) < 2:
        raise ValueError(f"summary_difference needs n >= 2 on each side, got {n1} and {n2}")
    v1, v2 = s1 * s1 / n1, s2 * s2 / n2
    error = math.sqrt(v1 + v2)
    df = (v1 + v2) ** 2 / (v1 * v1 / (n1 - 1) + v2 * v2 / (n2 - 1)) if error > 0 else float(n1 + n2 - 2)
    estimate = m1 - m2
    half = float(scipy_stats.t.ppf(0.5 + CONFIDENCE / 2, df)) * error
    p_value = float(2 * scipy_stats.t.sf(abs(estimate) / error, df)) if error > 0 else float(estimate == 0)
    return Effect(what, float(estimate), estimate - half, estimate + half, p_value,
                  "Welch t interval from the cards' per-input mean and s.d.", (int(n1), int(n2)), df=float(df))


@dataclass(frozen=True)
class Evidence:
    """One tested part of a claim, as REPRODUCTION.md shows it: what was tested, by which test, the effect with its
    95% interval, over which loop window, seeds and inputs, and the word the rule gave. ``counted=False``: a
    sensitivity row (another window), shown beside the verdict, not part of it."""

    part: str
    test: str
    effect: str
    window: str
    seeds: str
    inputs: str
    verdict: str
    why: str = ""
    counted: bool = True


def evidence(part: str, effect: Effect | None, claimed: str, *, window: str, seeds: str, inputs: str,
             margin: float = 0.0, null: float = 0.0, scale: float = 1.0, unit: str = "", counted: bool = True,
             missing: str = "too few values for an interval") -> Evidence:
    """The `Evidence` of ``effect`` tested against ``claimed`` (``"greater"`` / ``"less"`` than ``null`` by
    ``margin``); ``effect`` None: "not testable here" with ``missing`` as the reason."""
    word, why = verdict(effect, claimed, margin=margin, null=null, scale=scale, unit=unit)
    if effect is None:
        return Evidence(part, "-", "-", window, seeds, inputs, word, missing, counted)
    return Evidence(part, effect.test, f"{effect.what}: {effect.words(scale, unit)}", window, seeds, inputs, word,
                    why, counted)


def combine(parts: list[Evidence]) -> str:
    """The claim's word from its counted parts: their common word when they agree; "partly" when at least one part
    is reproduced and another is not; else the weakest word among them (not testable < inconclusive < refuted
    only when every part is refuted)."""
    words = [part.verdict for part in parts if part.counted]
    if not words:
        raise ValueError("a claim needs at least one counted part of evidence")
    if len(set(words)) == 1:
        return words[0]
    if REPRODUCED in words:
        return "partly"
    return INCONCLUSIVE if INCONCLUSIVE in words or REFUTED in words else NOT_TESTABLE


def _verdict_cell(part: Evidence) -> str:
    """The word, and for an undecided part why (the sample size that would decide it, or what could not be
    tested); the interval itself is in the effect cell already."""
    if part.verdict not in (INCONCLUSIVE, NOT_TESTABLE) or not part.why:
        return part.verdict
    reason = re.sub(r"^95% interval \[[^\]]*\].*? (?=includes |lies )", "", part.why)  # the interval and its unit
    return f"{part.verdict}: {reason}"


def evidence_table(parts: list[Evidence], scale_note: str = "") -> str:
    """The markdown table of a claim's evidence (a sensitivity row says so in its verdict cell)."""
    rows = ["| part | test | effect (95% interval) | window | seeds | inputs | verdict |", "|---|---|---|---|---|---|---|"]
    for p in parts:
        word = _verdict_cell(p)
        word = word if p.counted else f"{word} (sensitivity: not counted)"
        rows.append(f"| {p.part} | {p.test} | {p.effect} | {p.window} | {p.seeds} | {p.inputs} | {word} |")
    return "\n".join(rows) + (f"\n\n{scale_note}" if scale_note else "")
