"""Exact sampling: the randomness sources and exact Bernoulli trials the selectors' exact samplers
are built from, with no float in any decision.

* :class:`RandomSource` (uniform integers), :class:`SystemRandomSource` (``secrets``, the
  deployment default) and :class:`SeededRandomSource` (reproducible experiments);
* :func:`bernoulli_rational` and :func:`bernoulli_exp_neg`: exact Bernoulli(p) for rational p
  and Bernoulli(exp(-x)) for rational x >= 0 (Canonne, Kamath & Steinke 2020); their number of
  trials depends on x;
* fixed work: :func:`exp_neg_bounds` brackets exp(-x) with a number of integer operations fixed
  by the public (bound, bits); :func:`bernoulli_exp_neg_fixed` / :func:`bernoulli_offset` and
  :func:`invert_exp_weights` (a draw from Pr[v] proportional to exp(-x_v)) decide only where the
  bracket makes the answer certain and otherwise read more bits, so their laws are exact and
  their work depends on the public values only, except with probability <= 2^-62 per draw.
  Exponents enter as offsets t' = x / 2^s + 1/16 (:func:`grid_offsets`).
"""
from __future__ import annotations

import random
import secrets
import sys
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Protocol, Sequence

import numpy as np

from .errors import ParameterError
from .rationals import Number


class RandomSource(Protocol):
    """Uniform integers in [0, n) for arbitrary n >= 1 (the only randomness the exact sampler uses)."""

    def randbelow(self, n: int) -> int: ...


class SystemRandomSource:
    """OS-grade randomness (``secrets``): the deployment default."""

    def randbelow(self, n: int) -> int:
        return secrets.randbelow(n)


class SeededRandomSource:
    """Reproducible randomness for experiments (Mersenne Twister, arbitrary-size integers)."""

    def __init__(self, seed: int | np.random.Generator) -> None:
        if isinstance(seed, np.random.Generator):
            seed = int(seed.integers(0, 2**63 - 1))
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise ParameterError(f"seed must be an int, got {seed!r}")
        self._r = random.Random(int(seed))

    def randbelow(self, n: int) -> int:
        return self._r.randrange(n)


def bernoulli_rational(p: Fraction, rnd: RandomSource) -> bool:
    """Exact Bernoulli(p) for rational p in [0, 1]."""
    if p < 0 or p > 1:
        raise ParameterError(f"probability must be in [0, 1], got {p}")
    return rnd.randbelow(p.denominator) < p.numerator


def bernoulli_exp_neg(x: Fraction, rnd: RandomSource) -> bool:
    """Exact Bernoulli(exp(-x)) for rational x >= 0 (Canonne, Kamath & Steinke 2020, Alg. 1).

    For x in [0,1]: draw A_k ~ Bernoulli(x/k) for k = 1, 2, ... until the first A_k = 0; return
    True iff that k is odd (Pr = sum_k (-x)^{k-1}/(k-1)! ... = exp(-x)). For x > 1, use
    exp(-x) = exp(-1)^floor(x) * exp(-(x - floor(x)))."""
    x = Fraction(x)
    if x < 0:
        raise ParameterError(f"x must be >= 0, got {x}")
    while x > 1:
        if not bernoulli_exp_neg(Fraction(1), rnd):
            return False
        x -= 1
    k = 1
    while bernoulli_rational(x / k, rnd):
        k += 1
    return k % 2 == 1

# ---- fixed work (running time independent of the exponents) ------------------------------------
#: Precision of the first try of the fixed-work samplers, in bits (plus 2 bit_length(|V_g|) for
#: Eq. 7's inversion): the weight bounds are that tight and U is read to that many bits, so that
#: Pr[more bits are needed] <= 2^-62 per selection (< 2^-62 per Bernoulli trial as well).
FIXED_WORK_BITS = 64
_GUARD_BITS = 6           # working bits beyond the target: Horner, exp(1/16) and squaring roundings
_OFFSET = 4               # t' = x / 2^s + 2^-4 lies in [1/16, 1/8]: a fixed bit length, few Horner terms
_DIGIT = sys.int_info.bits_per_digit   # CPython's big-integer digit (30 bits on 64-bit builds)
#: A public odd 62-bit constant every per-view integer is a multiple of: no per-view value is 0 or
#: a small cached int, and all have the same number of digits (uniform CPython integer work).
_BLIND = (1 << 61) | 0x2545F4914F6CDD1D


@dataclass(frozen=True)
class _ExpPlan:
    """The public parameters of :func:`exp_neg_bounds` for exponents in [0, bound] (see there)."""

    s: int      # squarings: bound / 2^s <= 1/16
    w: int      # working scale 2^w
    t: int      # Horner terms
    e_lo: int   # 2^w exp(1/16) lies in [e_lo, e_hi]
    e_hi: int
    recip: tuple[tuple[int, int, int], ...]   # (k, floor(2^m / k), ceil(2^m / k)) for k = t..1: no division
    m: int                                    # reciprocal scale (a CPU's division time depends on its operands)


def squarings(bound: Fraction) -> int:
    """The least s >= 0 with bound / 2^s <= 1/16: the squarings of the fixed-work bounds on
    exp(-x) for x in [0, bound] (a function of the public bound only)."""
    s = 0
    while bound > Fraction(1 << s, 1 << _OFFSET):
        s += 1
    return s


def _reciprocals(w: int, t: int) -> tuple[tuple[tuple[int, int, int], ...], int]:
    """(k, floor(2^m / k), ceil(2^m / k)) for k = t, ..., 1 and the scale m = w + bit_length(t) + 3:
    multiplying by a reciprocal instead of dividing by k moves a Horner term by < 2^-6 ulp."""
    m = w + t.bit_length() + 3
    return tuple((k, (1 << m) // k, -(-(1 << m) // k)) for k in range(t, 0, -1)), m


def _horner(r_lo: int, r_hi: int, w: int, recip: Sequence[tuple[int, int, int]], m: int) -> tuple[int, int]:
    """Bounds on 2^w exp(-r) for r in [r_lo, r_hi] / 2^w, 0 <= r <= 1/8 + 2^-w, by t nested steps
    h_k = 1 - r h_{k+1} / (k + 1), h_0 = exp(-r), from the tail h_t in [1/2, 1]. Each step is
    decreasing in r and h_{k+1}; ``lo`` subtracts an upper bound of r h / k (rounded-up reciprocal
    of k, floor + 1), ``hi`` a lower one (rounded-down reciprocal, floor). Multiplications and
    shifts only: no integer division, whose time on a CPU depends on the operands."""
    one = 1 << w
    lo, hi = one >> 1, one
    shift = w + m
    for _, inv_lo, inv_hi in recip:
        lo, hi = one - (hi * r_hi * inv_hi >> shift) - 1, one - (lo * r_lo * inv_lo >> shift)
    return lo, hi


@lru_cache(maxsize=256)
def _exp_plan(bound: Fraction, bits: int) -> _ExpPlan:
    """The plan for exponents in [0, bound] at ``bits`` bits: a function of public values only.

    w = bits + s + guard, rounded up to w = -1 (mod the digit size) so that every value with bit
    length in [w - digit + 2, w + 1] - the Horner values, exp(-x / 2^s) and, for x up to
    ~(digit - 2) ln 2 (19 on 64-bit CPython), the squares - has the same number of digits."""
    s = squarings(bound)
    w = bits + s + _GUARD_BITS
    w += (_DIGIT - 1 - w) % _DIGIT
    t, f = 0, 1                      # f = 8^t t! >= 2^w: the tail's width 2^(w-1) shrinks below an ulp
    while f < 1 << w:
        t += 1
        f *= 8 * t
    recip, m = _reciprocals(w, t)
    q = 1 << (w - _OFFSET)           # exp(-1/16), then exp(1/16) = 1 / exp(-1/16) rounded outwards
    lo, hi = _horner(q, q, w, recip, m)
    return _ExpPlan(s, w, t, (1 << 2 * w) // hi, -(-(1 << 2 * w) // lo), recip, m)


def _exp_neg_offset(n: int, d: int, plan: _ExpPlan) -> tuple[int, int]:
    """Bounds on 2^w exp(-x) from t' = n / d = x / 2^s + 1/16 in [1/16, 1/8], with fixed work."""
    w = plan.w
    one = 1 << w
    r = (n << w) // d                                                     # t' in [r, r + 1] / 2^w
    lo, hi = _horner(r, r + 1, w, plan.recip, plan.m)                     # exp(-t')
    lo, hi = lo * plan.e_lo >> w, min(one, (hi * plan.e_hi >> w) + 1)     # exp(-x / 2^s) = exp(-t') e^(1/16)
    for _ in range(plan.s):
        lo, hi = lo * lo >> w, min(one, (hi * hi >> w) + 1)              # exp(-x / 2^(j-1)) = exp(-x / 2^j)^2
    return lo, hi


def _offset(x: Fraction, s: int) -> tuple[int, int]:
    """t' = x / 2^s + 1/16 as (numerator, denominator)."""
    return (((x.numerator << _OFFSET) + (x.denominator << s)) * _BLIND, (x.denominator << (s + _OFFSET)) * _BLIND)


def check_bits(bits: object) -> int:
    """``bits`` itself if it is a positive integer (bool excluded); ParameterError otherwise."""
    if isinstance(bits, bool) or not isinstance(bits, int) or bits < 1:
        raise ParameterError(f"bits must be a positive integer, got {bits!r}")
    return bits


def _check_exponent(x: Number, bound: Number) -> tuple[Fraction, Fraction]:
    x, bound = Fraction(x), Fraction(bound)
    if x < 0 or x > bound:
        raise ParameterError(f"x must lie in [0, bound] = [0, {bound}], got {x}")
    return x, bound


def exp_neg_bounds(x: Fraction, bound: Fraction, bits: int) -> tuple[int, int, int]:
    """Integers ``(lo, hi, W)`` with lo <= 2^W exp(-x) <= hi and hi - lo < 2^(W - bits) for a
    rational 0 <= x <= bound, computed with a number of integer operations fixed by (bound, bits).

    The weights of Eq. (7) are exp(-x_v), x_v = eps (u* - u_v) / (2 Du) in [0, eps / (2 Du)].
    With s squarings (bound / 2^s <= 1/16): t' = x / 2^s + 1/16 is read as [r, r + 1] / 2^W,
    exp(-t') bounded by T nested Horner steps rounded outwards, multiplied by bounds on exp(1/16)
    and squared s times, again rounded outwards. Every step is monotone, so the bounds are
    rigorous; T, s and W depend on (bound, bits) only, and the operands keep their sizes, so the
    work does not depend on x.

    Raises
    ------
    ParameterError
        If x is negative or exceeds ``bound``, or ``bits`` is not a positive integer."""
    bits = check_bits(bits)
    x, bound = _check_exponent(x, bound)
    plan = _exp_plan(bound, bits)
    lo, hi = _exp_neg_offset(*_offset(x, plan.s), plan)
    return lo, hi, plan.w


def grid_offsets(ms: Sequence[int], grid: int, bound: Fraction, s: int) -> list[tuple[int, int]]:
    """``[(n_v, d_v)]``: n_v / d_v = x_v / 2^s + 1/16 for the exponents x_v = bound (m* - m_v) / D
    of grid numerators m_v (m* = max m_v, D = ``grid``), unreduced, with the same few
    multiplications of integers whose sizes are fixed by (D, bound) for every v (no gcd, no zero
    operand).

    Parameters
    ----------
    ms : sequence of int
        The numerators m_v in [0, D].
    grid : int
        The denominator D.
    bound : Fraction
        The public bound on every exponent (eps / (2 Du) for Eq. 7).
    s : int
        The squarings for ``bound`` (:func:`squarings`).

    Returns
    -------
    list of (int, int)
    """
    a, b = bound.numerator, bound.denominator
    p, q = max(ms) * _BLIND, grid * _BLIND   # m* / D = p / q, q fixed; p + q in [q, 2q]
    # n_v / d_v = (D (16ap + bq 2^s) - 16aq m_v) / (16bq 2^s D), written with m_v + D in [D, 2D]
    g1, g2, g3 = (a * (p + q) << _OFFSET) + (b * q << s), a * q << _OFFSET, b * q << (s + _OFFSET)
    d = grid * g3
    return [(grid * g1 - (m + grid) * g2, d) for m in ms]


def bernoulli_offset(n: int, d: int, bound: Fraction, rnd: RandomSource, bits: int) -> bool:
    """Exact Bernoulli(exp(-x)) from t' = n / d = x / 2^s + 1/16 (see :func:`bernoulli_exp_neg_fixed`)."""
    length = bits
    u = rnd.randbelow(1 << length)
    while True:
        plan = _exp_plan(bound, bits)
        lo, hi = _exp_neg_offset(n, d, plan)
        below = (u + 1) << plan.w <= lo << length   # U < (u + 1) / 2^L <= lo / 2^W <= exp(-x)
        above = u << plan.w >= hi << length         # U >= u / 2^L >= hi / 2^W >= exp(-x)
        if below or above:
            return below
        u = (u << length) | rnd.randbelow(1 << length)   # undecided: read more of U, tighten
        bits, length = 2 * bits, 2 * length


def bernoulli_exp_neg_fixed(x: Fraction, bound: Fraction, rnd: RandomSource, *, bits: int | None = None) -> bool:
    """Exact Bernoulli(exp(-x)) for rational 0 <= x <= bound, with work fixed by (bound, bits).

    The acceptance test of permute-and-flip on Eq. (7)'s weights (x = eps (u* - u) / (2 Du)).
    Reads a uniform U in [0, 1) to ``bits`` bits (one ``randbelow(2^bits)``, default
    ``FIXED_WORK_BITS``) and returns whether U < exp(-x), from :func:`exp_neg_bounds`: True if U's
    cell lies below the lower bound, False if it lies above the upper one; otherwise (probability
    < 2^(2 - bits)) the precision and the bits of U are doubled, so the result is exactly
    Bernoulli(exp(-x)).

    Raises
    ------
    ParameterError
        If x lies outside [0, bound] or ``bits`` is not None or a positive integer."""
    bits = FIXED_WORK_BITS if bits is None else check_bits(bits)
    x, bound = _check_exponent(x, bound)
    return bernoulli_offset(*_offset(x, squarings(bound)), bound, rnd, bits)


def invert_exp_weights(ts: Sequence[tuple[int, int]], bound: Fraction, rnd: RandomSource, bits: int,
                       refinements: list[int] | None = None) -> int:
    """An index v drawn exactly with Pr[v] = w_v / S, w_v = exp(-x_v), S = sum w, x_v in [0, bound]:
    the v with rho_v <= U < rho_{v+1}, rho_i = (w_0 + ... + w_{i-1}) / S, for U uniform in [0, 1)
    read lazily to ``bits`` bits at first; only certain comparisons decide, all of them made
    (see :func:`~dpmv_lib.core.selection.sample_em_fixed`). ``ts``: t'_v = x_v / 2^s + 1/16 as
    pairs (:func:`grid_offsets`); ``refinements`` (tests) collects the precision of every
    undecided try."""
    length = bits
    u = rnd.randbelow(1 << length)
    e = len(ts).bit_length() + 1
    while True:
        plan = _exp_plan(bound, bits)
        bounds = [_exp_neg_offset(n, d, plan) for n, d in ts]
        # Sums carry the offset B = 2^(w+e) > 2 sum w, so that every operand has a fixed size:
        # c = B + C (weights before i), s = B + S, and B + C + R = s + c_hi - c_lo etc.
        shift = plan.w + e
        base = 1 << shift
        base_l = base << length
        u0, u1 = u, u + 1
        u0b, u1b = u0 << shift, u1 << shift
        s_lo = base + sum(lo for lo, _ in bounds)
        s_hi = base + sum(hi for _, hi in bounds)
        c_lo = c_hi = base
        index, decided = 0, True
        for lo, hi in bounds[:-1]:
            c_lo += lo
            c_hi += hi
            # rho_i lies in [C_lo / (C_lo + R_hi), C_hi / (C_hi + R_lo)], R = S - C (weights from i on)
            le = (c_hi << length) + u0b <= u0 * (s_lo + c_hi - c_lo) + base_l   # rho_i <= u / 2^L <= U
            gt = (c_lo << length) + u1b >= u1 * (s_hi + c_lo - c_hi) + base_l   # rho_i >= (u + 1) / 2^L > U
            index += le
            decided &= le or gt
        if decided:
            return index
        if refinements is not None:
            refinements.append(bits)
        u = (u << length) | rnd.randbelow(1 << length)   # undecided: read more of U, tighten
        bits, length = 2 * bits, 2 * length
