"""Utility judge: known-answer behaviour scores, blinding by signature, frozen rubrics, strict LLM parsing."""
from __future__ import annotations

import dataclasses
import inspect
import json
import math

import pandas as pd
import pytest

from dpmv_lib.evaluate.encoders import HashingEncoder
from dpmv_lib.core.errors import ParameterError
from dpmv_lib.evaluate.rubric_judge import CALIBRATION, THRESHOLDS, RubricJudge, grade, split_sentences
from dpmv_lib.evaluate.rubric import DIMENSIONS, Judgement, Rubric, RubricItem, build_rubric
from dpmv_lib.evaluate.llm_judge import LLMJudge, parse_llm_output, render_llm_prompt
from dpmv_lib.evaluate.judge import score_transcripts, summarise_utility
from generation_toy import toy_benchmark

DESC = "Suggests meals that keep blood sugar steady, such as high-fibre, low-sugar options."


def rubric_one(role="apply", desc=DESC, query="What should I cook for dinner tonight?"):
    return Rubric("r1", (query,), (RubricItem(0, "b1", desc, role),))


def test_restating_scores_high_unrelated_low():
    j = RubricJudge(HashingEncoder())
    hi = j.judge(rubric_one(), ["Here is a plan. Pick meals that keep blood sugar steady, with high-fibre, "
                                "low-sugar options."])
    lo = j.judge(rubric_one(), ["The train to the coast leaves at nine on Saturday."])
    assert hi.items["0:b1"] >= 3 and lo.items["0:b1"] == 0
    assert hi.scores["personalisation"] > lo.scores["personalisation"]
    assert not hi.failed and 0 <= hi.U <= 1


def test_calibration_sentences_grade_as_documented():
    enc = HashingEncoder()
    for desc, restate, _other, unrelated in CALIBRATION:
        x = enc.encode([desc, restate, unrelated])
        assert grade(float(x[1] @ x[0]), THRESHOLDS["hashing"]) >= 2
        assert grade(float(x[2] @ x[0]), THRESHOLDS["hashing"]) == 0


def test_generic_same_slot_advice_is_not_target_personalisation():
    j = RubricJudge(HashingEncoder())
    desc = "Suggests dinner meals that limit added sugar"
    r = Rubric("r2", ("What should I cook tonight?",),
               (RubricItem(0, "t1", desc, "apply", ("Suggests dinner meals that are quick to cook",)),))
    generic = j.judge(r, ["Suggests dinner meals that are quick to cook tonight."])
    specific = j.judge(r, ["Pick dinner meals that limit added sugar."])
    no_contrast = j.judge(Rubric("r3", r.queries, (RubricItem(0, "t1", desc, "apply"),)),
                          ["Suggests dinner meals that are quick to cook tonight."])
    assert generic.items["0:t1"] == 0 < no_contrast.items["0:t1"]
    assert specific.items["0:t1"] >= 3


def test_contrast_sets_come_from_the_catalogue():
    from dpmv_lib.bench.benchmark import Behaviour
    from dpmv_lib.evaluate.rubric import contrast_set
    cat = {"g": Behaviour("g", "generic", "quick dinner", "", "food"),
           "r": Behaviour("r", "target_required", "low sugar", "diabetes", "food"),
           "u": Behaviour("u", "unsupported", "low sugar", "diabetes", "food"),
           "p": Behaviour("p", "target_required", "pregnancy safe", "pregnancy", "food"),
           "f": Behaviour("f", "generic", "home workout", "", "fitness")}
    assert contrast_set(cat["r"], cat) == ("pregnancy safe", "quick dinner")
    assert contrast_set(cat["g"], cat) == ()


def test_unsupported_behaviour_lowers_correctness_and_artifacts_are_penalised():
    j = RubricJudge(HashingEncoder())
    r = rubric_one(role="unsupported")
    bad = j.judge(r, ["Pick meals that keep blood sugar steady, with high-fibre, low-sugar options."])
    ok = j.judge(r, ["Try a quick pasta with vegetables, ready in twenty minutes."])
    assert bad.items["0:b1"] >= 3 and bad.scores["correctness"] <= 1
    assert ok.scores["correctness"] == 4 and ok.items["0:b1"] == 0
    art = j.judge(rubric_one(),
                  ["Try a quick pasta. I see a note marked [withheld food detail]; I'll leave that aside."])
    assert art.scores["correctness"] == 2
    empty = j.judge(rubric_one(), [""])
    assert all(empty.scores[d] == 0 for d in DIMENSIONS)


def test_actionability_rules():
    j = RubricJudge(HashingEncoder())
    act = j.judge(rubric_one(), ["Cook a lentil stew tonight. Try adding spinach for 5 minutes."])
    vague = j.judge(rubric_one(), ["Food is a big topic. Many people like dinner."])
    assert act.scores["actionability"] == 4 and vague.scores["actionability"] == 0


def test_judge_is_blind_by_signature():
    for cls in (RubricJudge, LLMJudge):
        params = list(inspect.signature(cls.judge).parameters)
        assert params == ["self", "rubric", "responses"]
    fields = {f.name for f in dataclasses.fields(Rubric)} | {f.name for f in dataclasses.fields(RubricItem)}
    assert not fields & {"method", "side", "store", "label"}


def test_rubrics_are_built_from_gold_only_and_shared():
    bench = toy_benchmark()
    pair = bench.pairs[0]
    rm, rmp = build_rubric(pair, "M", bench.behaviours, 16), build_rubric(pair, "M'", bench.behaviours, 16)
    assert {i.item_id for i in rm.items} == {"b.target", "b.generic"}
    assert {i.item_id for i in rmp.items} == {"b.unsup", "b.generic"}
    assert {i.role for i in rmp.items if i.item_id == "b.unsup"} == {"unsupported"}
    assert build_rubric(pair, "M", bench.behaviours, 16) == rm       # deterministic, fixed
    assert len(rm.queries) == 16
    with pytest.raises(ParameterError, match="side"):
        build_rubric(pair, "X", bench.behaviours)


def _toy_transcripts(bench, methods=("A", "B")):
    rows = []
    for pair in bench.pairs:
        for method in methods:
            for side in ("M", "M'"):
                for t in pair.turns[:16]:
                    good = method == "A" and t.query.qtype == "target" and side == "M"
                    resp = ("Uses supported target needs: here is a plan. Try this today." if good
                            else "Answers the question. Try this today.")
                    rows.append(dict(track="pairedmem", response_model="m", method=method, pair_id=pair.pair_id,
                                     attribute=pair.attribute, side=side, seed=-1, turn=t.index, response=resp))
    return pd.DataFrame(rows)


def test_score_transcripts_trec_on_m_unsup_on_mprime():
    bench = toy_benchmark()
    df = _toy_transcripts(bench)
    per = score_transcripts(df, {"pairedmem": bench}, RubricJudge(HashingEncoder()), 16)
    assert len(per) == len(bench.pairs) * 2 * 2
    assert per.loc[per["side"] == "M", "tRec"].notna().all() and per.loc[per["side"] == "M", "Unsup"].isna().all()
    assert per.loc[per["side"] == "M'", "Unsup"].notna().all() and per.loc[per["side"] == "M'", "tRec"].isna().all()
    s = summarise_utility(per, n_boot=50).set_index("method")
    assert s.loc["A", "tRec"] > s.loc["B", "tRec"]
    assert s.loc["A", "n_failed"] == 0
    # the same rubric is used for every method of a pair and side
    assert per.groupby(["pair_id", "side"])["rubric_id"].nunique().max() == 1


def test_judge_scores_do_not_depend_on_the_worker_count(monkeypatch):
    """The distinct turns are scored in chunks over forked workers: the same table, bit
    for bit, for 1 and 2 workers, with chunks small enough that both workers get several."""
    import dpmv_lib.evaluate.rubric_judge as RJ

    bench = toy_benchmark()
    df = _toy_transcripts(bench)
    df["response"] = [f"{r} Turn {t} of {p} on {s} side, method {m}." for r, t, p, s, m in
                      zip(df["response"], df["turn"], df["pair_id"], df["side"], df["method"])]
    monkeypatch.setattr(RJ, "TURN_CHUNK", 7)
    one, two = (score_transcripts(df, {"pairedmem": bench}, RubricJudge(HashingEncoder(), workers=w), 16)
                for w in (1, 2))
    assert df["response"].nunique() > 4 * RJ.TURN_CHUNK
    pd.testing.assert_frame_equal(one, two, check_exact=True)
    with pytest.raises(ParameterError, match="workers"):
        RubricJudge(HashingEncoder(), workers=0)


# ---- LLM judge: strict parsing, retries, failure records ------------------------------------------------
def _valid(rubric, v=3):
    return json.dumps({"relevance": 4, "correctness": 3, "actionability": 2, "personalisation": 1,
                       "behaviours": {i.key: v for i in rubric.items}})


def test_parse_is_strict():
    r = rubric_one()
    s, items = parse_llm_output(_valid(r), r)
    assert s["relevance"] == 4 and items == {"0:b1": 3}
    assert parse_llm_output("```json\n" + _valid(r) + "\n```", r)[0]["correctness"] == 3
    for bad in ("Sure! " + _valid(r), _valid(r).replace('"relevance": 4', '"relevance": 5'),
                _valid(r).replace('"relevance": 4', '"relevance": 2.5'), json.dumps({"relevance": 4}),
                _valid(r).replace('"0:b1"', '"0:bX"'), "[1, 2]", "not json at all"):
        with pytest.raises(ValueError):
            parse_llm_output(bad, r)


def test_malformed_output_is_retried_then_recorded_as_failure():
    calls = []

    def gen(prompts):
        calls.append(prompts)
        return ["{'relevance': 4,"] * len(prompts)     # never valid JSON

    j = LLMJudge(gen, retries=2)
    out = j.judge(rubric_one(), ["Try a bean salad."])
    assert len(calls) == 3                                # 1 attempt + 2 retries
    assert "previous answer was not valid" in calls[1][0]
    assert out.failed and out.attempts == 3 and len(out.raw) == 3
    assert all(math.isnan(out.scores[d]) for d in DIMENSIONS) and math.isnan(out.U)
    assert "JSON" in out.error


def test_retry_can_recover():
    r = rubric_one()
    answers = iter(["oops", _valid(r, 4)])
    j = LLMJudge(lambda prompts: [next(answers) for _ in prompts], retries=1)
    out = j.judge(r, ["Keep blood sugar steady."])
    assert not out.failed and out.attempts == 2 and out.items["0:b1"] == 4


def test_backend_exception_is_a_failure_record():
    def boom(prompts):
        raise RuntimeError("server down")
    out = LLMJudge(boom, retries=1).judge(rubric_one(), ["x"])
    assert out.failed and "server down" in out.error


def test_failures_are_excluded_and_counted():
    bench = toy_benchmark()
    df = _toy_transcripts(bench, methods=("A",))
    per = score_transcripts(df, {"pairedmem": bench}, LLMJudge(lambda p: ["nope"] * len(p), retries=0), 16)
    assert per["failed"].all() and per["U"].isna().all()
    s = summarise_utility(per, n_boot=0)
    assert s["n_failed"].iloc[0] == len(per) and math.isnan(s["U"].iloc[0])


def test_prompt_has_no_method_or_label():
    r = rubric_one()
    p = render_llm_prompt(r, ["Try a bean salad."])
    assert "Try a bean salad." in p and DESC in p and "0:b1" in p
    for word in ("DP-MemView", "RawReadSet", "GenericOnly", "M'", "store side"):
        assert word not in p


def test_split_sentences():
    assert split_sentences("One. Two!  Three? four") == ["One.", "Two!", "Three?", "four"]
    assert split_sentences("  ") == []


@pytest.mark.slow
def test_llm_judge_with_real_smollm2():
    """Real offline model: the result is either a parsed judgement or a recorded failure."""
    from dpmv_lib.evaluate.llm_judge import responder_generate
    j = LLMJudge(responder_generate("smollm2", max_new_tokens=96), name="smollm2", retries=1)
    out = j.judge(rubric_one(), ["Pick high-fibre, low-sugar meals."])
    assert isinstance(out, Judgement)
    assert out.raw and all(isinstance(x, str) for x in out.raw)
    if out.failed:
        assert out.error and all(math.isnan(out.scores[d]) for d in DIMENSIONS)
    else:
        assert all(0 <= out.scores[d] <= 4 for d in DIMENSIONS)


@pytest.mark.slow
def test_minilm_thresholds_match_their_documentation():
    from dpmv_lib.evaluate.encoders import get_encoder
    from dpmv_lib.evaluate.rubric_judge import CALIBRATION_CONTRAST, MARGINS
    enc = get_encoder("minilm")
    for desc, restate, other, unrelated in CALIBRATION:
        x = enc.encode([desc, restate, other, unrelated])
        assert grade(float(x[1] @ x[0]), THRESHOLDS["st"]) >= 3
        assert grade(float(x[2] @ x[0]), THRESHOLDS["st"]) <= 2
        assert grade(float(x[3] @ x[0]), THRESHOLDS["st"]) == 0
    for desc, contrast, restate, generic, unrelated in CALIBRATION_CONTRAST:
        x = enc.encode([desc, *contrast, restate, generic, unrelated])
        d, c, s = x[0], x[1:1 + len(contrast)], x[1 + len(contrast):]
        margins = [float(v @ d - (c @ v).max()) for v in s]
        assert grade(margins[0], MARGINS["st"]) >= 3
        assert grade(margins[1], MARGINS["st"]) == 0 and grade(margins[2], MARGINS["st"]) == 0
