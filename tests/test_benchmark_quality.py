"""The benchmark's quality goals on the committed PairedMem data (dpmv_lib.bench.benchmark_quality): the measured
figures, and that each check detects the artefact it is about."""
from __future__ import annotations

import dataclasses
from collections import Counter
from fractions import Fraction

import pytest

from dpmv_lib.bench import benchmark_quality as bq
from dpmv_lib.bench import lexicon


@pytest.fixture(scope="module")
def bench(pairedmem_bench):
    return pairedmem_bench


# ---- goal 1: charge structure (Table 4) ---------------------------------------------------------
def test_nocap_bound_is_16_over_3_and_c_a_is_8_on_every_pair(bench):
    rows = bq.charge_structure(bench.pairs, bench.policy, horizon=16)
    assert len(rows) == 320
    for r in rows:
        assert r["target_turns"] == 8 and r["neutral_reading_I_a"] == 0 and r["distractor_reading_I_a"] == 0, r
        assert r["NoCap_bound"] == Fraction(16, 3), r           # 8 charged selections x B_a / K = 2/3
        assert r["NoCap_ledger"] == Fraction(16, 3), r
        assert r["C_a"] == 8, r                                  # preallocated eps = B_a / C_a = 1/4
        # IncompleteCharge: the ledger never passes B_a = 2, the reconstructed bound may
        assert r["IncompleteCharge_ledger"] <= 2 and r["IncompleteCharge_bound"] >= r["IncompleteCharge_ledger"]
        assert r["IncompleteCharge_bound"] <= Fraction(16, 3)
    s = bq.charge_summary(rows)
    assert s["IncompleteCharge_bound"]["max"] > 2, s             # the C2 violation is visible
    # the IncompleteCharge figures quoted in data/README.md
    dist = Counter(r["IncompleteCharge_bound"] for r in rows)
    assert [dist[Fraction(k, 3)] for k in range(2, 17, 2)] == [5, 26, 71, 77, 73, 37, 28, 3]
    assert sum(r["IncompleteCharge_ledger"] == 0 for r in rows) == 246
    assert sum(r["IncompleteCharge_bound"] > 2 for r in rows) == 218


def test_charge_structure_counts_a_neutral_turn_that_reads_the_group(bench):
    p = bench.pairs[0]
    pol = bench.policy(p)
    t_target = next(t for t in p.turns[:16] if t.query.qtype == "target")
    i = next(k for k, t in enumerate(p.turns[:16]) if t.query.qtype == "neutral")
    bad = dataclasses.replace(p.turns[i], query=dataclasses.replace(t_target.query, qtype="neutral"),
                              slot=t_target.slot)
    turns = list(p.turns)
    turns[i] = bad
    r = bq.charge_structure([dataclasses.replace(p, turns=tuple(turns))], lambda _p: pol)[0]
    assert r["neutral_reading_I_a"] == 1 and r["NoCap_bound"] == Fraction(18, 3) and r["C_a"] == 9


# ---- goal 2: split leakage ------------------------------------------------------------------------
def test_sentence_core_strips_frames_and_pronouns():
    assert bq.sentence_core("Something to keep in mind: my A1C is high.") == "my a1c is high"
    assert bq.sentence_core("User shared that their A1C is high.") == "my a1c is high"
    assert bq.sentence_core("Memory: they're twenty weeks pregnant.") == "i'm twenty weeks pregnant"
    assert bq.sentence_core("FYI, I owe $9,800 on my cards.") == "i owe $9,800 on my cards"


def test_no_test_or_validation_evidence_core_occurs_in_train(bench):
    r = bq.split_leakage(bench.pairs)
    for s in ("validation", "test"):
        assert r[s]["evidence_cores"] >= 100, r
        assert r[s]["evidence_cores_in_train"] == 0, r
        assert r[s]["background_cores_in_train"] == 0, r
    assert r["validation_test_evidence_shared"] == 0
    # the check can fail: move one test pair into train
    pairs = list(bench.pairs)
    k = next(i for i, p in enumerate(pairs) if p.split == "test")
    pairs.append(dataclasses.replace(pairs[k], split="train"))
    assert bq.split_leakage(pairs)["test"]["evidence_cores_in_train"] >= 1


# ---- goal 3: templating volume -------------------------------------------------------------------
def test_templating_volume(bench):
    r = bq.templating(bench.pairs)
    assert r["query_turns"] == 10240
    assert r["distinct_query_strings"] >= 2000 and r["query_max_use"] <= 10, r
    assert all(n >= 250 for n in r["evidence_cores_per_attribute"].values()), r
    assert set(r["evidence_cores_per_attribute"]) == set(lexicon.ATTRIBUTES)
    assert r["memory_sentences"] == 320 * 28 * 2
    assert r["top_5gram_share"] <= 0.01, r
    assert bq.ngram_shares(bench.pairs, k=1)[0][1] == r["top_5gram_share"]


# ---- goal 4: artefacts ------------------------------------------------------------------------------
def test_length_only_classifier_is_at_chance(bench):
    r = bq.length_auc(bench.pairs)
    assert set(r) == set(lexicon.ATTRIBUTES)
    for a, v in r.items():
        assert 0.45 <= v["auc"] <= 0.55, (a, v)
        assert 0.45 <= v["m_longer_rate"] <= 0.55, (a, v)
    assert bq.auc([2, 3], [0, 1]) == 1.0 and bq.auc([1], [1]) == 0.5


def test_no_counter_evidence_number_transform_or_label_mismatch(bench):
    ce = bq.counter_evidence(bench.pairs)
    assert ce["mprime_sentences_with_counter_evidence"] == 0, ce["examples"]
    nt = bq.number_transforms(bench.pairs)
    assert nt["scaled_positions_total"] == 0 and nt["deterministic_attributes"] == [], nt
    lab = bq.label_mismatches(bench.pairs, bench.policy)
    assert lab["evidence_sentences"] == sum(2 * len(p.meta["evidence_positions"]) for p in bench.pairs)
    assert lab["evidence_label_mismatches"] == 0 and lab["other_label_mismatches"] == 0, lab["examples"]


def test_artefact_checks_detect_the_v1_artefacts(bench):
    p = next(p for p in bench.pairs if p.attribute == "debt")
    i = p.meta["evidence_positions"][0]
    m = p.m.replace({i: "I owe about $24,000 across five credit cards."})
    mp = p.m_prime.replace({i: "My credit cards are paid off and I pay about $240 a month."})
    bad = dataclasses.replace(p, m=m, m_prime=mp)
    assert bq.counter_evidence([bad])["mprime_sentences_with_counter_evidence"] == 1
    assert bq.number_transforms([bad])["scaled_positions_total"] == 1
    labels = {pos.id: pos.label for pos in bench.policy(p).positions}
    assert bq.label_mismatches([bad], bench.policy)["evidence_label_mismatches"] >= \
        (not bq.label_fits(m.contents[i], labels[i])) + (not bq.label_fits(mp.contents[i], labels[i]))


def test_gold_removals_follow_the_explicit_rule(bench):
    g = bq.gold_removals(bench.pairs, bench.policy)
    assert g["removed_entries"] > 0 and g["removed_without_evidence_in_read"] == 0, g


def test_quality_table_meets_every_goal(bench):
    from dpmv_lib.experiments import data_report as dr
    t = dr.quality_table(bench.pairs, bench.policy, paper_bounds={"NoCap": "5.33", "IncompleteCharge": "4.0"})
    assert len(t) >= 25 and t["meets goal"].all(), t[~t["meets goal"]].to_dict("records")
    row = t[t["quantity"].str.startswith("NoCap")].iloc[0]
    assert row["ours"] == round(16 / 3, 3) and row["paper"] == "5.33"
