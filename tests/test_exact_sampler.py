"""Both Eq. (7) samplers against the exact EM distribution, and the exact Bernoulli(exp(-x)).

* chi-square goodness of fit over many draws (fixed seeds, so deterministic) for the exact
  rational sampler and the float Gumbel-max samplers, incl. eps = 0 and a large eps;
* a power check: the same test rejects a wrong distribution (the tests can fail);
* bernoulli_exp_neg: frequency vs exp(-x) and an exact truncated enumeration of its
  decision tree (rational arithmetic, no sampling);
* the exact sampler's rejection round: exact enumeration gives Pr[accept i] = e^{-x_i} / n;
* reproducibility with SeededRandomSource and a working SystemRandomSource;
* the fixed-work samplers (sample_em_fixed, the default, and sample_pf_fixed): weight
  bounds against 300-bit mpmath, the output against the exact inverse distribution function for U
  next to every boundary (with a deliberately wrong eps caught), chi-square, the continuation at a
  low first precision, and randomness requests and arithmetic that do not depend on the utilities
  (work, never time: the timing is measured in benchmarks/bench_timing_channel.py).
"""
from __future__ import annotations

import math
import random
from collections import Counter
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from scipy import stats

from dpmv_lib.core import sampling, selection
from dpmv_lib.core.errors import ParameterError
from dpmv_lib.checks.examples import running_example
from dpmv_lib.core.sampling import (FIXED_WORK_BITS, SeededRandomSource, SystemRandomSource, bernoulli_exp_neg,
                                    bernoulli_exp_neg_fixed, exp_neg_bounds, invert_exp_weights, squarings)
from dpmv_lib.core.selection import (EXACT_EM_SAMPLERS, em_probabilities, exact_em_sampler, exact_exponents,
                                     exponential_mechanism, grid_utilities, offset_exponents, permute_and_flip,
                                     pf_from_acceptance, pf_probabilities, sample_em, sample_em_batch, sample_em_exact,
                                     sample_em_fixed, sample_pf_exact, sample_pf_fixed)
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


# the exact samplers of Eq. (7): the rejection sampler and the fixed-work one, with
# the seed offsets they have always used
EXACT_SAMPLERS = pytest.mark.parametrize("sampler,seed0", [(sample_em_exact, 1000), (sample_em_fixed, 3000)],
                                         ids=["rejection", "fixed"])


@EXACT_SAMPLERS
@pytest.mark.parametrize("case", range(len(CASES)))
def test_exact_sampler_matches_eq7(sampler, seed0, case):
    u, eps = CASES[case]
    src = SeededRandomSource(seed0 + case)
    counts = Counter(sampler(u, eps, DU, src) for _ in range(N_EXACT))
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


@EXACT_SAMPLERS
def test_chi_square_has_power(sampler, seed0):
    """The test above can fail: exact draws are rejected against Eq. (7) at a wrong eps."""
    u, eps = CASES[0]
    counts = Counter(sampler(u, eps, DU, SeededRandomSource(7)) for _ in range(N_EXACT))
    assert chi2_pvalue(counts, exact_probs(u, 3 * eps)) < 1e-6
    assert chi2_pvalue(counts, exact_probs(u, 0)) < 1e-6


def test_exact_sampler_on_memview_utilities():
    """The utilities MemView really feeds the sampler (float scores) for the Figure 2 query."""
    policy, m, _, _ = running_example()
    mv = MemView(policy, m, seed=0)
    prep = mv.prepare(Query("Any ideas for an affordable dinner?", "affordable_dinner"), "food", ())
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
    monkeypatch.setattr(sampling, "bernoulli_rational",
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
    assert 0 <= exponential_mechanism().sample_exact([0.1, 0.9], Fraction(1), DU, src) < 2  # OS randomness


def test_exact_sampler_rejects_bad_input():
    src = SeededRandomSource(0)
    for u, eps, du in [([], 1, DU), ([float("nan")], 1, DU), ([float("inf"), 0.1], 1, DU), ([1.5], 1, DU),
                       ([-0.1], 1, DU), (5, 1, DU), ([None], 1, DU), ([0.5], -1, DU),
                       ([0.5], float("nan"), DU), ([0.5], 1, 0), ([0.5], "x", DU)]:
        with pytest.raises(ParameterError):
            sample_em_exact(u, eps, du, src)
    with pytest.raises(ParameterError):
        bernoulli_exp_neg(Fraction(-1), src)


# ---- the fixed-work samplers (running time independent of the utilities) ----------
# sample_em_fixed inverts Eq. (7)'s distribution function at a uniform U read lazily; the tests
# check (a) the weight bounds against 300-bit mpmath, (b) the output against the exact inverse CDF
# for U placed next to every boundary (so the continuation that reads more bits runs), with a
# deliberately wrong eps caught, (c) chi-square like the samplers above, and (d) that the
# randomness requests and the arithmetic's structure do not depend on the utilities (work, not
# time: no timed test; the timing is measured in benchmarks/bench_timing_channel.py).

def _fr(text: str) -> list[Fraction]:
    return [Fraction(x) for x in text.split()]


RUNNING_PAIRS = [  # (u_M, u_M') of the running example's slots whose utilities differ (Fractions, as MemView)
    (_fr("1/2 1 4/5 0"), _fr("1/2 2/5 4/5 0")),
    (_fr("1/2 1 0"), _fr("1/2 2/5 3/10")),
    (_fr("1/2 1 2/5"), _fr("1/2 2/5 7/10")),
    (_fr("1/2 1 4/5 2/5"), _fr("1/2 1 2/5 2/5")),
    (_fr("1/2 1 4/5 2/5"), _fr("1/2 2/5 4/5 2/5")),
]


def _mp(x: Fraction):
    return mpmath.mpf(x.numerator) / x.denominator


@pytest.mark.parametrize("bound", [Fraction(0), Fraction(1, 8), Fraction(1), Fraction(25, 3), Fraction(10**6)])
@pytest.mark.parametrize("bits", [1, 8, 64, 200])
def test_exp_neg_bounds_bracket_exp_tightly(bound, bits):
    """lo <= 2^W exp(-x) <= hi and hi - lo < 2^(W - bits), against 300-bit mpmath, for x across
    [0, bound] (both ends included)."""
    rnd = random.Random(hash((bound, bits)) & 0xFFFF)
    xs = {Fraction(0), bound} | {bound * Fraction(rnd.randrange(1001), 1000) for _ in range(25)}
    xs |= {bound * Fraction(rnd.randrange(1, 10**9), 10**9) for _ in range(10)}
    with mpmath.workprec(2 * bits + 400):
        for x in sorted(xs):
            lo, hi, w = exp_neg_bounds(x, bound, bits)
            exact = mpmath.exp(-_mp(x)) * mpmath.mpf(2) ** w
            assert lo <= exact <= hi, (x, bound, bits)
            assert hi - lo < 2 ** (w - bits), (x, bound, bits, hi - lo)


class _Bits:
    """A RandomSource whose randbelow(2^L) returns the next L bits of U = k / 2^K (U fixed)."""

    def __init__(self, k: int, K: int) -> None:
        self.k, self.K, self.used, self.requests = k, K, 0, []

    def randbelow(self, n: int) -> int:
        length = n.bit_length() - 1
        assert n == 1 << length, "the fixed-work samplers only ask for whole bits"
        self.requests.append(n)
        self.used += length
        assert self.used <= self.K, "read more bits of U than the test supplied"
        return (self.k >> (self.K - self.used)) & (n - 1)


K_BITS = 4096


def on_grid(u, du=DU) -> list[Fraction]:
    """The grid utilities u~ = floor(D u) / D the fixed-work samplers draw from, as Fractions."""
    ms, grid = grid_utilities(u, du)
    return [Fraction(m, grid) for m in ms]


def _boundaries(u, eps, du=DU, prec=1200, grid=True):
    """rho_i = (w_0 + ... + w_{i-1}) / sum w, w = exp(-x) of Eq. (7) on the grid utilities (or on
    ``u`` itself, ``grid=False``), in ``prec``-bit mpmath."""
    with mpmath.workprec(prec):
        w = [mpmath.exp(_mp(x)) for x in exact_exponents(on_grid(u, du) if grid else u, eps, du)]
        total = mpmath.fsum(w)
        return [mpmath.fsum(w[:i]) / total for i in range(1, len(w))]


def _inverse_cdf_mismatches(u, eps, sample_eps=None, offsets=(2 ** -200, 2 ** -90, 2 ** -40), grid=True):
    """For U just below and just above every boundary rho_i (by each offset) and 40 random U:
    the (U, expected, got) where sample_em_fixed's output is not #{i : rho_i <= U}; and how
    many of those draws read more bits than the first try."""
    rho = _boundaries(u, eps, grid=grid)
    rnd = random.Random(len(u) * 1000 + int(eps * 7))
    with mpmath.workprec(1200):
        us = [rnd.getrandbits(K_BITS) for _ in range(40)]
        for r in rho:
            for off in offsets:
                us.append(int(mpmath.floor((r - off) * 2 ** K_BITS)))
                us.append(int(mpmath.ceil((r + off) * 2 ** K_BITS)))
        bad, refined = [], 0
        for k in (k for k in us if 0 <= k < 2 ** K_BITS):
            want = sum(1 for r in rho if r <= mpmath.mpf(k) / 2 ** K_BITS)
            src = _Bits(k, K_BITS)
            got = sample_em_fixed(u, eps if sample_eps is None else sample_eps, DU, src)
            refined += len(src.requests) > 1
            if got != want:
                bad.append((k, want, got))
    return bad, refined


@pytest.mark.parametrize("u,eps", [(CASES[0][0], CASES[0][1]), (CASES[1][0], CASES[1][1]), (CASES[2][0], Fraction(10)),
                                   (RUNNING_PAIRS[0][0], Fraction(4)), (RUNNING_PAIRS[1][1], Fraction(10)),
                                   ([Fraction(1), Fraction(0)], Fraction(10**6))])
def test_fixed_sampler_is_the_exact_inverse_cdf(u, eps):
    """sample_em_fixed(U) = #{i : rho_i <= U} for U within 2^-200 of every boundary of Eq. (7)'s
    distribution function (and random U): Pr[v] = rho_{v+1} - rho_v = Eq. (7) exactly. The
    near-boundary U cannot be decided at the first precision, so the continuation runs too."""
    bad, refined = _inverse_cdf_mismatches(u, eps)
    assert not bad
    if eps < 10**6:  # (at eps = 10^6 the boundary is 1 - e^-833333: every U of 4096 bits lies below it)
        assert refined >= 2 * (len(u) - 1)


def test_inverse_cdf_test_has_power():
    """The same check catches Eq. (7) at eps (1 + 2^-40) instead of eps: a relative error of
    ~10^-12 in the probabilities (and the chi-square below catches eps off by a factor 3)."""
    u, eps = RUNNING_PAIRS[0][0], Fraction(4)
    bad, _ = _inverse_cdf_mismatches(u, eps, sample_eps=eps * (1 + Fraction(1, 2**40)))
    assert bad


@pytest.mark.parametrize("bits", [3, 6])
def test_fixed_sampler_continuation_is_exact(bits):
    """At a deliberately low first precision most draws need the continuation (more bits of U,
    tighter bounds); the law is still Eq. (7), and undecided tries are as rare as the bound says."""
    u, eps = CASES[2]
    n = len(u)
    src = SeededRandomSource(40 + bits)
    bound, ts = offset_exponents(u, eps, DU)
    refinements: list[int] = []
    draws = [invert_exp_weights(ts, bound, src, bits, refinements) for _ in range(N_EXACT)]
    assert chi2_pvalue(Counter(draws), exact_probs(u, eps)) > ALPHA
    first = sum(1 for b in refinements if b == bits)
    assert first > 0
    limit = (n - 1) * (2 * n * 2.0 ** -bits + 2.0 ** (1 - bits))   # Pr[first try undecided] <= limit
    assert first / N_EXACT <= min(1.0, limit) + 0.02
    assert sample_em_fixed(u, eps, DU, SeededRandomSource(1), bits=bits) in range(n)


def test_fixed_sampler_default_precision_meets_its_bound():
    """The documented Pr[more bits] <= 2^-62 per selection at the default precision."""
    for n in range(1, 300):
        bits = FIXED_WORK_BITS + 2 * n.bit_length()
        assert (n - 1) * (2 * n * 2.0 ** -bits + 2.0 ** (1 - bits)) <= 2.0 ** -62


class _Recorder:
    """Records every randomness request; answers from a seeded generator (no undecided tries)."""

    def __init__(self, seed: int) -> None:
        self.r, self.requests = random.Random(seed), []

    def randbelow(self, n: int) -> int:
        self.requests.append(n)
        return self.r.randrange(n)


@pytest.mark.parametrize("eps", [Fraction(2, 3), Fraction(4), Fraction(10)])
def test_fixed_samplers_work_does_not_depend_on_utilities(eps, monkeypatch):
    """Work, not time: for M and M' (and random vectors of the same size) the fixed-work samplers
    make the same randomness requests and compute the same number of weight bounds, and every
    per-view integer they compute has the same number of CPython digits. The rejection sampler
    does not (its number of proposals depends on the utilities)."""
    mech = sampling
    calls = []
    real = mech._exp_neg_offset

    def counting(n, d, plan):
        lo, hi = real(n, d, plan)
        calls.append(tuple(-(-v.bit_length() // mech._DIGIT) for v in (n, d, (n << plan.w) // d, lo, hi)))
        return lo, hi

    monkeypatch.setattr(mech, "_exp_neg_offset", counting)
    rnd = random.Random(5)
    for um, ump in RUNNING_PAIRS:
        vectors = [um, ump] + [[Fraction(rnd.randrange(11), 10) for _ in um] for _ in range(3)]
        for sampler in (sample_em_fixed, sample_pf_fixed):
            seen = set()
            for v in vectors:
                rec = _Recorder(11)
                calls.clear()
                for _ in range(20):
                    sampler(v, eps, DU, rec)
                sizes = set(calls)
                seen.add((tuple(rec.requests), len(calls), tuple(sorted(sizes))))
                assert len(sizes) == 1, (sampler.__name__, v, sizes)   # every view: the same digit counts
            assert len(seen) == 1, (sampler.__name__, seen)
    rounds = set()
    for v in RUNNING_PAIRS[1]:
        rec = _Recorder(11)
        for _ in range(50):
            sample_em_exact(v, Fraction(10), DU, rec)
        rounds.add(len(rec.requests))
    assert len(rounds) == 2   # the rejection sampler's randomness use tells M from M'


@pytest.mark.parametrize("x", [Fraction(0), Fraction(1, 3), Fraction(1), Fraction(5, 2), Fraction(25, 3)])
def test_bernoulli_exp_neg_fixed(x):
    """Frequency vs exp(-x), and exactly U < exp(-x) for U next to exp(-x) (continuation)."""
    bound = Fraction(25, 3)
    n = 20000
    src = SeededRandomSource(int(x * 6) + 17)
    hits = sum(bernoulli_exp_neg_fixed(x, bound, src) for _ in range(n))
    if x == 0:
        assert hits == n
    else:
        assert stats.binomtest(hits, n, math.exp(-float(x))).pvalue > ALPHA
    with mpmath.workprec(1200):
        e = mpmath.exp(-_mp(x))
        for off, want in ((-(2 ** -150), True), (2 ** -150, False), (-(2 ** -70), True), (2 ** -70, False)):
            k = int(mpmath.floor((e + off) * 2 ** K_BITS))
            if not 0 <= k < 2 ** K_BITS:
                continue
            src = _Bits(k, K_BITS)
            assert bernoulli_exp_neg_fixed(x, bound, src) is want
            assert len(src.requests) > 1   # undecided at 64 bits: the continuation decided it


@pytest.mark.parametrize("case", range(len(CASES)))
def test_fixed_pf_sampler_matches_pf(case):
    u, eps = CASES[case]
    src = SeededRandomSource(500 + case)
    counts = Counter(sample_pf_fixed(u, eps, DU, src) for _ in range(N_EXACT))
    assert chi2_pvalue(counts, pf_probabilities(u, eps, DU)) > ALPHA
    assert chi2_pvalue(counts, exact_probs(u, eps)) < 1e-6 or eps < 4   # P&F is not Eq. (7)


class _Enum:
    """Replays a prefix of randbelow outcomes; raises _NeedChoice to branch (weights 1/n each)."""

    def __init__(self, prefix):
        self.prefix, self.i = prefix, 0

    def randbelow(self, n: int) -> int:
        if self.i == len(self.prefix):
            raise _NeedChoice([Fraction(1, n)] * n)
        v = self.prefix[self.i]
        self.i += 1
        return v


def test_fixed_pf_decision_tree_is_exactly_pf(monkeypatch):
    """Every randomness path of sample_pf_fixed (shuffle + a flip for EVERY view), with each flip
    an exact rational Bernoulli(1/(1+x)) instead of Bernoulli(exp(-x)): the output law equals the
    closed form (PF) for those q exactly - the unused flips change nothing."""
    def rational_flip(n, d, bound, rnd, bits):
        x = (Fraction(n, d) - Fraction(1, 16)) * 2 ** squarings(bound)   # t' = x / 2^s + 1/16
        q = 1 / (1 + x)
        return rnd.randbelow(q.denominator) < q.numerator

    monkeypatch.setattr(selection, "bernoulli_offset", rational_flip)
    for u, eps in (([Fraction(1, 5), Fraction(1, 2), Fraction(1), Fraction(0)], Fraction(3)),
                   ([Fraction(1), Fraction(1), Fraction(2, 5)], Fraction(1))):
        xs = [-x for x in exact_exponents(u, eps, DU)]
        dist: dict = {}
        stack: list = [((), Fraction(1))]
        while stack:
            prefix, p = stack.pop()
            try:
                out = sample_pf_fixed(u, eps, DU, _Enum(prefix))
            except _NeedChoice as need:
                stack.extend((prefix + (v,), p * w) for v, w in enumerate(need.weights))
                continue
            dist[out] = dist.get(out, Fraction(0)) + p
        want = pf_from_acceptance([1 / (1 + x) for x in xs])
        assert [dist.get(i, Fraction(0)) for i in range(len(u))] == want and sum(want) == 1


def test_fixed_samplers_reproducible_and_defaults():
    u, eps = CASES[0]
    for sampler in (sample_em_fixed, sample_pf_fixed):
        s1, s2 = SeededRandomSource(42), SeededRandomSource(42)
        assert [sampler(u, eps, DU, s1) for _ in range(200)] == [sampler(u, eps, DU, s2) for _ in range(200)]
    assert exponential_mechanism().sample_exact is sample_em_fixed
    assert exponential_mechanism("rejection").sample_exact is sample_em_exact
    assert permute_and_flip().sample_exact is sample_pf_fixed
    assert permute_and_flip("sequential").sample_exact is sample_pf_exact
    assert EXACT_EM_SAMPLERS == {"fixed": sample_em_fixed, "rejection": sample_em_exact}
    policy, m, _, _ = running_example()
    assert MemView(policy, m).selector.sample_exact is sample_em_fixed   # the deployment default
    assert MemView(policy, m, selector="pf").selector.sample_exact is sample_pf_fixed
    # seeded experiments keep the earlier sampler (their committed results reproduce) unless asked
    assert MemView(policy, m, seed=0).selector.sample_exact is sample_em_exact
    assert MemView(policy, m, seed=0, selector="pf").selector.sample_exact is sample_pf_exact
    assert MemView(policy, m, random_source=SeededRandomSource(1)).selector.sample_exact is sample_em_exact
    assert MemView(policy, m, seed=0, fixed_work=True).selector.sample_exact is sample_em_fixed
    assert MemView(policy, m, fixed_work=False).selector.sample_exact is sample_em_exact
    for name in ("fixed", "rejection"):
        assert exponential_mechanism(name).sample_exact([0.1, 0.9], Fraction(1), DU, SeededRandomSource(0)) in (0, 1)
    assert {sample_em_fixed([1.0, 0.5, 0.0, 1.0], 1e6, 0.6, SeededRandomSource(s)) for s in range(30)} <= {0, 3}


def test_fixed_samplers_reject_bad_input():
    src = SeededRandomSource(0)
    for u, eps, du in [([], 1, DU), ([float("nan")], 1, DU), ([float("inf"), 0.1], 1, DU), ([1.5], 1, DU),
                       ([-0.1], 1, DU), (5, 1, DU), ([None], 1, DU), ([0.5], -1, DU),
                       ([0.5], float("nan"), DU), ([0.5], 1, 0), ([0.5], "x", DU), ([0.5], True, DU)]:
        for sampler in (sample_em_fixed, sample_pf_fixed):
            with pytest.raises(ParameterError):
                sampler(u, eps, du, src)
    for bits in (0, -3, 1.5, True, "64"):
        with pytest.raises(ParameterError):
            sample_em_fixed([0.5, 0.2], 1, DU, src, bits=bits)
        with pytest.raises(ParameterError):
            exp_neg_bounds(Fraction(1), Fraction(2), bits)
    for x, bound in ((Fraction(-1), Fraction(2)), (Fraction(3), Fraction(2))):
        with pytest.raises(ParameterError):
            exp_neg_bounds(x, bound, 64)
        with pytest.raises(ParameterError):
            bernoulli_exp_neg_fixed(x, bound, src)
    for bad in ("gumbel", None, 3, ["fixed"]):
        with pytest.raises(ParameterError):
            exact_em_sampler(bad)
        with pytest.raises(ParameterError):
            exponential_mechanism(bad)
        with pytest.raises(ParameterError):
            permute_and_flip(bad)


# ---- the public utility grid of the fixed-work samplers --------------------------------------
# Utilities a custom scorer may return (MemView accepts any finite number in [0, 1]): their exact
# values have denominators up to 2^1074, which the fixed-work samplers must not carry into their
# integers. They draw from Eq. (7) on u~ = floor(D u) / D instead (grid_utilities).
OFF_GRID = [
    ([0.5, 0.5, 0.5, 0.1], [0.5] * 4),
    ([0.5, 1.0, 0.8, 0.0], [0.5, 0.4, 0.8, 0.0]),
    ([Fraction(1, 10 ** 300), Fraction(1, 2)], [Fraction(0), Fraction(1, 2)]),
    ([5e-324, 0.5], [0.0, 0.5]),
    ([Fraction(1, 2) + Fraction(1, 3 ** 190), Fraction(2, 5) + Fraction(1, 3 ** 190), Fraction(1, 3 ** 190)],
     [Fraction(1, 2), Fraction(1), Fraction(0)]),
]


@pytest.mark.parametrize("eps", [Fraction(1, 4), Fraction(4), Fraction(10)])
@pytest.mark.parametrize("u", [u for pair in OFF_GRID for u in pair], ids=lambda u: "-".join(str(x)[:8] for x in u))
def test_fixed_sampler_law_is_eq7_on_the_grid_utilities(u, eps):
    """sample_em_fixed(U) = #{i : rho_i <= U}, rho from Eq. (7) on the grid utilities as exact
    Fractions, for U within 2^-200 of every boundary: its law is exactly Eq. (7) on u~."""
    bad, _ = _inverse_cdf_mismatches(u, eps)
    assert not bad


def test_grid_law_test_has_power():
    """The same check against Eq. (7) on the unrounded float utilities finds mismatches: the
    rounding is real (by < 2^-92) and the test sees it."""
    u = [0.5, 0.5, 0.5, 0.1]
    assert on_grid(u) != [Fraction(x) for x in u]
    bad, _ = _inverse_cdf_mismatches(u, Fraction(4), grid=False)
    assert bad


def _lexicon_utilities() -> list[Fraction]:
    """Every utility MemView scores for the running example: each routed (query, slot), on M and
    on both neighbours (the stores of the benchmarks and the committed results)."""
    from dpmv_lib.checks.examples import RUNNING_EXAMPLE_POLICY
    policy, *stores = running_example()
    out = []
    for intent in RUNNING_EXAMPLE_POLICY["routes"]:
        q = Query(intent, intent)
        for slot in policy.route(q, ()):
            for st in stores:
                out += list(MemView(policy, st, seed=0).prepare(q, slot, ()).utilities)
    return out


def test_lexicon_utilities_lie_on_the_grid():
    """Flooring to the grid changes no utility of the shipped lexicon scorer: not the running
    example's (so no committed result or benchmark changes), nor any with <= 64 read items."""
    from dpmv_lib.core.scorer import LexiconScorer
    us = _lexicon_utilities()
    assert len(set(us)) >= 7 and all(isinstance(x, Fraction) for x in us)
    assert on_grid(us) == us
    sc = LexiconScorer()
    third = [sc.generic_r]   # r of the generic view; 0 and 1 otherwise
    values = {min(Fraction(1), sc.w_r * r + sc.w_c * Fraction(k, n) + sc.w_s * Fraction(h, sc.saturation))
              for n in range(1, 65) for k in range(n + 1) for h in range(sc.saturation + 1)
              for r in [Fraction(0), Fraction(1)] + third}
    values = sorted(values)
    assert on_grid(values) == values
    assert on_grid([Fraction(1, 3 ** 50)]) != [Fraction(1, 3 ** 50)]   # (off the grid: floored)


def _floored_diff(u, v, du, grid):
    return abs(Fraction(u * grid // 1 - v * grid // 1, grid))


@pytest.mark.parametrize("du", [Fraction(3, 5), Fraction(1, 3 ** 50), Fraction(7, 11 ** 9), Fraction(1)])
def test_the_grid_keeps_the_sensitivity_bound(du):
    """|u - u'| <= Du implies |u~ - u'~| <= Du (floor is monotone and D Du is an integer), on
    pairs at distance exactly Du placed just below a grid point; a grid without Du's
    denominator (the broken copy) exceeds Du on the same pairs."""
    grid = selection.utility_grid(du)
    assert grid % selection.UTILITY_GRID == 0 and (grid * du).denominator == 1
    rnd = random.Random(int(du.denominator % 1000))
    for _ in range(300):
        k = rnd.randrange(grid - int(grid * du)) if du < 1 else 0
        u = Fraction(k + 1, grid) - Fraction(1, rnd.randrange(2, 10 ** 6) * grid)   # just below a grid point
        v = min(Fraction(1), u + du * rnd.choice([1, 1, Fraction(rnd.randrange(1, 100), 100)]))
        ms, g = grid_utilities([u, v], du)
        assert g == grid and abs(Fraction(ms[1] - ms[0], grid)) <= du
    if (selection.UTILITY_GRID * du).denominator != 1:   # broken: the grid alone, Du off it
        broken = selection.UTILITY_GRID
        u = Fraction(1, broken) - Fraction(1, 10 ** 40)
        assert _floored_diff(u + du, u, du, broken) > du


@pytest.mark.parametrize("eps", [Fraction(1, 4), Fraction(4), Fraction(10)])
def test_fixed_samplers_work_does_not_depend_on_off_grid_utilities(eps, monkeypatch):
    """Work, not time, for the custom-scorer pairs: the same randomness requests, weight-bound
    calls and CPython digit counts of every per-view integer for both sides of each pair (and
    for their exact rational values read without the grid, the digit counts would differ)."""
    calls = []
    real = sampling._exp_neg_offset

    def counting(n, d, plan):
        lo, hi = real(n, d, plan)
        calls.append(tuple(-(-v.bit_length() // sampling._DIGIT) for v in (n, d, (n << plan.w) // d, lo, hi)))
        return lo, hi

    monkeypatch.setattr(sampling, "_exp_neg_offset", counting)
    for um, ump in OFF_GRID:
        for sampler in (sample_em_fixed, sample_pf_fixed):
            seen = set()
            for v in (um, ump):
                rec = _Recorder(11)
                calls.clear()
                for _ in range(20):
                    sampler(v, eps, DU, rec)
                sizes = set(calls)
                seen.add((tuple(rec.requests), len(calls), tuple(sorted(sizes))))
                assert len(sizes) == 1, (sampler.__name__, v, sizes)
            assert len(seen) == 1, (sampler.__name__, um, ump, seen)
    sizes = {max(Fraction(x).denominator.bit_length() for x in pair) for pair in OFF_GRID[0]}
    assert len(sizes) == 2   # (the exact values themselves: 1 bit against 55)


def test_grid_flooring_is_exact_for_every_kind_of_utility():
    """floor(D u) computed with fixed-size operands equals the exact rational floor, for floats
    (normal, subnormal, 0, 1), Fractions, ints and numpy scalars; a denominator beyond the public
    GRID_INPUT_BITS, a value outside [0, 1] and NaN are refused."""
    import math as _m
    grid = selection.utility_grid(DU)
    rnd = random.Random(8)
    xs = [0.0, 1.0, 5e-324, 2.2250738585072014e-308, 0.1, 0.5, 1 - 2 ** -53, 2.0 ** -93, 3 * 2.0 ** -95]
    xs += [rnd.random() for _ in range(500)] + [rnd.random() * 2.0 ** -rnd.randrange(1, 1070) for _ in range(500)]
    xs += [Fraction(x) for x in xs[:200]]
    xs += [Fraction(1, 10 ** 300), Fraction(1, 3), Fraction(2, 3 ** 200) + Fraction(1, 2), 0, 1,
           np.float64(0.3), np.float32(0.3), np.int64(1)]
    ms, g = grid_utilities(xs, DU)
    assert g == grid and ms == [_m.floor(selection.exact_utility(x) * grid) for x in xs]
    for bad in ([Fraction(1, 2 ** 1200)], [1.5], [float("nan")], [-0.0 - 1e-300], [Fraction(-1, 3)]):
        with pytest.raises(ParameterError):
            grid_utilities(bad, DU)
