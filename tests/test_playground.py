"""The MemView playground of notebook 07 (dpmv_lib.experiments.playground, beyond the paper).

Every number the notebook shows is recomputed here independently of the playground's own checks:
the view probabilities sum to 1 and equal Eq. (7) (50-digit mpmath; permute-and-flip likewise) for
the exact utilities of the public scorer; they and the released views are those of the RQ1
transcripts; after the replay each ledger is the sum of its admitted charges and never above its
cap; the generic fallback happens exactly when a cap check fails (also within a multi-slot turn,
Figure 2); M and M' differ only where the paper allows; the widget draws one frame per input.
"""
from __future__ import annotations

import dataclasses
import html
import json
import math
from fractions import Fraction

import matplotlib

matplotlib.use("Agg")

import mpmath
import pytest

from dpmv_lib.core.errors import QueryError
from dpmv_lib.core.ledger import InMemoryLedger
from dpmv_lib.core.memview import MemView
from dpmv_lib.core.policy import Query
from dpmv_lib.core.scorer import LexiconScorer
from dpmv_lib.core.selection import pf_from_acceptance
from dpmv_lib.core.store import differing_positions
from dpmv_lib.experiments import playground as P
from dpmv_lib.generate.interfaces import make_interface

PAIR = "pm-diabetes-000"   # the notebook's default pair


@pytest.fixture(scope="module")
def bench(pairedmem_bench):
    return pairedmem_bench


@pytest.fixture(scope="module")
def links():
    from dpmv_lib.bench.datasets import load_gold_rules
    from dpmv_lib.common.paths import project_root
    return load_gold_rules(project_root() / "data")["view_links"]


def _pair(bench, pid=PAIR):
    return next(p for p in bench.pairs if p.pair_id == pid)


def _pairs(bench):
    """One plain and one overlapping pair per attribute."""
    out = {}
    for p in bench.pairs:
        out.setdefault((p.attribute, p.overlap), p)
    return list(out.values())


@pytest.fixture(scope="module")
def rep(bench, links):
    p = _pair(bench)
    return P.replay(p, bench.policy(p), view_links=links)


def _eq7(utilities, eps, du):
    """Eq. (7) in 50-digit arithmetic from exact rationals."""
    with mpmath.workdps(50):
        w = [mpmath.exp(mpmath.mpf((eps * u / (2 * du)).numerator) / (eps * u / (2 * du)).denominator)
             for u in utilities]
        z = mpmath.fsum(w)
        return [x / z for x in w]


def _pf(utilities, eps, du):
    with mpmath.workdps(50):
        top = max(utilities)
        q = [mpmath.exp(mpmath.mpf((eps * (u - top) / (2 * du)).numerator) / (eps * (u - top) / (2 * du)).denominator)
             for u in utilities]
        return pf_from_acceptance(q)


# ---- the numbers -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("method", P.METHODS)
def test_probabilities_sum_to_one_and_equal_eq7(bench, method):
    p = _pair(bench)
    r = P.replay(p, bench.policy(p), method=method, B_a=4, K=3)
    scorer, du = LexiconScorer(), r.policy.sensitivity
    admitted = [s for side in P.SIDES for s in r.slot_steps(side) if s.admitted]
    assert len(admitted) >= 4
    for s in admitted:
        q = r.step(s.side, s.turn).query
        views = r.policy.slot(s.slot).views
        assert s.views == tuple(v.id for v in views)
        for side in P.SIDES:
            u = [scorer(q, v, p.store(side).read(s.read_set)) for v in views]
            assert list(s.utilities[side]) == u and all(type(x) is Fraction for x in u)   # exact, the scorer's
            ref = (_eq7 if "P&F" not in method else _pf)(u, s.epsilon, du)
            got = s.probabilities[side]
            assert math.fsum(got) == pytest.approx(1.0, abs=1e-14)
            for g, e, lg in zip(got, ref, s.log_probabilities[side]):
                assert g == pytest.approx(float(e), rel=1e-13, abs=0)
                assert lg == pytest.approx(float(mpmath.log(e)), abs=1e-13)
            if "P&F" not in method:  # Eq. (7) exactly: log-ratios are eps (u_v - u_w) / (2 Du), rational
                for i in range(len(u)):
                    assert s.log_probabilities[side][i] - s.log_probabilities[side][0] == pytest.approx(
                        float(s.epsilon * (u[i] - u[0]) / (2 * du)), abs=1e-14)
    for s in (s for side in P.SIDES for s in r.slot_steps(side) if not s.admitted):  # generic: probability 1
        assert s.view == r.policy.slot(s.slot).generic.id
        assert all(s.probability(side, s.view) == 1.0 and math.fsum(s.probabilities[side]) == 1.0 for side in P.SIDES)


@pytest.mark.parametrize("method", ["DP-MemView (on)", "DP-MemView (pre, P&F)"])
def test_views_and_probabilities_are_those_of_the_transcripts(bench, method):
    """The replay releases what the experiments release (same MemView, seed, B_a, K) and its
    probabilities are the transcripts' trusted-side ``view_probs`` (MemView's own _outcomes)."""
    for p in _pairs(bench)[:4]:
        r = P.replay(p, bench.policy(p), method=method, seed=1)
        iface = make_interface(method, B_a=2, K=3, seed=1)
        for side in P.SIDES:
            tc = iface.run(p, bench.policy(p), side, 1, turns=16)
            for t, c in enumerate(tc):
                st = r.step(side, t)
                assert tuple(st.views.values()) == c.views and st.conditioning == c.conditioning
                for s in st.slots:
                    want = c.view_probs[s.slot]
                    assert {v: pr for v, pr in zip(s.views, s.probabilities[side]) if pr > 0} == pytest.approx(
                        {v: pr for v, pr in want.items() if pr > 0}, abs=1e-15)


@pytest.mark.parametrize("B_a,K", [(2, 3), (1, 2), (4, 6), (8, 2)])
def test_ledger_is_the_sum_of_charges_and_never_exceeds_the_cap(bench, B_a, K):
    for p in _pairs(bench):
        r = P.replay(p, bench.policy(p), B_a=B_a, K=K)
        for side in P.SIDES:
            total = {a: Fraction(0) for a in r.policy.attribute_names}
            for st in r.steps[side]:
                for s in st.slots:
                    if s.mechanism in ("em", "pf"):
                        for a in s.charge_set:
                            total[a] += s.epsilon
                ledger = {a: Fraction(v) for a, v in st.release.public_dict()["ledger"].items()}
                assert ledger == total                                  # the public ledger state
                assert all(v <= Fraction(B_a) for v in ledger.values())  # never above the cap
            assert r.steps[side][-1].ledger == total


def test_fallback_exactly_when_the_cap_would_be_exceeded(bench):
    seen = {"fallback": 0, "admitted": 0}
    for p in _pairs(bench):
        for B_a, K in ((2, 3), (1, 4), (4, 2)):
            r = P.replay(p, bench.policy(p), B_a=B_a, K=K)
            for side in P.SIDES:
                spent = {a: Fraction(0) for a in r.policy.attribute_names}
                for st in r.steps[side]:
                    for s in st.slots:
                        eps = Fraction(B_a) / K
                        assert s.epsilon == (eps if s.read_set else None)   # online rule: min_a B_a / K
                        assert s.charge_set == r.policy.charge_set(s.read_set)   # C2: every affected attribute
                        would = any(spent[a] + eps > Fraction(B_a) for a in s.charge_set)
                        assert s.fallback == would and (s.view == r.policy.slot(s.slot).generic.id or not would)
                        assert s.admitted == (not would)
                        seen["fallback" if would else "admitted"] += 1
                        if not would:
                            for a in s.charge_set:
                                spent[a] += eps
    assert seen["fallback"] > 50 and seen["admitted"] > 50


def test_fallback_within_a_multi_slot_turn_figure2(running, dinner):
    """Figure 2: the diabetes ledger cannot afford the food read (I_D and I_B); food falls back at
    zero cost, finance is admitted and charges debt only; the explanation says why."""
    policy, m, mp, _ = running
    mv = MemView(policy, m, ledger=InMemoryLedger(policy.caps, spent={"diabetes": Fraction(3, 2)}), seed=3)
    st = P.explain_release(mv, dinner, (), {"M": m, "M'": mp}, LexiconScorer(), side="M", turn=0)
    food, finance = st.slots
    assert food.decision == "generic fallback (cap: diabetes)" and food.blocked_by == ("diabetes",)
    assert food.cap_checks() == [("debt", 0, Fraction(2, 3), 2, True),
                                 ("diabetes", Fraction(3, 2), Fraction(2, 3), 2, False)]
    assert food.ledger_after == food.ledger_before and not food.charged
    assert finance.admitted and finance.charged == {"debt"} and finance.ledger_before == food.ledger_after
    assert st.ledger == {"diabetes": Fraction(3, 2), "debt": Fraction(2, 3)} == dict(finance.ledger_after)
    assert math.fsum(finance.probabilities["M"]) == pytest.approx(1, abs=1e-14)


# ---- M and M' side by side ------------------------------------------------------------------------------
def test_m_and_mprime_differ_only_where_the_paper_allows(bench, links):
    from dpmv_lib.generate.responders import make_responder

    responses = P.Responses(make_responder("surrogate", list(bench.policies.values())))
    for p in _pairs(bench):
        r = P.replay(p, bench.policy(p), view_links=links)
        group = r.policy.attribute(p.attribute).group
        assert differing_positions(p.m, p.m_prime) <= group                       # adjacency: only inside I_a
        du = r.policy.sensitivity
        for sm, sp in zip(r.slot_steps("M"), r.slot_steps("M'")):
            public = ("slot", "read_set", "affected", "charge_set", "epsilon", "ledger_before", "ledger_after",
                      "mechanism", "fallback", "views")
            assert all(getattr(sm, f) == getattr(sp, f) for f in public)     # C4, C5: one public path
            assert sm.probabilities == sp.probabilities                      # same plan: same two distributions
            if not sm.admitted:
                assert sm.view == sp.view == r.policy.slot(sm.slot).generic.id
            elif not set(sm.read_set) & group:                               # the read avoids I_a: same law
                assert sm.utilities["M"] == sm.utilities["M'"] and sm.probabilities["M"] == sm.probabilities["M'"]
            else:                                                            # charged to a (C2), eps-DP (C3)
                assert p.attribute in sm.charge_set
                assert all(abs(a - b) <= du for a, b in zip(sm.utilities["M"], sm.utilities["M'"]))
                assert all(abs(a - b) <= float(sm.epsilon) + 1e-12
                           for a, b in zip(sm.log_probabilities["M"], sm.log_probabilities["M'"]))
        out = responses.get(r)
        for t in range(r.turns):
            a, b = (out[(out["turn"] == t + 1) & (out["side"] == side)].iloc[0] for side in P.SIDES)
            assert (a["conditioning"] == b["conditioning"]) == (r.step("M", t).views == r.step("M'", t).views)
            if a["conditioning"] == b["conditioning"]:
                assert a["response"] == b["response"]                        # C6: post-processing of public inputs
        text = json.dumps([st.release.public_dict() for side in P.SIDES for st in r.steps[side]])
        assert not any(p.m.contents[i] in text or p.m_prime.contents[i] in text for i in group)
        loss = P.loss_table(r)                                               # Theorem 1 on the realised path
        assert (loss["cumulative loss"].abs() <= loss["L_target"] + 1e-12).all() and (loss["L_target"] <= 2).all()
        assert P.invariants(r)["holds"].all()


def test_invariants_see_a_broken_replay(rep):
    assert P.invariants(rep)["holds"].all()
    i = next(i for i, s in enumerate(rep.steps["M"]) if s.slots[0].admitted)
    st = rep.steps["M"][i]
    bad = dataclasses.replace(st.slots[0], ledger_after={a: v + 2 for a, v in st.slots[0].ledger_after.items()})
    broken = dataclasses.replace(rep, steps={**rep.steps,
                                             "M": rep.steps["M"][:i] + (dataclasses.replace(st, slots=(bad,)),)
                                             + rep.steps["M"][i + 1:]})
    failed = set(P.invariants(broken).query("not holds")["claim"])
    assert {"every ledger = the sum of its admitted charges", "L_a <= B_a after every slot"} <= failed


def test_a_typed_query_replaces_one_turn(bench, rep):
    p = _pair(bench)
    typed = Query("Any cheap dinner ideas for tonight?", "food.quick_dinner", "typed")
    r = P.replay(p, bench.policy(p), custom={0: typed})
    assert r.step("M", 0).custom and r.step("M", 0).query == typed and not r.step("M", 1).custom
    assert r.step("M", 0).slots[0].slot == "food" and rep.step("M", 0).slots[0].slot == "schedule"
    assert [s.slot for s in r.slot_steps("M")[1:]] == [s.slot for s in rep.slot_steps("M")[1:]]
    assert P.invariants(r)["holds"].all() and "typed" in P.summary_text(r, 0)
    assert P.Responses(P.responder("surrogate", list(bench.policies.values()))).prompt(r, "M", 0).query == typed.text
    with pytest.raises(QueryError, match="unknown query intent"):
        P.replay(p, bench.policy(p), custom={2: Query("hello", "no.such_intent")})
    with pytest.raises(Exception, match="playground runs"):
        P.replay(p, bench.policy(p), method="RawReadSet")


def test_tables_agree_with_the_replay(rep):
    t = next(s.turn for s in rep.slot_steps("M") if s.fallback)
    tt = P.turn_table(rep, t)
    assert list(tt.columns) == ["M", "M'"] and "generic fallback (cap" in tt.loc["[health] decision", "M"]
    assert (tt.loc["[health] charge set Gamma"] == "diabetes, job_loss, pregnancy").all()
    vt = P.view_table(P.replay(rep.pair, rep.policy, view_links=rep.view_links), 3)
    assert vt["p_M"].sum() == pytest.approx(1) and vt["p_M'"].sum() == pytest.approx(1)
    assert "diabetes" in set(vt["linked to"]) and (vt["released on M"] == "yes").sum() == 1
    rt = P.replay_table(rep)
    assert len(rt) == rep.turns and rt["decision"].str.startswith("generic fallback").sum() == 10
    assert set(P.pair_table(rep)["position"]) == set(rep.group) and P.pair_table(rep)["in I_a"].all()


# ---- the figure and the widget ---------------------------------------------------------------------------
def test_walkthrough_figure_renders(rep):
    from dpmv_lib.experiments import playground_widget as PW

    png = PW.figure_png(PW.walkthrough_figure(rep, 4, dpi=40))
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    outcomes = [PW.outcome(rep, "M", t) for t in range(rep.turns)]
    assert outcomes[4] == 2 and outcomes[0] == 0 and set(outcomes) <= {0, 1, 2, 3}


def test_widget_one_frame_per_input(bench, links):
    pytest.importorskip("ipywidgets")
    from dpmv_lib.experiments import playground_widget as PW
    from dpmv_lib.generate.responders import make_responder

    box = PW.make_playground(bench, make_responder("surrogate", list(bench.policies.values())), pair_id=PAIR,
                             turn=4, view_links=links, dpi=20, size=(8, 5))
    c = box.controls
    assert box.state["renders"] == 1 and "turn=4/16" in box.label.value and "pm-diabetes-000" in box.label.value
    assert "responses" in box.details.value and "food.plant_forward" in box.details.value

    def step(widget, value, *expect, frames=1):
        before, img = box.state["renders"], box.image.value
        c[widget].value = value
        assert box.state["renders"] - before == frames, (widget, value)
        assert all(e in html.unescape(box.label.value) for e in expect), box.label.value
        return img != box.image.value

    other = next(p.pair_id for p in bench.pairs if p.attribute == "debt")
    assert step("pair", other, other)
    assert step("turn", 7, "turn=7/16")
    assert step("query", "What should I cook tonight?", "typed")
    assert step("intent", "food.quick_dinner", "intent=food.quick_dinner")
    assert step("b_a", Fraction(4), "B_a=4")
    assert step("k", 6, "K=6")
    assert step("method", "DP-MemView (pre, P&F)", "DP-MemView (pre, P&F)")
    assert not step("turn", 7, frames=0)                  # unchanged: no frame
    step("method", "DP-MemView (on)", frames=0)           # back to a cached setting: sent, not redrawn
    assert box.state["replay"].method == "DP-MemView (on)"


@pytest.mark.slow
def test_smollm2_responds_when_installed(bench, rep):
    """SmolLM2 through the llm profile's engine (skipped when OpenVINO GenAI or the exported model
    is absent)."""
    pytest.importorskip("openvino_genai")
    r = P.Responses(P.responder("openvino:smollm2@f32", list(bench.policies.values())))
    try:
        out = r.get(rep, [3])
    except Exception as exc:  # noqa: BLE001 - a missing model file is a skip, not a failure
        pytest.skip(f"OpenVINO SmolLM2 unavailable: {exc}")
    assert len(out) == 2 and all(isinstance(x, str) and x.strip() for x in out["response"])


def test_notebook_steps_write_their_tables_and_say_what_they_found(tmp_path):
    from dpmv_lib.experiments import playground_widget as PW
    from dpmv_lib.experiments import session

    run = session.start("07", profile="smoke", results_dir=str(tmp_path), pair_id="pm-diabetes-000", turn=4,
                        query=None, intent=None, method="DP-MemView (on)", B_a=2, K=3, T=16, responder=None)
    opened = P.open_pair(run)
    pg = opened["playground"]
    assert opened.finding.endswith("all inside $I_{diabetes}$.") and pg.turn == 3
    assert P.turn_step(run, pg).finding.startswith("The public plan is identical on M and M'")
    rep_ = P.replay_step(run, pg)
    fallbacks = [s for s in pg.rep.slot_steps("M") if s.fallback and s.epsilon is not None]
    assert f"{len(fallbacks)} generic fallbacks" in rep_.finding and len(rep_.tables) == 1 + bool(fallbacks)
    assert P.checks_step(run, pg).finding == "All 8 claims hold on this replay."
    fig = PW.walkthrough_step(run, pg)
    assert fig.figures["walk-through"].is_file() and "inside its ledger" in fig.finding
    assert "of 16 turns" in P.responses_step(run, pg).finding
    for name in ("07_replay.csv", "07_checks.csv", "07_loss.csv", "07_turn.csv", "07_views.csv", "07_responses.csv",
                 "07_run.json"):
        assert (tmp_path / "tables" / name).is_file(), name
    bad = session.start("07", profile="smoke", results_dir=str(tmp_path), pair_id="pm-nobody", turn=1,
                        method="DP-MemView (on)")
    with pytest.raises(Exception, match="unknown pair 'pm-nobody'"):
        P.open_pair(bad)
