"""Privacy accounting from public releases: reconstructed bounds, Corollary 1, B.4 odds bound."""
from __future__ import annotations

import itertools
import math
from fractions import Fraction
from typing import Sequence

from ..core.errors import PolicyError
from ..core.releases import Release
from ..core.policy import Policy
from ..core.selection import DP_SELECTOR_TAGS
from ..core.store import MemoryStore, differing_positions


def reconstructed_bound(releases: Sequence[Release], attribute: str) -> Fraction | float:
    """The pure-DP bound of ``attribute`` implied by a run: the sum of eps over every admitted
    private selection whose read touched I_a, charged to a's ledger or omitted from it (Table 4).

    A deterministic release (CappedArgmax) touching I_a has no finite bound: returns inf."""
    total = Fraction(0)
    for rel in releases:
        for s in rel.slots:
            if attribute not in s.affected or s.mechanism == "generic":
                continue
            if s.mechanism not in DP_SELECTOR_TAGS:  # Eq. (7) or permute-and-flip: eps-DP
                return math.inf
            total += s.epsilon
    return total


def reported_ledger(releases: Sequence[Release], attribute: str) -> Fraction:
    """What the interface's own ledger says for ``attribute`` after the run."""
    return releases[-1].spent.get(attribute, Fraction(0)) if releases else Fraction(0)


def composite_cost(policy: Policy, m: MemoryStore, m_prime: MemoryStore) -> tuple[Fraction | float, frozenset[str]]:
    """kappa(M, M') of Corollary 1: min over attribute sets C covering D of sum_{a in C} B_a.

    Exact (enumerates covers, smallest first); returns (inf, {}) if no cover exists, i.e. the
    stores differ at a position outside every group and no guarantee applies."""
    d = differing_positions(m, m_prime)
    if not d:
        return Fraction(0), frozenset()
    relevant = [a for a in policy.attributes if a.group & d]
    if len(relevant) > 20:
        raise PolicyError("composite_cost enumerates attribute subsets; more than 20 relevant attributes")
    best: tuple[Fraction | float, frozenset[str]] = (math.inf, frozenset())
    for k in range(1, len(relevant) + 1):
        for combo in itertools.combinations(relevant, k):
            if d <= frozenset().union(*(a.group for a in combo)):
                cost = sum((a.cap for a in combo), Fraction(0))
                if cost < best[0]:
                    best = (cost, frozenset(a.name for a in combo))
    return best


def posterior_odds_bounds(budget: float | Fraction, prior: float) -> tuple[float, float]:
    """B.4: observing any transcript event moves the prior odds by at most e^{+-B_a}.

    Returns the (lowest, highest) posterior probability of "M" reachable from ``prior``."""
    if not 0 < prior < 1:
        raise PolicyError(f"prior must be in (0, 1), got {prior}")
    odds = prior / (1 - prior)
    lo, hi = odds * math.exp(-float(budget)), odds * math.exp(float(budget))
    return lo / (1 + lo), hi / (1 + hi)

