"""Wilson intervals against the textbook values and their defining equation; the exact McNemar test against SciPy's
binomial test."""
import math

import pytest

from jacobiscope._proportions import exact_mcnemar, wilson_interval


def test_wilson_interval_matches_its_closed_form_and_edges():
    low, high = wilson_interval(8, 10)
    assert (round(low, 4), round(high, 4)) == (0.4902, 0.9433)   # the textbook Wilson 95% interval for 8 / 10
    assert wilson_interval(0, 5)[0] == 0.0 and wilson_interval(5, 5)[1] == 1.0
    assert all(math.isnan(v) for v in wilson_interval(0, 0))


@pytest.mark.parametrize("successes, total", [(3, 17), (50, 200), (199, 200)])
def test_wilson_bounds_solve_the_score_equation(successes, total):
    """Each bound p satisfies (x/n - p)^2 = z^2 p (1 - p) / n: the score test sits exactly at its 95% edge."""
    z = 1.959963984540054
    for bound in wilson_interval(successes, total):
        assert (successes / total - bound) ** 2 == pytest.approx(z * z * bound * (1 - bound) / total, rel=1e-9)


@pytest.mark.parametrize("better, worse", [(8, 0), (11, 3), (0, 0), (5, 5), (29, 1), (2, 14)])
def test_exact_mcnemar_is_the_two_sided_binomial_test_on_the_discordant_items(better, worse):
    stats = pytest.importorskip("scipy.stats")
    expected = 1.0 if better + worse == 0 else stats.binomtest(better, better + worse, 0.5).pvalue
    assert exact_mcnemar(better, worse) == pytest.approx(expected, rel=1e-12)
