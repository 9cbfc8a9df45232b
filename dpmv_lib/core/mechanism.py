"""The exponential mechanism of Eq. (7) over a small public vocabulary.

    Pr[v | M] = exp(eps * u(v; M_R) / (2 Du)) / sum_v' exp(eps * u(v'; M_R) / (2 Du))

Privacy argument (McSherry & Talwar 2007): if |u_M(v) - u_M'(v)| <= Du for every v and the
vocabulary is the same under M and M' (C1), each probability changes by a factor of at most
exp(eps/2) in the numerator and exp(eps/2) in the normaliser, so one release is eps-DP.
The premise must hold for the numbers actually used: utilities, eps and Du are exact rationals
here (a float utility such as 0.4*0 + 0.4*1 + 0.2*1 = 0.6000000000000001 would exceed Du = 3/5
and give only eps*(1 + 1.5e-16)-DP); only the shifted exponents eps*(u - u_max)/(2 Du) <= 0 are
rounded to float, for exp.

Two samplers of the same distribution:
* :func:`sample_em` / :func:`sample_em_batch` - float, log-space Gumbel-max (fast, for experiments;
  for one distribution the exponents are computed exactly in rationals, see
  :func:`em_log_probabilities`);
* :func:`sample_em_fixed` - exact, and its work is fixed by the public (|V_g|, eps, Du) (the
  deployment default): utilities floored to a public grid 1/D (:func:`grid_utilities`: the same
  Du, so the same eps-DP; the lexicon scorer's utilities lie on it), then inversion of Eq. (7)'s
  distribution function with a uniform U read to a fixed number of bits and interval bounds on
  every weight exp(-x_v) computed with a fixed number of integer operations; the decision is
  taken only where it is certain, and with probability <= 2^-62 per selection more bits are read
  (exactly, so the law stays Eq. 7);
* :func:`sample_em_exact` - the rejection sampler ("rejection"): uniform proposal + acceptance
  with an exact Bernoulli(exp(-x)) for rational x (Canonne, Kamath & Steinke 2020). Accepted view
  v has probability proportional to exp(-x_v), x_v = eps (u_max - u_v) / (2 Du), i.e. exactly
  Eq. (7); its number of rounds and Bernoulli trials depend on the utilities (a timing channel,
  benchmarks/results/timing_channel.md).
"""
from __future__ import annotations

import math
import random
import secrets
import sys
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import TYPE_CHECKING, Callable, Protocol, Sequence, cast

import numpy as np

from .rationals import Number, to_fraction
from .errors import ParameterError

if TYPE_CHECKING:
    from numpy.typing import ArrayLike


def _check_utilities(u: np.ndarray) -> None:
    if u.size == 0:
        raise ParameterError("the exponential mechanism needs at least one view")
    if not np.all(np.isfinite(u)):
        raise ParameterError("utilities must be finite")
    if np.any(u < 0) or np.any(u > 1):
        raise ParameterError(f"utilities must lie in [0, 1] (Eq. 6), got min {u.min()} max {u.max()}")


def _check_eps(epsilon: float, sensitivity: float) -> None:
    if not (math.isfinite(epsilon) and epsilon >= 0):
        raise ParameterError(f"epsilon must be finite and >= 0, got {epsilon!r}")
    if not (math.isfinite(sensitivity) and sensitivity > 0):
        raise ParameterError(f"sensitivity must be finite and > 0, got {sensitivity!r}")


def _exact_param(x: object, what: str, *, positive: bool = False, nonnegative: bool = False) -> Fraction:
    """epsilon / sensitivity as an exact rational (floats through their shortest repr, as in
    :func:`sample_em_exact`; numpy scalars unwrapped)."""
    if isinstance(x, (np.floating, np.integer)) and not isinstance(x, (float, int)):
        x = x.item()
    return to_fraction(x, what, positive=positive, nonnegative=nonnegative)


def _utility_items(utilities: Sequence[Number]) -> list[Number]:
    """The utilities as a non-empty list; ParameterError otherwise."""
    try:
        items = list(utilities)
    except TypeError:
        raise ParameterError(f"utilities must be a sequence of numbers, got {type(utilities).__name__}") from None
    if not items:
        raise ParameterError("the exponential mechanism needs at least one view")
    return items


def _checked_utilities(utilities: Sequence[Number]) -> list[Fraction]:
    """Utilities as exact rationals in [0, 1] (Eq. 6); ParameterError otherwise."""
    items = _utility_items(utilities)
    us = [exact_utility(u) for u in items]
    for u in us:
        if u < 0 or u > 1:
            raise ParameterError(f"utilities must lie in [0, 1] (Eq. 6), got {u}")
    return us


def exact_exponents(utilities: Sequence[Number], epsilon: Number, sensitivity: Number) -> list[Fraction]:
    """The exponents of Eq. (7) as exact rationals, shifted by their maximum:
    x_v = eps * (u_v - max_w u_w) / (2 Du) <= 0 (the shift cancels in the normalisation).

    Utilities are read exactly (Fractions as they are, floats through their binary value)."""
    us = _checked_utilities(utilities)
    eps = _exact_param(epsilon, "epsilon", nonnegative=True)
    du = _exact_param(sensitivity, "sensitivity", positive=True)
    scale, top = eps / (2 * du), max(us)
    return [scale * (u - top) for u in us]


def to_float_exponent(x: Fraction) -> float:
    """A non-positive exact exponent as the nearest float (-inf below the float range)."""
    try:
        return float(x)
    except OverflowError:
        return -math.inf


def em_log_probabilities(utilities: Sequence[Number] | np.ndarray, epsilon: Number | np.ndarray,
                         sensitivity: Number) -> np.ndarray:
    """log Pr[v] of Eq. (7), computed stably in log space (no overflow for large eps*u).

    One distribution (1-D utilities, scalar epsilon): the exponents eps*u/(2 Du) are computed
    exactly in rationals from exact utilities (:func:`exact_exponents`), shifted by their max,
    and only then rounded to float for exp/log (one rounding per exponent, then a log-sum-exp
    whose largest term is exactly exp(0) = 1). A (n, V) array, or an (n,) epsilon, gives n
    distributions with the vectorised float computation (fast path for experiments)."""
    # numpy's stubs know no Fraction: ``epsilon`` is a Number or a numpy array, read as array-like
    if np.ndim(cast("ArrayLike", epsilon)) == 0 and np.ndim(np.asarray(utilities, dtype=object)) == 1:
        # one distribution: a 1-D sequence of numbers and a scalar eps (a numpy scalar is unwrapped)
        exps = exact_exponents(cast("Sequence[Number]", utilities), cast("Number", epsilon), sensitivity)
        x = np.array([to_float_exponent(v) for v in exps])
        logp: np.ndarray = x - np.log(np.exp(x).sum())
        return logp
    u = np.asarray(utilities, dtype=float)
    _check_utilities(u)
    eps = np.asarray(epsilon, dtype=float)
    if np.any(~np.isfinite(eps)) or np.any(eps < 0):
        raise ParameterError("epsilon must be finite and >= 0")
    _check_eps(0.0, float(sensitivity))
    logits = (eps[..., None] if eps.ndim else eps) * u / (2.0 * float(sensitivity))
    logits = logits - logits.max(axis=-1, keepdims=True)
    logps: np.ndarray = logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))
    return logps


def em_probabilities(utilities: Sequence[Number] | np.ndarray, epsilon: Number | np.ndarray,
                     sensitivity: Number) -> np.ndarray:
    """Pr[v] of Eq. (7) as floats (they sum to 1 up to rounding)."""
    probs: np.ndarray = np.exp(em_log_probabilities(utilities, epsilon, sensitivity))
    return probs


def sample_em(utilities: Sequence[Number] | np.ndarray, epsilon: Number, sensitivity: Number,
              rng: np.random.Generator) -> int:
    """Index of one view drawn from Eq. (7) by Gumbel-max in log space (seeded numpy Generator)."""
    logp = em_log_probabilities(utilities, epsilon, sensitivity)
    return int(np.argmax(logp + rng.gumbel(size=logp.shape)))


def sample_em_batch(utilities: np.ndarray, epsilon: np.ndarray | float, sensitivity: float,
                    rng: np.random.Generator) -> np.ndarray:
    """Vectorised Eq. (7): utilities (n, V), epsilon scalar or (n,) -> n sampled indices."""
    logp = em_log_probabilities(utilities, epsilon, sensitivity)
    picks: np.ndarray = np.argmax(logp + rng.gumbel(size=logp.shape), axis=-1)
    return picks


# ---- exact sampling -------------------------------------------------------------------------
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


def exact_utility(u: object) -> Fraction:
    """A utility as an exact rational; floats through their exact binary value (as the float
    sampler sees them); NaN/inf rejected.

    Parameters
    ----------
    u : Fraction, float, int or numeric str
        The utility.

    Returns
    -------
    Fraction

    Raises
    ------
    ParameterError
        If ``u`` is NaN, infinite or not a number.
    """
    if isinstance(u, Fraction):
        return u
    if isinstance(u, (float, np.floating)):
        if not math.isfinite(u):
            raise ParameterError(f"utilities must be finite, got {u!r}")
        return Fraction(float(u))
    if isinstance(u, (int, np.integer)) and not isinstance(u, (bool, np.bool_)):
        return Fraction(int(u))
    return to_fraction(u, "utility")


def sample_em_exact(utilities: Sequence[Number], epsilon: Number, sensitivity: Number,
                    rnd: RandomSource) -> int:
    """Index drawn exactly from Eq. (7): utilities (floats through their exact binary value),
    epsilon and sensitivity (floats through their shortest repr) are read as exact rationals and
    no float enters the decision."""
    top_shifted = exact_exponents(utilities, epsilon, sensitivity)  # x_v - max_w x_w <= 0
    xs = [-x for x in top_shifted]
    n = len(xs)
    while True:
        i = rnd.randbelow(n)
        if bernoulli_exp_neg(xs[i], rnd):
            return i


# ---- fixed-work exact sampling (running time independent of the utilities) -------------------
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


def _squarings(bound: Fraction) -> int:
    """The least s >= 0 with bound / 2^s <= 2^-_OFFSET (1/16)."""
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
    s = _squarings(bound)
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


def _exact_bound(epsilon: Number, sensitivity: Number) -> Fraction:
    """eps / (2 Du): the public bound on every exponent x_v of Eq. (7)."""
    eps = _exact_param(epsilon, "epsilon", nonnegative=True)
    return eps / (2 * _exact_param(sensitivity, "sensitivity", positive=True))


def _bound_and_squarings(epsilon: Number, sensitivity: Number) -> tuple[Fraction, int]:
    bound = _exact_bound(epsilon, sensitivity)
    return bound, _squarings(bound)


_bound_memo = lru_cache(maxsize=256)(lambda e, te, d, td: _bound_and_squarings(e, d))


def _public_bound(epsilon: Number, sensitivity: Number) -> tuple[Fraction, int]:
    """(eps / (2 Du), its squarings s), remembered per (type, value) of the public eps and Du."""
    # typed as plain ``type``: mypy reads type[int] as not Hashable (through int's unbound __hash__)
    te: type = type(epsilon)
    td: type = type(sensitivity)
    try:
        return _bound_memo(epsilon, te, sensitivity, td)
    except TypeError:   # unhashable: validate and convert as usual (raises ParameterError if invalid)
        return _bound_and_squarings(epsilon, sensitivity)


#: The public utility grid of the fixed-work samplers: 5 lcm(1, ..., 64). Every utility of the
#: shipped lexicon scorer (default weights 2/5, 2/5, 1/5, saturation 2) over at most 64 read
#: items is a multiple of 1/UTILITY_GRID, so flooring leaves it unchanged.
UTILITY_GRID = 5 * math.lcm(*range(1, 65))


def utility_grid(sensitivity: Number) -> int:
    """The grid denominator D = lcm(UTILITY_GRID, denominator of Du): public, and D Du is an integer.

    Raises
    ------
    ParameterError
        If ``sensitivity`` is not a finite number > 0."""
    du = _exact_param(sensitivity, "sensitivity", positive=True)
    return math.lcm(UTILITY_GRID, du.denominator)


#: Bits every rational utility's denominator is padded to before it is floored to the grid (a
#: float's is at most 2^1074, 10^300 < 2^997); a larger denominator is refused.
GRID_INPUT_BITS = 1152
_F53 = float(1 << 53)


@lru_cache(maxsize=64)
def _float_plan(grid: int) -> tuple[int, int]:
    """(top, B) for floats: u D = n D / 2^s with n < 2^53, so the floor is 0 once s >= top."""
    top = 53 + grid.bit_length()
    return top, 1 << (top + 1)


def _grid_numerator(u: object, grid: int) -> int:
    """floor(D u) for a utility u in [0, 1] read exactly, with the same operations on operands of
    the same sizes whatever u is (ParameterError if it is not a number in [0, 1]).

    A float u = mant 2^e (mant in [1/2, 1), from frexp: n = 2^53 mant has 53 bits; u = 0 is read
    as 5e-324, whose floor is 0 as well): floor(D u) = floor((n D + B) / 2^s) - B / 2^s with
    s = min(53 - e, top), B = 2^(top + 1) (a multiple of 2^s). A rational p / q (p + q and q
    shifted to GRID_INPUT_BITS bits of q, never 0): floor(D p / q) = ((p + q) D + q) // q - D - 1."""
    if isinstance(u, float):
        if not 0.0 <= u <= 1.0:   # (also NaN)
            raise ParameterError(f"utilities must be finite and lie in [0, 1] (Eq. 6), got {u!r}")
        top, big = _float_plan(grid)
        mant, e = math.frexp(u or 5e-324)
        s = min(53 - e, top)
        return ((int(mant * _F53) * grid + big) >> s) - (big >> s)
    f = exact_utility(u)
    num, den = f.numerator, f.denominator
    if num < 0 or num > den:
        raise ParameterError(f"utilities must lie in [0, 1] (Eq. 6), got {u}")
    pad = GRID_INPUT_BITS - den.bit_length()
    if pad < 0:
        raise ParameterError(f"a utility's denominator has {den.bit_length()} bits, more than the "
                             f"{GRID_INPUT_BITS} the fixed-work samplers read; round it first")
    top, den = (num + den) << pad, den << pad
    return (top * grid + den) // den - grid - 1


def grid_utilities(utilities: Sequence[Number], sensitivity: Number) -> tuple[list[int], int]:
    """``([m_v], D)``: every utility floored to the public grid, u~_v = m_v / D = floor(D u_v) / D.

    The fixed-work samplers draw from Eq. (7) on u~ instead of u: their integers then have sizes
    fixed by the public (D, eps, Du), whatever the utilities' representation (a float's 2^-55
    steps, 1/10^300, a subnormal float), so their work does not depend on the utility values.

    Privacy: flooring is monotone and D Du is an integer (:func:`utility_grid`), so
    |u_M(v) - u_M'(v)| <= Du implies |u~_M(v) - u~_M'(v)| <= Du: from u_M'(v) <= u_M(v) + Du,
    floor(D u_M'(v)) <= floor(D u_M(v) + D Du) = floor(D u_M(v)) + D Du, and symmetrically. The
    premise of Eq. (7)'s eps-DP argument holds for u~ with the same Du, so a release stays eps-DP
    with the eps it is charged (no term for the rounding; without D Du integer it would be
    Du + 1/D). A utility moves by less than 1/D < 2^-92, so Pr[v] is within a factor
    exp(eps / (Du D)) of Eq. (7) on u; on the grid (every lexicon-scorer utility of the running
    example) the law is Eq. (7) exactly.

    Raises
    ------
    ParameterError
        If a utility is not a finite number in [0, 1] (or there is none), or ``sensitivity`` is
        not a finite number > 0."""
    items = _utility_items(utilities)
    grid = utility_grid(sensitivity)
    return [_grid_numerator(u, grid) for u in items], grid


def offset_exponents(utilities: Sequence[Number], epsilon: Number, sensitivity: Number
                      ) -> tuple[Fraction, list[tuple[int, int]]]:
    """``(bound, [(n_v, d_v)])``: bound = eps / (2 Du) and n_v / d_v = x_v / 2^s + 1/16 for Eq. (7)'s
    exponents x_v = eps (u~* - u~_v) / (2 Du) on the grid utilities u~_v = m_v / D of
    :func:`grid_utilities` (s = the squarings for ``bound``), unreduced, with the same few
    multiplications of integers whose sizes are fixed by (D, eps, Du) for every view (no gcd, no
    zero operand)."""
    ms, grid = grid_utilities(utilities, sensitivity)
    bound, s = _public_bound(epsilon, sensitivity)
    a, b = bound.numerator, bound.denominator
    p, q = max(ms) * _BLIND, grid * _BLIND   # u~* = p / q, q fixed; p + q in [q, 2q]
    # n_v / d_v = (D (16ap + bq 2^s) - 16aq m_v) / (16bq 2^s D), written with m_v + D in [D, 2D]
    g1, g2, g3 = (a * (p + q) << _OFFSET) + (b * q << s), a * q << _OFFSET, b * q << (s + _OFFSET)
    d = grid * g3
    return bound, [(grid * g1 - (m + grid) * g2, d) for m in ms]


def bernoulli_offset(n: int, d: int, bound: Fraction, rnd: RandomSource, bits: int) -> bool:
    """Exact Bernoulli(exp(-x)), t' = n / d = x / 2^s + 1/16 (see bernoulli_exp_neg_fixed)."""
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
    return bernoulli_offset(*_offset(x, _squarings(bound)), bound, rnd, bits)


def _em_inversion(ts: Sequence[tuple[int, int]], bound: Fraction, rnd: RandomSource, bits: int,
                  refinements: list[int] | None = None) -> int:
    """The v with rho_v <= U < rho_{v+1}, rho_i = (w_0 + ... + w_{i-1}) / S, w = exp(-x), S = sum w,
    for U uniform in [0, 1) read lazily; only certain comparisons decide (see sample_em_fixed).
    ``ts``: t'_v = x_v / 2^s + 1/16 as pairs; ``refinements`` (tests) collects the precision of
    every undecided try."""
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


def _precision(bits: int | None, n: int) -> int:
    """Bits of the first try of Eq. (7)'s inversion: ``FIXED_WORK_BITS + 2 bit_length(n)``."""
    return FIXED_WORK_BITS + 2 * n.bit_length() if bits is None else check_bits(bits)


def sample_em_fixed(utilities: Sequence[Number], epsilon: Number, sensitivity: Number, rnd: RandomSource,
                    *, bits: int | None = None) -> int:
    """Index drawn exactly from Eq. (7) on the grid utilities, with work fixed by the public (|V_g|, eps, Du).

    The utilities are first floored to the public grid 1/D (:func:`grid_utilities`, which shows
    that Eq. (7) on them is eps-DP with the same Du; unchanged on the grid). Inversion of Eq. (7)'s
    distribution function: a uniform U in [0, 1) is read to L bits (one
    ``randbelow(2^L)``, L = ``bits``, default ``FIXED_WORK_BITS + 2 bit_length(n)``) and the
    output is the v with rho_v <= U < rho_{v+1}, rho_i = sum_{j<i} w_j / sum_j w_j,
    w_j = exp(-x_j), x_j = eps (u~* - u~_j) / (2 Du) read exactly; so Pr[v] = w_v / sum_j w_j,
    exactly Eq. (7) on u~. Each rho_i is bracketed from the bounds of
    :func:`exp_neg_bounds` (one per view, fixed work) and all n - 1 comparisons are made, with no
    early exit; a boundary is decided only when U's L-bit cell lies on one side of its bracket.
    If one is not (probability <= (n-1)(2n 2^-bits + 2^(1-L)) <= 2^-62 at the default), the
    precision and L are doubled with fresh bits of U: the law stays exactly Eq. (7), and only
    that rare continuation takes utility-dependent time.

    Raises
    ------
    ParameterError
        As :func:`exact_exponents` for invalid utilities, epsilon or sensitivity, or if ``bits``
        is not None or a positive integer."""
    bound, ts = offset_exponents(utilities, epsilon, sensitivity)
    return _em_inversion(ts, bound, rnd, _precision(bits, len(ts)))


#: The exact samplers of Eq. (7) by name: "fixed" (default: fixed work) and "rejection" (CKS 2020).
EXACT_EM_SAMPLERS: dict[str, Callable[..., int]] = {"fixed": sample_em_fixed, "rejection": sample_em_exact}


def exact_em_sampler(name: str = "fixed") -> Callable[..., int]:
    """The exact Eq. (7) sampler registered under ``name`` (:data:`EXACT_EM_SAMPLERS`).

    Raises
    ------
    ParameterError
        If ``name`` is not a registered sampler."""
    try:
        return EXACT_EM_SAMPLERS[name]
    except (KeyError, TypeError):
        raise ParameterError(f"unknown exact sampler {name!r}; use one of {sorted(EXACT_EM_SAMPLERS)}") from None


@dataclass(frozen=True)
class ExponentialMechanism:
    """Eq. (7) with local parameter eps and fixed sensitivity bound Du; eps-DP per release.

    ``exact=True`` (the MemView default) samples with the exact sampler named ``sampler``
    (:data:`EXACT_EM_SAMPLERS`: "fixed", :func:`sample_em_fixed`, by default, or "rejection",
    :func:`sample_em_exact`); ``False`` uses the float Gumbel-max sampler."""

    epsilon: Fraction
    sensitivity: Fraction
    exact: bool = True
    sampler: str = "fixed"

    def probabilities(self, utilities: Sequence[Number]) -> np.ndarray:
        return em_probabilities(utilities, self.epsilon, self.sensitivity)

    def sample(self, utilities: Sequence[Number], rng: np.random.Generator | None = None,
               source: RandomSource | None = None) -> int:
        if self.exact:
            return exact_em_sampler(self.sampler)(
                utilities, self.epsilon, self.sensitivity,
                source or (SeededRandomSource(rng) if rng is not None else SystemRandomSource()))
        if rng is None:
            raise ParameterError("the float sampler needs a numpy Generator (rng)")
        return sample_em(utilities, self.epsilon, self.sensitivity, rng)
