"""Exact transcript distributions by enumeration (verification of Theorem 1 on small stores).

For an interface factory, a store and an adaptive query strategy, enumerate every augmented
transcript (queries, released views, public ledger states) with its exact probability, by
branching over every slot-level outcome. Comparing two adjacent stores gives the exact
maximum privacy loss max_omega |log P[omega | M] / P[omega | M']| (inf on a support mismatch).
"""
from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import Callable, Sequence

from .errors import ParameterError
from .memview import MemView
from .releases import Release, SlotRelease
from .policy import Query
from .store import MemoryStore

Strategy = Callable[[tuple[Release, ...]], Query]
Transcript = tuple[Release, ...]


def fixed_strategy(queries: Sequence[Query]) -> Strategy:
    """A non-adaptive strategy: the t-th query whatever was released before."""
    qs = tuple(queries)
    return lambda history: qs[len(history)]


def transcript_distribution(make: Callable[[MemoryStore], MemView], store: MemoryStore,
                            strategy: Strategy, horizon: int, max_transcripts: int = 200_000
                            ) -> dict[Transcript, float]:
    """P[transcript | store] for every augmented transcript of length ``horizon``."""
    return _enumerate(make, store, strategy, horizon, max_transcripts, log=False)


def transcript_log_distribution(make: Callable[[MemoryStore], MemView], store: MemoryStore,
                                strategy: Strategy, horizon: int, max_transcripts: int = 200_000
                                ) -> dict[Transcript, float]:
    """log P[transcript | store] (natural log) for every augmented transcript of length
    ``horizon`` with positive probability, enumerated in log space (MemView's own
    ``log_outcomes``), so large eps cannot underflow a probability to 0: the Theorem 1 loss
    max |log P_M - log P_M'| is then finite unless the supports really differ.

    Raises
    ------
    ParameterError
        If ``horizon`` < 0 or more than ``max_transcripts`` transcripts arise.
    """
    return _enumerate(make, store, strategy, horizon, max_transcripts, log=True)


def _enumerate(make: Callable[[MemoryStore], MemView], store: MemoryStore, strategy: Strategy, horizon: int,
               max_transcripts: int, log: bool) -> dict[Transcript, float]:
    """Every transcript with its probability (``log``: its log probability)."""
    if isinstance(horizon, bool) or not isinstance(horizon, int) or horizon < 0:
        raise ParameterError(f"horizon must be an integer >= 0, got {horizon!r}")
    mul, add = (operator.add, log_add) if log else (operator.mul, operator.add)
    frontier: list[tuple[Transcript, MemView, float]] = [((), make(store), 0.0 if log else 1.0)]
    for _ in range(horizon):
        nxt = []
        for history, iface, w in frontier:
            q = strategy(history)
            for slots, branch, wt in turn_outcomes(iface, q, history, log):
                nxt.append((history + (branch.make_release(q, slots),), branch, mul(w, wt)))
        frontier = nxt
        if len(frontier) > max_transcripts:
            raise ParameterError(f"more than {max_transcripts} transcripts; use a smaller example")
    dist: dict[Transcript, float] = {}
    for history, _, w in frontier:
        dist[history] = add(dist[history], w) if history in dist else w
    return dist


def log_add(a: float, b: float) -> float:
    """log(e^a + e^b) without overflow or underflow (either may be -inf)."""
    if a < b:
        a, b = b, a
    return a if b == -math.inf else a + math.log1p(math.exp(b - a))


def turn_outcomes(iface: MemView, q: Query, history: Transcript, log: bool = False
                  ) -> list[tuple[list[SlotRelease], MemView, float]]:
    """Every outcome of one turn with positive probability, through the interface's own public
    steps (``route``, ``prepare``, ``outcomes``/``log_outcomes``: the code path of ``release()``),
    each on its own fork of ``iface`` (``iface`` itself is not changed).

    Parameters
    ----------
    iface : MemView
        The interface (any subclass) before the turn; its ledger must be in memory.
    q : Query
        The turn's public query.
    history : tuple of Release
        The public released history before the turn.
    log : bool, default False
        Weigh outcomes by log probabilities instead of probabilities.

    Returns
    -------
    list of (list of SlotRelease, MemView, float)
        (the slot releases in route order, the fork after them, the probability or, with
        ``log``, its natural log); ``branch.make_release(q, slots)`` is the turn's Release.

    Raises
    ------
    BudgetError
        If the ledger is not an in-memory ledger (it cannot be forked).
    """
    partial: list[tuple[list[SlotRelease], MemView, float]] = [([], iface.fork(), 0.0 if log else 1.0)]
    for slot in iface.route(q, history):  # the interface's own route (C4 hook)
        grown = []
        for done, branch, w in partial:
            branch = branch.fork()
            prep = branch.prepare(q, slot, history)  # the same code path release() uses
            if log:
                grown += [(done + [sr], branch, w + lp) for sr, lp in branch.log_outcomes(prep)]
            else:
                grown += [(done + [sr], branch, w * p) for sr, p in branch.outcomes(prep) if p > 0]
        partial = grown
    return [(done, branch.fork(), w) for done, branch, w in partial]


@dataclass(frozen=True)
class PrivacyLoss:
    """Exact comparison of two transcript distributions."""

    max_loss: float          # max over transcripts of |log P_M / P_M'| (inf if supports differ)
    worst: Transcript | None
    n_transcripts: int
    total_m: float
    total_m_prime: float


def privacy_loss(dist_m: dict[Transcript, float], dist_mp: dict[Transcript, float]) -> PrivacyLoss:
    """The Theorem 1 loss max |log P_M / P_M'| from two float distributions
    (:func:`transcript_distribution`); a probability that underflowed to 0 reads as a support
    mismatch (inf): use :func:`log_privacy_loss` on log distributions for large eps."""
    worst, best = None, 0.0
    for t in set(dist_m) | set(dist_mp):
        a, b = dist_m.get(t, 0.0), dist_mp.get(t, 0.0)
        if a == 0.0 and b == 0.0:
            continue
        loss = math.inf if (a == 0.0 or b == 0.0) else abs(math.log(a) - math.log(b))
        if loss > best:
            best, worst = loss, t
    return PrivacyLoss(best, worst, len(set(dist_m) | set(dist_mp)), sum(dist_m.values()),
                       sum(dist_mp.values()))


def log_privacy_loss(logdist_m: dict[Transcript, float], logdist_mp: dict[Transcript, float]) -> PrivacyLoss:
    """The Theorem 1 loss max_omega |log P[omega | M] - log P[omega | M']| from two log
    distributions (:func:`transcript_log_distribution`): finite whatever eps when the supports
    agree; inf where a transcript has probability 0 (absent, or log -inf) on one side only.
    ``total_m``/``total_m_prime`` are the total probabilities (1 up to rounding)."""
    worst, best = None, 0.0
    keys = set(logdist_m) | set(logdist_mp)
    for t in keys:
        a, b = logdist_m.get(t, -math.inf), logdist_mp.get(t, -math.inf)
        if a == -math.inf and b == -math.inf:
            continue
        loss = math.inf if (a == -math.inf or b == -math.inf) else abs(a - b)
        if loss > best:
            best, worst = loss, t
    return PrivacyLoss(best, worst, len(keys), math.fsum(map(math.exp, logdist_m.values())),
                       math.fsum(map(math.exp, logdist_mp.values())))


def privacy_loss_of(make: Callable[[MemoryStore], MemView], m: MemoryStore, m_prime: MemoryStore,
                       strategy: Strategy, horizon: int) -> PrivacyLoss:
    """The exact max privacy loss of the augmented transcript between two stores (Theorem 1:
    at most B_a for a compliant interface), enumerated in log space, so it stays finite for
    large eps (inf only on a genuine support mismatch).

    Raises
    ------
    ParameterError
        If ``horizon`` < 0 or the example has too many transcripts.
    """
    return log_privacy_loss(transcript_log_distribution(make, m, strategy, horizon),
                            transcript_log_distribution(make, m_prime, strategy, horizon))
