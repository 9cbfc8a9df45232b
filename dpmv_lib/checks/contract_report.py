"""Result types of the contract checker (:mod:`dpmv_lib.checks.contract`): the conditions C1-C6,
violations with evidence, per-condition results, exact loss checks and the report.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable

from ..core.errors import ParameterError
from ..core.memview import MemView
from ..core.releases import Release
from ..core.policy import Policy, Query
from ..core.store import MemoryStore


Strategy = Callable[[tuple[Release, ...]], Query]
Factory = Callable[[Policy, MemoryStore], MemView]

CONDITIONS: dict[str, str] = {
    "C1": "common view support: fixed vocabulary V_g (with generic view) shared by adjacent stores",
    "C2": "complete charging: Gamma contains Gamma*(R); no uncharged attribute moves a view",
    "C3": "private selection: admitted charged views sampled by Eq. (7), log-ratio <= eps",
    "C4": "public control: route, read/charge set, eps and budget branch fixed by the prefix",
    "C5": "pathwise caps: prospective check, generic fallback, exact update, L_a <= B_a",
    "C6": "observable releases: nothing beside the view depends on raw memory",
    "Thm1": "exact transcript privacy loss <= B_a (Theorem 1 on these pairs and strategies)",
    "Enum": "release() stays inside the enumerated transcript support",
}
# Tolerance for comparisons of float probabilities / log-ratios only (exp is irrational, so these
# cannot be exact); they corroborate. The premise that decides eps-DP of Eq. (7), the utility
# sensitivity |u_M(v) - u_M'(v)| <= Du, is compared exactly (see _compare).
TOLERANCE = 1e-9


# ---- result types -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Violation:
    """One piece of evidence: which condition, where (pair, strategy, side, prefix) and what."""

    condition: str
    where: str
    detail: str

    def __str__(self) -> str:
        return f"{self.condition} [{self.where}] {self.detail}"


@dataclass(frozen=True)
class ConditionResult:
    condition: str
    description: str
    passed: bool
    count: int
    evidence: tuple[Violation, ...] = ()


@dataclass(frozen=True)
class LossCheck:
    """Exact max privacy loss of the augmented transcript for one pair and strategy."""

    attribute: str
    strategy: str
    max_loss: float
    cap: Fraction
    n_transcripts: int

    @property
    def ok(self) -> bool:
        return self.max_loss <= float(self.cap) + TOLERANCE


@dataclass(frozen=True)
class ContractReport:
    """Which contract conditions an interface fails on the given pairs and strategies."""

    interface: str
    policy: str
    results: tuple[ConditionResult, ...]
    losses: tuple[LossCheck, ...]
    n_pairs: int
    n_strategies: int
    horizon: int
    operations: int
    sampled_runs: int

    @property
    def failed(self) -> tuple[str, ...]:
        return tuple(r.condition for r in self.results if not r.passed)

    @property
    def failed_conditions(self) -> tuple[str, ...]:
        """The failing conditions among C1-C6 only."""
        return tuple(c for c in self.failed if c.startswith("C"))

    @property
    def passed(self) -> bool:
        return not self.failed

    def result(self, condition: str) -> ConditionResult:
        for r in self.results:
            if r.condition == condition:
                return r
        raise ParameterError(f"unknown condition {condition!r}; known: {list(CONDITIONS)}")

    def table(self, evidence: int = 2) -> str:
        """A readable report: conditions x pass/FAIL with evidence."""
        worst = max(self.losses, key=lambda loss: loss.max_loss / float(loss.cap), default=None)
        lines = [f"Contract check of {self.interface} on policy {self.policy!r}: {self.n_pairs} adjacent "
                 f"pair(s) x {self.n_strategies} strategies, horizon {self.horizon}; "
                 f"{self.operations} slot operations enumerated, {self.sampled_runs} sampled release() runs",
                 f"{'cond':<5} {'result':<6} {'#':>5}  description", "-" * 100]
        for r in self.results:
            lines.append(f"{r.condition:<5} {'pass' if r.passed else 'FAIL':<6} {r.count:>5}  {r.description}")
            if r.condition == "Thm1" and worst is not None:
                lines.append(f"{'':<19}worst: {worst.attribute} / {worst.strategy}: exact loss "
                             f"{worst.max_loss:.4g} vs B_a = {worst.cap}")
            for v in r.evidence[:evidence]:
                lines.append(f"{'':<19}- [{v.where}] {v.detail}")
        verdict = "PASSES the contract" if self.passed else f"FAILS {', '.join(self.failed)}"
        lines.append(f"=> {self.interface} {verdict}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {"interface": self.interface, "policy": self.policy, "passed": self.passed,
                "failed": list(self.failed),
                "results": [{"condition": r.condition, "passed": r.passed, "count": r.count,
                             "evidence": [str(v) for v in r.evidence]} for r in self.results],
                "losses": [{"attribute": loss.attribute, "strategy": loss.strategy, "max_loss": loss.max_loss,
                            "cap": str(loss.cap)} for loss in self.losses]}
