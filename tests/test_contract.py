"""Contract checker: passes DP-MemView and flags each violating variant with the right condition."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from dpmv_lib.checks.contract_report import CONDITIONS
from dpmv_lib.checks.contract import (CONTRACT_VARIANTS, check_contract, default_strategies, main,
                                    synthetic_pairs, variant_factory)
from dpmv_lib.core.errors import ParameterError, StoreError
from dpmv_lib.core.exact import privacy_loss_of
from dpmv_lib.checks.examples import running_example
from dpmv_lib.core.ledger import OnlineBudget, PreallocatedBudget, planned_charges
from dpmv_lib.core.memview import MemView
from dpmv_lib.core.releases import SlotPlan, SlotRelease
from dpmv_lib.core.policy import Query
from dpmv_lib.core.scorer import cue_hits
from dpmv_lib.checks.variants import VARIANTS

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = 3


@pytest.fixture(scope="module")
def example():
    return running_example()


def _check(cls, policy, **kw):
    kw.setdefault("samples", SAMPLES)
    return check_contract(variant_factory(cls), policy, label=cls.label, **kw)


def test_memview_passes_every_condition(example):
    policy = example[0]
    rep = _check(MemView, policy)
    assert rep.passed and rep.failed == (), rep.table()
    assert rep.operations > 500 and rep.sampled_runs == 2 * 7 * 2 * SAMPLES
    assert all(loss.ok for loss in rep.losses) and max(loss.max_loss for loss in rep.losses) > 0
    assert "PASSES" in rep.table()


EVIDENCE = {  # a phrase the evidence of each variant's condition must contain
    "IncompleteCharge": "missed: ['debt']",
    "CappedArgmax": "deterministic release: point mass",
    "NoCap": "exceeds its cap",
    "ScoreChannel": "top_score",
    "StoreDependentVocabulary": "vocabulary",
    "MemoryRouting": "route for intent",
}


@pytest.fixture(scope="module")
def variant_reports(example):
    """Every contract-violating variant checked once (horizon 2: every violation shows by turn 2)."""
    return {n: _check(cls, example[0], horizon=2) for n, cls in CONTRACT_VARIANTS.items() if n != "DP-MemView"}


def test_memview_passes_with_other_budgets_and_samplers(example):
    policy = example[0]
    plan = [Query("d", "affordable_dinner"), Query("m", "meal_plan"), Query("c", "checkup_prep")]
    pre = PreallocatedBudget(planned_charges(policy, plan))
    assert check_contract(lambda p, s: MemView(p, s, budget=pre, seed=0), policy, strategies={"plan": plan},
                          samples=2).passed
    assert check_contract(variant_factory(MemView, OnlineBudget(1)), policy, horizon=2, samples=1).passed
    assert check_contract(lambda p, s: MemView(p, s, exact=False, seed=0), policy, horizon=2, samples=1).passed


@pytest.mark.parametrize("name", [n for n in CONTRACT_VARIANTS if n != "DP-MemView"])
def test_each_variant_flagged_with_its_condition(variant_reports, name):
    cls = CONTRACT_VARIANTS[name]
    rep = variant_reports[name]
    assert rep.failed_conditions == (cls.violates,), rep.table()  # exactly the broken condition
    res = rep.result(cls.violates)
    assert res.count > 0 and res.evidence and all(v.where and v.detail for v in res.evidence)
    assert any(EVIDENCE[name] in v.detail for v in res.evidence), rep.table()
    assert f"{cls.violates:<5} FAIL" in rep.table()


# ---- further hand-made violations (test-only variants) -------------------------------------------
class MemoryBudget(MemView):
    """VIOLATES C4: a memory-dependent budget branch (eps halved when the slot memory has cues)."""

    label, violates = "MemoryBudget", "C4"

    def plan(self, query, slot, history=()):
        p = super().plan(query, slot, history)
        text = " ".join(self.store.read(self.policy.positions_of(slot)))
        hits = sum(cue_hits(v.cues, text) for v in self.policy.slot(slot).views)
        if p.epsilon is not None and hits >= 3:
            return SlotPlan(p.slot, p.read_set, p.affected, p.charged, p.epsilon / 2)
        return p


class MemoryAdmission(MemView):
    """VIOLATES C4: refuses the charged selection when the memory mentions the strongest cue."""

    label, violates = "MemoryAdmission", "C4"

    def admit(self, charged, epsilon):
        if any("sugar" in t.lower() for t in self.store.contents.values()):
            return False
        return super().admit(charged, epsilon)


class ForgetfulLedger(MemView):
    """VIOLATES C5: admits after the check but never writes the charge to the ledger."""

    label, violates = "ForgetfulLedger", "C5"

    def admit(self, charged, epsilon):
        return all(self.ledger.spent()[a] + epsilon <= self.policy.caps[a] for a in charged)


class LeakyFallback(MemView):
    """VIOLATES C5: the 'fallback' releases a specific view instead of the fixed generic one."""

    label, violates = "LeakyFallback", "C5"

    def select(self, prepared):
        p = prepared.plan
        if not prepared.admitted and p.read_set:
            return SlotRelease(p.slot, self.vocabulary(p.slot)[-1].id, p.read_set, p.affected, p.charged,
                               p.epsilon, "generic")
        return super().select(prepared)

    def outcomes(self, prepared):
        if not prepared.admitted and prepared.plan.read_set:
            return [(self.select(prepared), 1.0)]
        return super().outcomes(prepared)


class HiddenRouting(MemView):
    """Overrides release() itself (not the hooks) to drop the finance slot when memory has debt
    cues: the enumeration cannot see it, the sampled cross-check must."""

    label, violates = "HiddenRouting", "Enum"

    def release(self, query, history=()):
        rel = super().release(query, history)
        if "collector" in " ".join(self.store.contents.values()):
            return type(rel)(rel.query, tuple(s for s in rel.slots if s.slot != "finance"), rel.ledger)
        return rel


@pytest.mark.parametrize("cls", [MemoryBudget, MemoryAdmission, ForgetfulLedger, LeakyFallback])
def test_more_violations_are_caught(example, cls):
    rep = _check(cls, example[0], horizon=2)
    assert cls.violates in rep.failed_conditions, rep.table()


def test_memory_budget_branch_evidence(example):
    rep = _check(MemoryBudget, example[0], horizon=1)
    assert rep.failed_conditions == ("C4",)
    assert any("epsilon" in v.detail for v in rep.result("C4").evidence)
    rep = _check(MemoryAdmission, example[0], horizon=1)
    assert any("budget branch" in v.detail for v in rep.result("C4").evidence)


def test_release_outside_the_hooks_is_caught_by_sampling(example):
    rep = _check(HiddenRouting, example[0], horizon=2, samples=2)
    assert "Enum" in rep.failed and rep.failed_conditions == (), rep.table()


# ---- agreement with exact.py, custom inputs, errors ----------------------------------------------
def test_loss_matches_exact_enumeration(example):
    policy, m, m_d, _ = example
    q = Query("dinner?", "affordable_dinner")
    rep = check_contract(variant_factory(MemView), policy, [("diabetes", m, m_d)], {"dinner": [q]},
                         horizon=2, samples=1)
    ref = privacy_loss_of(lambda s: MemView(policy, s, seed=0), m, m_d, lambda h: q, 2)
    assert rep.losses[0].max_loss == pytest.approx(ref.max_loss, rel=1e-12)
    assert rep.losses[0].n_transcripts == ref.n_transcripts


def test_synthetic_pairs_for_any_policy(example):
    policy = example[0].with_caps("3/2")
    pairs = synthetic_pairs(policy)
    assert [a for a, _, _ in pairs] == ["diabetes", "debt"]
    strats = {k: v for k, v in default_strategies(policy, 2).items() if k in ("round-robin", "adaptive")}
    assert check_contract(variant_factory(MemView), policy, pairs, strats, horizon=2, samples=1).passed
    rep = check_contract(variant_factory(VARIANTS["NoCap"], OnlineBudget(2)), policy, pairs,
                         {"dinner": [Query("d", "affordable_dinner")]}, horizon=2, samples=1)
    assert rep.failed_conditions == ("C5",)


def test_checker_input_errors(example):
    policy, m, m_d, m_b = example
    with pytest.raises(StoreError, match="not adjacent"):
        check_contract(variant_factory(MemView), policy, [("diabetes", m, m_b)])
    with pytest.raises(StoreError):
        check_contract(variant_factory(MemView), policy, [("diabetes", m)])  # type: ignore[list-item]
    with pytest.raises(ParameterError):
        check_contract(variant_factory(MemView), policy, horizon=0)
    with pytest.raises(ParameterError, match="MemView"):
        check_contract(lambda p, s: object(), policy, [("diabetes", m, m_d)], horizon=1)  # type: ignore
    with pytest.raises(ParameterError):
        check_contract(variant_factory(MemView), policy, [("diabetes", m, m_d)], {"bad": ["not a query"]})
    assert set(CONDITIONS) >= {"C1", "C2", "C3", "C4", "C5", "C6"}


def test_cli_exit_codes(capsys):
    assert main(["--horizon", "2", "--samples", "1"]) == 0
    out = capsys.readouterr().out
    assert "DP-MemView PASSES" in out and "C5    pass" in out
    assert main(["--variant", "NoCap", "--horizon", "2", "--samples", "1"]) == 1
    out = capsys.readouterr().out
    assert "C5    FAIL" in out and "exceeds its cap" in out
    assert main(["--variant", "Nope"]) == 2


def test_cli_module_entry_point():
    r = subprocess.run([sys.executable, "-m", "dpmv_lib.checks.contract", "--variant", "CappedArgmax", "--horizon", "1",
                        "--samples", "1"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stderr
    assert "C3    FAIL" in r.stdout and "CappedArgmax FAILS" in r.stdout
