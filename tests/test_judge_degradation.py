"""Issue 12 section 3: the rubric judge on a labelled degradation set (tests/data/judge_degradation.jsonl,
built by dpmv_lib.experiments.judge_degradation from the surrogate's answers to PairedMem target queries).
Each variant must score strictly lower than its original on the dimensions it is meant to lower."""
from __future__ import annotations

import pytest

from dpmv_lib.evaluate.encoders import get_encoder
from dpmv_lib.evaluate.rubric_judge import RubricJudge, is_truncated, leads_with_negation, soft_grade
from dpmv_lib.experiments.judge_degradation import (DEFAULT_SET, INTENDED, VARIANTS, build_degradation_set, evaluate_judge,
                                        load_jsonl, reverse_advice)

# (variant, dimension) rows below 0.9 with the lexical hashing encoder (smoke profile only): it sees
# no topic beyond shared words, so an answer about another topic that shares frame words ties.
HASHING_BELOW = {("off_topic", "relevance"), ("off_topic", "personalisation")}


@pytest.fixture(scope="module")
def records():
    return load_jsonl(DEFAULT_SET)


def test_committed_set_is_what_the_builder_makes(records):
    assert build_degradation_set() == records
    assert len(records) == 80 and {r["side"] for r in records} == {"M", "M'"}
    m = [r for r in records if r["side"] == "M"]
    assert all(set(r["variants"]) == set(VARIANTS) - {"over_personal"} for r in m)
    assert all(set(r["variants"]) == {"over_personal"} for r in records if r["side"] == "M'")
    assert all(r["variants"]["over_personal"].split(". ")[1].startswith("Since you mentioned ")
               for r in records if r["side"] == "M'")


def test_variant_rules():
    assert reverse_advice("The key point: prefer low-sugar meals.") == "The key point: avoid low-sugar meals."
    assert reverse_advice("Book early.") == "Do not book early."
    assert is_truncated("Keep meals regular and") and not is_truncated("Keep meals regular.")
    assert leads_with_negation("The key point: avoid sugary drinks.") and leads_with_negation("Don't skip lunch.")
    assert not leads_with_negation("I'd assume a strict budget: essentials first, avoid new credit.")
    assert soft_grade(0.3, (0.3, 0.4, 0.5, 0.6)) == 1.0 and soft_grade(0.7, (0.3, 0.4, 0.5, 0.6)) == 4.0
    assert soft_grade(0.35, (0.3, 0.4, 0.5, 0.6)) == pytest.approx(1.5)   # linear between grades 1 and 2


@pytest.mark.parametrize("spec", ["minilm", "hashing"])
def test_rubric_judge_ranks_degradations_lower(records, spec):
    """Default judge (MiniLM): every intended (variant, dimension) row >= 0.9; hashing (smoke):
    the same except :data:`HASHING_BELOW`. Every intended mean gap is positive."""
    rep = evaluate_judge(RubricJudge(get_encoder(spec)), records)
    s = rep.intended().set_index(["variant", "dimension"])
    assert len(s) == sum(len(v) for v in INTENDED.values())
    exempt = HASHING_BELOW if spec == "hashing" else set()
    for key, row in s.iterrows():
        assert row["n"] == 40
        assert row["mean_gap"] > 0, (key, row)
        if key not in exempt:
            assert row["accuracy"] >= 0.9, (key, row)
    assert not rep.scores["failed"].any()
