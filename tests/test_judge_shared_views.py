"""The rubric judge grades a response that shows a behaviour alike whichever attributes
share the behaviour's policy view; verbatim restatements of every view grade >= 2; bullet and
numbered lists split into items."""
from __future__ import annotations

import pytest

from dpmv_lib.bench.datasets import load_gold_rules
from dpmv_lib.common.paths import project_root
from dpmv_lib.evaluate.encoders import HashingEncoder, get_encoder
from dpmv_lib.evaluate.rubric import Rubric, RubricItem, contrast_set
from dpmv_lib.evaluate.rubric_judge import RubricJudge, is_truncated, split_sentences

# (view, attribute) items of the smoke data below 0.95 with the lexical hashing encoder only: their
# description shares almost no word with the view text ("Cuts spending" / "cut discretionary
# spending"; "prenatal appointments or scans" / "medical appointments and check-ins"; "earn extra
# income" / "add income"), so even the bare view text grades < 2 or loses to a generic line that
# collides in 512 hashed features. MiniLM (the default judge) has no exemption.
HASHING_LEXICAL = {("finance.strict_budget", "job_loss"), ("schedule.appointment_aware", "pregnancy"),
                   ("work.side_income", "debt")}


@pytest.fixture(scope="module")
def minilm_judge():
    return RubricJudge(get_encoder("minilm"))


@pytest.fixture(scope="module")
def shared_views(pairedmem_bench):
    """view -> (view text, {attribute: req behaviour id}) for every view linked to >= 2 attributes
    with different descriptions (the public gold rules), texts from the policies."""
    rules = load_gold_rules(project_root() / "data")
    texts = {v.id: v.text for pol in pairedmem_bench.policies.values() for s in pol.slots for v in s.views}
    out = {}
    for view, attrs in rules["view_links"].items():
        descs = {b["description"] for b in rules["behaviours"] if b["view"] == view}
        if len(attrs) >= 2 and len(descs) >= 2:
            out[view] = (texts[view], {a: f"req:{a}:{view}" for a in attrs})
    assert {"finance.strict_budget", "food.strict_budget", "health.low_cost_care",
            "schedule.appointment_aware"} <= set(out)
    return out


def _restating(text: str) -> list[str]:
    """Responses that repeat ``text`` word for word: alone, in a neutral reply, as a list item."""
    lc = text[0].lower() + text[1:]
    return [text, f"Happy to help with that. {text} Let me know if you want more detail.",
            f"Here is a simple plan. The key point: {lc} Tell me how it goes and we can refine it.",
            f"A few ideas:\n- {text.rstrip('.')}\n- Keep it simple so it is easy to stick with"]


def _item_grade(judge, bid: str, behaviours, response: str) -> float:
    b = behaviours[bid]
    item = RubricItem(0, bid, b.description, "apply", contrast_set(b, behaviours))
    return judge.judge(Rubric("r", ("What should I do this week?",), (item,)), [response]).items[f"0:{bid}"]


# ---- (a) a shared view grades alike ---------------------------------------------------------------
def test_contrast_never_holds_the_same_views_other_wording(pairedmem_bench, shared_views):
    beh = pairedmem_bench.behaviours
    for view, (_, by_attr) in shared_views.items():
        for a, bid in by_attr.items():
            others = {beh[o].description for x, o in by_attr.items() if x != a}
            assert not others & set(contrast_set(beh[bid], beh)), (view, a)


def test_grade_does_not_depend_on_which_attributes_share_the_view(pairedmem_bench, shared_views):
    """Each attribute's item grades a restatement exactly as it would if no other attribute linked
    to the view (old judge: job loss's low-cost-care item 0 where debt's wording is closer)."""
    judge, beh = RubricJudge(HashingEncoder()), pairedmem_bench.behaviours
    for view, (text, by_attr) in shared_views.items():
        for a, bid in by_attr.items():
            alone = {k: b for k, b in beh.items()
                     if not (k.endswith(f":{view}") and b.attribute != a and b.kind != "generic")}
            for resp in _restating(text):
                assert _item_grade(judge, bid, beh, resp) == _item_grade(judge, bid, alone, resp), (view, a, resp)


@pytest.mark.parametrize("view", ["health.low_cost_care", "food.strict_budget"])
def test_restating_a_shared_view_grades_both_attributes_alike(pairedmem_bench, shared_views, minilm_judge, view):
    """Default judge: the same grade (>= 3) for debt's and job loss's item of one shared view,
    whose two wordings are equally close to the view text."""
    text, by_attr = shared_views[view]
    for resp in _restating(text):
        grades = {a: _item_grade(minilm_judge, bid, pairedmem_bench.behaviours, resp) for a, bid in by_attr.items()}
        assert len(set(grades.values())) == 1 and min(grades.values()) >= 3, (resp, grades)


# ---- (b) verbatim restatements of every view on the smoke data ----------------------------------------
@pytest.mark.parametrize("spec", ["minilm", "hashing"])
def test_restatements_grade_at_least_two_for_every_view_and_attribute(pairedmem_bench, spec):
    from dpmv_lib.evaluate.rubric import build_rubric
    from dpmv_lib.experiments.judge_restatement import PASS_GRADE, restatement_report
    from dpmv_lib.experiments.rq1 import select_pairs

    smoke = select_pairs(pairedmem_bench, 16, 0)          # the smoke profile's pairs
    controls = spec == "hashing"                          # other views' restatements (fast with hashing)
    rep = restatement_report(smoke, RubricJudge(get_encoder(spec)), controls=controls)
    s = rep.summary().set_index(["view", "attribute"])
    want = {(bid.split(":")[2], smoke.behaviours[bid].attribute)
            for p in smoke.pairs for side in ("M", "M'") for i in build_rubric(p, side, smoke.behaviours).items
            for bid in [i.item_id] if smoke.behaviours[bid].kind != "generic"}
    assert set(s.index) == want and s["shared"].any() and (~s["shared"]).any()
    assert (rep.grades["grade"] >= 0).all() and PASS_GRADE == 2
    exempt = HASHING_LEXICAL if spec == "hashing" else set()
    low = s[s["share_ge2"] < 0.95]
    assert set(low.index) <= exempt, low
    if controls:      # the judge still tells views apart: other views' restatements grade low
        other = rep.grades.loc[~rep.grades["own"], "grade"]
        assert len(other) > 5 * len(s) and (other >= PASS_GRADE).mean() <= 0.05


def test_restatement_report_rejects_bad_input(pairedmem_bench):
    from dpmv_lib.core.errors import ParameterError
    from dpmv_lib.experiments.judge_restatement import restatement_report, restatements

    with pytest.raises(ParameterError, match="horizon"):
        restatement_report(pairedmem_bench, RubricJudge(HashingEncoder()), horizon=0)
    with pytest.raises(ParameterError, match="empty"):
        restatements("  ")


# ---- (c) lists and lead-ins ----------------------------------------------------------------------
def test_bullet_and_numbered_lists_split_into_items():
    assert split_sentences("Some ideas:\n- Walk after dinner\n* Keep a snack on hand\n\u2022 Drink water") == \
        ["Some ideas:", "Walk after dinner", "Keep a snack on hand", "Drink water"]
    assert split_sentences("Plan\n1. Cook rice\n2) Add beans\n(3) Serve it warm. Enjoy!") == \
        ["Plan", "Cook rice", "Add beans", "Serve it warm.", "Enjoy!"]
    assert split_sentences("Ideas:\nwalk more\nsleep early") == ["Ideas:", "walk more sleep early"]
    assert split_sentences("Keep meals regular\nand light. Rest.") == ["Keep meals regular and light.", "Rest."]
    assert split_sentences("1.5 cups of rice is plenty. -2 is cold.") == ["1.5 cups of rice is plenty.", "-2 is cold."]
    assert split_sentences("One. Two!  Three? four") == ["One.", "Two!", "Three?", "four"]


def test_a_list_without_full_stops_is_read_like_sentences():
    assert not is_truncated("Ideas:\n- Walk after dinner\n- Keep a snack on hand")
    assert is_truncated("Ideas:\n- Walk after dinner.\n- Keep a snack on") and is_truncated("Keep meals regular and")
    j = RubricJudge(HashingEncoder())
    desc = "Suggests meals that keep blood sugar steady, such as high-fibre, low-sugar options."
    r = Rubric("r", ("What should I cook tonight?",), (RubricItem(0, "b1", desc, "apply"),))
    plain = j.judge(r, ["Some ideas. Pick meals that keep blood sugar steady, with high-fibre, low-sugar options. "
                        "Cook a lentil stew tonight."])
    bullets = j.judge(r, ["Some ideas:\n- Pick meals that keep blood sugar steady, with high-fibre, low-sugar options\n"
                          "- Cook a lentil stew tonight"])
    assert bullets.items["0:b1"] == plain.items["0:b1"] >= 3
    assert bullets.scores["actionability"] == plain.scores["actionability"] == 4
    numbered = j.judge(r, ["Ideas:\n1. Cook a stew\n2. Add some beans"])
    assert numbered.scores["actionability"] == 3              # "1." is a list marker, not a concrete detail


def test_lead_ins_are_compared_without_their_frame():
    from dpmv_lib.evaluate.rubric_judge import advice_units
    assert advice_units("The key point: keep food costs very low.") == \
        ["The key point: keep food costs very low.", "Keep food costs very low."]
    assert advice_units("Since you mentioned debt, I'd keep food costs low.")[1] == "Keep food costs low."
    assert advice_units("Given your note about lost their job, keep costs low.")[1] == "Keep costs low."
    long_clause = "Frame the whole week around finding new paid work: applications, networking and skills."
    assert advice_units(long_clause) == [long_clause]     # nine words before ":" are advice, not a frame
    assert advice_units("Try it.") == ["Try it."]
