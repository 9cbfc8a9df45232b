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
* :func:`sample_em_exact` - no floating point in the decision: uniform proposal + acceptance with
  an exact Bernoulli(exp(-x)) for rational x (Canonne, Kamath & Steinke 2020). Accepted view v has
  probability proportional to exp(-x_v), x_v = eps (u_max - u_v) / (2 Du), i.e. exactly Eq. (7).
"""
from __future__ import annotations

import math
import random
import secrets
from dataclasses import dataclass
from fractions import Fraction
from typing import Protocol, Sequence

import numpy as np

from ._exact import Number, to_fraction
from .errors import ParameterError


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


def _exact_param(x: object, what: str, **kw: bool) -> Fraction:
    """epsilon / sensitivity as an exact rational (floats through their shortest repr, as in
    :func:`sample_em_exact`; numpy scalars unwrapped)."""
    if isinstance(x, (np.floating, np.integer)) and not isinstance(x, (float, int)):
        x = x.item()
    return to_fraction(x, what, **kw)  # type: ignore[arg-type]


def exact_exponents(utilities: Sequence[Number], epsilon: Number, sensitivity: Number) -> list[Fraction]:
    """The exponents of Eq. (7) as exact rationals, shifted by their maximum:
    x_v = eps * (u_v - max_w u_w) / (2 Du) <= 0 (the shift cancels in the normalisation).

    Utilities are read exactly (Fractions as they are, floats through their binary value)."""
    try:
        items = list(utilities)
    except TypeError:
        raise ParameterError(f"utilities must be a sequence of numbers, got {type(utilities).__name__}") from None
    if not items:
        raise ParameterError("the exponential mechanism needs at least one view")
    us = [_exact_utility(u) for u in items]
    for u in us:
        if u < 0 or u > 1:
            raise ParameterError(f"utilities must lie in [0, 1] (Eq. 6), got {u}")
    eps = _exact_param(epsilon, "epsilon", nonnegative=True)
    du = _exact_param(sensitivity, "sensitivity", positive=True)
    scale, top = eps / (2 * du), max(us)
    return [scale * (u - top) for u in us]


def _to_float_exponent(x: Fraction) -> float:
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
    if np.ndim(epsilon) == 0 and np.ndim(np.asarray(utilities, dtype=object)) == 1:
        x = np.array([_to_float_exponent(v) for v in exact_exponents(utilities, epsilon, sensitivity)])
        return x - np.log(np.exp(x).sum())
    u = np.asarray(utilities, dtype=float)
    _check_utilities(u)
    eps = np.asarray(epsilon, dtype=float)
    if np.any(~np.isfinite(eps)) or np.any(eps < 0):
        raise ParameterError("epsilon must be finite and >= 0")
    _check_eps(0.0, float(sensitivity))
    logits = (eps[..., None] if eps.ndim else eps) * u / (2.0 * float(sensitivity))
    logits = logits - logits.max(axis=-1, keepdims=True)
    return logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))


def em_probabilities(utilities: Sequence[Number] | np.ndarray, epsilon: Number | np.ndarray,
                     sensitivity: Number) -> np.ndarray:
    """Pr[v] of Eq. (7) as floats (they sum to 1 up to rounding)."""
    return np.exp(em_log_probabilities(utilities, epsilon, sensitivity))


def sample_em(utilities: Sequence[Number] | np.ndarray, epsilon: Number, sensitivity: Number,
              rng: np.random.Generator) -> int:
    """Index of one view drawn from Eq. (7) by Gumbel-max in log space (seeded numpy Generator)."""
    logp = em_log_probabilities(utilities, epsilon, sensitivity)
    return int(np.argmax(logp + rng.gumbel(size=logp.shape)))


def sample_em_batch(utilities: np.ndarray, epsilon: np.ndarray | float, sensitivity: float,
                    rng: np.random.Generator) -> np.ndarray:
    """Vectorised Eq. (7): utilities (n, V), epsilon scalar or (n,) -> n sampled indices."""
    logp = em_log_probabilities(utilities, epsilon, sensitivity)
    return np.argmax(logp + rng.gumbel(size=logp.shape), axis=-1)


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


def _exact_utility(u: object) -> Fraction:
    """A utility as an exact rational; floats through their exact binary value (as the float
    sampler sees them); NaN/inf rejected."""
    if isinstance(u, Fraction):
        return u
    if isinstance(u, (float, np.floating)):
        if not math.isfinite(u):
            raise ParameterError(f"utilities must be finite, got {u!r}")
        return Fraction(float(u))
    if isinstance(u, (int, np.integer)) and not isinstance(u, (bool, np.bool_)):
        return Fraction(int(u))
    return to_fraction(u, "utility")  # type: ignore[arg-type]


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


@dataclass(frozen=True)
class ExponentialMechanism:
    """Eq. (7) with local parameter eps and fixed sensitivity bound Du; eps-DP per release.

    ``exact=True`` (the MemView default) samples with :func:`sample_em_exact`; ``False`` uses the
    float Gumbel-max sampler."""

    epsilon: Fraction
    sensitivity: Fraction
    exact: bool = True

    def probabilities(self, utilities: Sequence[Number]) -> np.ndarray:
        return em_probabilities(utilities, self.epsilon, self.sensitivity)

    def sample(self, utilities: Sequence[Number], rng: np.random.Generator | None = None,
               source: RandomSource | None = None) -> int:
        if self.exact:
            return sample_em_exact(utilities, self.epsilon, self.sensitivity,
                                   source or (SeededRandomSource(rng) if rng is not None else SystemRandomSource()))
        if rng is None:
            raise ParameterError("the float sampler needs a numpy Generator (rng)")
        return sample_em(utilities, self.epsilon, self.sensitivity, rng)
