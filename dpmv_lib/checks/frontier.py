"""The DP utility frontier: the largest (M-side, M'-side) rate separation that ANY interface that is
pure B_a-DP for the attribute over the whole adaptive transcript can reach (beyond the paper).

For a pure B-DP transcript law and any event E of the transcript (e.g. "the target-linked view is
released at turn t"), P_M(E) <= e^B P_M'(E) and, applied to the complement, P_M(E) <= 1 - e^{-B}
(1 - P_M'(E)). The same bound holds for the expectation of any [0, 1]-valued function of the
transcript (a rate averaged over turns): write E f = int_0^1 P(f > t) dt and use that the bound
g_B(q) = min(e^B q, 1 - e^{-B} (1 - q)) is concave (Jensen). It is attained: randomised response
at eps = B on one bit, copied into every turn, gives (q, g_B(q)) at q = 1 / (1 + e^B), and mixing
with constant outputs reaches every other q. The largest difference g_B(q) - q is tanh(B / 2) at
q = 1 / (1 + e^B).

:func:`frontier_rate` is the closed form; :func:`frontier_lp` computes the same maximum as a
linear program (``scipy.optimize.linprog``, HiGHS) over the two output laws of a finite output
set, the brute force the tests compare the closed form with.
"""
from __future__ import annotations

import itertools
import math
from typing import Sequence

import numpy as np

from ..core.errors import ParameterError


def _budget(b: float) -> float:
    if isinstance(b, bool) or not isinstance(b, (int, float, np.integer, np.floating)) or not math.isfinite(b) \
            or b < 0:
        raise ParameterError(f"the budget B_a must be a finite number >= 0, got {b!r}")
    return float(b)


def _rates(q: float | Sequence[float] | np.ndarray) -> np.ndarray:
    arr = np.asarray(q, dtype=float)
    if not np.all(np.isfinite(arr)) or np.any(arr < 0) or np.any(arr > 1):
        raise ParameterError(f"M'-side rates must lie in [0, 1], got {q!r}")
    return arr


def frontier_rate(q: float | Sequence[float] | np.ndarray, b: float) -> np.ndarray | float:
    """g_B(q) = min(e^B q, 1 - e^{-B} (1 - q)): the largest M-side rate of any pure B-DP
    interface whose M'-side rate of the same event (or [0, 1]-valued statistic) is q.

    Parameters
    ----------
    q : float or array of float
        M'-side rates in [0, 1].
    b : float
        The cap B_a >= 0.

    Returns
    -------
    float or ndarray
        Same shape as ``q``.

    Raises
    ------
    ParameterError
        If a rate lies outside [0, 1] or ``b`` is negative or not finite.
    """
    b = _budget(b)
    arr = _rates(q)
    out = np.minimum(math.exp(b) * arr, 1.0 - math.exp(-b) * (1.0 - arr))
    return float(out) if out.ndim == 0 else out


def max_separation(b: float) -> tuple[float, float]:
    """(q*, g_B(q*) - q*): the M'-side rate where the frontier is farthest above the diagonal,
    q* = 1 / (1 + e^B), and that largest difference, tanh(B / 2)."""
    b = _budget(b)
    return 1.0 / (1.0 + math.exp(b)), math.tanh(b / 2.0)


def randomised_response(eps: float) -> tuple[float, float]:
    """(P_M(yes), P_M'(yes)) of randomised response at eps on the bit "M holds the attribute"."""
    eps = _budget(eps)
    return 1.0 / (1.0 + math.exp(-eps)), 1.0 / (1.0 + math.exp(eps))


def distance(q: float, p: float, b: float) -> float:
    """How far the point (q, p) (M'-side rate, M-side rate) lies below the frontier: g_B(q) - p
    (negative: above it, impossible for a pure B-DP interface)."""
    if not 0.0 <= float(p) <= 1.0:
        raise ParameterError(f"the M-side rate must lie in [0, 1], got {p!r}")
    return float(frontier_rate(q, b)) - float(p)


def frontier_lp(q: float, b: float, values: Sequence[float]) -> float:
    """max E_M[f] over every pair of laws (P_M, P_M') on a finite output set with P_M <= e^B P_M'
    and P_M' <= e^B P_M output by output (pure B-DP) and E_M'[f] = q, by ``scipy.optimize.linprog``.

    Parameters
    ----------
    q : float
        The M'-side value of the statistic, in [0, 1].
    b : float
        The cap B_a.
    values : sequence of float
        f(y) in [0, 1] for every output y (an event: 0/1 values).

    Returns
    -------
    float
        The maximum, or NaN where no feasible pair exists (q outside [min f, max f]).

    Raises
    ------
    ParameterError
        If ``values`` is empty or outside [0, 1], or q / b are invalid.
    """
    b = _budget(b)
    q = float(_rates(q))
    f = np.asarray(values, dtype=float)
    if f.ndim != 1 or f.size == 0 or not np.all(np.isfinite(f)) or np.any(f < 0) or np.any(f > 1):
        raise ParameterError(f"values must be a non-empty list of numbers in [0, 1], got {values!r}")
    from scipy.optimize import linprog

    n = f.size
    e = math.exp(b)
    eye = np.eye(n)
    a_ub = np.vstack([np.hstack([eye, -e * eye]), np.hstack([-e * eye, eye])])   # x = (P_M, P_M')
    a_eq = np.vstack([np.hstack([np.ones(n), np.zeros(n)]), np.hstack([np.zeros(n), np.ones(n)]),
                      np.hstack([np.zeros(n), f])])
    res = linprog(-np.hstack([f, np.zeros(n)]), A_ub=a_ub, b_ub=np.zeros(2 * n), A_eq=a_eq,
                  b_eq=np.array([1.0, 1.0, q]), bounds=(0, None), method="highs")
    return float(-res.fun) if res.status == 0 else math.nan


def transcript_rate_values(turns: int) -> np.ndarray:
    """f(y) for every binary transcript y in {0, 1}^turns (1 = the target-linked view at that
    turn): the share of target turns, the statistic the target-view rate averages."""
    if isinstance(turns, bool) or not isinstance(turns, int) or not 1 <= turns <= 12:
        raise ParameterError(f"turns must be an integer in 1..12, got {turns!r}")
    return np.array([sum(y) / turns for y in itertools.product((0, 1), repeat=turns)], dtype=float)
