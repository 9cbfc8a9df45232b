"""Permute-and-flip (McKenna & Sheldon 2020) as MemView's C3 selector (dpmv_lib.core.selection).

* the closed form (PF) against brute force over all n! orders, exactly, for arbitrary rational
  acceptance probabilities, and against the arrival-time integral in 50-digit mpmath for the
  exp(x) acceptance probabilities;
* chi-square of the seeded float sampler and of the exact rational sampler (plus a power check);
* Theorem 1 by exact enumeration of every augmented transcript with P&F (random policies,
  adaptive routing, both budget modes, the running example);
* expected utility >= Eq. (7)'s on many random utility vectors (50-digit arithmetic);
* the contract checker passes MemView with P&F; accounting and the public tag "pf".
"""
from __future__ import annotations

import itertools
import math
import random
from collections import Counter
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from scipy import stats

from dpmv_lib.checks.accounting import reconstructed_bound
from dpmv_lib.checks.contract import check_contract
from dpmv_lib.experiments.diagnostics import running_adaptive_strategy, running_queries
from dpmv_lib.core.errors import ParameterError
from dpmv_lib.core.exact import privacy_loss_of, fixed_strategy, transcript_distribution
from dpmv_lib.checks.instances import random_case
from dpmv_lib.core.ledger import OnlineBudget, PreallocatedBudget, planned_charges
from dpmv_lib.core.sampling import SeededRandomSource
from dpmv_lib.core.memview import MemView
from dpmv_lib.core.selection import (em_probabilities, exact_exponents, exponential_mechanism, get_selector,
                                     permute_and_flip, pf_from_acceptance, pf_probabilities, sample_pf, sample_pf_exact)

DU = Fraction(3, 5)
CASES = [  # (utilities, eps)
    ([0.2, 0.5, 0.9, 0.0], Fraction(2, 3)),
    ([0.0, 1.0, 0.5], Fraction(0)),
    ([0.1, 0.4, 0.4, 1.0, 0.7], Fraction(4)),
    ([0.0, 0.5, 0.8, 1.0], Fraction(12)),
]
ALPHA = 1e-4


def brute_force(q: list[Fraction]) -> list[Fraction]:
    """Pr[r output] = sum over all n! orders of 1/n! * q_r * prod_{j before r} (1 - q_j)."""
    n = len(q)
    out = [Fraction(0)] * n
    for order in itertools.permutations(range(n)):
        reach = Fraction(1, math.factorial(n))
        for r in order:
            out[r] += reach * q[r]
            reach *= 1 - q[r]
    return out


@pytest.mark.parametrize("seed", range(12))
def test_closed_form_equals_brute_force_over_orders(seed):
    rnd = random.Random(seed)
    n = 1 + seed % 6
    q = [Fraction(rnd.randint(0, 12), 12) for _ in range(n)]
    if seed % 2:
        q[rnd.randrange(n)] = Fraction(1)  # the maximiser's q = 1, as in P&F
    got = pf_from_acceptance(q)
    assert all(isinstance(p, Fraction) for p in got)
    assert got == brute_force(q)
    if seed % 2:
        assert sum(got) == 1


def integral_form(q: list) -> list:
    """Independent form: Pr[r] = q_r * int_0^1 prod_{j != r} (1 - t q_j) dt (uniform arrival times)."""
    return [q[r] * mpmath.quad(lambda t: mpmath.fprod(1 - t * q[j] for j in range(len(q)) if j != r), [0, 1])  # noqa: B023 - called within the iteration
            for r in range(len(q))]


@pytest.mark.parametrize("u,eps", CASES)
def test_float_probabilities_match_high_precision(u, eps):
    with mpmath.workdps(50):
        q = [mpmath.exp(mpmath.mpf(x.numerator) / x.denominator) for x in exact_exponents(u, eps, DU)]
        ref = integral_form(q)
        assert abs(mpmath.fsum(ref) - 1) < mpmath.mpf(10) ** -40
        exact_mp = pf_from_acceptance(q)  # the closed form in 50 digits agrees with the integral
        assert max(abs(a - b) for a, b in zip(exact_mp, ref)) < mpmath.mpf(10) ** -40
        got = pf_probabilities(u, eps, DU)
        assert max(abs(float(r) - g) for r, g in zip(ref, got)) < 1e-13


def test_probability_edge_cases():
    assert np.allclose(pf_probabilities([0.0, 1.0, 0.5], 0, DU), [1 / 3] * 3)  # eps = 0: uniform
    p = pf_probabilities([0.0, 1.0, 0.5], 1000, DU)
    assert p[1] == pytest.approx(1.0) and p[0] < 1e-300
    assert pf_probabilities([0.3], 2, DU).tolist() == [1.0]
    # ties: each maximiser is accepted when visited first among them
    assert np.allclose(pf_probabilities([1.0, 1.0, 0.0], 50, DU), [0.5, 0.5, 0], atol=1e-12)
    with pytest.raises(ParameterError):
        pf_from_acceptance([])
    with pytest.raises(ParameterError):
        pf_from_acceptance([Fraction(3, 2)])
    with pytest.raises(ParameterError):
        pf_probabilities([1.5], 1, DU)
    with pytest.raises(ParameterError):
        get_selector("gumbel")


def _chi2(draws, probs) -> float:
    counts = Counter(draws)
    obs = np.array([counts.get(i, 0) for i in range(len(probs))], dtype=float)
    keep = np.asarray(probs) * len(draws) >= 5
    exp = np.asarray(probs) * len(draws)
    o = np.append(obs[keep], obs[~keep].sum())
    e = np.append(exp[keep], exp[~keep].sum())
    if e[-1] < 5:  # fold the rare tail into the largest cell
        o[np.argmax(e[:-1])] += o[-1]
        e[np.argmax(e[:-1])] += e[-1]
        o, e = o[:-1], e[:-1]
    if len(o) < 2:
        return 1.0
    return float(stats.chisquare(o, e * o.sum() / e.sum()).pvalue)


@pytest.mark.parametrize("case", range(len(CASES)))
def test_exact_sampler_matches_pf(case):
    u, eps = CASES[case]
    src = SeededRandomSource(100 + case)
    draws = [sample_pf_exact(u, eps, DU, src) for _ in range(5000)]
    assert _chi2(draws, pf_probabilities(u, eps, DU)) > ALPHA


@pytest.mark.parametrize("case", range(len(CASES)))
def test_seeded_float_sampler_matches_pf(case):
    u, eps = CASES[case]
    rng = np.random.default_rng(200 + case)
    draws = [sample_pf(u, eps, DU, rng) for _ in range(20000)]
    assert _chi2(draws, pf_probabilities(u, eps, DU)) > ALPHA


def test_chi_square_has_power():
    """P&F and Eq. (7) differ visibly at moderate eps: the same test tells them apart."""
    u, eps = [0.0, 0.3, 0.6, 1.0], Fraction(6)
    pf, em = pf_probabilities(u, eps, DU), em_probabilities(u, eps, DU)
    assert pf[3] > em[3] + 0.05
    src = SeededRandomSource(7)
    draws = [sample_pf_exact(u, eps, DU, src) for _ in range(5000)]
    assert _chi2(draws, pf) > ALPHA and _chi2(draws, em) < 1e-6


def test_expected_utility_never_below_em():
    """McKenna & Sheldon Thm. 2, in 50-digit arithmetic on 400 random utility vectors."""
    rnd = random.Random(0)
    gains = []
    with mpmath.workdps(50):
        for _ in range(400):
            n = rnd.randint(2, 7)
            u = [Fraction(rnd.randint(0, 20), 20) for _ in range(n)]
            eps = Fraction(rnd.randint(0, 80), 10)
            x = [mpmath.mpf(v.numerator) / v.denominator for v in exact_exponents(u, eps, DU)]
            q = [mpmath.exp(v) for v in x]
            pf = pf_from_acceptance(q)
            em = [v / mpmath.fsum(q) for v in q]
            uu = [mpmath.mpf(v.numerator) / v.denominator for v in u]
            e_pf = mpmath.fsum(p * v for p, v in zip(pf, uu))
            e_em = mpmath.fsum(p * v for p, v in zip(em, uu))
            assert e_pf >= e_em - mpmath.mpf(10) ** -40, (u, eps)
            gains.append(float(e_pf - e_em))
    assert max(gains) > 0.01  # not vacuous: P&F is strictly better on some vectors


def assert_theorem1(make, m, m_prime, strategy, horizon, bound) -> float:
    dm = transcript_distribution(make, m, strategy, horizon)
    dmp = transcript_distribution(make, m_prime, strategy, horizon)
    assert sum(dm.values()) == pytest.approx(1.0, abs=1e-9)
    assert sum(dmp.values()) == pytest.approx(1.0, abs=1e-9)
    assert set(dm) == set(dmp)
    worst = max(abs(math.log(dm[t]) - math.log(dmp[t])) for t in dm)
    assert worst <= float(bound) * (1 + 1e-9)
    for t in dm:
        assert all(r.slots == () or all(s.mechanism in ("pf", "generic") for s in r.slots) for r in t)
    return worst


@pytest.mark.parametrize("seed", range(8))
def test_theorem1_with_permute_and_flip(seed):
    case = random_case(seed, adaptive=bool(seed % 2), levels=1 if seed % 2 else 4)
    for kind in ("fixed", "adaptive"):
        for budget in (case.budget("online", K=1 + seed % 3), case.budget("pre")):
            assert_theorem1(case.factory(budget=budget, selector="pf"), case.m, case.m_prime,
                            case.strategy(kind), case.horizon, case.bound)


def test_theorem1_pf_cases_are_not_vacuous():
    losses = [privacy_loss_of(random_case(s).factory(selector="pf"), random_case(s).m, random_case(s).m_prime,
                                 random_case(s).strategy("fixed"), random_case(s).horizon).max_loss for s in range(8)]
    assert sum(x > 0.05 for x in losses) >= 4


@pytest.mark.parametrize("attribute", ["diabetes", "debt"])
def test_theorem1_running_example_pf(running, attribute):
    policy, m, m_d, m_b = running
    mp = m_d if attribute == "diabetes" else m_b
    queries = running_queries(3)
    for budget in (OnlineBudget(3), PreallocatedBudget(planned_charges(policy, queries))):
        make = lambda s, b=budget: MemView(policy, s, budget=b, seed=0, selector="pf")  # noqa: E731
        for strategy in (fixed_strategy(queries), running_adaptive_strategy):
            assert_theorem1(make, m, mp, strategy, 3, policy.attribute(attribute).cap)


def test_pf_and_em_differ_on_the_transcript_but_share_the_ledger(running):
    policy, m, m_d, _ = running
    queries = running_queries(3)
    strat = fixed_strategy(queries)
    em = lambda s: MemView(policy, s, budget=OnlineBudget(3), seed=0)  # noqa: E731
    pf = lambda s: MemView(policy, s, budget=OnlineBudget(3), seed=0, selector="pf")  # noqa: E731
    d_em, d_pf = transcript_distribution(em, m, strat, 3), transcript_distribution(pf, m, strat, 3)
    ledgers = lambda d: {t[-1].ledger for t in d}  # noqa: E731
    assert ledgers(d_em) == ledgers(d_pf)
    assert privacy_loss_of(pf, m, m_d, strat, 3).max_loss != privacy_loss_of(em, m, m_d, strat, 3).max_loss


def test_contract_checker_passes_pf(running):
    policy = running[0]
    rep = check_contract(lambda p, s: MemView(p, s, budget=OnlineBudget(3), seed=0, selector="pf"), policy,
                         horizon=2, samples=2, label="DP-MemView (P&F)")
    assert rep.passed, rep.table()
    # the checker compares against the interface's own selector: P&F claiming to be EM fails C3
    class Mislabelled(MemView):
        def outcomes(self, prep):
            out = super().outcomes(prep)
            if not prep.admitted:
                return out
            probs = pf_probabilities(prep.utilities, prep.plan.epsilon, self.policy.sensitivity)
            return [(sr, float(p)) for (sr, _), p in zip(out, probs)]
    bad = check_contract(lambda p, s: Mislabelled(p, s, budget=OnlineBudget(3), seed=0), policy,
                         horizon=1, samples=1)
    assert "C3" in bad.failed


def test_memview_release_tags_and_accounting(running):
    policy, m, _, _ = running
    queries = running_queries(3)
    for exact in (True, False):
        mv = MemView(policy, m, budget=OnlineBudget(3), seed=3, selector=permute_and_flip(), exact=exact)
        hist = []
        for q in queries:
            hist.append(mv.release(q, tuple(hist)))
        tags = {s.mechanism for r in hist for s in r.slots}
        assert "pf" in tags and "em" not in tags
        ref = MemView(policy, m, budget=OnlineBudget(3), seed=3)
        h2 = []
        for q in queries:
            h2.append(ref.release(q, tuple(h2)))
        assert hist[-1].ledger == h2[-1].ledger  # same charges and caps, whatever the selector
        for a in policy.attribute_names:
            assert reconstructed_bound(hist, a) == reconstructed_bound(h2, a)
    assert MemView(policy, m).selector == exponential_mechanism()  # default stays Eq. (7)
    with pytest.raises(ParameterError):
        MemView(policy, m, selector="argmax")


def test_seeded_memview_pf_reproducible(running):
    policy, m, _, _ = running
    q = running_queries(1)[0]
    runs = [[MemView(policy, m, seed=s, selector="pf").release(q).views for s in range(20)] for _ in range(2)]
    assert runs[0] == runs[1] and len({tuple(sorted(v.items())) for v in runs[0]}) > 1


class _NeedMore(Exception):
    def __init__(self, n: int) -> None:
        self.n = n


class _Scripted:
    """Replays a fixed prefix of randbelow() outcomes; asks for a branch after it."""

    def __init__(self, prefix):
        self.prefix, self.i = prefix, 0

    def randbelow(self, n: int) -> int:
        if self.i == len(self.prefix):
            raise _NeedMore(n)
        v, m = self.prefix[self.i]
        assert m == n
        self.i += 1
        return v


def test_exact_sampler_decision_tree_is_exactly_pf(monkeypatch):
    """Enumerate every randomness path of sample_pf_exact (shuffle + flips) in rationals, with the
    Bernoulli(exp(-x)) replaced by an exact rational Bernoulli(1/(1+x)) (q = 1 at the maximiser):
    the output distribution equals the closed form (PF) for those q exactly."""
    import dpmv_lib.core.selection as sel

    monkeypatch.setattr(sel, "bernoulli_exp_neg",
                        lambda x, rnd: rnd.randbelow((1 / (1 + x)).denominator) < (1 / (1 + x)).numerator)
    for u, eps in (([Fraction(1, 5), Fraction(1, 2), Fraction(1), Fraction(0)], Fraction(3)),
                   ([Fraction(1), Fraction(1), Fraction(2, 5)], Fraction(1))):
        xs = [-x for x in exact_exponents(u, eps, DU)]
        dist = {}
        stack = [()]
        while stack:
            prefix = stack.pop()
            try:
                out = sample_pf_exact(u, eps, DU, _Scripted(prefix))
            except _NeedMore as more:
                stack.extend(prefix + ((v, more.n),) for v in range(more.n))
                continue
            p = Fraction(1)
            for _, m in prefix:
                p /= m
            dist[out] = dist.get(out, Fraction(0)) + p
        want = pf_from_acceptance([1 / (1 + x) for x in xs])
        assert [dist.get(i, Fraction(0)) for i in range(len(u))] == want and sum(want) == 1
