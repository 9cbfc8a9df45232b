"""Pure eps-DP selectors for C3: the exponential mechanism (Eq. 7) and permute-and-flip.

One constructor per mechanism, its privacy argument next to it (OpenDP style). Both take the
same exact inputs (utilities in [0, 1] as rationals, eps, the fixed sensitivity bound Du) and
read them through :func:`~dpmv_lib.core.mechanism.exact_exponents`: x_v = eps (u_v - u*) / (2 Du) <= 0,
u* = max_w u_w. MemView uses either; ledger, cap check (C5) and generic fallback are unchanged.

Permute-and-flip (McKenna & Sheldon 2020, Alg. 1): visit the views in a uniformly random order
and accept view r with probability q_r = exp(x_r); output the first accepted one (the maximiser
has q = 1, so the walk always stops). Its exact output distribution: r is output iff it is
accepted and every view visited before it is rejected. The set S of views before r is, for a
uniform order, of size k with probability 1/n for each k and uniform among the k-subsets, so

    Pr[r] = q_r * sum_{k=0}^{n-1} k! (n-1-k)! / n! * e_k({1 - q_j : j != r})       (PF)

with e_k the elementary symmetric polynomial. All terms are >= 0 (stable in floats);
equivalently Pr[r] = q_r * int_0^1 prod_{j != r} (1 - t q_j) dt (arrival times, used in tests).

Exact samplers (issue 29): each selector's default ``sample_exact`` does work fixed by the public
(|V_g|, eps, Du), so its running time does not depend on the utilities
(:func:`~dpmv_lib.core.mechanism.sample_em_fixed`, :func:`sample_pf_fixed`); the earlier samplers,
whose number of rounds or flips does, stay available by name ("rejection", "sequential").
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from math import comb
from typing import Any, Callable, Sequence

import numpy as np

from .rationals import Number
from .errors import ParameterError, ParameterTypeError
from .mechanism import (FIXED_WORK_BITS, RandomSource, bernoulli_offset, check_bits, offset_exponents,
                        to_float_exponent, bernoulli_exp_neg, em_probabilities, exact_em_sampler, exact_exponents,
                        sample_em)


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
        As :func:`~dpmv_lib.core.mechanism.exact_exponents`: no views, a utility outside
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
        As :func:`~dpmv_lib.core.mechanism.exact_exponents`: no views, a utility outside
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
        As :func:`~dpmv_lib.core.mechanism.exact_exponents`: no views, a utility outside
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
    (:func:`~dpmv_lib.core.mechanism.bernoulli_exp_neg`, rational x = eps (u* - u_r) / (2 Du)).

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
        As :func:`~dpmv_lib.core.mechanism.exact_exponents`: no views, a utility outside
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
    (:func:`~dpmv_lib.core.mechanism.bernoulli_exp_neg_fixed`, x_r = eps (u* - u_r) / (2 Du), the
    exponents of Eq. (7) on the utilities floored to the public grid 1/D,
    :func:`~dpmv_lib.core.mechanism.grid_utilities`: the same Du, so the same eps-DP, and no
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
        As :func:`~dpmv_lib.core.mechanism.exact_exponents` for invalid utilities, epsilon or
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
    with a :class:`~dpmv_lib.core.mechanism.RandomSource` and rational arithmetic only.

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

    ``exact_sampler``: "fixed" (default, :func:`~dpmv_lib.core.mechanism.sample_em_fixed`: work
    fixed by the public |V_g|, eps and Du) or "rejection"
    (:func:`~dpmv_lib.core.mechanism.sample_em_exact`: running time depends on the utilities).

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


#: The exact sampler of each selector whose running time depends on the utilities (the samplers
#: before issue 29): what seeded experiments use, so that their committed results reproduce.
UTILITY_TIMED_SAMPLERS = {"em": "rejection", "pf": "sequential"}


def get_selector(selector: "str | Selector", fixed_work: bool = True) -> Selector:
    """A Selector from its tag ("em" | "pf") or as given. For a tag, ``fixed_work`` picks the
    exact sampler: the fixed-work one (default; deployment) or the earlier one
    (:data:`UTILITY_TIMED_SAMPLERS`: same law, another use of the random stream).

    Parameters
    ----------
    selector : str or Selector
        "em" (Eq. 7), "pf" (permute-and-flip) or a :class:`Selector` (returned as is).
    fixed_work : bool, optional
        For a tag: the fixed-work exact sampler (default) or the utility-timed one.

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
        return SELECTORS[selector]() if fixed_work else SELECTORS[selector](UTILITY_TIMED_SAMPLERS[selector])
    raise (ParameterError if isinstance(selector, str) else ParameterTypeError)(
        f"unknown selector {selector!r}; use one of {sorted(SELECTORS)} or a Selector")
