"""jacobiscope._validation: the shared argument checks' words and their edge values (bool is not an int, a str
subclass is its str, NaN is not a number a size can take)."""
import math

import numpy as np
import pytest

from jacobiscope._validation import did_you_mean, one_of, positive_int
from jacobiscope.errors import ArgumentError


@pytest.mark.parametrize("value", ["qr", np.str_("qr")])
def test_one_of_returns_a_listed_choice_as_given(value):
    assert one_of(value, "method", ("qr", "two_trajectory")) is value


@pytest.mark.parametrize("value, words", [
    ("two-trajectory", "method must be 'qr' or 'two_trajectory', got 'two-trajectory' (did you mean "
                       "'two_trajectory'?) — pass one of them."),
    ("QR", "method must be 'qr' or 'two_trajectory', got 'QR' (did you mean 'qr'?) — pass one of them."),
    (None, "method must be 'qr' or 'two_trajectory', got None — pass one of them."),
    (["qr"], "method must be 'qr' or 'two_trajectory', got ['qr'] — pass one of them."),
    ("x" * 100, "got '" + "x" * 56 + "... — pass one of them."),
])
def test_one_of_names_the_choices_and_the_closest_one(value, words):
    with pytest.raises(ArgumentError) as info:
        one_of(value, "method", ("qr", "two_trajectory"))
    assert str(info.value).endswith(words) if value == "x" * 100 else str(info.value) == words


def test_one_of_keeps_bools_and_ints_apart():
    assert one_of(True, "header", ("auto", True, False)) is True
    for value in (1, 0, 1.0):
        with pytest.raises(ArgumentError, match="header must be 'auto', True or False"):
            one_of(value, "header", ("auto", True, False))
    with pytest.raises(ValueError, match="kind must be 'a'"):  # the caller's own error type
        one_of("b", "kind", ("a",), error=ValueError)


def test_did_you_mean_and_positive_int_edges():
    assert did_you_mean("atention", ["block", "attention"]) == " (did you mean 'attention'?)"
    assert did_you_mean(3, ["block", "attention"]) == ""
    # case is ignored in the match and kept in the answer: the name as it must be typed
    assert did_you_mean("ITRSA-SUDOKU", ["akorn-sudoku", "itrsa-sudoku"]) == " (did you mean 'itrsa-sudoku'?)"
    assert did_you_mean("zoo/Akorn-N4", ["zoo/akorn-n4", "zoo/akorn-n8"]) == " (did you mean 'zoo/akorn-n4'?)"
    for bad in (True, 0, -2, 1.5, math.nan, "3"):
        with pytest.raises(ArgumentError, match="loops must be a positive int"):
            positive_int(bad, "loops")
    assert positive_int(np.int64(3), "loops") == 3
