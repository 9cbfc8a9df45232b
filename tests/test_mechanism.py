"""Eq. (7): probabilities against an independent reference, chi-square checks of the float and the
exact sampler, and log-space safety for huge eps*u."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy.stats import chisquare

from dpmv_lib.core.errors import ParameterError
from dpmv_lib.core.sampling import SeededRandomSource
from dpmv_lib.core.selection import (em_log_probabilities, em_probabilities, exponential_mechanism, sample_em,
                                     sample_em_batch, sample_em_exact)

P_MIN = 1e-4  # chi-square p-value threshold: stable under the fixed seeds, yet catches a wrong law


def reference_em(u, eps, du):
    """Eq. (7) written out independently of dpmv_lib: exp(eps u / (2 du)) / sum exp(...)."""
    w = [math.exp(eps * x / (2 * du)) for x in u]
    z = sum(w)
    return np.array([x / z for x in w])


def wrong_em(u, eps, du):
    """A plausible bug: the factor 2 missing from the exponent."""
    return reference_em(u, 2 * eps, du)


CASES = [
    ([0.0, 0.5, 1.0], 2.0, 1.0),
    ([0.2, 0.9, 0.9, 0.0], 3.0, 0.6),
    ([0.5, 1.0, 0.8, 0.0], 2 / 3, 0.6),  # the running example's food slot at eps = 2/3
]


@pytest.mark.parametrize("u,eps,du", CASES)
def test_probabilities_match_reference(u, eps, du):
    p = em_probabilities(u, eps, du)
    np.testing.assert_allclose(p, reference_em(u, eps, du), rtol=1e-12)
    assert p.sum() == pytest.approx(1.0, abs=1e-12)
    ef, df = Fraction(eps).limit_denominator(1000), Fraction(du).limit_denominator(1000)
    np.testing.assert_allclose(exponential_mechanism().probabilities(u, ef, df), reference_em(u, float(ef), float(df)))


def test_single_release_is_eps_dp():
    """|log P_M(v) - log P_M'(v)| <= eps when every utility moves by at most du."""
    rng = np.random.default_rng(1)
    for _ in range(200):
        eps, du = rng.uniform(0.1, 4), rng.uniform(0.1, 1)
        u = rng.uniform(0, 1, 5)
        u2 = np.clip(u + rng.uniform(-du, du, 5), 0, 1)
        lp, lp2 = em_log_probabilities(u, eps, du), em_log_probabilities(u2, eps, du)
        assert np.max(np.abs(lp - lp2)) <= eps + 1e-12


def test_zero_epsilon_is_uniform_and_batch_rows():
    np.testing.assert_allclose(em_probabilities([0.0, 1.0, 0.3], 0.0, 0.6), [1 / 3] * 3)
    u = np.array([[0.0, 1.0], [1.0, 0.0]])
    p = em_probabilities(u, np.array([2.0, 4.0]), 1.0)
    np.testing.assert_allclose(p[0], reference_em([0, 1], 2.0, 1.0))
    np.testing.assert_allclose(p[1], reference_em([1, 0], 4.0, 1.0))


def test_log_space_is_safe_for_huge_eps_u():
    u = [1.0, 0.5, 0.0, 1.0]
    lp = em_log_probabilities(u, 1e6, 0.6)
    p = em_probabilities(u, 1e6, 0.6)
    assert np.all(np.isfinite(lp[[0, 3]])) and not np.any(np.isnan(lp))
    assert not np.any(np.isnan(p)) and np.all(np.isfinite(p))
    np.testing.assert_allclose(p, [0.5, 0.0, 0.0, 0.5], atol=1e-12)
    rng = np.random.default_rng(0)
    draws = sample_em_batch(np.tile(u, (1000, 1)), 1e6, 0.6, rng)
    assert set(np.unique(draws)) <= {0, 3}
    assert sample_em(u, 1e6, 0.6, rng) in (0, 3)
    src = SeededRandomSource(0)
    assert {sample_em_exact(u, 1e6, 0.6, src) for _ in range(50)} <= {0, 3}
    # eps * u / (2 du) ~ 1e300 overflows a naive exp; log space does not
    with np.errstate(over="raise", invalid="raise"):
        assert em_probabilities([1.0, 0.0], 1e300, 0.5)[0] == 1.0


@pytest.mark.parametrize("bad", [[], [0.5, 1.5], [-0.1, 0.5], [0.5, math.nan], [0.5, math.inf]])
def test_bad_utilities(bad):
    with pytest.raises(ParameterError):
        em_probabilities(bad, 1.0, 0.6)


@pytest.mark.parametrize("eps,du", [(math.nan, 0.6), (math.inf, 0.6), (-1.0, 0.6), (1.0, 0.0), (1.0, math.nan)])
def test_bad_eps_or_sensitivity(eps, du):
    with pytest.raises(ParameterError):
        em_probabilities([0.1, 0.2], eps, du)
    with pytest.raises(ParameterError):
        sample_em_exact([0.1, 0.2], eps, du, SeededRandomSource(0))


def test_float_sampler_seeds_reproduce():
    sample = exponential_mechanism().sample
    a = [sample([0.1, 0.9, 0.4], Fraction(1), Fraction(3, 5), np.random.default_rng(7)) for _ in range(3)]
    b = [sample([0.1, 0.9, 0.4], Fraction(1), Fraction(3, 5), np.random.default_rng(7)) for _ in range(3)]
    assert a == b
    s1, s2 = SeededRandomSource(5), SeededRandomSource(5)
    assert [sample_em_exact([0, 0.5, 1], 2, 1, s1) for _ in range(20)] == \
           [sample_em_exact([0, 0.5, 1], 2, 1, s2) for _ in range(20)]
    with pytest.raises(ParameterError, match="seed"):
        SeededRandomSource(1.5)


def _chisq(draws, n_views, probs):
    counts = np.bincount(np.asarray(draws), minlength=n_views)
    return chisquare(counts, probs * len(draws)).pvalue


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("u,eps,du", CASES)
def test_float_sampler_chi_square(u, eps, du, seed):
    rng = np.random.default_rng(seed)
    n = 20_000
    batch = sample_em_batch(np.tile(u, (n, 1)), eps, du, rng)
    single = [sample_em(u, eps, du, rng) for _ in range(3000)]
    ref = reference_em(u, eps, du)
    assert _chisq(batch, len(u), ref) > P_MIN
    assert _chisq(single, len(u), ref) > P_MIN
    if u == CASES[0][0]:  # power: the same draws reject a law without the factor 2
        assert _chisq(batch, len(u), wrong_em(u, eps, du)) < P_MIN


@pytest.mark.parametrize("u,eps,du", CASES[:2])
def test_exact_sampler_chi_square(u, eps, du):
    src = SeededRandomSource(11)
    uf = [Fraction(x).limit_denominator(100) for x in u]
    ef, df = Fraction(eps).limit_denominator(100), Fraction(du).limit_denominator(100)
    draws = [sample_em_exact(uf, ef, df, src) for _ in range(5000)]
    ref = reference_em([float(x) for x in uf], float(ef), float(df))
    assert _chisq(draws, len(u), ref) > P_MIN
    if u == CASES[0][0]:
        assert _chisq(draws, len(u), wrong_em(u, eps, du)) < P_MIN


def test_exponential_mechanism_exact_default():
    """The selector's default exact sampler (fixed work), seeded from numpy Generators as MemView
    seeds it, draws Eq. (7)."""
    sample = exponential_mechanism().sample_exact
    draws = [sample([0.0, 0.5, 1.0], Fraction(2), Fraction(1), SeededRandomSource(np.random.default_rng(s)))
             for s in range(2000)]
    assert _chisq(draws, 3, reference_em([0, 0.5, 1], 2, 1)) > P_MIN
