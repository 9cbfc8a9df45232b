"""The pure eps-DP selectors of C3: the exponential mechanism (Eq. 7) and permute-and-flip.

    Pr[v | M] = exp(eps * u(v; M_R) / (2 Du)) / sum_v' exp(eps * u(v'; M_R) / (2 Du))      (Eq. 7)

One constructor per mechanism (:func:`exponential_mechanism`, :func:`permute_and_flip`), its
privacy argument next to it (OpenDP style). Both take the same exact inputs (utilities in [0, 1]
as rationals, eps, the fixed sensitivity bound Du) and read them through
:func:`exact_exponents`: x_v = eps (u_v - u*) / (2 Du) <= 0, u* = max_w u_w. MemView uses
either; ledger, cap check (C5) and generic fallback are unchanged.

Eq. (7) (McSherry & Talwar 2007): if |u_M(v) - u_M'(v)| <= Du for every v and the vocabulary is
the same under M and M' (C1), numerator and normaliser each change by a factor of at most
exp(eps/2), so one release is eps-DP. The premise must hold for the numbers actually used:
utilities, eps and Du are exact rationals here (a float utility such as 0.4*0 + 0.4*1 + 0.2*1 =
0.6000000000000001 would exceed Du = 3/5 and give only eps*(1 + 1.5e-16)-DP); only the shifted
exponents eps*(u - u_max)/(2 Du) <= 0 are rounded to float, for exp. Its samplers:

* :func:`sample_em` / :func:`sample_em_batch` - float, log-space Gumbel-max (fast, for
  experiments; for one distribution the exponents are exact, :func:`em_log_probabilities`);
* :func:`sample_em_fixed` ("fixed", the deployment default) - exact, with work fixed by the
  public (|V_g|, eps, Du): utilities floored to a public grid 1/D (:func:`grid_utilities`: the
  same Du, so the same eps-DP; the lexicon scorer's utilities lie on it), then inversion of the
  distribution function with fixed-work bounds on every weight exp(-x_v)
  (:func:`~dpmv_lib.core.sampling.invert_exp_weights`);
* :func:`sample_em_exact` ("rejection") - exact: uniform proposal + acceptance with an exact
  Bernoulli(exp(-x)) (Canonne, Kamath & Steinke 2020); its number of rounds depends on the
  utilities (a timing channel, benchmarks/results/timing_channel.md).

Permute-and-flip (McKenna & Sheldon 2020, Alg. 1): visit the views in a uniformly random order
and accept view r with probability q_r = exp(x_r); output the first accepted one (the maximiser
has q = 1, so the walk always stops). Its exact output distribution: r is output iff it is
accepted and every view visited before it is rejected. The set S of views before r is, for a
uniform order, of size k with probability 1/n for each k and uniform among the k-subsets, so

    Pr[r] = q_r * sum_{k=0}^{n-1} k! (n-1-k)! / n! * e_k({1 - q_j : j != r})       (PF)

with e_k the elementary symmetric polynomial. All terms are >= 0 (stable in floats);
equivalently Pr[r] = q_r * int_0^1 prod_{j != r} (1 - t q_j) dt (arrival times, used in tests).
Its exact samplers: :func:`sample_pf_fixed` ("fixed", work fixed by the public values) and
:func:`sample_pf_exact` ("sequential", stops at the first acceptance).

Each selector's default ``sample_exact`` is its fixed-work sampler, whose running time does not
depend on the utilities; :data:`VARIABLE_WORK_SAMPLERS` names the other one (same law, another
use of the random stream), which seeded experiments use. The exact primitives (random sources,
exact Bernoulli trials, fixed-work bounds) are in :mod:`dpmv_lib.core.sampling`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from math import comb
from typing import TYPE_CHECKING, Any, Callable, Sequence, cast

import numpy as np

from .errors import ParameterError, ParameterTypeError
from .rationals import Number, to_fraction
from .sampling import (FIXED_WORK_BITS, RandomSource, bernoulli_exp_neg, bernoulli_offset, check_bits, grid_offsets,
                       invert_exp_weights, squarings)

if TYPE_CHECKING:
    from numpy.typing import ArrayLike


# ---- the exponential mechanism, Eq. (7) ---------------------------------------------------------------
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

    Parameters
    ----------
    utilities : sequence of numbers
        u_v in [0, 1] for every view of V_g (Fractions as they are, floats through their binary value).
    epsilon : number
        The selection's eps >= 0.
    sensitivity : number
        The sensitivity bound Du > 0.

    Returns
    -------
    list of Fraction
        x_v, in vocabulary order (0 for a maximiser).

    Raises
    ------
    ParameterError
        If there are no views, a utility is not a finite number in [0, 1], eps < 0 or Du <= 0
        (a wrong-typed eps or Du raises its ParameterTypeError subclass).
    """
    us = _checked_utilities(utilities)
    eps = _exact_param(epsilon, "epsilon", nonnegative=True)
    du = _exact_param(sensitivity, "sensitivity", positive=True)
    scale, top = eps / (2 * du), max(us)
    return [scale * (u - top) for u in us]


def to_float_exponent(x: Fraction) -> float:
    """A non-positive exact exponent as the nearest float (-inf below the float range).

    Parameters
    ----------
    x : Fraction
        An exponent x <= 0 (e.g. from :func:`exact_exponents`).

    Returns
    -------
    float
    """
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
    distributions with the vectorised float computation (fast path for experiments).

    Parameters
    ----------
    utilities : sequence of numbers or numpy.ndarray
        u_v in [0, 1]: one vocabulary (1-D) or n of them (n, V).
    epsilon : number or numpy.ndarray
        eps >= 0, one or (n,).
    sensitivity : number
        The sensitivity bound Du > 0.

    Returns
    -------
    numpy.ndarray
        log Pr[v], the shape of ``utilities``.

    Raises
    ------
    ParameterError
        If there are no views, a utility is not a finite number in [0, 1], eps < 0 or Du <= 0
        (a wrong-typed eps or Du raises its ParameterTypeError subclass).
    """
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
    """Pr[v] of Eq. (7) as floats (they sum to 1 up to rounding): exp of :func:`em_log_probabilities`.

    Parameters
    ----------
    utilities : sequence of numbers or numpy.ndarray
        u_v in [0, 1]: one vocabulary (1-D) or n of them (n, V).
    epsilon : number or numpy.ndarray
        eps >= 0, one or (n,).
    sensitivity : number
        The sensitivity bound Du > 0.

    Returns
    -------
    numpy.ndarray
        Pr[v], the shape of ``utilities``.
    """
    probs: np.ndarray = np.exp(em_log_probabilities(utilities, epsilon, sensitivity))
    return probs


def sample_em(utilities: Sequence[Number] | np.ndarray, epsilon: Number, sensitivity: Number,
              rng: np.random.Generator) -> int:
    """Index of one view drawn from Eq. (7) by Gumbel-max in log space (seeded numpy Generator).

    Parameters
    ----------
    utilities : sequence of numbers
        u_v in [0, 1] for every view of V_g (Fractions as they are, floats through their binary value).
    epsilon : number
        The selection's eps >= 0.
    sensitivity : number
        The sensitivity bound Du > 0.
    rng : numpy.random.Generator
        The random stream.

    Returns
    -------
    int
    """
    logp = em_log_probabilities(utilities, epsilon, sensitivity)
    return int(np.argmax(logp + rng.gumbel(size=logp.shape)))


def sample_em_batch(utilities: np.ndarray, epsilon: np.ndarray | float, sensitivity: float,
                    rng: np.random.Generator) -> np.ndarray:
    """Vectorised Eq. (7): utilities (n, V), epsilon scalar or (n,) -> n sampled indices.

    Parameters
    ----------
    utilities : numpy.ndarray
        (n, V) utilities in [0, 1].
    epsilon : float or numpy.ndarray
        eps >= 0, one or (n,).
    sensitivity : float
        The sensitivity bound Du > 0.
    rng : numpy.random.Generator
        The random stream.

    Returns
    -------
    numpy.ndarray
        (n,) view indices.
    """
    logp = em_log_probabilities(utilities, epsilon, sensitivity)
    picks: np.ndarray = np.argmax(logp + rng.gumbel(size=logp.shape), axis=-1)
    return picks


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
    no float enters the decision. Its number of rounds depends on the utilities.

    Parameters
    ----------
    utilities : sequence of numbers
        u_v in [0, 1] for every view of V_g (Fractions as they are, floats through their binary value).
    epsilon : number
        The selection's eps >= 0.
    sensitivity : number
        The sensitivity bound Du > 0.
    rnd : RandomSource
        The random source.

    Returns
    -------
    int
        The index of the selected view.

    Raises
    ------
    ParameterError
        If there are no views, a utility is not a finite number in [0, 1], eps < 0 or Du <= 0
        (a wrong-typed eps or Du raises its ParameterTypeError subclass).
    """
    top_shifted = exact_exponents(utilities, epsilon, sensitivity)  # x_v - max_w x_w <= 0
    xs = [-x for x in top_shifted]
    n = len(xs)
    while True:
        i = rnd.randbelow(n)
        if bernoulli_exp_neg(xs[i], rnd):
            return i


# ---- the fixed-work sampler of Eq. (7): utilities on a public grid -----------------------------------
def _exact_bound(epsilon: Number, sensitivity: Number) -> Fraction:
    """eps / (2 Du): the public bound on every exponent x_v of Eq. (7)."""
    eps = _exact_param(epsilon, "epsilon", nonnegative=True)
    return eps / (2 * _exact_param(sensitivity, "sensitivity", positive=True))


def _bound_and_squarings(epsilon: Number, sensitivity: Number) -> tuple[Fraction, int]:
    bound = _exact_bound(epsilon, sensitivity)
    return bound, squarings(bound)


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

    Parameters
    ----------
    sensitivity : number
        The sensitivity bound Du > 0.

    Returns
    -------
    int

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

    Parameters
    ----------
    utilities : sequence of numbers
        u_v in [0, 1] for every view of V_g.
    sensitivity : number
        The sensitivity bound Du > 0.

    Returns
    -------
    (list of int, int)
        The numerators m_v and the grid denominator D.

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
    zero operand; :func:`~dpmv_lib.core.sampling.grid_offsets`).

    Parameters
    ----------
    utilities : sequence of numbers
        u_v in [0, 1] for every view of V_g.
    epsilon : number
        The selection's eps >= 0.
    sensitivity : number
        The sensitivity bound Du > 0.

    Returns
    -------
    (Fraction, list of (int, int))
    """
    ms, grid = grid_utilities(utilities, sensitivity)
    bound, s = _public_bound(epsilon, sensitivity)
    return bound, grid_offsets(ms, grid, bound, s)


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
    :func:`~dpmv_lib.core.sampling.exp_neg_bounds` (one per view, fixed work) and all n - 1
    comparisons are made, with no early exit; a boundary is decided only when U's L-bit cell
    lies on one side of its bracket.
    If one is not (probability <= (n-1)(2n 2^-bits + 2^(1-L)) <= 2^-62 at the default), the
    precision and L are doubled with fresh bits of U: the law stays exactly Eq. (7), and only
    that rare continuation takes utility-dependent time.

    Parameters
    ----------
    utilities : sequence of numbers
        u_v in [0, 1] for every view of V_g.
    epsilon : number
        The selection's eps >= 0.
    sensitivity : number
        The sensitivity bound Du > 0.
    rnd : RandomSource
        The random source.
    bits : int, optional
        L, the bits of U read at first (default ``FIXED_WORK_BITS + 2 bit_length(n)``).

    Returns
    -------
    int
        The index of the selected view.

    Raises
    ------
    ParameterError
        As :func:`exact_exponents` for invalid utilities, epsilon or sensitivity, or if ``bits``
        is not None or a positive integer."""
    bound, ts = offset_exponents(utilities, epsilon, sensitivity)
    return invert_exp_weights(ts, bound, rnd, _precision(bits, len(ts)))


#: The exact samplers of Eq. (7) by name: "fixed" (default: fixed work) and "rejection" (CKS 2020).
EXACT_EM_SAMPLERS: dict[str, Callable[..., int]] = {"fixed": sample_em_fixed, "rejection": sample_em_exact}


def exact_em_sampler(name: str = "fixed") -> Callable[..., int]:
    """The exact Eq. (7) sampler registered under ``name`` (:data:`EXACT_EM_SAMPLERS`).

    Parameters
    ----------
    name : str, optional
        "fixed" (default) or "rejection".

    Returns
    -------
    callable
        (utilities, eps, Du, RandomSource) -> view index.

    Raises
    ------
    ParameterError
        If ``name`` is not a registered sampler."""
    try:
        return EXACT_EM_SAMPLERS[name]
    except (KeyError, TypeError):
        raise ParameterError(f"unknown exact sampler {name!r}; use one of {sorted(EXACT_EM_SAMPLERS)}") from None


# ---- permute-and-flip -------------------------------------------------------------------------------
def _elementary_symmetric(xs: Sequence[Any], one: Any) -> list[Any]:
    """e_0..e_m of xs (any field: Fraction, float, mpmath), by the product recurrence."""
    e = [one] + [one * 0] * len(xs)
    for x in xs:
        for k in range(len(e) - 1, 0, -1):
            e[k] = e[k] + x * e[k - 1]
    return e


def pf_from_acceptance(q: Sequence[Any]) -> list[Any]:
    """Pr[r] of permute-and-flip for arbitrary acceptance probabilities q_r in [0, 1], by (PF).

    Exact for Fractions (then the result sums to 1 - Pr[all rejected], i.e. exactly 1 when some
    q_r = 1); works for floats or mpmath numbers too. O(n^3), n = |V_g| is small.

    Parameters
    ----------
    q : sequence of numbers
        Acceptance probabilities q_r in [0, 1] (Fractions for an exact result).

    Returns
    -------
    list
        Pr[r] for every r, in the number type of ``q``.

    Raises
    ------
    ParameterError
        If ``q`` is empty or some q_r lies outside [0, 1].
    ParameterTypeError
        If some q_r is not comparable with numbers.

    Examples
    --------
    >>> from fractions import Fraction
    >>> pf_from_acceptance([Fraction(1), Fraction(1, 2)])
    [Fraction(3, 4), Fraction(1, 4)]
    """
    n = len(q)
    if n == 0:
        raise ParameterError("permute-and-flip needs at least one view")
    for x in q:
        try:
            inside = 0 <= x <= 1
        except TypeError:
            raise ParameterTypeError(f"acceptance probabilities must be numbers, got {type(x).__name__}") from None
        if not inside:
            raise ParameterError(f"acceptance probabilities must lie in [0, 1], got {x}")
    exact = all(isinstance(x, (Fraction, int)) for x in q)
    one = Fraction(1) if exact else q[0] * 0 + 1
    return [q[r] * s for r, s in enumerate(_pf_sums(q, one, exact))]


def _pf_sums(q: Sequence[Any], one: Any, exact: bool) -> list[Any]:
    """S_r = sum_k k! (n-1-k)! / n! e_k({1 - q_j: j != r}) for every r: Pr[r] = q_r S_r (PF).
    With q_max = 1, S_r lies in [1/n, 1] (never underflows)."""
    n = len(q)
    weights = [(Fraction(1, n * comb(n - 1, k)) if exact else one / (n * comb(n - 1, k))) for k in range(n)]
    out = []
    for r in range(n):
        e = _elementary_symmetric([one - q[j] for j in range(n) if j != r], one)
        out.append(sum((w * ek for w, ek in zip(weights, e)), one * 0))
    return out


def pf_log_probabilities(utilities: Sequence[Number], epsilon: Number, sensitivity: Number) -> list[float]:
    """log Pr[v] of permute-and-flip: x_v + log S_v with the exact exponents x_v (Eq. 7's) and
    S_v in [1/n, 1] (:func:`_pf_sums`), so a probability below the float range keeps a finite
    log; -inf only for an exponent below the float range.

    Parameters
    ----------
    utilities : sequence of numbers
        u_v in [0, 1] for every view of V_g.
    epsilon : number
        The selection's eps >= 0.
    sensitivity : number
        The sensitivity bound Du > 0.

    Returns
    -------
    list of float

    Raises
    ------
    ParameterError
        As :func:`exact_exponents`: no views, a utility outside
        [0, 1], eps < 0 or Du <= 0, a value that is not a finite number (a wrong-typed eps or
        Du raises its ParameterTypeError subclass)."""
    xs = [to_float_exponent(x) for x in exact_exponents(utilities, epsilon, sensitivity)]
    sums = _pf_sums([math.exp(x) for x in xs], 1.0, False)
    return [x + math.log(s) if x > -math.inf else -math.inf for x, s in zip(xs, sums)]


def pf_probabilities(utilities: Sequence[Number], epsilon: Number, sensitivity: Number) -> np.ndarray:
    """Pr[v] of permute-and-flip as floats: exact rational exponents x_v <= 0, one rounding
    each, q_v = exp(x_v) (the maximiser's q is exactly 1), then (PF) with non-negative terms.

    Parameters
    ----------
    utilities : sequence of numbers
        u_v in [0, 1] for every view of V_g.
    epsilon : number
        The selection's eps >= 0.
    sensitivity : number
        The sensitivity bound Du > 0.

    Returns
    -------
    numpy.ndarray
        Pr[v], in vocabulary order.

    Raises
    ------
    ParameterError
        As :func:`exact_exponents`: no views, a utility outside
        [0, 1], eps < 0 or Du <= 0, a value that is not a finite number (a wrong-typed eps or
        Du raises its ParameterTypeError subclass)."""
    q = [math.exp(to_float_exponent(x)) for x in exact_exponents(utilities, epsilon, sensitivity)]
    return np.array(pf_from_acceptance(q), dtype=float)


def sample_pf(utilities: Sequence[Number], epsilon: Number, sensitivity: Number, rng: np.random.Generator) -> int:
    """One permute-and-flip draw with a seeded numpy Generator (float acceptance test).

    Parameters
    ----------
    utilities : sequence of numbers
        u_v in [0, 1] for every view of V_g.
    epsilon : number
        The selection's eps >= 0.
    sensitivity : number
        The sensitivity bound Du > 0.
    rng : numpy.random.Generator
        The random stream.

    Returns
    -------
    int
        The index of the selected view.

    Raises
    ------
    ParameterError
        As :func:`exact_exponents`: no views, a utility outside
        [0, 1], eps < 0 or Du <= 0, a value that is not a finite number (a wrong-typed eps or
        Du raises its ParameterTypeError subclass)."""
    xs = [to_float_exponent(x) for x in exact_exponents(utilities, epsilon, sensitivity)]
    for r in rng.permutation(len(xs)):
        if rng.random() < math.exp(xs[r]):  # q = 1 for the maximiser: always accepted
            return int(r)
    raise AssertionError("unreachable: the maximiser is always accepted")  # pragma: no cover


def sample_pf_exact(utilities: Sequence[Number], epsilon: Number, sensitivity: Number, rnd: RandomSource) -> int:
    """One permute-and-flip draw with no float in the decision: a uniform order by lazy
    Fisher-Yates (``randbelow``) and an exact Bernoulli(exp(-x)) per visited view
    (:func:`~dpmv_lib.core.sampling.bernoulli_exp_neg`, rational x = eps (u* - u_r) / (2 Du)).

    Parameters
    ----------
    utilities : sequence of numbers
        u_v in [0, 1] for every view of V_g.
    epsilon : number
        The selection's eps >= 0.
    sensitivity : number
        The sensitivity bound Du > 0.
    rnd : RandomSource
        The random source (``randbelow`` and random bits).

    Returns
    -------
    int
        The index of the selected view.

    Raises
    ------
    ParameterError
        As :func:`exact_exponents`: no views, a utility outside
        [0, 1], eps < 0 or Du <= 0, a value that is not a finite number (a wrong-typed eps or
        Du raises its ParameterTypeError subclass)."""
    xs = [-x for x in exact_exponents(utilities, epsilon, sensitivity)]
    order = list(range(len(xs)))
    for i in range(len(order)):
        j = i + rnd.randbelow(len(order) - i)
        order[i], order[j] = order[j], order[i]
        if bernoulli_exp_neg(xs[order[i]], rnd):
            return order[i]
    raise AssertionError("unreachable: the maximiser (x = 0) is always accepted")  # pragma: no cover


def sample_pf_fixed(utilities: Sequence[Number], epsilon: Number, sensitivity: Number, rnd: RandomSource,
                    *, bits: int | None = None) -> int:
    """One permute-and-flip draw with no float in the decision and work fixed by the public
    (|V_g|, eps, Du): a uniform order by Fisher-Yates (``randbelow``), then an exact
    Bernoulli(exp(-x_r)) with fixed work for EVERY view
    (:func:`~dpmv_lib.core.sampling.bernoulli_exp_neg_fixed`, x_r = eps (u* - u_r) / (2 Du), the
    exponents of Eq. (7) on the utilities floored to the public grid 1/D,
    :func:`grid_utilities`: the same Du, so the same eps-DP, and no
    change on the grid); the output is the first accepted view in the order - the same law (PF)
    as :func:`sample_pf_exact` on the grid utilities, since the flips after it are independent
    and unused. Only with
    probability < n 2^(2-bits) (< 2^-59 for n <= 8 at the default ``FIXED_WORK_BITS``) does a
    flip read more bits (exactly: the law stays (PF)).

    Parameters
    ----------
    utilities : sequence of numbers
        u_v in [0, 1] for every view of V_g.
    epsilon : number
        The selection's eps >= 0.
    sensitivity : number
        The sensitivity bound Du > 0.
    rnd : RandomSource
        The random source (``randbelow`` and random bits).
    bits : int, optional
        The fixed number of random bits per flip (default ``FIXED_WORK_BITS``).

    Returns
    -------
    int
        The index of the selected view.

    Raises
    ------
    ParameterError
        As :func:`exact_exponents` for invalid utilities, epsilon or
        sensitivity, or if ``bits`` is not None or a positive integer."""
    bound, ts = offset_exponents(utilities, epsilon, sensitivity)
    bits = FIXED_WORK_BITS if bits is None else check_bits(bits)
    n = len(ts)
    order = list(range(n))
    for i in range(n - 1):
        j = i + rnd.randbelow(n - i)
        order[i], order[j] = order[j], order[i]
    accepted = [bernoulli_offset(*ts[r], bound, rnd, bits) for r in order]
    return order[accepted.index(True)]   # the maximiser (x = 0) is always accepted


#: The exact permute-and-flip samplers by name: "fixed" (default: fixed work) and "sequential".
EXACT_PF_SAMPLERS: dict[str, Callable[..., int]] = {"fixed": sample_pf_fixed, "sequential": sample_pf_exact}


# ---- the selector abstraction -----------------------------------------------------------------------
@dataclass(frozen=True)
class Selector:
    """A pure eps-DP selection over a public vocabulary given utilities of sensitivity Du (C3).

    ``name`` is the public mechanism tag of an admitted release (SlotRelease.mechanism);
    ``probabilities`` gives the exact view distribution as floats (for the exact oracle, the
    contract checker and analyses); ``sample`` draws with a numpy Generator, ``sample_exact``
    with a :class:`~dpmv_lib.core.sampling.RandomSource` and rational arithmetic only.

    Parameters
    ----------
    name : str
        Public mechanism tag ("em", "pf").
    label : str
        Human-readable name.
    probabilities : callable
        (utilities, eps, Du) -> the view distribution as floats.
    sample : callable
        (utilities, eps, Du, numpy Generator) -> view index.
    sample_exact : callable
        (utilities, eps, Du, RandomSource) -> view index, exact.
    privacy : str
        The privacy argument in one line.
    """

    name: str
    label: str
    probabilities: Callable[[Sequence[Number], Number, Number], np.ndarray]
    sample: Callable[[Sequence[Number], Number, Number, np.random.Generator], int]
    sample_exact: Callable[[Sequence[Number], Number, Number, RandomSource], int]
    privacy: str


def exponential_mechanism(exact_sampler: str = "fixed") -> Selector:
    """Eq. (7). Privacy (McSherry & Talwar 2007): with |u_M(v) - u_M'(v)| <= Du on a shared
    vocabulary, numerator and normaliser each move by at most exp(eps/2): eps-DP per release.

    ``exact_sampler``: "fixed" (default, :func:`sample_em_fixed`: work
    fixed by the public |V_g|, eps and Du) or "rejection"
    (:func:`sample_em_exact`: running time depends on the utilities).

    Parameters
    ----------
    exact_sampler : str, optional
        "fixed" (default) or "rejection".

    Returns
    -------
    Selector
        Tag "em".

    Raises
    ------
    ParameterTypeError
        If ``exact_sampler`` is not a string.
    ParameterError
        If ``exact_sampler`` is not one of those names.

    Examples
    --------
    >>> exponential_mechanism().name
    'em'
    """
    if not isinstance(exact_sampler, str):
        raise ParameterTypeError(f"exact_sampler must be a sampler name (str), got {type(exact_sampler).__name__}")
    return Selector("em", "Eq. (7)", em_probabilities, sample_em, exact_em_sampler(exact_sampler),
                    "eps-DP: numerator and normaliser of Eq. (7) each change by <= exp(eps/2)")


def permute_and_flip(exact_sampler: str = "fixed") -> Selector:
    """Permute-and-flip (McKenna & Sheldon 2020). Privacy (their Thm. 1): with
    |u_M(v) - u_M'(v)| <= Du on a shared vocabulary, acceptance probabilities
    exp(eps (u_v - u*) / (2 Du)) give an eps-DP selection - the same eps and sensitivity as
    Eq. (7) - and its expected utility is never lower than Eq. (7)'s (their Thm. 2).

    ``exact_sampler``: "fixed" (default, :func:`sample_pf_fixed`: work fixed by the public
    |V_g|, eps and Du) or "sequential" (:func:`sample_pf_exact`: stops at the first acceptance).

    Parameters
    ----------
    exact_sampler : str, optional
        "fixed" (default) or "sequential".

    Returns
    -------
    Selector
        Tag "pf".

    Raises
    ------
    ParameterTypeError
        If ``exact_sampler`` is not a string.
    ParameterError
        If ``exact_sampler`` is not one of those names.

    Examples
    --------
    >>> permute_and_flip().label
    'permute-and-flip'
    """
    if not isinstance(exact_sampler, str):
        raise ParameterTypeError(f"exact_sampler must be a sampler name (str), got {type(exact_sampler).__name__}")
    try:
        sampler = EXACT_PF_SAMPLERS[exact_sampler]
    except (KeyError, TypeError):
        raise ParameterError(f"unknown exact sampler {exact_sampler!r}; use one of "
                             f"{sorted(EXACT_PF_SAMPLERS)}") from None
    return Selector("pf", "permute-and-flip", pf_probabilities, sample_pf, sampler,
                    "eps-DP (McKenna & Sheldon 2020, Thm. 1), same sensitivity as Eq. (7)")


SELECTORS: dict[str, Callable[..., Selector]] = {"em": exponential_mechanism, "pf": permute_and_flip}
#: mechanism tags of admitted releases made by an eps-DP selector (they carry eps in accounting)
DP_SELECTOR_TAGS: frozenset[str] = frozenset(SELECTORS)


#: The exact sampler of each selector whose work (and running time) varies with the utilities:
#: the same law as the fixed-work default, another use of the random stream; seeded experiments use
#: it (``MemView(fixed_work=False)``, the default with a seed).
VARIABLE_WORK_SAMPLERS = {"em": "rejection", "pf": "sequential"}


def get_selector(selector: "str | Selector", fixed_work: bool = True) -> Selector:
    """A Selector from its tag ("em" | "pf") or as given. For a tag, ``fixed_work`` picks the
    exact sampler: the fixed-work one (default; deployment) or the variable-work one
    (:data:`VARIABLE_WORK_SAMPLERS`: same law, another use of the random stream).

    Parameters
    ----------
    selector : str or Selector
        "em" (Eq. 7), "pf" (permute-and-flip) or a :class:`Selector` (returned as is).
    fixed_work : bool, optional
        For a tag: the fixed-work exact sampler (default) or the variable-work one.

    Returns
    -------
    Selector

    Raises
    ------
    ParameterTypeError
        If ``selector`` is neither a string nor a :class:`Selector`.
    ParameterError
        If ``selector`` is an unknown tag.
    """
    if isinstance(selector, Selector):
        return selector
    if isinstance(selector, str) and selector in SELECTORS:
        return SELECTORS[selector]() if fixed_work else SELECTORS[selector](VARIABLE_WORK_SAMPLERS[selector])
    raise (ParameterError if isinstance(selector, str) else ParameterTypeError)(
        f"unknown selector {selector!r}; use one of {sorted(SELECTORS)} or a Selector")
