"""The exponential mechanism of Eq. (7) over a small public vocabulary.

    Pr[v | M] = exp(eps * u(v; M_R) / (2 Du)) / sum_v' exp(eps * u(v'; M_R) / (2 Du))

Privacy argument (McSherry & Talwar 2007): if |u_M(v) - u_M'(v)| <= Du for every v and the
vocabulary is the same under M and M' (C1), each probability changes by a factor of at most
exp(eps/2) in the numerator and exp(eps/2) in the normaliser, so one release is eps-DP.

Two samplers of the same distribution:
* :func:`sample_em` / :func:`sample_em_batch` - float, log-space Gumbel-max (fast, for experiments);
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


def em_log_probabilities(utilities: Sequence[float] | np.ndarray, epsilon: float,
                         sensitivity: float) -> np.ndarray:
    """log Pr[v] of Eq. (7), computed stably in log space (no overflow for large eps*u).

    Works on the last axis, so a (n, V) array gives n distributions; epsilon may be (n,)."""
    u = np.asarray(utilities, dtype=float)
    _check_utilities(u)
    eps = np.asarray(epsilon, dtype=float)
    if np.any(~np.isfinite(eps)) or np.any(eps < 0):
        raise ParameterError("epsilon must be finite and >= 0")
    _check_eps(0.0, float(sensitivity))
    logits = (eps[..., None] if eps.ndim else eps) * u / (2.0 * float(sensitivity))
    logits = logits - logits.max(axis=-1, keepdims=True)
    return logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))


def em_probabilities(utilities: Sequence[float] | np.ndarray, epsilon: float,
                     sensitivity: float) -> np.ndarray:
    """Pr[v] of Eq. (7) as floats (they sum to 1 up to rounding)."""
    return np.exp(em_log_probabilities(utilities, epsilon, sensitivity))


def sample_em(utilities: Sequence[float] | np.ndarray, epsilon: float, sensitivity: float,
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
    """Index drawn exactly from Eq. (7): utilities, epsilon and sensitivity are read as exact
    rationals (floats through their exact binary value) and no float enters the decision."""
    try:
        utilities = list(utilities)
    except TypeError:
        raise ParameterError(f"utilities must be a sequence of numbers, got {type(utilities).__name__}") from None
    if len(utilities) == 0:
        raise ParameterError("the exponential mechanism needs at least one view")
    us = [_exact_utility(u) for u in utilities]
    for u in us:
        if u < 0 or u > 1:
            raise ParameterError(f"utilities must lie in [0, 1] (Eq. 6), got {u}")
    eps = to_fraction(epsilon, "epsilon", nonnegative=True)
    du = to_fraction(sensitivity, "sensitivity", positive=True)
    top = max(us)
    xs = [eps * (top - u) / (2 * du) for u in us]
    n = len(us)
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

    def probabilities(self, utilities: Sequence[float]) -> np.ndarray:
        return em_probabilities(utilities, float(self.epsilon), float(self.sensitivity))

    def sample(self, utilities: Sequence[float], rng: np.random.Generator | None = None,
               source: RandomSource | None = None) -> int:
        if self.exact:
            return sample_em_exact(utilities, self.epsilon, self.sensitivity,
                                   source or (SeededRandomSource(rng) if rng is not None else SystemRandomSource()))
        if rng is None:
            raise ParameterError("the float sampler needs a numpy Generator (rng)")
        return sample_em(utilities, float(self.epsilon), float(self.sensitivity), rng)
