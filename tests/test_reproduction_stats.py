"""benchmarks/reproduction_stats.py against SciPy's permutation tests and bootstrap, and normal theory; the verdict
words from constructed effects."""
import math

import numpy as np
import pytest
import scipy.stats

from conftest import load_script

stats = load_script("benchmarks/reproduction_stats.py")


def _mean_difference(x, y, axis=-1):
    return np.mean(x, axis=axis) - np.mean(y, axis=axis)


def test_permutation_p_values_equal_scipys_exact_tests():
    first, second = [0.41, 0.52, 0.38, 0.60, 0.47], [0.30, 0.44, 0.29, 0.35, 0.41]
    effect = stats.difference_of_means(first, second)
    reference = scipy.stats.permutation_test((first, second), _mean_difference, permutation_type="independent",
                                             n_resamples=np.inf, alternative="two-sided")
    assert effect.p_value == pytest.approx(reference.pvalue, abs=1e-12)
    assert effect.estimate == pytest.approx(np.mean(first) - np.mean(second))
    assert "exact permutation test" in effect.test and effect.sizes == (5, 5)
    # paired: the sign-flip test is SciPy's 'samples' permutation test of the mean difference
    a, b = [0.9, 0.7, 0.8, 0.95, 0.6, 0.85, 0.7], [0.8, 0.72, 0.6, 0.9, 0.61, 0.7, 0.66]
    paired = stats.paired_difference(a, b)
    reference = scipy.stats.permutation_test((a, b), lambda x, y, axis=-1: np.mean(x - y, axis=axis),
                                             permutation_type="samples", n_resamples=np.inf)
    assert paired.p_value == pytest.approx(reference.pvalue, abs=1e-12)


def test_bootstrap_intervals_agree_with_scipy_and_normal_theory():
    rng = np.random.default_rng(1)
    first, second = rng.normal(1.0, 2.0, 400), rng.normal(0.2, 1.0, 300)
    effect = stats.difference_of_means(first, second, seed=3)
    half = 1.96 * math.sqrt(first.var(ddof=1) / 400 + second.var(ddof=1) / 300)
    centre = first.mean() - second.mean()
    assert effect.low == pytest.approx(centre - half, abs=0.1 * half)
    assert effect.high == pytest.approx(centre + half, abs=0.1 * half)
    reference = scipy.stats.bootstrap((first, second), _mean_difference, method="percentile", n_resamples=10_000,
                                      random_state=4).confidence_interval
    assert (effect.low, effect.high) == pytest.approx((reference.low, reference.high), abs=0.1 * half)
    # many values: a random-relabelling p-value, never 0
    assert "10,000 relabellings" in effect.test and 0 < effect.p_value < 1e-3


def test_rank_correlation_against_scipy():
    rng = np.random.default_rng(2)
    x = rng.normal(size=25)
    y = 0.6 * x + rng.normal(size=25)
    effect = stats.rank_correlation(x, y, resamples=2000)
    assert effect.estimate == pytest.approx(scipy.stats.spearmanr(x, y).statistic, abs=1e-12)
    assert effect.low < effect.estimate < effect.high
    reference = scipy.stats.permutation_test((y,), lambda v: scipy.stats.spearmanr(x, v).statistic,
                                             permutation_type="pairings", n_resamples=2000, random_state=0)
    assert effect.p_value == pytest.approx(reference.pvalue, abs=0.01)
    tied = stats.rank_correlation([1, 2, 2, 3], [1, 3, 3, 4], resamples=100)
    assert tied.estimate == pytest.approx(scipy.stats.spearmanr([1, 2, 2, 3], [1, 3, 3, 4]).statistic)


@pytest.mark.parametrize("low, high, claimed, word", [
    (0.02, 0.10, "greater", "reproduced"), (-0.10, -0.02, "greater", "refuted"),
    (-0.10, -0.02, "less", "reproduced"), (-0.03, 0.08, "greater", "inconclusive at this budget"),
])
def test_verdict_words_follow_the_interval(low, high, claimed, word):
    effect = stats.Effect("x", (low + high) / 2, low, high, 0.01, "test", (5, 5))
    assert stats.verdict(effect, claimed)[0] == word
    assert stats.verdict(None, claimed)[0] == "not testable here"
    # the test must agree: an interval off zero with p >= 0.05 (two or three seeds) decides nothing
    weak = stats.Effect("x", (low + high) / 2, low, high, 0.25, "test", (2, 2))
    word, why = stats.verdict(weak, claimed)
    assert word == "inconclusive at this budget" and ("too few values" in why or "includes" in why)


def test_two_seeds_never_decide_even_when_their_bootstrap_interval_is_off_zero():
    effect = stats.paired_difference([0.30, 0.31], [0.10, 0.12])
    assert effect.low > 0 and effect.p_value >= 0.5
    assert stats.verdict(effect, "greater")[0] == "inconclusive at this budget"
    # six pairs, all the same way: the exact sign-flip test reaches 2/64 and the word follows
    six = stats.paired_difference([0.30, 0.31, 0.29, 0.33, 0.32, 0.30], [0.10, 0.12, 0.11, 0.1, 0.13, 0.09])
    assert six.p_value == pytest.approx(2 / 64) and stats.verdict(six, "greater")[0] == "reproduced"


def test_claim_words_combine_their_counted_parts():
    def part(word, counted=True):
        return stats.Evidence("p", "t", "e", "w", "s", "i", word, counted=counted)

    assert stats.combine([part("reproduced"), part("reproduced"), part("refuted", counted=False)]) == "reproduced"
    assert stats.combine([part("reproduced"), part("inconclusive at this budget")]) == "partly"
    assert stats.combine([part("refuted"), part("inconclusive at this budget")]) == "inconclusive at this budget"
    assert stats.combine([part("not testable here"), part("not testable here")]) == "not testable here"
    with pytest.raises(ValueError, match="at least one counted part"):
        stats.combine([part("reproduced", counted=False)])


def test_summary_intervals_against_scipys_t_tests():
    import numpy as np

    rng = np.random.default_rng(3)
    a, b = rng.normal(0.1, 0.05, 16), rng.normal(0.05, 0.08, 12)
    effect = stats.summary_difference((a.mean(), a.std(ddof=1), 16), (b.mean(), b.std(ddof=1), 12))
    reference = scipy.stats.ttest_ind(a, b, equal_var=False)
    assert effect.p_value == pytest.approx(reference.pvalue, rel=1e-9)
    low, high = reference.confidence_interval(0.95)
    assert (effect.low, effect.high) == (pytest.approx(low, rel=1e-9), pytest.approx(high, rel=1e-9))


def test_inconclusive_names_the_sample_that_would_decide():
    effect = stats.Effect("x", 0.025, -0.03, 0.08, 0.3, "test", (5, 5))
    word, why = stats.verdict(effect, "greater")
    # half-width 0.055 against an effect of 0.025: (0.055 / 0.025)^2 = 4.84 times the seeds
    assert word == "inconclusive at this budget" and "about n = 25 / 25" in why
    assert "no sample size" in stats.needed_sizes(stats.Effect("x", 0.0, -0.1, 0.1, 1.0, "t", (3, 3)))
    # a margin: an interval inside it decides nothing
    assert stats.verdict(stats.Effect("x", 0.015, 0.01, 0.02, 0.001, "t", (9, 9)), "greater", margin=0.02)[0] == \
        "inconclusive at this budget"


def test_the_seeds_that_would_decide_a_t_interval_count_its_shrinking_quantile():
    """2 + 2 seeds with equal spread (Welch's df = 2, t = 4.30): growing the groups also shrinks the t quantile, so
    the sample that decides is far smaller than (half / effect)^2 says. Checked against scipy's t interval at the
    size named (it decides) and one seed fewer (it does not)."""
    effect = stats.seed_difference([5.0, 7.0], [1.0, 3.0], what="gain")  # means 6 and 2, s.d. 1.41 each
    assert effect.df == pytest.approx(2.0)  # equal spreads: Welch's df is the pooled 2 + 2 - 2
    stretched = stats.Effect("gain", 1.0, 1.0 - 9.0, 1.0 + 9.0, 0.5, effect.test, (2, 2), df=2.0)  # half 9 at df 2
    n = int(stats.needed_sizes(stretched).split("n = ")[1].split(" /")[0])
    plain = math.ceil(2 * (9.0 / 1.0) ** 2)
    assert n < plain / 4   # the 1/sqrt(n) rule alone asks for 162 per group

    def half_width(size):  # equal groups with the s.d. that gives half-width 9 at 2 + 2: t(df) * s * sqrt(2 / n)
        sd = 9.0 / scipy.stats.t.ppf(0.975, 2) / math.sqrt(2 / 2)
        return scipy.stats.t.ppf(0.975, 2 * size - 2) * sd * math.sqrt(2 / size)

    assert half_width(n) < 1.0 <= half_width(n - 1)


def test_undecided_parts_say_why_in_the_evidence_table():
    undecided = stats.evidence("part", stats.Effect("x", 0.025, -0.03, 0.08, 0.3, "test", (5, 5)), "greater",
                               window="w", seeds="s", inputs="i")
    untestable = stats.evidence("other", None, "greater", window="w", seeds="s", inputs="i",
                                missing="the variants never trained")
    decided = stats.evidence("third", stats.Effect("x", 0.5, 0.4, 0.6, 1e-4, "test", (9, 9)), "greater",
                             window="w", seeds="s", inputs="i")
    table = stats.evidence_table([undecided, untestable, decided]).splitlines()
    assert table[2].endswith("| inconclusive at this budget: includes zero; about n = 25 / 25 would decide it if the "
                             "effect stayed +0.025 |")
    assert table[3].endswith("| not testable here: the variants never trained |")
    assert table[4].endswith("| reproduced |")
    # in the effect cell's own scale and unit (accuracy shares said in points)
    scaled = stats.evidence("part", stats.Effect("x", 0.025, -0.03, 0.08, 0.3, "test", (5, 5)), "greater",
                            window="w", seeds="s", inputs="i", scale=100, unit=" points")
    assert scaled.effect.startswith("x: +2.5 [-3, +8] points") and scaled.why.startswith("95% interval [-3, +8] points")
    assert scaled.why.endswith("about n = 25 / 25 would decide it if the effect stayed +2.5 points")
    assert stats.evidence_table([scaled]).splitlines()[2].endswith(
        "| inconclusive at this budget: includes zero; about n = 25 / 25 would decide it if the effect stayed +2.5 "
        "points |")


def test_median_iqr_and_outliers_name_a_cell_carried_by_one_value():
    norms = [6.7, 7.9, 8.4, 9.1, 10.2, 12.0, 17328.0]   # the no-norm zoo cell: one start state overflowed
    assert stats.outliers(norms) == [6]
    median, q1, q3 = stats.median_iqr(norms)
    assert (median, q1, q3) == (9.1, pytest.approx(8.15), pytest.approx(11.1))
    assert stats.outliers([1.0, 1.1, 0.9, 1.05]) == []
    with pytest.raises(ValueError, match="finite numbers"):
        stats.difference_of_means([1.0, float("nan")], [1.0, 2.0])
    with pytest.raises(ValueError, match="needs pairs"):
        stats.paired_difference([1.0, 2.0], [1.0, 2.0, 3.0])


def test_proportion_interval_and_test_against_closed_forms_and_scipy():
    # k = n and k = 0 have closed-form Clopper-Pearson bounds: (alpha / 2)^(1 / n) and its mirror; p = 2 / 2^n
    for n in (1, 2, 10):
        every = stats.proportion(n, n)
        assert every.estimate == 1.0 and every.high == 1.0
        assert every.low == pytest.approx(0.025 ** (1 / n), rel=1e-10)
        assert every.p_value == pytest.approx(min(1.0, 2 * 0.5 ** n), rel=1e-12)
        none = stats.proportion(0, n)
        assert none.low == 0.0 and none.high == pytest.approx(1 - 0.025 ** (1 / n), rel=1e-10)
    # an interior count: SciPy's own exact interval
    middle = stats.proportion(7, 10)
    reference = scipy.stats.binomtest(7, 10).proportion_ci(0.95, method="exact")
    assert (middle.low, middle.high) == (pytest.approx(reference.low, rel=1e-9), pytest.approx(reference.high, rel=1e-9))
    # against a coin flip: 10 of 10 decides "most runs", 2 of 2 does not (its interval reaches down to 0.16)
    assert stats.verdict(stats.proportion(10, 10), "greater", null=0.5)[0] == "reproduced"
    assert stats.verdict(stats.proportion(0, 10), "less", null=0.5)[0] == "reproduced"
    assert stats.verdict(stats.proportion(0, 10), "greater", null=0.5)[0] == "refuted"
    word, why = stats.verdict(stats.proportion(2, 2), "greater", null=0.5)
    assert word == "inconclusive at this budget" and "includes 0.5" in why
    assert stats.verdict(stats.proportion(7, 10), "greater", null=0.5)[0] == "inconclusive at this budget"
    for bad in ((3, 2), (-1, 4), (1, 0), (1.5, 3)):
        with pytest.raises(ValueError, match="successes <= trials"):
            stats.proportion(*bad)


def test_a_share_names_the_runs_that_would_decide_it():
    # 2 of 2 escaped: all of n runs decide once (1/2)^n * 2 < 0.05 and 0.025^(1/n) > 1/2, i.e. n = 6
    why = stats.verdict(stats.proportion(2, 2), "greater", null=0.5)[1]
    assert "about n = 6 would decide it if the share stayed 1" in why
    assert stats.verdict(stats.proportion(6, 6), "greater", null=0.5)[0] == "reproduced"
    assert stats.verdict(stats.proportion(5, 5), "greater", null=0.5)[0] == "inconclusive at this budget"
    assert "1 [0.158, 1]" in stats.proportion(2, 2).words()   # a share prints no sign


def test_seed_difference_uses_a_test_that_can_decide_at_its_sample_size():
    import numpy as np

    # 3 + 3 seeds: an exact permutation test's smallest p is 2/20 = 0.1, so Welch's t on the seed values instead
    a, b = [0.20, 0.22, 0.18], [0.10, 0.12, 0.07]
    small = stats.seed_difference(a, b)
    reference = scipy.stats.ttest_ind(a, b, equal_var=False)
    assert small.p_value == pytest.approx(reference.pvalue, rel=1e-9) and small.test.startswith("Welch t")
    low, high = reference.confidence_interval(0.95)
    assert (small.low, small.high) == (pytest.approx(low, rel=1e-9), pytest.approx(high, rel=1e-9))
    assert stats.verdict(small, "greater")[0] == "reproduced"
    assert stats.difference_of_means(a, b).p_value == pytest.approx(0.1)   # what the permutation test could say
    # 4 + 4 and more: the permutation test (smallest p 2/70 < 0.05), as difference_of_means computes it
    rng = np.random.default_rng(5)
    c, d = rng.normal(0.1, 0.02, 4), rng.normal(0.0, 0.02, 5)
    large = stats.seed_difference(c, d)
    assert large == stats.difference_of_means(c, d, what=large.what) and "permutation" in large.test
