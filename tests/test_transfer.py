"""The public-corpus transfer track v3 (paper C.3): evidence rules, the reviewed allow-list and its
M' checks, background conflicts, the pregnancy persona rule, gold support, byte-identical rebuilds
on a tiny synthetic corpus, and the measured quality figures of the committed track
(>= 25 distinct evidence sentences per attribute, <= 4 slots per sentence, a source kind for
every sentence, a reason for every rejection)."""
from __future__ import annotations

import csv
import json
import math
import re
from collections import Counter
from pathlib import Path

import pytest

from dpmv_lib.bench import lexicon
from dpmv_lib.bench import pairedmem as pm
from dpmv_lib.bench import transfer as tr
from dpmv_lib.bench import transfer_corpora as TC
from dpmv_lib.bench import transfer_evidence as TE
from dpmv_lib.bench import transfer_support as TS
from dpmv_lib.bench import transfer_quality as TQ
from dpmv_lib.bench.datasets import load_benchmark
from dpmv_lib.core.errors import CorpusError
from dpmv_lib.common.paths import default_corpora_dir, project_root
from dpmv_lib.core.store import differing_positions, is_adjacent

DATA = project_root() / "data"


def _st(*texts: str) -> list[TC.SourceText]:
    return [TC.SourceText("test", f"t:{i}", t) for i, t in enumerate(texts)]


# ---- T3 rules ------------------------------------------------------------------------------------
@pytest.mark.parametrize("attribute,text", [
    ("job_loss", "I just got laid off from my job."),
    ("job_loss", "I lost my job last week."),
    ("job_loss", "I have been jobless for 6 months now."),
    ("debt", "My credit card debt is ridiculous."),
    ("pregnancy", "I just found out that I'm pregnant."),
    ("diabetes", "I have recently been diagnosed with diabetic kidney disease."),
])
def test_rules_accept_first_person_current_statements(attribute, text):
    assert TE.evidence_problems(text, attribute) == []
    kept, why = TE.select_evidence(_st(text), attribute)
    assert [e.text for e in kept] == [text], dict(why)
    # with an allow-list, a passing sentence that is not listed is not used
    kept, why = TE.select_evidence(_st(text), attribute, review={})
    assert not kept and why["not_reviewed"] == 1


@pytest.mark.parametrize("attribute,text,reason", [
    ("job_loss", "My wife got laid off last month.", "about_someone_else"),
    ("job_loss", "If I get laid off I will move home.", "hypothetical"),
    ("job_loss", "I was laid off years ago.", "not_current"),
    ("job_loss", "I lost my job a couple of months ago and yesterday I finally got a full time job!!", "not_current"),
    ("job_loss", "When I lost my job.", "question"),
    ("debt", "I finally paid off all my debt.", "not_the_attribute"),
    ("pregnancy", "I took a pregnancy test this morning.", "not_the_attribute"),
    ("pregnancy", "My sister is pregnant with twins.", "about_someone_else"),
    ("pregnancy", "I had a recent pregnancy too.", "not_current"),
    ("pregnancy", "I have been experiencing severe bleeding during my pregnancy.", "not_current"),
    ("pregnancy", "Is it safe to fly when I am pregnant?", "question"),
    ("diabetes", "I think I might have diabetes.", "hypothetical"),
    ("diabetes", "I was diagnosed with diabetes insipidus.", "not_the_attribute"),
    ("diabetes", "I was diagnosed with diabetic ketoacidosis.", "not_the_attribute"),
    ("diabetes", "I have type 1 diabetes.", "not_the_attribute"),
    ("diabetes", "I have been diagnosed with Gestational Diabetes.", "not_the_attribute"),
    ("diabetes", "Diabetes runs in families.", "not_first_person"),
    ("diabetes", "I am not diabetic or alcoholic.", "not_the_attribute"),
    ("diabetes", "I have never taken any medicine for diabetes.", "not_the_attribute"),
    ("diabetes", "I use an insulin pump for my diabetes.", "not_the_attribute"),
    ("diabetes", "I am taking Metformin for PCOS.", "not_the_attribute"),
    ("diabetes", "Diabetes and high blood pressure runs in my family.", "about_someone_else"),
    ("diabetes", "My parents are diabetic.", "about_someone_else"),
    ("diabetes", "So for your type 2 diabetes, I want an A1c test.", "about_someone_else"),
    ("diabetes", "Yes, I used insulin last time as well.", "not_current"),
    ("pregnancy", "I got a negative result after checking for pregnancy.", "not_the_attribute"),
    ("pregnancy", "I am not married or pregnant.", "not_the_attribute"),
    ("pregnancy", "I've been pregnant four times.", "not_the_attribute"),
    ("debt", "I'll be in debt until I'm 52.", "hypothetical"),
    ("debt", "I am smart enough not to bury myself in debt.", "not_the_attribute"),
])
def test_rules_reject(attribute, text, reason):
    assert reason in TE.evidence_problems(text, attribute)
    kept, why = TE.select_evidence(_st(text), attribute)
    assert not kept and sum(why.values()) == 1, dict(why)


@pytest.mark.parametrize("attribute,record", [
    # the four job-loss records of the independent check (SDCNL paraphrased, not quoted)
    ("job_loss", "I have been jobless for 14 months. last week, I finally got a job. I am so happy."),
    ("job_loss", "I got laid off a few months back and was really worried about paying my bills. It was consuming "
                 "me. But I ended up getting a new job the week my unemployment ran out!"),
    ("job_loss", "I am doing well. I start a new job on Monday. I have been unemployed for about a year now."),
    ("job_loss", "I got laid off in November. I got the call that I am going back to work on Saturday, but what is "
                 "the use?"),
    ("job_loss", "I was fired from my job. Good news: I got hired at the bakery."),
    ("pregnancy", "I am 30 weeks pregnant. Update: I gave birth to a healthy boy yesterday."),
    ("debt", "My credit card debt is ridiculous. Update: I paid off all my debt last month."),
    ("diabetes", "I am a diabetic. My doctor says my diabetes is in remission now."),
])
def test_record_that_says_the_attribute_ended_rejects_the_sentence(attribute, record):
    assert TE.ended_in_record(record, attribute)
    kept, why = TE.select_evidence(_st(record), attribute)
    assert not kept and why["ended_in_record"] == 1, dict(why)
    # each sentence taken as its own record: the evidence is kept (the rule reads the record)
    assert [e for s in TE.sentences(record) for e in TE.select_evidence(_st(s), attribute)[0]]


@pytest.mark.parametrize("attribute,record", [
    ("job_loss", "I lost my job last week. I need to find a new job soon."),        # a wish
    ("job_loss", "I lost my job. My husband got a new job last month."),            # someone else
    ("job_loss", "I was just laid off. Have you found a job yet?"),                 # a question
    ("job_loss", "I was just laid off. I haven't found a new job yet."),            # a negation
    ("pregnancy", "I am 30 weeks pregnant. My sister gave birth last year."),
    ("debt", "My credit card debt is ridiculous. I can't wait to be debt free."),
    ("diabetes", "I am a diabetic. I hope it goes into remission."),
])
def test_record_rule_keeps_records_that_do_not_say_it_ended(attribute, record):
    assert TE.ended_in_record(record, attribute) == []
    kept, why = TE.select_evidence(_st(record), attribute)
    assert [e.text for e in kept] == [TE.sentences(record)[0]], dict(why)


def test_rules_read_typographic_apostrophes():
    assert TE.evidence_problems("I\u2019m currently unemployed and struggling.", "job_loss") == []
    assert "not_the_attribute" in TE.evidence_problems("I don\u2019t have diabetes.", "diabetes")
    assert "hypothetical" in TE.evidence_problems("I\u2019ll be in debt until I\u2019m 52.", "debt")


def test_clause_fallback_keeps_only_the_current_clause():
    kept, _ = TE.select_evidence(_st("I got laid off a few months back and was really worried about paying my bills."),
                                 "job_loss")
    assert [e.text for e in kept] == ["I got laid off a few months back."] and kept[0].unit == "clause"
    kept, _ = TE.select_evidence(_st("I have been recently diagnosed with diabetic retinopathy, what tests do I need?"),
                                 "diabetes")
    assert [e.text for e in kept] == ["I have been recently diagnosed with diabetic retinopathy."]


@pytest.mark.parametrize("attribute,m,m_prime,bad", [
    # the issue's examples of nonsense / residual-signal edits are all caught
    ("job_loss", "I made a stupid mistake at work and I got fired.",
     "I made a stupid mistake at work and I got promoted.", "counter-evidence"),
    ("pregnancy", "I am questioning the safety of the pregnancy.", "I am questioning the health of the babies.",
     "residual"),
    ("pregnancy", "I am pregnant.", "I am being induced tomorrow.", "residual"),
    ("diabetes", "I was diagnosed with diabetic retinopathy.", "I was diagnosed with retinopathy.", "residual"),
    ("diabetes", "My blood sugar is high.", "My glucose is high.", "signal"),
    ("debt", "My debts are overdue.", "My credit cards are paid off.", "counter-evidence"),
    ("debt", "I owe a lot on my cards.", "I have a lot sent to collections.", "residual"),
    ("job_loss", "I got laid off.", "I got laid off.", "unchanged"),
])
def test_replacement_checks_catch_residual_signal_and_counter_evidence(attribute, m, m_prime, bad):
    assert any(p.startswith(bad) for p in TE.replacement_problems(m, m_prime, attribute))


def test_word_edit_distance():
    assert TQ.word_edit_distance("I lost my job yesterday.", "I lost my phone yesterday.") == 1
    assert TQ.word_edit_distance("I am pregnant.", "I am pregnant.") == 0
    assert TQ.word_edit_distance("I am a diabetic.", "I am 64 and a retired teacher.") == 4
    d = TQ.edit_distribution([("I lost my job.", "I lost my keys."), ("I am 29 weeks pregnant.", "I am 29 years old.")])
    assert (d["n"], d["words_min"], d["words_max"], sum(d["share_bins"].values())) == (2, 1, 2, 2)


def test_replacement_checks_accept_neutral_edits():
    assert TE.replacement_problems("I lost my job yesterday.", "I lost my phone yesterday.", "job_loss") == []
    assert TE.replacement_problems("I am a diabetic.", "I am a vegetarian.", "diabetes") == []


def test_review_file_is_valid_and_passes_the_rules():
    review, rejected = TE.load_review(), TE.load_rejections()
    for a, entries in review.items():
        for text, r in entries.items():
            assert TE.evidence_problems(text, a) == [], text
            assert TE.replacement_problems(text, r.m_prime, a) == [], r.m_prime
            assert r.reason.strip() and r.ref, text
            assert r.ref.split(":")[0] in TC.KIND_OF_SOURCE, r.ref
    raw = json.loads(TE.REVIEW_FILE.read_text(encoding="utf-8"))["rejected_on_review"]
    for a, rows in raw.items():
        assert len(rejected[a]) == len(rows) > 0
        for row in rows:   # a reason for every rejection; mental-health posts are hashed, never quoted
            assert row["reason"].strip() and row["ref"], row
            assert ("text" in row) is (row["ref"].split(":")[0] not in TE.SENSITIVE_SOURCES), row


def test_rejected_candidates_are_counted_apart_from_unreviewed_ones():
    texts = [TC.SourceText("ed-train", "ed-train:1", "I lost my job yesterday."),
             TC.SourceText("cams", "cams:7", "I just got laid off from my job."),
             TC.SourceText("sad-mturk", "sad-mturk:3", "I lost my job last week.")]
    rejected = {"I lost my job yesterday.": "test", TE.review_key("I just got laid off from my job.", "cams"): "test"}
    assert TE.review_key("I just got laid off from my job.", "cams").startswith("sha256:")
    assert TE.review_key("I lost my job yesterday.", "ed-train") == "I lost my job yesterday."
    kept, why = TE.select_evidence(texts, "job_loss", review={}, rejected=rejected)
    assert not kept and (why["rejected_on_review"], why["not_reviewed"]) == (2, 1)
    kept, _ = TE.select_evidence(texts, "job_loss")
    assert [e.source_kind for e in kept] == ["crowd-written", "real forum post", "crowd-written"]
    assert set(TC.KIND_OF_SOURCE.values()) <= set(TC.SOURCE_KINDS)


def test_review_errors_name_the_problem(tmp_path: Path):
    p = tmp_path / "r.json"
    p.write_text(json.dumps({"evidence": {"diabetes": [{"text": "I am a diabetic.", "m_prime": "I am diabetic.",
                                                        "reason": "x"}]}}))
    with pytest.raises(CorpusError, match="M' replacement of 'I am a diabetic.' fails"):
        TE.load_review(p)
    p.write_text(json.dumps({"evidence": {"flu": []}}))
    with pytest.raises(CorpusError, match="unknown attribute 'flu'"):
        TE.load_review(p)
    p.write_text("{not json")
    with pytest.raises(CorpusError, match="cannot read the transfer review"):
        TE.load_review(p)
    ok = {"text": "I am a diabetic.", "m_prime": "I am a vegetarian.", "reason": "x", "ref": "t:1"}
    p.write_text(json.dumps({"evidence": {"diabetes": [ok]},
                             "rejected_on_review": {"diabetes": [{"ref": "t:2", "text": "I am diabetic."}]}}))
    with pytest.raises(CorpusError, match="needs a ref, a text or sha256, and a reason"):
        TE.load_rejections(p)
    p.write_text(json.dumps({"evidence": {"diabetes": [ok]},
                             "rejected_on_review": {"diabetes": [{"ref": "t:1", "text": ok["text"], "reason": "y"}]}}))
    with pytest.raises(CorpusError, match="both accepted and rejected"):
        TE.load_rejections(p)


# ---- background consistency and persona ----------------------------------------------------------
def test_background_drops_sentences_that_conflict_with_the_speakers_attributes():
    sp = TC.Speaker("s", "Sam", "0", (("D1:1", "I started a new job last week and I love my coworkers there."),
                                      ("D1:2", "I had a glass of wine with dinner at my favourite restaurant."),
                                      ("D1:3", "I cooked a big pasta dinner for my whole family tonight.")))
    by_slot, why = TE.background_sentences(sp, conflict_attributes=("job_loss", "pregnancy"))
    kept = [s for v in by_slot.values() for s in v]
    assert kept == ["I cooked a big pasta dinner for my whole family tonight."]
    assert why["conflicts_job_loss"] == 1 and why["conflicts_pregnancy"] == 1
    by_slot, why = TE.background_sentences(sp, conflict_attributes=())
    assert sum(len(v) for v in by_slot.values()) == 3


@pytest.mark.parametrize("she,he,conflicts,fits", [
    (70, 0, 0, True), (55, 27, 0, True), (18, 91, 0, False), (0, 125, 0, False), (5, 0, 0, False), (75, 0, 10, False)])
def test_pregnancy_persona_rule(she, he, conflicts, fits):
    assert TC.pregnancy_persona_fits(she, he, conflicts) is fits


def test_missing_corpora_names_files(tmp_path: Path):
    with pytest.raises(CorpusError, match=r"locomo/26\.json.*chatdoctor5k\.json.*Get them from"):
        TC.check_corpora(tmp_path / "none")
    (tmp_path / "c" / "locomo").mkdir(parents=True)
    with pytest.raises(CorpusError, match="prompts_valid.csv"):
        TC.check_corpora(tmp_path / "c")
    # a whole folder missing is named as such, with where to get it
    root = _fake_corpora(tmp_path / "full")
    assert TC.check_corpora(root) == root
    import shutil
    shutil.rmtree(root / "first_person_finance")
    with pytest.raises(CorpusError, match=r"absent folders: first_person_finance/;.*SAD_v1\.csv.*Dreaddit") as exc:
        TC.check_corpora(root)
    assert "first_person_health" not in str(exc.value)
    shutil.rmtree(root / "first_person_health" / "meqsum")
    with pytest.raises(CorpusError, match=r"absent folders: first_person_finance/, first_person_health/meqsum/;"):
        TC.check_corpora(root)


# ---- a tiny synthetic corpus with the real layout ------------------------------------------------
_BG = ["I cooked a big pasta dinner for my family", "I started a new painting in my studio this week",
       "I went hiking with my dog on the coast trail", "I saved some money for a new camera lens",
       "I have a busy project going on this month", "I am planning a trip to the mountains next month",
       "I slept badly after a long day of errands", "I ran five miles in the park this morning",
       "I bought a cheap second-hand bike from a neighbour", "I baked cookies for the school fair last week",
       "I visit my grandparents every other weekend", "I finished reading a great novel last night",
       "I started a new job last week and I love it"]     # conflicts with job loss: never used
_EV = {
    "job_loss": ["I just got laid off from my job.", "I lost my job last week.",
                 "I have been jobless for 6 months now.",
                 "I'm unemployed and struggling right now.", "I lost my job yesterday."],
    "debt": ["My credit card debt is ridiculous.", "I'm really ashamed that I've gotten so far behind on my bills.",
             "My debts are accumulating.", "I'm working hard to pay off all my debts.",
             "I've got a lot of bills that are overdue, and can't afford to pay them yet."],
    "pregnancy": ["I just found out that I'm pregnant.", "I am 38 weeks pregnant.", "I am currently pregnant.",
                  "I have been experiencing sharp abdominal pain and I am pregnant.",
                  "Also, I'm pregnant and have been having some problems."],
    "diabetes": ["I have recently been diagnosed with diabetic kidney disease.", "I am a diabetic.",
                 "I have been feeling really sick lately and my blood sugar levels are extremely high.",
                 "I have been recently diagnosed with diabetic retinopathy.",
                 "I have been diagnosed with diabetes and my blood sugar is high."],
}
_NEUTRAL = ["I lost my wallet.", "My commute is ridiculous.", "I am currently recovering from a cold.",
            "I have been learning Spanish for 6 months now.", "I am a vegetarian."]


def _fake_review() -> dict[str, dict[str, TE.Review]]:
    return {a: {t: TE.Review(a, t, _NEUTRAL[k], "synthetic test sentence") for k, t in enumerate(ts)}
            for a, ts in _EV.items()}


def _fake_corpora(root: Path) -> Path:
    import csv
    (root / "locomo").mkdir(parents=True)
    for n in (26, 30, 41, 42, 43, 44, 47, 48, 49, 50):
        a, b = f"Ann{n}", f"Bob{n}"
        turns = [{"speaker": who, "dia_id": f"D1:{k}", "text": f"{s} number {k}."}
                 for k in range(40) for who, s in ((a, _BG[k % len(_BG)]), (b, _BG[(k + 5) % len(_BG)]))]
        obs = {a: [[f"{a} enjoys her garden and her books.", "D1:1"]] * 6, b: [[f"{b} loves his bike.", "D1:2"]] * 6}
        (root / "locomo" / f"{n}.json").write_text(json.dumps({"speaker_a": a, "speaker_b": b, "session_1": turns,
                                                               "session_1_observation": obs}))
    ed = root / "empathetic_dialogues"
    ed.mkdir()
    rows = [*_EV["job_loss"], *_EV["debt"], *_EV["pregnancy"][:1], "My wife got laid off."]
    for name in ("prompts_valid.csv", "prompts_test.csv"):
        with (ed / name).open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["label", "content"])
            for r in rows:
                w.writerow([1, r.replace(",", "_comma_")])
    with (ed / "prompts_train_lowercased.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["text", "aug_text", "label"])
        w.writerow(["i am currently pregnant.", "x", 1])
    lq = root / "medical_questions" / "liveqa"
    lq.mkdir(parents=True)
    for name in TC.LIVEQA_FILES:
        (root / name).write_text('<?xml version="1.0"?><NLM-QUESTIONS><NLM-QUESTION questionid="Q1"><MESSAGE>'
                                 "I am a diabetic and I suspect it may be my kidneys.</MESSAGE></NLM-QUESTION>"
                                 "</NLM-QUESTIONS>")
    gm = root / "medical_questions" / "genmedgpt5k"
    gm.mkdir()
    (gm / "chatdoctor5k.json").write_text(json.dumps(
        [{"input": f"Hi doctor, {t}"} for t in (*_EV["diabetes"], *_EV["pregnancy"][1:])]))
    _fake_first_person(root)
    return root


def _write_csv(path: Path, header: list[str], rows: list[list]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


def _fake_first_person(root: Path) -> None:
    """first_person_health/ and first_person_finance/ in their real layouts."""
    (root / TC.ICLINIQ_FILE).parent.mkdir(parents=True)
    (root / TC.ICLINIQ_FILE).write_text(json.dumps({"chat": [{"input": [
        {"role": "user", "content": "Hello doctor,i am a known diabetic for the past 15 years.My feet hurt."}],
        "ideal": "x"}]}) + "\n")
    _write_csv(root / TC.MEQSUM_FILE, ["File", "CHQ", "Summary"],
               [["1.txt", "SUBJECT: sugar\nMESSAGE: i am 64 yrs old and a type II diabetic", "x"]])
    for f in TC.ACI_FILES:
        _write_csv(root / f, ["dataset", "encounter_id", "dialogue", "note"],
                   [["virtassist", "D2N001", "[doctor] hi , martha .\n[patient] i'm doing okay , i cook a lot .", "n"]])
    for f in TC.MTS_FILES:
        _write_csv(root / f, ["ID", "section_header", "section_text", "dialogue"],
                   [["0", "GENHX", "x", "Doctor: Hello.\nPatient: I walk my dog every day.\nDoctor: Good."]])
    for f in TC.DREADDIT_FILES:
        _write_csv(root / f, ["subreddit", "post_id", "sentence_range", "text", "id"],
                   [["assistance", "p1", "[0, 2]", "My rent is due.\nI cook at home", "17"]])
    for f in TC.SDCNL_FILES:
        _write_csv(root / f, ["", "title", "selftext"], [["0", "rent", "I pay my rent on time."]])
    _write_csv(root / TC.CAMS_FILE, ["selftext", "cause", "inference"], [["I pay my bills.", "0", "x"]])
    _write_csv(root / TC.SAD_FILE, ["sID", "sentence", "Source"],
               [["1", "I cook pasta.", "Inquire"], ["2", "I bake bread.", "mTurk_synthetic"],
                ["3", "I ran.", "popbots_live"]])


def test_first_person_readers_parse_the_layouts(tmp_path: Path):
    root = _fake_corpora(tmp_path / "c")
    health = {t.ref: t for t in TC.read_health(root)}
    assert health["icliniq:0"].text == "Hello doctor, I am a known diabetic for the past 15 years. My feet hurt."
    assert TE.sentences(health["icliniq:0"].text)[0] == "I am a known diabetic for the past 15 years."
    assert health["meqsum:1.txt"].text == "I am 64 yrs old and a type II diabetic."
    assert health["aci-bench:train:D2N001:0"].text == "I'm doing okay, I cook a lot."
    assert health["mts-dialog:TrainingSet:0:0"].text == "I walk my dog every day."
    fin = {t.ref: t for t in TC.read_finance(root)}
    assert fin["dreaddit:train:17"].text == "My rent is due. I cook at home."
    assert {"sdcnl:training:0:title", "sdcnl:training:0:selftext", "cams:0"} <= set(fin)
    assert (fin["sad-livejournal:1"].source, fin["sad-mturk:2"].source) == ("sad-livejournal", "sad-mturk")
    assert not any(r.startswith("sad") and r.endswith(":3") for r in fin)   # chatbot logs are not read
    assert {TC.source_kind(t.source) for t in [*health.values(), *fin.values()]} <= set(TC.SOURCE_KINDS)
    with pytest.raises(CorpusError, match="unknown evidence source"):
        TC.source_kind("nowhere")


@pytest.fixture(scope="module")
def small_pm():
    return pm.build_pairedmem(seed=0, n_candidates_per_attribute=24, n_selected_per_attribute=20)


def test_support_positions_cover_every_target_required_behaviour(small_pm):
    for p in small_pm.pairs:
        pol = small_pm.policies[p.policy_id]
        s = TS.support_positions(pol, p)
        if s is None:
            continue
        assert set(s) <= pol.attribute(p.attribute).group
        for n in TS.support_needs(pol, p):
            assert n.reads & set(s), (p.pair_id, n)


def test_fake_corpus_build_is_valid_and_byte_identical(tmp_path: Path, small_pm):
    corpora = _fake_corpora(tmp_path / "corpora")
    outs = []
    for d in ("a", "b"):
        b = tr.build_transfer(small_pm.pairs, small_pm.policies, corpora, seed=0, n_speakers=4,
                              behaviours=small_pm.behaviours, review=_fake_review())
        outs.append(tr.write_transfer(b, tmp_path / d))
    # 4 speakers x 3 attributes, plus pregnancy for the two "she" personas (Ann26, Ann30)
    assert Counter(p.attribute for p in b.pairs) == {"diabetes": 4, "debt": 4, "job_loss": 4, "pregnancy": 2}
    assert {p.meta["speaker_name"] for p in b.pairs if p.attribute == "pregnancy"} == {"Ann26", "Ann30"}
    for f in sorted(p.name for p in outs[0].iterdir()):
        assert (outs[0] / f).read_bytes() == (outs[1] / f).read_bytes(), f
    by_id = {p.pair_id: p for p in small_pm.pairs}
    for p in b.pairs:
        pol = b.policies[p.policy_id]
        assert is_adjacent(p.m, p.m_prime, pol, p.attribute)
        assert differing_positions(p.m, p.m_prime) == set(p.meta["evidence_positions"])
        assert p.turns == by_id[p.meta["matched_pair"]].turns
        assert TS.pair_problems(pol, p, b.behaviours) == []
        assert "I started a new job last week and I love it number" not in " ".join(p.m.contents.values())
    q = TQ.quality_report(b)
    assert q["target_required"] > 0
    assert (q["unsupported_target_required"], q["rule_violations"], q["m_prime_problems"], q["background_conflicts"],
            q["pregnancy_pairs_persona_misfit"], q["pairs_differing_outside_group"]) == (0, 0, 0, 0, 0, 0)
    assert b.counts()["evidence_candidates_kept"] == {"diabetes": 5, "pregnancy": 5, "debt": 5, "job_loss": 5}


def test_quality_report_counts_what_is_wrong(small_pm):
    """The report is not vacuous: a PairedMem pair's own stores read as a transfer pair count
    their (template) sentences, and breaking a pair's M evidence makes behaviours unsupported."""
    from dataclasses import replace

    from dpmv_lib.bench.benchmark import Benchmark
    p = next(p for p in small_pm.pairs if not p.meta.get("co_present"))
    pol = small_pm.policies[p.policy_id]
    total, bad = TS.supported(pol, p)
    assert total > 0
    blank = p.m.replace({i: "I went for a walk in the park." for i in pol.attribute(p.attribute).group})
    broken = replace(p, m=blank, meta={**p.meta, "speaker": "x", "persona": {"she_refs": 0, "he_refs": 9}})
    q = TQ.quality_report(Benchmark("transfer", small_pm.policies, (broken,), small_pm.behaviours))
    assert q["unsupported_target_required"] == total
    if p.attribute == "pregnancy":
        assert q["pregnancy_pairs_persona_misfit"] == 1


# ---- the committed track -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def committed():
    if not (DATA / "transfer" / "manifest.json").exists():
        pytest.skip("data/transfer not built (python -m dpmv_lib.bench.transfer --build)")
    return load_benchmark("transfer", DATA), load_benchmark("pairedmem", DATA)


@pytest.fixture(scope="module")
def quality(committed):
    return TQ.quality_report(committed[0])


def test_committed_quality_goals(quality, committed):
    """Every target-required behaviour supported on M; 0 rule violations; 0 M'
    sentences with a signal, residual-signal word or counter-evidence; 0 background conflicts;
    0 pregnancy pairs with a misfitting (male) persona; equal outside I_a; D = evidence positions."""
    q = quality
    assert q["target_required"] >= 16 * q["pairs"]      # 2 blocks x 8 target turns, >= 1 behaviour each
    assert q["unsupported_target_required"] == 0
    assert q["rule_violations"] == 0, q["rule_violation_examples"]
    assert q["m_prime_problems"] == 0, q["m_prime_problem_examples"]
    assert q["m_prime_residual_anywhere"] == 0
    assert q["background_conflicts"] == 0, q["background_conflict_examples"]
    assert q["pregnancy_pairs_persona_misfit"] == 0
    assert q["pairs_differing_outside_group"] == 0 and q["pairs_d_not_evidence"] == 0
    assert q["max_reuse_within_pair"] == 1
    assert committed[0].manifest["quality"] == json.loads(json.dumps(q))


@pytest.mark.parametrize("attribute", lexicon.ATTRIBUTES)
def test_committed_balanced_reuse(quality, committed, attribute):
    """Reuse is balanced: no sentence is used more than ceil(placements / distinct sentences)
    times (least-used-first assignment), and within a pair every sentence is distinct."""
    placements = sum(len(p.meta["evidence_positions"]) for p in committed[0] if p.attribute == attribute)
    distinct = quality["distinct_evidence"][attribute]
    assert distinct >= 1 and quality["max_reuse"][attribute] <= math.ceil(placements / distinct)


@pytest.mark.parametrize("attribute", lexicon.ATTRIBUTES)
def test_committed_evidence_goals_of_issue_28(quality, committed, attribute):
    """>= 25 distinct evidence sentences, none in more than 4 evidence slots (counted from the
    stores), a source kind recorded for every one (in the pairs and in evidence.jsonl), every
    real-text sentence of the reviewed pool used, and every rule-passing candidate reviewed."""
    bench = committed[0]
    assert (TC.MIN_DISTINCT_EVIDENCE, TC.MAX_EVIDENCE_REUSE) == (25, 4)
    slots = Counter(p.m.contents[i] for p in bench if p.attribute == attribute
                    for i in differing_positions(p.m, p.m_prime))
    assert len(slots) == quality["distinct_evidence"][attribute] >= 25
    assert max(slots.values()) == quality["max_reuse"][attribute] <= 4
    kinds = {e["M"]: e["source_kind"] for p in bench if p.attribute == attribute for e in p.meta["evidence"]}
    assert set(kinds) == set(slots) and quality["evidence_without_source_kind"] == 0
    for p in bench:
        for e in p.meta["evidence"]:
            assert e["source_kind"] == TC.KIND_OF_SOURCE[e["source"]] and e["source_kind"] in TC.SOURCE_KINDS
    assert Counter(kinds.values()) == quality["distinct_evidence_by_kind"][attribute]
    pool = [json.loads(ln) for ln in (DATA / "transfer" / "evidence.jsonl").read_text().splitlines()]
    pool = [e for e in pool if e["attribute"] == attribute]
    assert all(e["source_kind"] == TC.KIND_OF_SOURCE[e["source"]] for e in pool)
    real = {e["text"] for e in pool if e["source_kind"].startswith("real ")}
    assert real and real <= set(slots)                       # real text first: every real sentence is used
    counts = bench.manifest["counts"]
    assert counts["evidence_rejections"][attribute].get("not_reviewed", 0) == 0
    assert (counts["evidence_rejections"][attribute].get("rejected_on_review", 0)
            >= len(TE.load_rejections()[attribute]) > 0)
    ed = quality["m_prime_edit_distance"][attribute]
    assert ed["n"] == len(slots) and ed["share_median"] <= 0.5 and sum(ed["share_bins"].values()) == ed["n"]


def test_data_card_reports_the_committed_counts(quality, committed):
    """data/README.md shows the source kinds per attribute (ours beside the paper's), the edit
    distances and the 67-pair difference from the paper's 80, all equal to the committed figures."""
    card = (DATA / "README.md").read_text(encoding="utf-8")
    for a in lexicon.ATTRIBUTES:
        row = next(ln for ln in card.splitlines() if ln.startswith(f"| {a.replace('_', ' ')} |"))
        cells = [c.strip().strip("*") for c in row.split("|")[1:-1]]
        by_kind = quality["distinct_evidence_by_kind"][a]
        assert cells[1:1 + len(TC.SOURCE_KINDS)] == [str(by_kind.get(k, 0)) for k in TC.SOURCE_KINDS], row
        assert cells[1 + len(TC.SOURCE_KINDS)] == str(quality["distinct_evidence"][a]), row
        ed = quality["m_prime_edit_distance"][a]
        assert (f"| {a.replace('_', ' ')} (M -> M') | {ed['words_min']} / {ed['words_median']} / "
                f"{ed['words_max']} |") in card
    # transfer test pairs whose skeleton (whose 32 queries they reuse) is a PairedMem train/validation pair
    split = {p.pair_id: p.split for p in committed[1].pairs}
    by_split = Counter(split[p.meta["matched_pair"]] for p in committed[0])
    seen = by_split["train"] + by_split["validation"]
    assert re.search(rf"{seen} of the {quality['pairs']} skeleton pairs are\s+in PairedMem's train "
                     rf"\({by_split['train']}\) or validation \({by_split['validation']}\) split; only "
                     rf"{by_split['test']} are test pairs\. So {seen} transfer test\s+pairs", card)
    n = quality["pairs_per_attribute"]
    assert re.search(rf"{quality['pairs']} pairs \({n['diabetes']} \+ {n['debt']} \+ {n['job_loss']} "
                     rf"\+ {n['pregnancy']}\)"
                     r" instead of the\s+paper's 80", card)


def test_committed_transfer_invariants(committed):
    bench, paired = committed
    review = TE.load_review()
    speakers = {p.meta["speaker"] for p in bench}
    assert len(speakers) == 20
    preg = {p.meta["speaker"] for p in bench if p.attribute == "pregnancy"}
    assert {(p.meta["speaker"], p.attribute) for p in bench} == {
        (s, a) for s in speakers for a in lexicon.ATTRIBUTES if a != "pregnancy" or s in preg}
    assert len(bench) == 3 * len(speakers) + len(preg)
    src = {p.pair_id: p for p in paired.pairs}
    for p in bench:
        pol = bench.policy(p)
        base = src[p.meta["matched_pair"]]
        assert (p.template, p.policy_id, p.turns) == (base.template, base.policy_id, base.turns)
        assert is_adjacent(p.m, p.m_prime, pol, p.attribute)
        assert TS.pair_problems(pol, p, bench.behaviours) == []
        for e in p.meta["evidence"]:   # only allow-listed sentences, with their reviewed replacement
            r = review[p.attribute][e["M"]]
            assert (p.m.contents[e["position"]], p.m_prime.contents[e["position"]]) == (r.text, r.m_prime)
        if p.attribute == "pregnancy":
            per = p.meta["persona"]
            assert per["she_refs"] >= 2 * per["he_refs"] and per["pregnancy_fits"]
    # the same speaker background appears in all of that speaker's pairs (outside evidence)
    by_speaker: dict[str, list] = {}
    for p in bench:
        by_speaker.setdefault(p.meta["speaker"], []).append(p)
    for ps in by_speaker.values():
        common = set.intersection(*(set(p.m.contents) - set(p.meta["evidence_positions"]) for p in ps))
        for i in common:
            assert len({p.m.contents[i] for p in ps}) == 1


def test_committed_evidence_records_do_not_say_the_attribute_ended(committed):
    """Every evidence sentence of the committed pairs, and every allow-list entry, comes from a source
    record that does not say the attribute has ended (re-read from the corpora); the four job-loss
    records an independent check found (6 evidence slots) are rejected by that rule."""
    try:
        root = TC.check_corpora()
    except CorpusError as exc:
        pytest.skip(str(exc))
    records = {t.ref: t.text for reader in (TC.read_empathetic, TC.read_medical, TC.read_health, TC.read_finance)
               for t in reader(root)}
    used = {(p.attribute, e["ref"]) for p in committed[0] for e in p.meta["evidence"]}
    listed = {(a, r.ref) for a, rows in TE.load_review().items() for r in rows.values()}
    ended = {(a, ref): TE.ended_in_record(records[ref], a) for a, ref in sorted(used | listed)}
    assert not any(ended.values()), {k: v for k, v in ended.items() if v}
    for ref in ("ed-train:11627", "ed-valid:1682", "mts-dialog:TrainingSet:170:0", "sdcnl:training:77:selftext"):
        assert TE.ended_in_record(records[ref], "job_loss"), ref
        assert ("job_loss", ref) not in listed
    counts = committed[0].manifest["counts"]["evidence_rejections"]
    # 5 job-loss candidates: those four and dreaddit:train:43931 (data/README.md); no other attribute
    assert {a: c.get("ended_in_record", 0) for a, c in counts.items()} == {
        "diabetes": 0, "pregnancy": 0, "debt": 0, "job_loss": 5}


def test_no_corpus_file_is_copied_into_the_repo():
    root = default_corpora_dir()
    if not root.is_dir():
        pytest.skip("corpora not available")
    sizes = {(root / f).stat().st_size for f in TC.REQUIRED_FILES if (root / f).is_file()}
    for p in (project_root() / "data").rglob("*"):
        if p.is_file():
            assert p.stat().st_size not in sizes or p.suffix == ".jsonl", p


@pytest.mark.slow
def test_committed_transfer_regenerates_byte_for_byte(tmp_path: Path, committed):
    _, paired = committed
    try:
        b = tr.build_transfer(paired.pairs, paired.policies, None, seed=0, behaviours=paired.behaviours)
    except CorpusError as exc:
        pytest.skip(str(exc))
    out = tr.write_transfer(b, tmp_path)
    for f in sorted((DATA / "transfer").iterdir()):
        assert (out / f.name).read_bytes() == f.read_bytes(), f.name


def test_quality_table_marks_goals(quality):
    rows = {r["figure"]: r for r in TQ.quality_table(quality)}
    assert rows["unsupported_target_required"]["met"] and rows["rule_violations"]["met"]
    assert rows["distinct_evidence"]["met"] is (min(quality["distinct_evidence"].values()) >= TC.MIN_DISTINCT_EVIDENCE)
    assert all(r["met"] for r in rows.values()), [r for r in rows.values() if not r["met"]]
    assert all(set(r) == {"figure", "measured", "goal", "met"} and r["measured"] != "" for r in rows.values())


def test_quality_report_detects_each_kind_of_defect(committed):
    """Non-vacuity on a committed pair: a resolved-state evidence sentence, a residual-signal M',
    a conflicting background sentence, a male persona and a difference outside I_a are each counted."""
    from dataclasses import replace

    from dpmv_lib.bench.benchmark import Benchmark
    bench, _ = committed
    p = next(p for p in bench if p.attribute == "pregnancy")
    pol = bench.policy(p)
    ev = p.meta["evidence_positions"]
    outside = next(i for i in p.m.contents if i not in pol.attribute(p.attribute).group)
    inside_bg = next(i for i in p.m.contents if i not in ev and i not in pol.attribute(p.attribute).group
                     and i != outside)
    m = p.m.replace({ev[0]: "I had a recent pregnancy too.", inside_bg: "I had a glass of wine with dinner tonight."})
    mp = p.m_prime.replace({ev[0]: "I am worried about the health of the babies.",
                            inside_bg: "I had a glass of wine with dinner tonight.", outside: "Something else."})
    bad = replace(p, m=m, m_prime=mp, meta={**p.meta, "persona": {"she_refs": 3, "he_refs": 80}})
    q = TQ.quality_report(Benchmark("transfer", bench.policies, (bad,), bench.behaviours))
    # 2 rule violations: the resolved pregnancy, and the background sentence at the position outside
    # I_a that now differs (it is not evidence of anything)
    assert q["rule_violations"] == 2 and q["m_prime_problems"] == 1 and q["m_prime_residual_anywhere"] == 1
    assert q["background_conflicts"] == 1 and q["pregnancy_pairs_persona_misfit"] == 1
    assert q["pairs_differing_outside_group"] == 1 and q["pairs_d_not_evidence"] == 1
    assert TS.pair_problems(pol, bad, bench.behaviours) != []
