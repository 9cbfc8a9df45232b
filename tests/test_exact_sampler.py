"""Both Eq. (7) samplers against the exact EM distribution, and the exact Bernoulli(exp(-x)).

* chi-square goodness of fit over many draws (fixed seeds, so deterministic) for the exact
  rational sampler and the float Gumbel-max samplers, incl. eps = 0 and a large eps;
* a power check: the same test rejects a wrong distribution (the tests can fail);
* bernoulli_exp_neg: frequency vs exp(-x) and an exact truncated enumeration of its
  decision tree (rational arithmetic, no sampling);
* the exact sampler's rejection round: exact enumeration gives Pr[accept i] = e^{-x_i} / n;
* reproducibility with SeededRandomSource and a working SystemRandomSource.
"""
from __future__ import annotations

import math
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from dpmv_lib.core import mechanism
from dpmv_lib.core.errors import ParameterError
from dpmv_lib.core.examples import running_example
from dpmv_lib.core.mechanism import (ExponentialMechanism, SeededRandomSource, SystemRandomSource,
                                bernoulli_exp_neg, em_probabilities, sample_em, sample_em_batch,
                                sample_em_exact)
from dpmv_lib.core.memview import MemView
from dpmv_lib.core.policy import Query

DU = Fraction(3, 5)
CASES = [  # (utilities, eps): running-example-like, eps = 0, moderate, large eps
    ([0.2, 0.5, 0.9, 0.0], Fraction(2, 3)),
    ([0.0, 1.0, 0.5], Fraction(0)),
    ([0.1, 0.4, 0.4, 1.0, 0.7], Fraction(4)),
    ([0.0, 0.5, 0.8, 1.0], Fraction(12)),  # x = 10 (1 - u): Pr ~ e^-10, e^-5, e^-2, 1
]
N_EXACT = 6000    # exact draws per case
N_FLOAT = 40000   # float batch draws per case
N_SINGLE = 4000   # float single-call draws per case
ALPHA = 1e-4      # deterministic (seeded) draws: the threshold only guards against a wrong sampler


def chi2_pvalue(counts: Counter, probs: np.ndarray) -> float:
    """Chi-square goodness of fit; cells with expected count < 5 are pooled."""
    n = sum(counts.values())
    obs = np.array([counts.get(i, 0) for i in range(len(probs))], dtype=float)
    exp = probs * n
    small = exp < 5
    if small.any():
        obs = np.append(obs[~small], obs[small].sum())
        exp = np.append(exp[~small], exp[small].sum())
        if exp[-1] == 0:
            obs, exp = obs[:-1], exp[:-1]
    if len(exp) < 2:
        return 1.0 if obs.sum() == n else 0.0
    exp = exp * obs.sum() / exp.sum()
    return float(stats.chisquare(obs, exp).pvalue)


def exact_probs(u, eps) -> np.ndarray:
    return em_probabilities(u, float(eps), float(DU))


@pytest.mark.parametrize("case", range(len(CASES)))
def test_exact_sampler_matches_eq7(case):
    u, eps = CASES[case]
    src = SeededRandomSource(1000 + case)
    counts = Counter(sample_em_exact(u, eps, DU, src) for _ in range(N_EXACT))
    assert set(counts) <= set(range(len(u)))
    assert chi2_pvalue(counts, exact_probs(u, eps)) > ALPHA


@pytest.mark.parametrize("case", range(len(CASES)))
def test_float_samplers_match_eq7(case):
    u, eps = CASES[case]
    rng = np.random.default_rng(2000 + case)
    batch = sample_em_batch(np.tile(np.array(u), (N_FLOAT, 1)), float(eps), float(DU), rng)
    assert chi2_pvalue(Counter(batch.tolist()), exact_probs(u, eps)) > ALPHA
    single = Counter(sample_em(u, float(eps), float(DU), rng) for _ in range(N_SINGLE))
    assert chi2_pvalue(single, exact_probs(u, eps)) > ALPHA


def test_chi_square_has_power():
    """The test above can fail: exact draws are rejected against Eq. (7) at a wrong eps."""
    u, eps = CASES[0]
    counts = Counter(sample_em_exact(u, eps, DU, SeededRandomSource(7)) for _ in range(N_EXACT))
    assert chi2_pvalue(counts, exact_probs(u, 3 * eps)) < 1e-6
    assert chi2_pvalue(counts, exact_probs(u, 0)) < 1e-6


def test_exact_sampler_on_memview_utilities():
    """The utilities MemView really feeds the sampler (float scores) for the Figure 2 query."""
    policy, m, _, _ = running_example()
    mv = MemView(policy, m, seed=0)
    prep = mv._prepare(Query("Any ideas for an affordable dinner?", "affordable_dinner"), "food", ())
    u, eps = list(prep.utilities), prep.plan.epsilon
    src = SeededRandomSource(3)
    counts = Counter(sample_em_exact(u, eps, policy.sensitivity, src) for _ in range(N_EXACT))
    assert chi2_pvalue(counts, em_probabilities(u, float(eps), float(policy.sensitivity))) > ALPHA


@pytest.mark.parametrize("x", [Fraction(0), Fraction(1, 3), Fraction(1), Fraction(5, 2)])
def test_bernoulli_exp_neg_frequency(x):
    n = 20000
    src = SeededRandomSource(int(x * 6) + 11)
    hits = sum(bernoulli_exp_neg(x, src) for _ in range(n))
    if x == 0:
        assert hits == n  # exp(0) = 1: always true
    else:
        assert stats.binomtest(hits, n, math.exp(-float(x))).pvalue > ALPHA


# ---- exact enumeration of the samplers' decision trees -----------------------------------------
class _NeedChoice(Exception):
    def __init__(self, weights: list[Fraction]) -> None:
        self.weights = weights


class _Rejected(Exception):
    pass


class _Script:
    """Replays a prefix of choices; raises _NeedChoice to ask the enumerator to branch."""

    def __init__(self, choices: tuple[int, ...]) -> None:
        self.choices, self.i, self.weight, self.rounds = choices, 0, Fraction(1), 0

    def choose(self, weights: list[Fraction]) -> int:
        if self.i == len(self.choices):
            raise _NeedChoice(weights)
        c = self.choices[self.i]
        self.i += 1
        self.weight *= weights[c]
        return c

    def randbelow(self, n: int) -> int:  # only the proposal index uses randbelow here
        self.rounds += 1
        if self.rounds > 1:
            raise _Rejected()  # the first proposal round was rejected
        return self.choose([Fraction(1, n)] * n)


def _enumerate(run, floor: Fraction, monkeypatch) -> tuple[dict, Fraction, Fraction]:
    """Exact outcome masses of ``run(script)`` with every Bernoulli(p) as a 2-way branch.

    Returns (mass per outcome, mass of 'rejected' paths, unresolved mass below ``floor``)."""
    monkeypatch.setattr(mechanism, "bernoulli_rational",
                        lambda p, rnd: rnd.choose([1 - Fraction(p), Fraction(p)]) == 1)
    mass: dict = {}
    rejected = unresolved = Fraction(0)
    stack: list[tuple[int, ...]] = [()]
    while stack:
        choices = stack.pop()
        s = _Script(choices)
        try:
            out = run(s)
        except _NeedChoice as need:
            if s.weight < floor:
                unresolved += s.weight
                continue
            stack.extend(choices + (c,) for c, w in enumerate(need.weights) if w > 0)
            continue
        except _Rejected:
            rejected += s.weight
            continue
        mass[out] = mass.get(out, Fraction(0)) + s.weight
    return mass, rejected, unresolved


@pytest.mark.parametrize("x", [Fraction(0), Fraction(1, 3), Fraction(1), Fraction(5, 2), Fraction(7, 3)])
def test_bernoulli_exp_neg_exact_enumeration(x, monkeypatch):
    """CKS 2020: the decision tree of bernoulli_exp_neg puts mass exactly exp(-x) on True."""
    mass, _, unresolved = _enumerate(lambda s: bernoulli_exp_neg(x, s), Fraction(1, 10**15), monkeypatch)
    p_true, p_false = mass.get(True, Fraction(0)), mass.get(False, Fraction(0))
    assert p_true + p_false + unresolved == 1
    assert unresolved < Fraction(1, 10**12)
    target = math.exp(-float(x))
    assert float(p_true) - 1e-15 <= target <= float(p_true + unresolved) + 1e-15


@pytest.mark.parametrize("u,eps", [([Fraction(1, 5), Fraction(1, 2), Fraction(9, 10)], Fraction(2, 3)),
                                   ([Fraction(0), Fraction(1)], Fraction(3)),
                                   ([Fraction(1, 3), Fraction(1, 3)], Fraction(1))])
def test_exact_sampler_round_is_exact(u, eps, monkeypatch):
    """One proposal round accepts view i with probability exactly e^{-x_i} / n, so the rejection
    loop (fresh randomness every round) returns i with probability Eq. (7)."""
    mass, rejected, unresolved = _enumerate(lambda s: sample_em_exact(u, eps, DU, s),
                                            Fraction(1, 10**14), monkeypatch)
    assert unresolved < Fraction(1, 10**11)
    n, top = len(u), max(u)
    for i, ui in enumerate(u):
        x = float(eps * (top - ui) / (2 * DU))
        assert abs(float(mass.get(i, 0)) - math.exp(-x) / n) <= float(unresolved) + 1e-15
    accepted = sum(mass.values())
    probs = exact_probs([float(v) for v in u], eps)
    for i in range(n):
        assert abs(float(mass.get(i, 0) / accepted) - probs[i]) < 1e-9
    assert accepted + rejected + unresolved == 1


# ---- randomness sources --------------------------------------------------------------------------
def test_seeded_source_reproducible():
    u, eps = CASES[0]
    a = [sample_em_exact(u, eps, DU, SeededRandomSource(42)) for _ in range(1)]
    s1, s2, s3 = SeededRandomSource(42), SeededRandomSource(42), SeededRandomSource(43)
    seq1 = [sample_em_exact(u, eps, DU, s1) for _ in range(300)]
    seq2 = [sample_em_exact(u, eps, DU, s2) for _ in range(300)]
    seq3 = [sample_em_exact(u, eps, DU, s3) for _ in range(300)]
    assert seq1 == seq2 and seq1 != seq3 and a[0] == seq1[0]
    g1, g2 = SeededRandomSource(np.random.default_rng(5)), SeededRandomSource(np.random.default_rng(5))
    assert [g1.randbelow(10**30) for _ in range(5)] == [g2.randbelow(10**30) for _ in range(5)]
    with pytest.raises(ParameterError):
        SeededRandomSource("42")  # type: ignore[arg-type]


def test_memview_exact_default_and_seeded_runs_reproducible():
    policy, m, _, _ = running_example()
    qs = [Query("dinner?", "affordable_dinner"), Query("meals?", "meal_plan"), Query("checkup", "checkup_prep")]

    def run(seed):
        mv = MemView(policy, m, seed=seed)
        assert mv.exact  # the exact sampler is the default
        hist = []
        for q in qs * 2:
            hist.append(mv.release(q, hist))
        return [r.views for r in hist]

    assert run(9) == run(9)
    assert any(run(9) != run(s) for s in (10, 11, 12))


def test_system_random_source_works():
    src = SystemRandomSource()
    assert {src.randbelow(3) for _ in range(200)} == {0, 1, 2}
    assert 0 <= src.randbelow(10**40) < 10**40
    u, eps = CASES[0]
    counts = Counter(sample_em_exact(u, eps, DU, src) for _ in range(3000))
    assert chi2_pvalue(counts, exact_probs(u, eps)) > 1e-6  # OS randomness: loose threshold
    policy, m, _, _ = running_example()
    mv = MemView(policy, m)  # seed=None: OS randomness for deployment
    assert isinstance(mv._source, SystemRandomSource)
    rel = mv.release(Query("dinner?", "affordable_dinner"))
    assert set(rel.views) == {"food", "finance"}
    mech = ExponentialMechanism(Fraction(1), DU)
    assert 0 <= mech.sample([0.1, 0.9]) < 2  # no rng/source given: OS randomness


def test_exact_sampler_rejects_bad_input():
    src = SeededRandomSource(0)
    for u, eps, du in [([], 1, DU), ([float("nan")], 1, DU), ([float("inf"), 0.1], 1, DU), ([1.5], 1, DU),
                       ([-0.1], 1, DU), (5, 1, DU), ([None], 1, DU), ([0.5], -1, DU),
                       ([0.5], float("nan"), DU), ([0.5], 1, 0), ([0.5], "x", DU)]:
        with pytest.raises(ParameterError):
            sample_em_exact(u, eps, du, src)
    with pytest.raises(ParameterError):
        bernoulli_exp_neg(Fraction(-1), src)
