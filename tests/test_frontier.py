"""The DP utility frontier (dpmv_lib.checks.frontier), the attribute-decision interface
(dpmv_lib.core.attribute_decision) under the exact Theorem 1 checks, its over-spending copies, the
exact interface rows and the frontier report."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from dpmv_lib.checks import frontier as fr
from dpmv_lib.checks.instances import random_case, tight_em_case
from dpmv_lib.checks.variants import MonotoneUtility
from dpmv_lib.core.attribute_decision import AttributeDecisionMemView, decision_epsilons, slot_links
from dpmv_lib.core.errors import ParameterError
from dpmv_lib.core.exact import fixed_strategy, log_privacy_loss, transcript_log_distribution
from dpmv_lib.core.ledger import OnlineBudget
from dpmv_lib.core.memview import MemView

REL = 1e-9
B_AS = (1.0, 2.0, 4.0, 8.0)


# ---- the frontier ------------------------------------------------------------------------------
@pytest.mark.parametrize("b", [0.5, 1.0, 2.0, 4.0, 8.0])
@pytest.mark.parametrize("q", [0.0, 0.03, 0.094, 0.119, 0.3, 0.5, 0.8, 1.0])
def test_closed_form_equals_lp_over_an_event(b, q):
    """An event of a 5-output law (outputs 0, 1 in E): the LP optimum is the closed form."""
    lp = fr.frontier_lp(q, b, [1, 1, 0, 0, 0])
    assert lp == pytest.approx(fr.frontier_rate(q, b), abs=1e-7)


@pytest.mark.parametrize("b", B_AS)
@pytest.mark.parametrize("q", [0.05, 0.094, 0.2, 0.6])
def test_closed_form_equals_brute_force_lp_over_transcripts(b, q):
    """Every law on the 2^3 transcripts of a 3-turn binary interface, the statistic the share of
    target turns (an average of events, not an event): the LP optimum is still the closed form."""
    lp = fr.frontier_lp(q, b, fr.transcript_rate_values(3))
    assert lp == pytest.approx(fr.frontier_rate(q, b), abs=1e-7)


def test_a_bound_below_the_frontier_would_be_caught():
    """The LP is not just echoing the closed form: e^B q alone (without the complement) is wrong."""
    b, q = 2.0, 0.3
    assert math.exp(b) * q > 1 and fr.frontier_lp(q, b, [1, 0]) < math.exp(b) * q
    assert fr.frontier_lp(q, 0.0, [1, 0]) == pytest.approx(q)  # B = 0: no separation at all


@pytest.mark.parametrize("b", B_AS)
def test_randomised_response_sits_on_the_frontier(b):
    p, q = fr.randomised_response(b)
    assert fr.distance(q, p, b) == pytest.approx(0.0, abs=1e-12)
    qs, sep = fr.max_separation(b)
    assert q == pytest.approx(qs) and p - q == pytest.approx(sep) == pytest.approx(math.tanh(b / 2))
    assert fr.distance(q, fr.randomised_response(b / 2)[0], b) > 0.01   # weaker RR: strictly below


def test_frontier_bad_inputs():
    with pytest.raises(ParameterError, match=r"\[0, 1\]"):
        fr.frontier_rate(1.2, 2)
    with pytest.raises(ParameterError, match="B_a"):
        fr.frontier_rate(0.2, -1)
    with pytest.raises(ParameterError, match="values"):
        fr.frontier_lp(0.2, 2, [])
    with pytest.raises(ParameterError, match="M-side"):
        fr.distance(0.2, 1.5, 2)
    assert math.isnan(fr.frontier_lp(0.5, 2, [0, 0]))  # q unreachable by a statistic that is always 0


# ---- the attribute-decision interface: exact Theorem 1 checks -----------------------------------
def max_loss(make, m, mp, strategy, horizon):
    return log_privacy_loss(transcript_log_distribution(make, m, strategy, horizon),
                            transcript_log_distribution(make, mp, strategy, horizon))


def assert_pure_dp(make, m, mp, strategy, horizon, bound):
    """Every transcript: |log P_M - log P_M'| <= B_a, both laws sum to 1, L_a <= B_a on every path."""
    dm = transcript_log_distribution(make, m, strategy, horizon)
    dmp = transcript_log_distribution(make, mp, strategy, horizon)
    assert math.fsum(map(math.exp, dm.values())) == pytest.approx(1.0, abs=1e-9)
    assert math.fsum(map(math.exp, dmp.values())) == pytest.approx(1.0, abs=1e-9)
    caps = make(m).policy.caps
    for t in set(dm) | set(dmp):
        a, b = dm.get(t, -math.inf), dmp.get(t, -math.inf)
        assert a > -math.inf and b > -math.inf, f"one-sided transcript {t}"
        assert abs(a - b) <= float(bound) * (1 + REL), f"loss {abs(a - b)} > {bound}"
        for rel in t:
            assert all(rel.spent[x] <= c for x, c in caps.items())
    return log_privacy_loss(dm, dmp).max_loss


@pytest.mark.parametrize("adaptive_policy", [False, True], ids=["table-router", "adaptive-router"])
@pytest.mark.parametrize("seed", range(16))
def test_attribute_decision_is_pure_dp_on_random_instances(seed, adaptive_policy):
    case = random_case(seed, adaptive=adaptive_policy, levels=1 if seed % 2 else 4)
    for kind in ("fixed", "adaptive"):
        assert_pure_dp(case.factory(AttributeDecisionMemView), case.m, case.m_prime, case.strategy(kind),
                       case.horizon, case.bound)


def test_attribute_decision_random_instances_are_not_vacuous():
    losses = [max_loss(random_case(s).factory(AttributeDecisionMemView), random_case(s).m, random_case(s).m_prime,
                       random_case(s).strategy("fixed"), random_case(s).horizon).max_loss for s in range(16)]
    assert sum(x > 0.05 for x in losses) >= 6


def test_attribute_decision_reaches_the_cap_exactly_when_the_score_flips():
    """tight_em_case: the score is 1 on M and 0 on M' -> randomised response at eps = B_a, whose
    loss is exactly B_a (on the frontier, not above it)."""
    case = tight_em_case(n_views=4)
    loss = assert_pure_dp(case.factory(AttributeDecisionMemView), case.m, case.m_prime, case.strategy("fixed"),
                          1, case.bound)
    assert loss == pytest.approx(float(case.bound), rel=1e-12)


def test_running_example_both_attributes(running):
    policy, m, m_d, m_b = running
    from dpmv_lib.experiments.diagnostics import running_adaptive_strategy, running_queries
    qs = running_queries(3)
    for mp, attr in ((m_d, "diabetes"), (m_b, "debt")):
        for strategy in (fixed_strategy(qs), running_adaptive_strategy):
            assert_pure_dp(lambda s: AttributeDecisionMemView(policy, s, seed=0), m, mp, strategy, 3,
                           policy.attribute(attr).cap)


def test_decision_epsilons_never_exceed_the_caps():
    for s in range(16):
        pol = random_case(s).policy
        links = {v: frozenset(a) for v, a in slot_links(pol).items()}
        eps = decision_epsilons(pol, links)
        for b in pol.attribute_names:
            spent = sum(e for a, e in eps.items() if b in pol.charge_set(tuple(sorted(pol.attribute(a).group))))
            assert spent <= pol.attribute(b).cap


# ---- deliberately over-spending copies: the exact checks catch them -----------------------------
class ForgetfulDecision(AttributeDecisionMemView):
    """OVER-SPENDS: forgets its earlier decisions and skips the cap check (draws anew every time)."""

    def decisions(self, history):
        return {}

    def admit(self, charged, epsilon):
        self.ledger.charge_unchecked(charged, epsilon)
        return True


class DoubleEpsDecision(AttributeDecisionMemView):
    """OVER-SPENDS: samples each decision at twice the eps its ledger charge records."""

    def decision_epsilon(self, prepared):
        return 2 * prepared.epsilon


@pytest.mark.parametrize("bad", [ForgetfulDecision, DoubleEpsDecision])
def test_over_spending_copies_fail_the_exact_check(bad):
    case = tight_em_case(n_views=4)
    q = case.queries[0]
    horizon = 3 if bad is ForgetfulDecision else 1
    strategy = fixed_strategy((q,) * horizon)
    good = max_loss(case.factory(AttributeDecisionMemView), case.m, case.m_prime, strategy, horizon).max_loss
    worse = max_loss(case.factory(bad), case.m, case.m_prime, strategy, horizon).max_loss
    assert good <= float(case.bound) * (1 + REL)
    assert worse > float(case.bound) * 1.5
    with pytest.raises(AssertionError):
        assert_pure_dp(case.factory(bad), case.m, case.m_prime, strategy, horizon, case.bound)


def test_monotone_utility_is_ruled_out_by_the_exact_checker():
    """The move 'eps / Du instead of eps / (2 Du)' needs a monotone utility; the paper's scorer
    and the tight instance are not monotone, and the exact checker finds a loss above B_a."""
    case = tight_em_case(n_views=6)
    make = case.factory(MonotoneUtility, budget=OnlineBudget(1))
    loss = max_loss(make, case.m, case.m_prime, case.strategy("fixed"), 1).max_loss
    assert loss > float(case.bound) * 1.2
    ok = max_loss(case.factory(MemView, budget=OnlineBudget(1)), case.m, case.m_prime, case.strategy("fixed"), 1)
    assert ok.max_loss <= float(case.bound) * (1 + REL)


def test_bad_links_are_refused():
    case = random_case(0)
    with pytest.raises(Exception, match="links"):
        AttributeDecisionMemView(case.policy, case.m, links=["x"])  # type: ignore[arg-type]
    with pytest.raises(Exception, match="links"):
        AttributeDecisionMemView(case.policy, case.m, links={"v": "a"})


# ---- benchmark pairs, exact rows, RQ1 pipeline ----------------------------------------------------
@pytest.fixture(scope="module")
def links():
    from dpmv_lib.bench.datasets import load_gold_rules
    from dpmv_lib.common.paths import project_root
    return load_gold_rules(project_root() / "data")["view_links"]


def test_every_benchmark_pair_stays_within_the_cap(pairedmem_bench, links):
    """Exact enumeration of every transcript of 16 turns on every PairedMem pair at B_a = 2."""
    from dpmv_lib.experiments.interface_rows import decision_pairs, summarise
    per = decision_pairs(pairedmem_bench, list(pairedmem_bench.pairs), (2.0,), links=links, workers=1)
    assert len(per) == len(pairedmem_bench.pairs)
    assert (per["max_loss"] <= 2.0 * (1 + REL)).all()
    row = summarise(per).iloc[0]
    assert row["within_cap"] and row["difference"] >= 0.2


def test_decision_pair_rates_are_probabilities_and_move_with_the_cap(pairedmem_bench, links):
    from dpmv_lib.experiments.interface_rows import decision_pair
    pair = pairedmem_bench.pairs[0]
    rows = [decision_pair(pairedmem_bench.policy(pair), pair, b, links=links) for b in B_AS]
    for r, b in zip(rows, B_AS):
        assert 0 <= r["target_rate_Mp"] <= r["target_rate_M"] <= 1 and r["max_loss"] <= b * (1 + REL)
    diffs = [r["target_rate_M"] - r["target_rate_Mp"] for r in rows]
    assert diffs == sorted(diffs) and diffs[-1] > diffs[0]


def test_monotone_variant_at_b_equals_eq7_at_2b(pairedmem_bench, links):
    """eps u / Du at B_a equals Eq. (7)'s eps u / (2 Du) at 2 B_a, exactly (same eps per charge)."""
    from dpmv_lib.experiments.interface_rows import variant_pair
    pair = pairedmem_bench.pairs[3]
    pol = pairedmem_bench.policy(pair)
    a = variant_pair(pol, pair, 2, 3, MonotoneUtility, links=links)
    b = variant_pair(pol, pair, 4, 3, MemView, links=links)
    assert a["target_rate_M"] == pytest.approx(b["target_rate_M"], abs=1e-12)
    assert a["target_rate_Mp"] == pytest.approx(b["target_rate_Mp"], abs=1e-12)


def test_make_interface_runs_through_generation_and_the_exact_oracle(pairedmem_bench):
    from dpmv_lib.evaluate.oracle import pair_results
    from dpmv_lib.experiments.rq1 import select_pairs
    from dpmv_lib.generate.generation import generate_transcripts
    from dpmv_lib.generate.interfaces import ATTRIBUTE_DECISION, make_interface
    from dpmv_lib.generate.responders.surrogate import SurrogateResponder
    small = select_pairs(pairedmem_bench, 8, 0)
    iface = make_interface(ATTRIBUTE_DECISION, B_a=2, seed=0)
    turns = iface.run(small.pairs[0], small.policy(small.pairs[0]), "M")
    assert len(turns) == len(small.pairs[0].turns)
    assert any(s["mechanism"] == "decision" for tc in turns for s in tc.released["slots"])
    df = generate_transcripts(small, SurrogateResponder.from_benchmark(small), [ATTRIBUTE_DECISION], seeds=(0, 1),
                              turns=16, progress=False)
    pp = pair_results(df, 16)
    assert len(pp) == 2 * len(small.pairs)
    assert (pp["max_loss"] <= 2.0 * (1 + 1e-6)).all() and pp["max_loss"].max() > 0.5
    # the oracle's loss (decisions convolved, reuses skipped) equals exact enumeration, pair by pair
    from dpmv_lib.bench.datasets import load_gold_rules
    from dpmv_lib.common.paths import project_root
    from dpmv_lib.experiments.interface_rows import decision_pair
    links = load_gold_rules(project_root() / "data")["view_links"]
    for pair in small.pairs:
        exact = decision_pair(small.policy(pair), pair, 2, links=links)["max_loss"]
        got = pp.loc[pp["pair_id"] == pair.pair_id, "max_loss"]
        assert np.allclose(got, exact, atol=1e-6), (pair.pair_id, list(got), exact)


# ---- grid rows, attribution, report -----------------------------------------------------------------
def _grid():
    rows = []
    for mode in ("on", "pre"):
        for b in B_AS:
            rows.append({"mode": mode, "b_a": b, "k": 3, "T": 16, "target_rate_M": 0.1 + b / 100,
                         "target_rate_Mp": 0.09, "max_loss": b / 3, "n_pairs": 5})
    return pd.DataFrame(rows)


def test_grid_rows_and_report_distances():
    from dpmv_lib.experiments import utility_frontier as uf
    from dpmv_lib.experiments.interface_rows import grid_rows
    g = grid_rows(_grid())
    assert list(g["interface"].unique()) == ["DP-MemView (on)", "DP-MemView (pre)"] and len(g) == 8
    t3 = pd.DataFrame({"b_a": [2.0], "k": [3], "trec": [0.5], "unsup": [0.1]})
    rep = uf.report(_grid(), paper_table3=t3, measured=t3.assign(method="DP-MemView (on)"))
    row = rep.table[(rep.table["interface"] == "DP-MemView (on)") & (rep.table["b_a"] == 2.0)
                    & (rep.table["statistic"] == uf.EXACT)].iloc[0]
    assert row["distance"] == pytest.approx(min(math.exp(2) * 0.09, 1 - math.exp(-2) * 0.91) - 0.12)
    assert "tanh(B_a/2) = 0.762" in rep.markdown and "0.120 on M" in rep.markdown
    assert "<img" in rep._repr_html_()
    with pytest.raises(ParameterError, match="trec"):
        uf.points(paper_table3=pd.DataFrame({"b_a": [1]}))


def test_attribution_rows_label_contract_breaks(pairedmem_bench, links):
    from dpmv_lib.experiments.interface_rows import ATTRIBUTION, attribution
    pairs = [p for p in pairedmem_bench.pairs if p.split == "test"][:3]
    res = attribution(pairedmem_bench, pairs, links=links, workers=1)
    t = res.table
    assert len(t) == len(ATTRIBUTION) + 1
    assert set(t["contract"]) == {"keeps the contract", "BREAKS C2", "BREAKS C3 (the scorer is not monotone)",
                                  "BREAKS C5"}
    kept = t[t["contract"] == "keeps the contract"]
    assert (kept["max_loss"] <= 2.0 * (1 + REL)).all()
    assert np.allclose(t["frontier_gap"], [fr.distance(q, p, 2.0) for q, p in zip(t["target_rate_Mp"],
                                                                                  t["target_rate_M"])])


def test_release_samples_the_exact_decision_law():
    """The deployment path (release(), exact sampler) draws z_a = 1 as often as outcomes() says."""
    from scipy.stats import binomtest
    case = tight_em_case(n_views=4)
    q = case.queries[0]
    mv = AttributeDecisionMemView(case.policy, case.m, scorer=case.scorer, seed=0)
    p = mv.outcomes(mv.fork().prepare(q, "g"))[0][1]
    n = 1500
    hits = sum(AttributeDecisionMemView(case.policy, case.m, scorer=case.scorer, seed=s).release(q).slots[0].view
               != "g.generic" for s in range(n))
    assert 0.5 < p < 1 and binomtest(hits, n, p).pvalue > 1e-3
    second = mv.release(q, (mv.release(q),))       # the decision is public now: reused, nothing charged
    assert second.slots[0].mechanism == "reuse" and second.spent == mv.ledger.spent()
