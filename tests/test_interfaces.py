"""Compared interfaces (Tables 1, 4, 8): each test pins a method's defining property."""
from __future__ import annotations

import json
import math
from fractions import Fraction

import numpy as np
import pytest
from generation_toy import toy_benchmark

from dpmv_lib.checks.accounting import reconstructed_bound, reported_ledger
from dpmv_lib.core.errors import BudgetError, ParameterError
from dpmv_lib.core.exact import fixed_strategy, transcript_distribution
from dpmv_lib.generate.filters import DeletionFilter
from dpmv_lib.generate.interfaces import (EXTRA_METHODS, GUIDANCE_HEADER, MEMORY_HEADER, METHODS, RQ1_METHODS,
                                          RQ2_METHODS, MemViewInterface, make_interface, task_positions)
from dpmv_lib.core.ledger import planned_charges
from dpmv_lib.core.memview import MemView
from dpmv_lib.core.policy import Query

BENCH = toy_benchmark()
PAIRS = BENCH.pairs
MEMVIEW_METHODS = [m for m in METHODS if issubclass(METHODS[m], MemViewInterface)]


def run(method, pair, side, seed=None, **kw):
    iface = make_interface(method, **kw)
    if seed is None:
        seed = 0 if iface.stochastic else -1
    return iface.run(pair, BENCH.policy(pair), side, seed)


def lines(conditioning):
    return [ln[2:] for ln in conditioning.splitlines() if ln.startswith("- ")]


def test_registry_has_every_method_of_tables_1_4_8():
    assert set(RQ1_METHODS) | set(RQ2_METHODS) | set(EXTRA_METHODS) == set(METHODS)
    assert RQ1_METHODS == ("GenericOnly", "RawReadSet", "TypedMask", "TaskMin", "OutputFilter",
                           "DP-MemView (on)", "DP-MemView (pre)", "DP-MemView (on, P&F)", "DP-MemView (pre, P&F)")
    assert make_interface("DP-MemView (on, P&F)").selector == "pf"
    assert make_interface("DP-MemView (on)").selector == "em"
    assert make_interface("DP-MemView (pre, P&F)").mode == "preallocated"
    det = {m for m in METHODS if not make_interface(m).stochastic}
    # C.5: deterministic methods run once; DP-MemView modes, IncompleteCharge, NoCap use EM seeds
    assert det == {"GenericOnly", "RawReadSet", "TypedMask", "TaskMin", "OutputFilter", "CappedArgmax"}
    with pytest.raises(ParameterError, match="unknown method"):
        make_interface("Raw")


@pytest.mark.parametrize("method", ["GenericOnly", "TypedMask"])
@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: p.pair_id)
def test_identical_conditioning_under_m_and_m_prime(method, pair):
    a, b = run(method, pair, "M"), run(method, pair, "M'")
    assert len(a) == len(b) == 32
    assert [t.conditioning for t in a] == [t.conditioning for t in b]
    assert [t.views for t in a] == [t.views for t in b]
    assert [t.view_probs for t in a] == [t.view_probs for t in b]


def test_raw_read_set_differs_and_is_ordered_read_set():
    pair = PAIRS[0]
    policy = BENCH.policy(pair)
    raw_m, raw_mp = run("RawReadSet", pair, "M"), run("RawReadSet", pair, "M'")
    assert any(x.conditioning != y.conditioning for x, y in zip(raw_m, raw_mp))
    for t, tc in zip(pair.turns, raw_m):
        read = sorted({i for g in policy.route(t.query) for i in policy.read(t.query, g)})
        assert list(tc.items) == read
        assert lines(tc.conditioning) == [pair.m.contents[i] for i in read]
        assert tc.conditioning.startswith(MEMORY_HEADER) and tc.views == ()


def test_typed_mask_replaces_exactly_the_protected_items():
    pair = PAIRS[0]
    policy = BENCH.policy(pair)
    protected = set().union(*(a.group for a in policy.attributes))
    slot_of = dict(policy.layout)
    for tc in run("TypedMask", pair, "M"):
        for i, text in zip(tc.items, lines(tc.conditioning)):
            if i in protected:
                assert text == f"[withheld {slot_of[i]} detail]"
            else:
                assert text == pair.m.contents[i]


def test_task_min_never_passes_distractor_only_positions():
    pair = PAIRS[0]
    policy = BENCH.policy(pair)
    reads = {qt: set() for qt in ("target", "neutral", "distractor")}
    for t in pair.turns:
        for g in policy.route(t.query):
            reads[t.query.qtype].update(policy.read(t.query, g))
    distractor_only = reads["distractor"] - reads["target"] - reads["neutral"]
    assert distractor_only == {6}  # the work slot, read only by weekend-plan queries
    assert set(task_positions(pair, policy)) == reads["target"] | reads["neutral"]
    for scope in ("union", "turn"):
        for side in ("M", "M'"):
            for tc in run("TaskMin", pair, side, scope=scope):
                assert not set(tc.items) & distractor_only
                assert "teacher" not in tc.conditioning
                if scope == "union":
                    assert tc.items == task_positions(pair, policy)
    with pytest.raises(ParameterError, match="scope"):
        make_interface("TaskMin", scope="all")


@pytest.mark.parametrize("method", MEMVIEW_METHODS + ["GenericOnly"])
def test_view_methods_pass_only_views(method):
    for pair in PAIRS:
        policy = BENCH.policy(pair)
        memory = [t for t in list(pair.m.contents.values()) + list(pair.m_prime.contents.values()) if t]
        for side in ("M", "M'"):
            for t, tc in zip(pair.turns, run(method, pair, side)):
                slots = policy.route(t.query)
                assert len(tc.views) == len(slots) and tc.items == ()
                for g, vid in zip(slots, tc.views):
                    assert vid in policy.slot(g).view_ids          # C1: the shared vocabulary
                assert lines(tc.conditioning) == [policy.view(v).text for v in tc.views]
                assert tc.conditioning.startswith(GUIDANCE_HEADER)
                assert not any(m in tc.conditioning for m in memory)


@pytest.mark.parametrize("method", ["DP-MemView (on)", "DP-MemView (pre)", "IncompleteCharge", "NoCap",
                                    "ScoreChannel", "CappedArgmax"])
def test_view_probs_are_the_exact_per_turn_distribution(method):
    """The product of the recorded per-turn view probabilities equals the probability of the
    realised transcript from exact enumeration (dpmv_lib.core.exact) on the first 3 turns."""
    pair = PAIRS[0]
    iface = make_interface(method)
    seed = 0 if iface.stochastic else -1
    policy = iface.capped_policy(BENCH.policy(pair))
    queries = pair.queries[:3]
    for side in ("M", "M'"):
        out = iface.run(pair, BENCH.policy(pair), side, seed, turns=3)
        for tc in out:
            for dist in tc.view_probs.values():
                assert math.isclose(sum(dist.values()), 1.0, abs_tol=1e-12)
            for g, v in zip([s.slot for s in tc.release.slots], tc.views):
                assert tc.view_probs[g][v] > 0
        dist = transcript_distribution(lambda st: iface.memview(pair, BENCH.policy(pair), side, max(seed, 0)),  # noqa: B023 - called within the iteration
                                       pair.store(side), fixed_strategy(queries), 3)
        realised = tuple(tc.release for tc in out)
        p = np.prod([tc.view_probs[s.slot][s.view] for tc in out for s in tc.release.slots])
        assert math.isclose(dist[realised], p, rel_tol=1e-9)
        assert policy.caps == {a: Fraction(2) for a in policy.attribute_names}


def test_online_and_preallocated_epsilons():
    pair = PAIRS[0]
    policy = BENCH.policy(pair)
    on = run("DP-MemView (on)", pair, "M")
    for tc in on:
        for s in tc.released["slots"]:
            if s["mechanism"] == "em":
                assert Fraction(s["epsilon"]) == Fraction(2, 3)          # B_a / K
        assert all(Fraction(v) <= 2 for v in tc.released["ledger"].values())  # C5
    pre = run("DP-MemView (pre)", pair, "M", plan_horizon=16)
    c = planned_charges(policy, pair.queries[:16])
    for tc in pre:
        for s in tc.released["slots"]:
            if s["mechanism"] == "em":
                attrs = s["charged"] or [a for a in c if c[a] > 0]  # uncharged read: PreallocatedBudget rule
                assert Fraction(s["epsilon"]) == min(Fraction(2, c[a]) for a in attrs)
        assert all(Fraction(v) <= 2 for v in tc.released["ledger"].values())
    # K and B_a are parameters: eps = B_a / K
    tc = run("DP-MemView (on)", pair, "M", B_a=4, K=2)[0]
    assert {Fraction(s["epsilon"]) for s in tc.released["slots"]} == {Fraction(2)}


def test_incomplete_charge_ledger_misses_the_reconstructed_charge():
    pair = PAIRS[0]  # target diabetes; position 3 is in both I_diabetes and I_debt
    assert pair.attribute == "diabetes"
    for seed in (0, 1):
        inc = [tc.release for tc in run("IncompleteCharge", pair, "M", seed)]
        ok = [tc.release for tc in run("DP-MemView (on)", pair, "M", seed)]
        assert reported_ledger(inc, "diabetes") < reconstructed_bound(inc, "diabetes")
        assert reported_ledger(inc, "diabetes") <= 2 < reconstructed_bound(inc, "diabetes")
        assert reported_ledger(ok, "diabetes") == reconstructed_bound(ok, "diabetes") <= 2
        omitted = [s for r in inc for s in r.slots if "diabetes" in s.affected and s.mechanism == "em"
                   and "diabetes" not in s.charged]
        assert omitted and all(s.charged == frozenset({"debt"}) for s in omitted)


def test_nocap_exceeds_cap_and_capped_argmax_is_deterministic():
    pair = PAIRS[0]
    nocap = [tc.release for tc in run("NoCap", pair, "M", 0)]
    assert reported_ledger(nocap, "diabetes") > 2
    a1, a2 = run("CappedArgmax", pair, "M"), run("CappedArgmax", pair, "M")
    assert [t.views for t in a1] == [t.views for t in a2]
    assert reconstructed_bound([t.release for t in a1], "diabetes") == math.inf
    assert all(set(p.values()) == {1.0} for t in a1 for p in t.view_probs.values())
    with pytest.raises(ParameterError, match="deterministic"):
        make_interface("CappedArgmax").run(pair, BENCH.policy(pair), "M", 0)


def test_score_channel_exposes_top_score_in_released():
    pair = PAIRS[0]
    out = run("ScoreChannel", pair, "M", 0)
    scores = [s.get("top_score") for tc in out for s in tc.released["slots"] if s["mechanism"] == "em"]
    assert scores and all(0 <= x <= 1 for x in scores)
    on = run("DP-MemView (on)", pair, "M", 0)
    assert all("top_score" not in s for tc in on for s in tc.released["slots"])


def test_output_filter_removes_listed_phrases():
    f = make_interface("OutputFilter")
    text = ("Since you have type 2 diabetes and take metformin, prefer low-sugar meals. Your cards are "
            "maxed out and a collector calls; you were laid off and are pregnant.")
    out = f.postprocess(text)
    assert DeletionFilter().pattern.search(out) is None
    for phrase in ("diabetes", "metformin", "maxed out", "collector", "laid off", "pregnant"):
        assert phrase not in out.lower()
    assert "prefer low-sugar meals" in out
    assert make_interface("RawReadSet").postprocess(text) == text
    # same conditioning as RawReadSet
    pair = PAIRS[0]
    assert [t.conditioning for t in run("OutputFilter", pair, "M")] == \
           [t.conditioning for t in run("RawReadSet", pair, "M")]
    assert DeletionFilter(mode="sentence")("Fine. You are pregnant. Eat well.") == "Fine. Eat well."
    assert DeletionFilter(("soup",))("I like soup.") == "I like."
    with pytest.raises(ParameterError):
        DeletionFilter(mode="word")


def test_seeds_reproducible_and_checked():
    pair = PAIRS[1]
    for exact in (False, True):
        a = run("DP-MemView (on)", pair, "M", 2, exact=exact)
        b = run("DP-MemView (on)", pair, "M", 2, exact=exact)
        assert [t.views for t in a] == [t.views for t in b]
    many = {tuple(t.views for t in run("DP-MemView (on)", pair, "M", s)) for s in range(6)}
    assert len(many) > 1
    with pytest.raises(ParameterError, match="EM seed"):
        run("DP-MemView (on)", pair, "M", -1)
    with pytest.raises(ParameterError, match="deterministic"):
        run("RawReadSet", pair, "M", 0)
    with pytest.raises(ParameterError, match="turns"):
        make_interface("RawReadSet").run(pair, BENCH.policy(pair), "M", -1, turns=40)
    with pytest.raises(BudgetError, match="K must be"):
        make_interface("DP-MemView (on)", K=0)
    with pytest.raises(ParameterError):
        make_interface("DP-MemView (pre)", plan_horizon=0)


def test_memview_interface_uses_memview_release_path():
    """Same seed, same store: the interface's releases equal MemView.release called directly."""
    pair = PAIRS[0]
    iface = make_interface("DP-MemView (on)", exact=True)
    out = iface.run(pair, BENCH.policy(pair), "M'", 1)
    mv = iface.memview(pair, BENCH.policy(pair), "M'", 1)
    assert isinstance(mv, MemView)
    hist = []
    for t, tc in zip(pair.turns, out):
        rel = mv.release(t.query, hist)
        hist.append(rel)
        assert rel == tc.release
    assert json.loads(json.dumps(out[0].released))["ledger"]


def test_generic_only_is_the_generic_view():
    pair = PAIRS[0]
    policy = BENCH.policy(pair)
    for t, tc in zip(pair.turns, run("GenericOnly", pair, "M")):
        assert tc.views == tuple(policy.slot(g).generic.id for g in policy.route(t.query))
    assert isinstance(PAIRS[0].turns[0].query, Query)


def _real_pairs(n_plain=2, n_overlap=2):
    try:
        from dpmv_lib.bench.datasets import load_benchmark
        bench = load_benchmark("pairedmem")
    except Exception as exc:  # noqa: BLE001 - the frozen data is built by notebook 01
        pytest.skip(f"PairedMem data not available: {exc}")
    plain = [p for p in bench.pairs if not p.overlap][:n_plain]
    over = [p for p in bench.pairs if p.overlap][:n_overlap]
    return bench, plain + over


def test_defining_properties_on_pairedmem_pairs():
    bench, pairs = _real_pairs()
    for pair in pairs:
        policy = bench.policy(pair)
        for m in ("GenericOnly", "TypedMask"):
            a = make_interface(m).run(pair, policy, "M")
            b = make_interface(m).run(pair, policy, "M'")
            assert [t.conditioning for t in a] == [t.conditioning for t in b]
        raw = make_interface("RawReadSet")
        assert ([t.conditioning for t in raw.run(pair, policy, "M")]
                != [t.conditioning for t in raw.run(pair, policy, "M'")])
        reads = {q: set() for q in ("target", "neutral", "distractor")}
        for t in pair.turns:
            for g in policy.route(t.query):
                reads[t.query.qtype].update(policy.read(t.query, g))
        distractor_only = reads["distractor"] - reads["target"] - reads["neutral"]
        for tc in make_interface("TaskMin").run(pair, policy, "M"):
            assert not set(tc.items) & distractor_only
        memory = [x for x in list(pair.m.contents.values()) + list(pair.m_prime.contents.values()) if x]
        for tc in make_interface("DP-MemView (on)").run(pair, policy, "M", 0):
            assert lines(tc.conditioning) == [policy.view(v).text for v in tc.views]
            assert not any(x in tc.conditioning for x in memory)
    over = [p for p in pairs if p.overlap]
    gaps = []
    for pair in over:
        for seed in (0, 1, 2):
            rel = [t.release for t in make_interface("IncompleteCharge").run(pair, bench.policy(pair), "M", seed)]
            gaps.append(reconstructed_bound(rel, pair.attribute) - reported_ledger(rel, pair.attribute))
            assert reported_ledger(rel, pair.attribute) <= 2
    assert over and max(gaps) > 0


def test_make_interface_default_seed():
    pair = PAIRS[0]
    a = make_interface("DP-MemView (on)", seed=3).run(pair, BENCH.policy(pair), "M")
    b = make_interface("DP-MemView (on)").run(pair, BENCH.policy(pair), "M", 3)
    assert [t.views for t in a] == [t.views for t in b]
    with pytest.raises(ParameterError, match="EM seed"):
        make_interface("DP-MemView (on)").run(pair, BENCH.policy(pair), "M")
    with pytest.raises(ParameterError, match="deterministic"):
        make_interface("RawReadSet", seed=1)
    with pytest.raises(ParameterError, match="EM seed"):
        make_interface("NoCap", seed=-1)
    assert make_interface("CappedArgmax", seed=-1).run(pair, BENCH.policy(pair), "M")[0].views
