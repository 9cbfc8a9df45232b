"""Distributions of the log-likelihood ratio L = log P_M / P_M' of a release, and their algebra
(the exact optimal auditor of :mod:`dpmv_lib.evaluate.oracle`): one categorical release, the
convolution of independent releases (a transcript), mixtures, ROC summaries, and a brute-force
reference for short trajectories.

Atoms are merged only when their L values fall in the same grid cell of width ``grid``
(default 1e-9, i.e. float-noise ties); if a distribution would exceed ``max_atoms`` atoms the grid
is coarsened to span/max_atoms. Each merged atom keeps the exact range [lo, hi] of the L values
it holds, which gives rigorous error bounds: the reported AUC is a lower bound of the exact one
with ``auc_err`` = 1/4 sum_b (e^hi_b - e^lo_b) P'(b)^2 >= exact - reported, and likewise for TPR.
The maximum loss is exact (it is the sum over turns of the per-turn extremes, tracked in lo/hi).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

import numpy as np

from ..core.errors import ParameterError

DEFAULT_GRID = 1e-9
DEFAULT_MAX_ATOMS = 200_000
OUTER_BUDGET = 1 << 22  # largest outer product formed in one convolution


@dataclass(frozen=True)
class LLRDistribution:
    """Atoms of L = log P_M / P_M' with their probabilities under M (``p_m``) and M' (``p_mp``).

    ``llr`` is sorted ascending and may hold -inf (P_M = 0) and +inf (P_M' = 0); ``lo``/``hi``
    are the exact extremes of the L values merged into each atom (equal when nothing merged)."""

    llr: np.ndarray
    p_m: np.ndarray
    p_mp: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    grid: float = DEFAULT_GRID

    # ---- construction -----------------------------------------------------------------------
    @classmethod
    def point(cls) -> "LLRDistribution":
        """The distribution of an uninformative observation (L = 0 with probability 1)."""
        one, zero = np.ones(1), np.zeros(1)
        return cls(zero, one, one.copy(), zero.copy(), zero.copy())

    @classmethod
    def separable(cls) -> "LLRDistribution":
        """A deterministic observation that differs under M and M' (L = +inf under M, -inf under M')."""
        return cls(np.array([-np.inf, np.inf]), np.array([0.0, 1.0]), np.array([1.0, 0.0]),
                   np.array([-np.inf, np.inf]), np.array([-np.inf, np.inf]))

    @classmethod
    def from_probs(cls, p: Mapping[str, float], q: Mapping[str, float], *, tol: float = 1e-6
                   ) -> "LLRDistribution":
        """One categorical release with probabilities ``p`` under M and ``q`` under M'."""
        keys = sorted(set(p) | set(q))
        pm = np.array([float(p.get(k, 0.0)) for k in keys])
        pq = np.array([float(q.get(k, 0.0)) for k in keys])
        for name, arr in (("P_M", pm), ("P_M'", pq)):
            if np.any(~np.isfinite(arr)) or np.any(arr < 0):
                raise ParameterError(f"{name} view probabilities must be finite and >= 0: {dict(zip(keys, arr))}")
            if abs(arr.sum() - 1.0) > tol:
                raise ParameterError(f"{name} view probabilities sum to {arr.sum()}, not 1: {dict(zip(keys, arr))}")
        pm, pq = pm / pm.sum(), pq / pq.sum()
        keep = (pm > 0) | (pq > 0)
        pm, pq = pm[keep], pq[keep]
        with np.errstate(divide="ignore"):
            llr = np.log(pm) - np.log(pq)
        return merge_atoms(llr, pm, pq, llr.copy(), llr.copy(), DEFAULT_GRID, DEFAULT_MAX_ATOMS)

    # ---- algebra ----------------------------------------------------------------------------
    def convolve(self, other: "LLRDistribution", *, grid: float = DEFAULT_GRID,
                 max_atoms: int = DEFAULT_MAX_ATOMS) -> "LLRDistribution":
        """The distribution of L1 + L2 for independent releases (the LLR of the joint release).

        If the outer product would exceed ``OUTER_BUDGET`` atoms the operands are first coarsened
        (merged on a wider grid); the [lo, hi] ranges keep the error bounds rigorous."""
        a, b = self, other
        if a.n_atoms * b.n_atoms > OUTER_BUDGET:
            small, large = sorted((a, b), key=lambda d: d.n_atoms)
            cap_small = min(small.n_atoms, int(math.isqrt(OUTER_BUDGET)))
            small = small.coarsen(cap_small)
            large = large.coarsen(max(1, OUTER_BUDGET // small.n_atoms))
            a, b = small, large
        return a._outer(b, grid=grid, max_atoms=max_atoms)

    def coarsen(self, n: int) -> "LLRDistribution":
        """Merge atoms on a grid so that at most about ``n`` remain (no-op if already smaller)."""
        if self.n_atoms <= n:
            return self
        return merge_atoms(self.llr, self.p_m, self.p_mp, self.lo, self.hi, self.grid, max(1, n - 2))

    def _outer(self, other: "LLRDistribution", *, grid: float, max_atoms: int) -> "LLRDistribution":
        pm = np.multiply.outer(self.p_m, other.p_m).ravel()
        pq = np.multiply.outer(self.p_mp, other.p_mp).ravel()
        with np.errstate(invalid="ignore"):
            llr = np.add.outer(self.llr, other.llr).ravel()
            lo = np.add.outer(self.lo, other.lo).ravel()
            hi = np.add.outer(self.hi, other.hi).ravel()
        keep = (pm > 0) | (pq > 0)
        if not keep.all():  # (a copy of five outer products: skipped when every atom stays)
            pm, pq, llr, lo, hi = pm[keep], pq[keep], llr[keep], lo[keep], hi[keep]
        # an atom of zero M-mass has L = -inf, of zero M'-mass L = +inf (never inf - inf)
        for zero, value in ((pm == 0, -np.inf), (pq == 0, np.inf)):
            if zero.any():
                for arr in (llr, lo, hi):
                    arr[zero] = value
        return merge_atoms(llr, pm, pq, lo, hi, max(grid, self.grid, other.grid), max_atoms)

    def power(self, n: int, **kw) -> "LLRDistribution":
        """n independent copies (e.g. one transcript per EM seed)."""
        if n < 1:
            raise ParameterError(f"power needs n >= 1, got {n}")
        out = self
        for _ in range(n - 1):
            out = out.convolve(self, **kw)
        return out

    # ---- the optimal auditor ----------------------------------------------------------------
    def auc(self) -> float:
        """AUC of the likelihood-ratio test (the best AUC of any, possibly randomised, auditor)."""
        below = np.concatenate([[0.0], np.cumsum(self.p_mp)[:-1]])
        return float(np.sum(self.p_m * (below + 0.5 * self.p_mp)))

    def _resolution(self) -> float:
        """D: every outcome's exact L lies within D of its atom's representative value."""
        fin = np.isfinite(self.llr)
        if not fin.any():
            return 0.0
        return float(max(np.max(self.hi[fin] - self.llr[fin]), np.max(self.llr[fin] - self.lo[fin]), 0.0))

    def auc_error(self) -> float:
        """Upper bound on (exact optimal AUC - :meth:`auc`) caused by merging atoms.

        :meth:`auc` is the AUC of a real test (ranking outcomes by their atom), hence a lower
        bound. Outcomes whose atoms lie more than 2D apart are ordered as by their exact L; a
        misordered pair (x positive, y negative) costs at most P'(x) P'(y) (e^{L_x} - e^{L_y})."""
        d = self._resolution()
        if d == 0.0:
            return 0.0
        fin = np.isfinite(self.llr)
        rep, pq = self.llr[fin], self.p_mp[fin]
        cq = np.concatenate([[0.0], np.cumsum(pq)])
        lo_i = np.searchsorted(rep, rep - 2 * d, side="left")
        hi_i = np.searchsorted(rep, rep + 2 * d, side="right")
        window = cq[hi_i] - cq[lo_i]
        return float(np.sum(pq * window * np.exp(rep) * (math.exp(3 * d) - math.exp(-3 * d))))

    def tpr_at(self, fpr: float = 0.05) -> tuple[float, float]:
        """(TPR, error bound) of the Neyman-Pearson test at exactly ``fpr`` (randomised at the
        threshold). The TPR is achieved by a real test (a lower bound of the optimum); the bound
        covers outcomes misordered by merging within 2D of the threshold."""
        if not 0 <= fpr <= 1:
            raise ParameterError(f"fpr must lie in [0, 1], got {fpr}")
        pm, pq = self.p_m[::-1], self.p_mp[::-1]  # descending L
        cq, cm = np.cumsum(pq), np.cumsum(pm)
        k = int(np.searchsorted(cq, fpr - 1e-15, side="left"))
        if k >= len(pq):
            return float(cm[-1]), 0.0
        before_q = cq[k - 1] if k > 0 else 0.0
        before_m = cm[k - 1] if k > 0 else 0.0
        delta = fpr - before_q
        gamma = 0.0 if pq[k] <= 0 else min(1.0, max(0.0, delta / pq[k]))
        tpr = before_m + gamma * pm[k]
        d = self._resolution()
        rep = self.llr[::-1][k]
        err = 0.0
        if d > 0 and np.isfinite(rep):
            err = float(math.exp(rep) * (math.exp(3 * d) - math.exp(-3 * d)) * fpr)
        return float(min(tpr, 1.0)), err

    def max_loss(self) -> float:
        """max |L| over outcomes of positive probability under M or M' (exact; +inf on support mismatch)."""
        if len(self.llr) == 0:
            return 0.0
        return float(max(np.max(np.abs(self.lo)), np.max(np.abs(self.hi))))

    @property
    def n_atoms(self) -> int:
        return int(len(self.llr))


_BIG = np.int64(2 ** 62)     # the cell key of L = +inf (-_BIG: L = -inf)


def cell_ranks(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(key, return_inverse=True)`` for int64 cell keys, the same two arrays.

    Where the finite keys span at most about 4 cells per key (a coarsened grid: a convolution's
    millions of atoms in at most ``max_atoms`` cells), they are counted on that dense range in
    linear time instead of sorted; the two infinite keys (``+-_BIG``) take the range's ends.
    Sparser keys fall back to ``np.unique``."""
    key = np.asarray(key, dtype=np.int64)
    kmin, kmax = int(key.min()), int(key.max())
    neg, pos = kmin == -_BIG, kmax == _BIG     # an atom with L = -inf / +inf
    lo, hi = kmin, kmax
    if neg or pos:
        mid = key[(key != _BIG) & (key != -_BIG)]
        lo, hi = (int(mid.min()), int(mid.max())) if len(mid) else (0, -1)
    span = hi - lo + 1
    if span > 4 * len(key) + 64:
        return np.unique(key, return_inverse=True)
    dense = key - (lo - 1)               # finite keys -> 1..span, -inf -> 0, +inf -> span + 1
    if neg:
        dense[key == -_BIG] = 0
    if pos:
        dense[key == _BIG] = span + 1
    occupied = np.bincount(dense, minlength=span + 2) > 0
    cells = np.flatnonzero(occupied)
    uniq = cells + (lo - 1)
    if neg:
        uniq[0] = -_BIG
    if pos:
        uniq[-1] = _BIG
    return uniq, (np.cumsum(occupied) - 1)[dense]


def merge_atoms(llr, pm, pq, lo, hi, grid: float, max_atoms: int) -> LLRDistribution:
    """Sort atoms by L and merge those in the same grid cell (coarsening the grid if needed).

    Parameters
    ----------
    llr, pm, pq, lo, hi : array_like of float
        Per atom: the log-likelihood ratio L, its probabilities under M and M', and the bounds
        of L within the atom (``llr`` itself for an exact atom); +-inf for a one-sided atom.
    grid : float
        Cell width in L (> 0); widened so that at most ``max_atoms`` cells remain.
    max_atoms : int
        The most atoms kept.

    Returns
    -------
    LLRDistribution

    Raises
    ------
    ParameterError
        If ``grid`` <= 0 or there are no atoms.
    """
    if grid <= 0:
        raise ParameterError(f"grid must be > 0, got {grid}")
    llr, pm, pq, lo, hi = (np.asarray(a, dtype=float) for a in (llr, pm, pq, lo, hi))
    if len(llr) == 0:
        raise ParameterError("empty LLR distribution")
    fin = np.isfinite(llr)
    every = bool(fin.all())      # the common case: no masking (the same values, fewer passes)
    if every or fin.any():
        finite = llr if every else llr[fin]
        span = float(np.max(finite) - np.min(finite))
        if span / grid > max_atoms:
            grid = span / max_atoms
    if every:
        key = np.floor(llr / grid).astype(np.int64)
    else:
        key = np.where(fin, np.floor(np.where(fin, llr, 0.0) / grid), 0).astype(np.int64)
        key = np.where(llr == np.inf, _BIG, np.where(llr == -np.inf, -_BIG, key))
    uniq, inv = cell_ranks(key)
    n = len(uniq)
    if n == len(key):  # nothing to merge: just sort (the ranks of distinct keys are their sorted order)
        order = np.empty(n, dtype=np.int64)
        order[inv] = np.arange(n)
        return LLRDistribution(llr[order], pm[order], pq[order], lo[order], hi[order], grid)
    s_pm = np.bincount(inv, weights=pm, minlength=n)
    s_pq = np.bincount(inv, weights=pq, minlength=n)
    s_lo = np.full(n, np.inf)
    np.minimum.at(s_lo, inv, lo)
    s_hi = np.full(n, -np.inf)
    np.maximum.at(s_hi, inv, hi)
    with np.errstate(divide="ignore", invalid="ignore"):
        rep = np.log(s_pm) - np.log(s_pq)
    # representative value of a merged cell: its own likelihood ratio, clipped into [lo, hi]
    rep = np.where(np.isfinite(rep), np.clip(rep, s_lo, s_hi), rep)
    rep[uniq == _BIG], rep[uniq == -_BIG] = np.inf, -np.inf
    return LLRDistribution(rep, s_pm, s_pq, s_lo, s_hi, grid)


def mixture(dists: Sequence[LLRDistribution], weights: Sequence[float] | None = None) -> LLRDistribution:
    """The pooled distribution over pairs (each pair equally likely unless ``weights``): the LLR of
    (pair identity, transcript), so its AUC bounds an auditor evaluated over all those pairs."""
    if not dists:
        raise ParameterError("mixture of no distributions")
    w = np.full(len(dists), 1.0 / len(dists)) if weights is None else np.asarray(weights, float) / np.sum(weights)
    cat = lambda f: np.concatenate([f(d) for d in dists])  # noqa: E731
    pm = np.concatenate([d.p_m * wi for d, wi in zip(dists, w)])
    pq = np.concatenate([d.p_mp * wi for d, wi in zip(dists, w)])
    return merge_atoms(cat(lambda d: d.llr), pm, pq, cat(lambda d: d.lo), cat(lambda d: d.hi),
                  max(d.grid for d in dists), DEFAULT_MAX_ATOMS * 4)


def trajectory_distribution(turns: Iterable[tuple[Mapping, Mapping]], *, grid: float = DEFAULT_GRID,
                            max_atoms: int = DEFAULT_MAX_ATOMS) -> LLRDistribution:
    """Convolution over turns and slots of per-slot releases; each turn is (probs_M, probs_M'), each
    a mapping slot -> {view: prob} (the ``view_probs`` column). The two sides must activate the
    same slots (C4); a mismatch is a public difference and makes the transcripts separable."""
    out = LLRDistribution.point()
    for pm_t, pq_t in turns:
        if set(pm_t) != set(pq_t):
            return LLRDistribution.separable()
        for slot in sorted(pm_t):
            d = LLRDistribution.from_probs(pm_t[slot], pq_t[slot])
            if d.n_atoms == 1 and d.llr[0] == 0:
                continue
            out = out.convolve(d, grid=grid, max_atoms=max_atoms)
    return out
