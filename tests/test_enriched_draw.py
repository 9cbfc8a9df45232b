"""The two-stratum label draw (dpmv_lib.evaluate.enriched_draw): the stratum predictor reads the
conditioning, each stratum is drawn uniformly with the probability it records, and the inverse
probabilities add up to the strata."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.stats import binomtest

from dpmv_lib.core.errors import ParameterError
from dpmv_lib.evaluate.enriched_draw import design_weights, echo_words, two_stratum_draw, view_echo

VIEW = "Response guidance:\n- Prefer pregnancy-safe food: well-cooked proteins, pasteurised dairy, no raw fish."


def test_echo_words_count_the_conditioning_words_the_response_repeats_outside_the_query():
    q = "Give me a simple dinner recipe with fish."
    r = "- Prefer pregnancy-safe food: well-cooked proteins and dairy.\n\nRequest: a dinner recipe with fish."
    # prefer, pregnancy, safe, food, cooked, proteins, dairy; "fish" is in the query, "guidance" in the header
    assert echo_words(q, r, VIEW) == 7
    assert echo_words(q, "Response guidance: try rice.", VIEW) == 0


def test_view_echo_needs_a_released_view_method_and_enough_words():
    q, r = "A dinner idea?", "Prefer pregnancy-safe food: well-cooked proteins, pasteurised dairy."
    assert view_echo("DP-MemView (pre)", q, r, VIEW)
    assert not view_echo("RawReadSet", q, r, VIEW)
    assert not view_echo("DP-MemView (on)", q, "Prefer pasteurised dairy.", VIEW)


def test_each_stratum_is_drawn_with_the_probability_it_records():
    units = pd.DataFrame({"u": np.arange(12)})
    high = np.arange(12) < 4
    counts = np.zeros(12)
    draws = 3000
    for s in range(draws):
        d = two_stratum_draw(units, high, 2, 3, np.random.default_rng(s))
        assert sorted(d["stratum"].value_counts().items()) == [("high", 2), ("low", 3)]
        counts[d["u"].to_numpy()] += 1
        p = d.set_index("u")["inclusion_probability"]
    assert p[p.index < 4].eq(2 / 4).all() and p[p.index >= 4].eq(3 / 8).all()
    for u in range(12):   # a wrong probability for any unit fails at this level
        assert binomtest(int(counts[u]), draws, 2 / 4 if u < 4 else 3 / 8).pvalue > 1e-6


def test_a_stratum_smaller_than_asked_is_taken_whole_and_weights_add_up():
    units = pd.DataFrame({"u": np.arange(10)})
    high = np.arange(10) < 3
    d = two_stratum_draw(units, high, 5, 4, np.random.default_rng(0))
    h = d[d["stratum"] == "high"]
    assert sorted(h["u"]) == [0, 1, 2] and (h["inclusion_probability"] == 1).all()
    for _, g in d.groupby("stratum"):
        assert (1 / g["inclusion_probability"]).sum() == pytest.approx(g["stratum_size"].iloc[0])
    again = two_stratum_draw(units, high, 5, 4, np.random.default_rng(0))
    pd.testing.assert_frame_equal(d, again)


def test_bad_draws_are_refused():
    units = pd.DataFrame({"u": np.arange(4)})
    with pytest.raises(ParameterError, match="stratum flags"):
        two_stratum_draw(units, [True], 1, 1, np.random.default_rng(0))
    with pytest.raises(ParameterError, match=">= 0"):
        two_stratum_draw(units, [True] * 4, -1, 1, np.random.default_rng(0))
    with pytest.raises(ParameterError, match="nothing"):
        two_stratum_draw(units, [True] * 4, 0, 0, np.random.default_rng(0))


def test_design_weights_count_the_draw_at_its_effective_size():
    p = np.array([np.nan, np.nan, 0.5, 0.5, 0.1])
    w = design_weights(p)
    ht = 1 / p[2:]
    assert w[:2].tolist() == [1.0, 1.0]
    assert w[2:] / w[2] == pytest.approx(ht / ht[0])
    assert w[2:].sum() == pytest.approx(ht.sum() ** 2 / (ht ** 2).sum())
    assert design_weights([np.nan, np.nan]).tolist() == [1.0, 1.0]
    with pytest.raises(ParameterError, match="inclusion probabilities"):
        design_weights([0.0, 0.5])
