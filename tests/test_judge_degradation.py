"""The rubric judge on a labelled degradation set (tests/data/judge_degradation.jsonl,
built by dpmv_lib.experiments.judge_degradation from the surrogate's answers to PairedMem target queries,
with variants that mirror none of the judge's rules). The variants the judge detects must score
strictly lower than their original on the dimensions they are meant to lower; the ones it does not
detect (plain wrong advice, another user's personalisation: correctness) are strict xfails, so a
judge that starts to detect them turns them into failures to be recorded."""
from __future__ import annotations

import pytest

from dpmv_lib.common.io import read_jsonl, write_jsonl
from dpmv_lib.evaluate.encoders import get_encoder
from dpmv_lib.experiments.profiles import get_profile
from dpmv_lib.evaluate.rubric_judge import RubricJudge, is_truncated, leads_with_negation, soft_grade
from dpmv_lib.experiments.judge_degradation import (DEFAULT_SET, INTENDED, VARIANTS, WRONG_ADVICE,
                                                    build_degradation_set, evaluate_judge)

# (variant, dimension) rows below 0.9 with the lexical hashing encoder (smoke profile only): it sees
# no topic beyond shared words, so an answer about another topic that shares frame words ties.
HASHING_BELOW = {("off_topic", "relevance"), ("off_topic", "personalisation")}
# rows the judge does not detect (its correctness rules look for negations, template slots, truncation
# and unsupported claims; naturally worded wrong advice and another user's facts pass them)
# (rubric-v5's fitted correctness detects the wrong advice: 0.975 of items; the rules of rubric-v4,
# which the hashing judge keeps, do not)
UNDETECTED = {("other_user", "correctness"), ("other_user", "personalisation")}
V4_UNDETECTED = UNDETECTED | {("wrong_advice", "correctness")}


# rows of the default judge (rubric-v5 on the default profile's MiniLM: holistic scores fitted on half
# of data/judge_labels) below 0.9, with the accuracy each still reaches. Relevance reads only query
# similarity and form, so some answers written for another query tie or win (measured: off_topic 0.775,
# gap +0.23; other_query 0.875, gap +0.46; the rule judge of rubric-v4 reached 1.00 and 0.925).
# Personalisation follows the labelling guide ("scored on what the response does, whether or not that
# personalisation is justified"): an answer to another item that uses the user's facts is still
# personalised, so off_topic need not lower it (measured 0.275, gap -0.20).
V5_BELOW = {("off_topic", "relevance"): 0.75, ("other_query", "relevance"): 0.85}
V5_NOT_INTENDED = {("off_topic", "personalisation")}
DEFAULT_ENCODER = get_profile("default").encoder


@pytest.fixture(scope="module")
def records():
    return read_jsonl(DEFAULT_SET)


def test_committed_set_is_written_by_the_one_jsonl_writer(records, tmp_path):
    """tests/data/judge_degradation.jsonl is byte for byte what dpmv_lib.common.io.write_jsonl makes."""
    assert write_jsonl(tmp_path / "set.jsonl", records) == len(records)
    assert (tmp_path / "set.jsonl").read_bytes() == DEFAULT_SET.read_bytes()


def test_committed_set_is_what_the_builder_makes(records):
    assert build_degradation_set() == records
    assert len(records) == 80 and {r["side"] for r in records} == {"M", "M'"}
    m = [r for r in records if r["side"] == "M"]
    assert all(set(r["variants"]) == set(VARIANTS) for r in m)
    assert all(set(r["variants"]) == {"other_user"} for r in records if r["side"] == "M'")
    for r in records:   # another user's memory changed the answer, and it is not this user's answer
        assert r["variants"]["other_user"] != r["original"]
    for r in m:         # no variant is built by a rule the judge has
        for v in r["variants"].values():
            assert "[insert" not in v and "{" not in v and v.rstrip()[-1] in ".!?"
        assert any(w in r["variants"]["wrong_advice"] for w in WRONG_ADVICE[r["attribute"]])
    written = [w for ws in WRONG_ADVICE.values() for w in ws]
    assert not any(leads_with_negation(w) or "mentioned" in w for w in written)


def test_judge_helpers():
    assert is_truncated("Keep meals regular and") and not is_truncated("Keep meals regular.")
    assert leads_with_negation("The key point: avoid sugary drinks.") and leads_with_negation("Don't skip lunch.")
    assert not leads_with_negation("I'd assume a strict budget: essentials first, avoid new credit.")
    assert soft_grade(0.3, (0.3, 0.4, 0.5, 0.6)) == 1.0 and soft_grade(0.7, (0.3, 0.4, 0.5, 0.6)) == 4.0
    assert soft_grade(0.35, (0.3, 0.4, 0.5, 0.6)) == pytest.approx(1.5)   # linear between grades 1 and 2


@pytest.mark.parametrize("spec", [DEFAULT_ENCODER, "hashing"])
def test_rubric_judge_ranks_detected_degradations_lower(records, spec):
    """Default judge (the default profile's MiniLM, rubric-v5): every intended (variant, dimension)
    row it detects >= 0.9 with a positive mean gap, except :data:`V5_BELOW` (its own floor) and :data:`V5_NOT_INTENDED`;
    hashing (smoke, rubric-v4): the same except :data:`HASHING_BELOW` (positive gap only)."""
    judge = RubricJudge(get_encoder(spec))
    assert (judge.holistic is not None) == (spec == DEFAULT_ENCODER)
    rep = evaluate_judge(judge, records)
    s = rep.intended().set_index(["variant", "dimension"])
    assert len(s) == sum(len(v) for v in INTENDED.values())
    not_intended = V5_NOT_INTENDED if spec == DEFAULT_ENCODER else V4_UNDETECTED
    below = V5_BELOW if spec == DEFAULT_ENCODER else dict.fromkeys(HASHING_BELOW, 0.0)
    for key, row in s.iterrows():
        assert row["n"] == (80 if key[0] == "other_user" else 40)
        if key in UNDETECTED | not_intended:   # UNDETECTED: the strict xfails below
            continue
        assert row["mean_gap"] > 0, (key, row)
        assert row["accuracy"] >= below.get(key, 0.9), (key, row)
    assert not rep.scores["failed"].any()


@pytest.mark.xfail(strict=True, reason="the rubric judge does not lower correctness or personalisation for "
                                       "another user's facts (notebook 03)")
@pytest.mark.parametrize("key", sorted(UNDETECTED))
def test_rubric_judge_detects_other_users_facts(records, key):
    rep = evaluate_judge(RubricJudge(get_encoder(DEFAULT_ENCODER)), records)
    assert rep.intended().set_index(["variant", "dimension"]).loc[key, "accuracy"] >= 0.9
