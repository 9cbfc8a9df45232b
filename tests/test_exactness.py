"""Exactness where the package promises it.

* C3: the lexicon scorer's utilities are exact rationals, so |u_M(v) - u_M'(v)| <= Du = 3/5 holds
  exactly (in floats 0.4*0 + 0.4*1 + 0.2*1 = 0.6000000000000001 > 3/5); Eq. (7)'s exponents are
  computed from exact rationals (checked against 60-digit decimal arithmetic); the contract
  checker compares the utility sensitivity exactly and flags an excess of 1e-17.
* C5 fail-closed scoring: a scorer that fails (raises, NaN/inf, out of [0, 1], non-number)
  neither raises out of release() nor changes the planned charge; the slot releases a uniform
  view of V_g, the failure goes only to the operator-side ``scorer_failures`` list, and the
  exact contract check (Theorem 1) still passes with a failure that depends on memory.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from decimal import Decimal, localcontext
from fractions import Fraction

import pytest

from dpmv_lib.checks.contract import check_contract
from dpmv_lib.core.ledger import OnlineBudget
from dpmv_lib.core.sampling import SeededRandomSource
from dpmv_lib.core.selection import em_probabilities, exact_exponents, sample_em_exact
from dpmv_lib.core.memview import MemView
from dpmv_lib.core.releases import FAILSAFE_UTILITY
from dpmv_lib.core.policy import Query
from dpmv_lib.core.scorer import LexiconScorer

DINNER = Query("Any ideas for an affordable dinner?", "affordable_dinner")
MEAL = Query("Plan my meals for the week", "meal_plan")


# ---- C3: exact utilities ----------------------------------------------------------------------
def test_lexicon_weights_example_is_exactly_the_sensitivity(running):
    """The 0.4/0.4/0.2 example: r = 0, c = s = 1 gives u = 3/5 exactly (floats: 0.6000000000000001)."""
    policy = running[0]
    scorer = LexiconScorer()
    quick = policy.view("food.quick")  # serves meal_plan only: r = 0 for the dinner query
    u_m = scorer(DINNER, quick, ["busy and quick", "late shifts"])  # every item hits, 2+ hits: c = s = 1
    u_mp = scorer(DINNER, quick, ["nothing notable", "nothing notable"])  # c = s = 0
    assert scorer.components(DINNER, quick, ["busy and quick", "late shifts"]) == (0, 1, 1)
    assert isinstance(u_m, Fraction) and isinstance(u_mp, Fraction)
    assert scorer.sensitivity == Fraction(3, 5)
    assert Fraction(u_m) - Fraction(u_mp) == Fraction(3, 5)  # exact value, not the float's
    assert 0.4 * 0 + 0.4 * 1 + 0.2 * 1 == 0.6000000000000001  # what the float scorer computed


def test_lexicon_utility_differences_never_exceed_sensitivity(running):
    """Every (query, view) of the running example over read sets of 1-3 items with 0-2 cue hits
    each: max u - min u <= Du exactly (any two read contents are an adjacent pair's worst case)."""
    policy = running[0]
    scorer = LexiconScorer()
    for slot in policy.slots:
        for view in slot.views:
            texts = ["nothing notable"] + [" ".join(view.cues[:k]) for k in (1, 2)] if view.cues else ["x"]
            for q in (DINNER, MEAL, Query("q", "budget_check")):
                us = []
                for n in (1, 2, 3):
                    for read in itertools.product(texts, repeat=n):
                        u = scorer(q, view, list(read))
                        r, c, s = scorer.components(q, view, list(read))
                        assert isinstance(u, Fraction) and u == min(1, Fraction(2, 5) * r + Fraction(2, 5) * c
                                                                     + Fraction(1, 5) * s)
                        us.append(u)
                assert max(us) - min(us) <= scorer.sensitivity, (view.id, q.intent)
                assert all(0 <= u <= 1 for u in us)


def test_lexicon_scorer_reads_float_weights_exactly_and_validates():
    s = LexiconScorer(w_r=0.4, w_c=0.4, w_s=0.2)
    assert (s.w_r, s.w_c, s.w_s) == (Fraction(2, 5), Fraction(2, 5), Fraction(1, 5))
    assert s.sensitivity == Fraction(3, 5)
    with pytest.raises(Exception, match="w_c"):
        LexiconScorer(w_c=-0.1)
    with pytest.raises(Exception, match="generic_r"):
        LexiconScorer(generic_r=2)
    with pytest.raises(Exception, match="saturation"):
        LexiconScorer(saturation=0)


def test_memview_feeds_exact_rationals_to_the_sampler(running, dinner):
    policy, m, _, _ = running
    prep = MemView(policy, m, seed=0).prepare(dinner, "food", ())
    assert prep.admitted and all(isinstance(u, Fraction) for u in prep.utilities)
    assert prep.utilities == (Fraction(1, 2), Fraction(1), Fraction(4, 5), Fraction(0))


def _decimal_em(us, eps, du, digits=60):
    with localcontext() as ctx:
        ctx.prec = digits
        w = [(Decimal(eps.numerator) / eps.denominator * (Decimal(u.numerator) / u.denominator)
              / (2 * Decimal(du.numerator) / du.denominator)).exp() for u in us]
        z = sum(w)
        return [x / z for x in w]


@pytest.mark.parametrize("us,eps", [
    ([Fraction(1, 2), Fraction(1), Fraction(4, 5), Fraction(0)], Fraction(2, 3)),
    ([Fraction(1, 3), Fraction(2, 7), Fraction(3, 5) + Fraction(1, 10**17), Fraction(0)], Fraction(4)),
    ([Fraction(0), Fraction(1), Fraction(999, 1000)], Fraction(60)),
])
def test_eq7_from_exact_exponents_matches_60_digits(us, eps):
    du = Fraction(3, 5)
    xs = exact_exponents(us, eps, du)
    assert max(xs) == 0 and all(x == eps * (u - max(us)) / (2 * du) for x, u in zip(xs, us))
    got = em_probabilities(us, eps, du)
    ref = _decimal_em(us, eps, du)
    for p, r, x in zip(got, ref, xs):  # one rounding of x, then exp: relative error ~ (|x| + few) ulp
        err = abs(Decimal(float(p)) - r)
        assert err <= Decimal("1.2e-15") and err <= Decimal((abs(float(x)) + 4) * 2.3e-16) * r


def test_exponent_beyond_float_range_is_zero_probability():
    assert list(em_probabilities([Fraction(1), Fraction(0)], Fraction(10**400), Fraction(1, 2))) == [1.0, 0.0]
    assert sample_em_exact([Fraction(1), Fraction(0)], Fraction(10**6), Fraction(1, 2), SeededRandomSource(0)) == 0


@dataclass(frozen=True)
class TinyExcess:
    """u(specific views) = Du + excess if the read memory mentions sugar, else 0 (generic: 0):
    with excess > 0 the scorer breaks its own declared sensitivity by exactly ``excess``."""

    excess: Fraction
    sensitivity: Fraction = Fraction(3, 5)

    def __call__(self, query, view, read_contents):
        if view.generic:
            return Fraction(0)
        return self.sensitivity + self.excess if any("sugar" in c.lower() for c in read_contents) else Fraction(0)


def _check(running, scorer):
    policy, m, m_d, _ = running
    return check_contract(lambda p, s: MemView(p, s, budget=OnlineBudget(3), scorer=scorer, seed=0), policy,
                          pairs=[("diabetes", m, m_d)], strategies={"meal": [MEAL]}, horizon=2, samples=2)


def test_contract_checker_flags_an_exact_excess_of_1e17(running):
    bad = _check(running, TinyExcess(Fraction(1, 10**17)))
    assert bad.failed_conditions == ("C3",)
    assert any("Du + 1/100000000000000000" in v.detail for v in bad.result("C3").evidence)
    # the float-probability checks cannot see an excess this small: only the exact check does
    assert bad.result("Thm1").passed
    good = _check(running, TinyExcess(Fraction(0)))  # exactly at the bound: compliant
    assert good.passed, good.table()


class FloatLexicon(LexiconScorer):
    """The lexicon scorer as it was: the same components combined in floats."""

    def __call__(self, query, view, read_contents):
        r, c, s = (float(x) for x in self.components(query, view, read_contents))
        return min(1.0, max(0.0, 0.4 * r + 0.4 * c + 0.2 * s))


def test_contract_checker_sees_the_float_lexicon_excess(running):
    """M has cues of food.quick (r = 0 for the dinner query, c = s = 1), M'_diabetes none: the float
    scorer moves u(food.quick) by 0.6000000000000001 > 3/5 (flagged, exactly); the exact one by 3/5."""
    policy, m, m_d, _ = running
    m_quick = m.replace({2: "Busy weeks, so quick meals.", 3: "Late shifts mean quick dinners."}, name="M quick")
    reports = {}
    for name, scorer in (("float", FloatLexicon()), ("exact", LexiconScorer())):
        reports[name] = check_contract(
            lambda p, st, sc=scorer: MemView(p, st, budget=OnlineBudget(3), scorer=sc, seed=0), policy,
            pairs=[("diabetes", m_quick, m_d)], strategies={"dinner": [DINNER]}, horizon=1, samples=1)
    assert reports["float"].failed_conditions == ("C3",)
    detail = reports["float"].result("C3").evidence[0].detail
    excess = Fraction(0.6000000000000001) - Fraction(3, 5)
    assert "food.quick" in detail and f"Du + {excess}" in detail
    assert reports["exact"].passed, reports["exact"].table()


# ---- C5: fail-closed scoring ------------------------------------------------------------------
class Tripwire:
    """A custom scorer that raises (with a memory-dependent message) iff a read item contains
    ``word``; otherwise the lexicon scorer."""

    sensitivity = Fraction(3, 5)

    def __init__(self, word: str = "sugar") -> None:
        self.word, self.inner = word, LexiconScorer()

    def __call__(self, query, view, read_contents):
        for c in read_contents:
            if self.word in c.lower():
                raise RuntimeError(f"memory says: {c}")
        return self.inner(query, view, read_contents)


def _public(rel):
    """Everything a Release shows except the sampled view ids."""
    d = rel.public_dict()
    for s in d["slots"]:
        s.pop("view")
    return d


def test_memory_dependent_scorer_failure_does_not_change_public_control(running):
    """M has 'sugar' in the food slot (the scorer raises), M'_diabetes does not. Neither call
    raises; every public field but the view and every ledger state is identical on M and M',
    through the cap and into the generic fallback; the failure is only in the operator log."""
    policy, m, m_d, _ = running
    queries = [MEAL, DINNER, MEAL, DINNER, MEAL]
    runs = {}
    for name, store in (("M", m), ("M'", m_d)):
        mv = MemView(policy, store, budget=OnlineBudget(3), scorer=Tripwire(), seed=1)
        hist = []
        for q in queries:
            hist.append(mv.release(q, hist))
        runs[name] = (mv, hist)
    (mv_m, h_m), (mv_p, h_p) = runs["M"], runs["M'"]
    assert [_public(r) for r in h_m] == [_public(r) for r in h_p]
    assert [r.ledger for r in h_m] == [r.ledger for r in h_p]
    assert h_m[-1].slots[0].mechanism == "generic" and h_m[-1].slots[0].view == h_p[-1].slots[0].view
    assert mv_m.scorer_failures and not mv_p.scorer_failures
    assert all(f.slot == "food" and f.reason == "raised RuntimeError" for f in mv_m.scorer_failures)
    shown = repr([r.public_dict() for r in h_m])
    assert "memory says" not in shown and "RuntimeError" not in shown


def test_failing_slot_is_uniform_and_charged_as_planned(running):
    policy, m, _, _ = running
    mv = MemView(policy, m, scorer=Tripwire(), seed=0)
    before = mv.ledger.spent()
    prep = mv.prepare(DINNER, "food", ())
    assert prep.admitted and prep.utilities == (FAILSAFE_UTILITY,) * 4
    outs = mv.outcomes(prep)
    assert [p for _, p in outs] == pytest.approx([0.25] * 4, abs=1e-15)
    assert {sr.charged for sr, _ in outs} == {prep.plan.charged} and {sr.mechanism for sr, _ in outs} == {"em"}
    after = mv.ledger.spent()
    assert all(after[a] - before[a] == prep.plan.epsilon for a in prep.plan.charged)


def test_memory_dependent_scorer_failure_passes_the_exact_contract_check(running):
    """Exact enumeration on M ~ M' with the failure on M only: C1-C6 hold and the exact
    transcript privacy loss is <= B_a (Theorem 1); per slot the uniform release is within
    eps of Eq. (7) on M' because Du = 3/5 >= 1/2."""
    report = _check(running, Tripwire())
    assert report.passed, report.table()
    assert max(loss.max_loss for loss in report.losses) > 0  # the failure is visible, within the cap


BAD_VALUES = [math.nan, math.inf, -math.inf, -0.1, 1.5, Fraction(3, 2), Fraction(-1, 10**17), "0.5", None, True,
              complex(0.5, 0)]


@pytest.mark.parametrize("bad", BAD_VALUES, ids=repr)
@pytest.mark.parametrize("exact", [True, False])
def test_invalid_utility_fails_closed(running, bad, exact):
    """A scorer returning NaN/inf/out-of-range/non-numbers for one view: the release goes ahead at
    the planned charge with the slot's utilities set to 1/2 (uniform), recorded privately."""
    policy, m, _, _ = running

    class Bad:
        sensitivity = Fraction(3, 5)

        def __call__(self, q, v, x):
            return bad if v.id == "food.cheap" else Fraction(1, 3)

    mv = MemView(policy, m, scorer=Bad(), seed=0, exact=exact)
    rel = mv.release(DINNER)
    food = rel.slots[0]
    assert food.mechanism == "em" and food.charged == frozenset({"diabetes", "debt"})
    assert food.view in policy.slot("food").view_ids
    assert rel.spent == {"diabetes": Fraction(2, 3), "debt": Fraction(4, 3)}  # food + finance at eps 2/3
    assert rel.slots[1].mechanism == "em"  # finance has no failing view: an ordinary release
    assert [(f.slot, f.view) for f in mv.scorer_failures] == [("food", "food.cheap")]
    assert mv.prepare(DINNER, "food", ()).utilities == (FAILSAFE_UTILITY,) * 4
