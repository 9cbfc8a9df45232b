"""The public-corpus transfer track (paper C.3): evidence rules, minimal edits, corpus errors,
byte-identical rebuilds on a tiny synthetic corpus, and the invariants of the committed track."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from dpmv_lib import lexicon
from dpmv_lib import pairedmem as pm
from dpmv_lib import transfer as tr
from dpmv_lib.datasets import load_benchmark
from dpmv_lib.errors import CorpusError
from dpmv_lib.paths import default_corpora_dir, project_root
from dpmv_lib.store import differing_positions, is_adjacent

DATA = project_root() / "data"


def _st(*texts: str) -> list[tr.SourceText]:
    return [tr.SourceText("test", f"t:{i}", t) for i, t in enumerate(texts)]


@pytest.mark.parametrize("attribute,text", [
    ("job_loss", "I just got laid off from my job."),
    ("job_loss", "I lost my job last week."),
    ("debt", "My credit card debt is ridiculous."),
    ("pregnancy", "I just found out that I'm pregnant."),
    ("diabetes", "I have recently been diagnosed with diabetic kidney disease."),
])
def test_rules_accept_first_person_current_statements(attribute, text):
    kept, why = tr.select_evidence(_st(text), attribute)
    assert [e.text for e in kept] == [text], dict(why)
    e = kept[0]
    assert not lexicon.signalled_attributes(e.edited) and e.edited != e.text
    assert tr.edit_ratio(e.text, e.edited) <= 0.5


@pytest.mark.parametrize("attribute,text,reason", [
    ("job_loss", "My wife got laid off last month.", "about_someone_else"),
    ("job_loss", "If I get laid off I will move home.", "hypothetical"),
    ("job_loss", "I was laid off years ago.", "not_current"),
    ("debt", "I finally paid off all my debt.", "not_the_attribute"),
    ("pregnancy", "I took a pregnancy test this morning.", "not_the_attribute"),
    ("pregnancy", "My sister is pregnant with twins.", "about_someone_else"),
    ("diabetes", "I think I might have diabetes.", "hypothetical"),
    ("diabetes", "I was diagnosed with diabetes insipidus.", "not_the_attribute"),
    ("diabetes", "Diabetes runs in families.", "not_first_person"),
])
def test_rules_reject(attribute, text, reason):
    kept, why = tr.select_evidence(_st(text), attribute)
    assert not kept and why[reason] == 1, dict(why)


def test_clause_fallback_keeps_only_the_current_clause():
    kept, _ = tr.select_evidence(_st("I got laid off a few months back and was really worried about paying my bills."),
                                 "job_loss")
    assert [e.text for e in kept] == ["I got laid off a few months back."] and kept[0].unit == "clause"


def test_missing_corpora_names_files(tmp_path: Path):
    with pytest.raises(CorpusError, match=r"locomo/26\.json.*chatdoctor5k\.json.*Get them from"):
        tr.check_corpora(tmp_path / "none")
    (tmp_path / "c" / "locomo").mkdir(parents=True)
    with pytest.raises(CorpusError, match="prompts_valid.csv"):
        tr.check_corpora(tmp_path / "c")


# ---- a tiny synthetic corpus with the real layout ------------------------------------------------
_BG = ["I cooked a big pasta dinner for my family", "I started a new painting in my studio this week",
       "I went hiking with my dog on the coast trail", "I saved some money for a new camera lens",
       "I have a busy project at work this month", "I am planning a trip to the mountains next month",
       "I slept badly after a long day at the office", "I ran five miles in the park this morning",
       "I bought a cheap second-hand bike from a neighbour", "I baked cookies for the school fair last week",
       "I visit my grandparents every other weekend", "I finished reading a great novel last night"]


def _fake_corpora(root: Path) -> Path:
    (root / "locomo").mkdir(parents=True)
    for n in (26, 30, 41, 42, 43, 44, 47, 48, 49, 50):
        a, b = f"Ann{n}", f"Bob{n}"
        turns = [{"speaker": who, "dia_id": f"D1:{k}", "text": f"{s} number {k}."}
                 for k in range(40) for who, s in ((a, _BG[k % len(_BG)]), (b, _BG[(k + 5) % len(_BG)]))]
        (root / "locomo" / f"{n}.json").write_text(json.dumps({"speaker_a": a, "speaker_b": b, "session_1": turns}))
    ed = root / "empathetic_dialogues"
    ed.mkdir()
    rows = ["I just got laid off from my job.", "I lost my job last week.", "My credit card debt is ridiculous.",
            "I'm really ashamed that I've gotten so far behind on my bills.", "I just found out that I'm pregnant.",
            "My wife got laid off."]
    for name in ("prompts_valid.csv", "prompts_test.csv"):
        with (ed / name).open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["label", "content"])
            for r in rows:
                w.writerow([1, r])
    with (ed / "prompts_train_lowercased.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["text", "aug_text", "label"])
        w.writerow(["my debts are accumulating.", "x", 1])
    lq = root / "medical_questions" / "liveqa"
    lq.mkdir(parents=True)
    for name in tr.LIVEQA_FILES:
        (root / name).write_text('<?xml version="1.0"?><NLM-QUESTIONS><NLM-QUESTION questionid="Q1"><MESSAGE>'
                                 "I am a diabetic and I suspect it may be my kidneys.</MESSAGE></NLM-QUESTION>"
                                 "</NLM-QUESTIONS>")
    gm = root / "medical_questions" / "genmedgpt5k"
    gm.mkdir()
    (gm / "chatdoctor5k.json").write_text(json.dumps([
        {"input": "Doctor, I have recently been diagnosed with diabetic kidney disease."},
        {"input": "Hi doctor, I am pregnant and I have been experiencing a lot of problems lately."}]))
    return root


@pytest.fixture(scope="module")
def small_pm():
    return pm.build_pairedmem(seed=0, n_candidates_per_attribute=24, n_selected_per_attribute=20)


def test_fake_corpus_build_is_valid_and_byte_identical(tmp_path: Path, small_pm):
    corpora = _fake_corpora(tmp_path / "corpora")
    outs = []
    for d in ("a", "b"):
        b = tr.build_transfer(small_pm.pairs, small_pm.policies, corpora, seed=0, n_speakers=3)
        outs.append(tr.write_transfer(b, tmp_path / d))
    assert len(b.pairs) == 12
    for f in sorted(p.name for p in outs[0].iterdir()):
        assert (outs[0] / f).read_bytes() == (outs[1] / f).read_bytes(), f
    by_id = {p.pair_id: p for p in small_pm.pairs}
    for p in b.pairs:
        pol = b.policies[p.policy_id]
        assert is_adjacent(p.m, p.m_prime, pol, p.attribute)
        assert differing_positions(p.m, p.m_prime) == set(p.meta["evidence_positions"])
        assert p.turns == by_id[p.meta["matched_pair"]].turns
    assert b.counts()["evidence_candidates_kept"]["diabetes"] == 2   # the hypothetical LiveQA clause is kept alone


# ---- the committed track -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def committed():
    if not (DATA / "transfer" / "manifest.json").exists():
        pytest.skip("data/transfer not built (python -m dpmv_lib.transfer --build)")
    return load_benchmark("transfer", DATA), load_benchmark("pairedmem", DATA)


def test_committed_transfer_invariants(committed):
    bench, paired = committed
    assert len(bench) == 80
    assert len({p.meta["speaker"] for p in bench}) == 20
    assert {(p.meta["speaker"], p.attribute) for p in bench} == {
        (s, a) for s in {p.meta["speaker"] for p in bench} for a in lexicon.ATTRIBUTES}
    src = {p.pair_id: p for p in paired.pairs}
    for p in bench:
        pol = bench.policy(p)
        base = src[p.meta["matched_pair"]]
        assert (p.template, p.policy_id, p.turns) == (base.template, base.policy_id, base.turns)
        assert not base.overlap and not base.meta["co_present"]
        assert is_adjacent(p.m, p.m_prime, pol, p.attribute)
        d = differing_positions(p.m, p.m_prime)
        assert d == set(p.meta["evidence_positions"]) and len(d) == tr.EVIDENCE_PER_PAIR
        assert pm.validate_pair(pol, p.attribute, p.m, p.m_prime, evidence_positions=p.meta["evidence_positions"]) == []
        assert pm.trajectory_problems(pol, p, bench.behaviours) == []
        slot_of = dict(pol.layout)
        assert all(slot_of[i] == tr.HOME_SLOT[p.attribute] for i in p.meta["evidence_positions"])
    # the same speaker background appears in all four of that speaker's pairs (outside evidence)
    by_speaker: dict[str, list] = {}
    for p in bench:
        by_speaker.setdefault(p.meta["speaker"], []).append(p)
    for ps in by_speaker.values():
        common = set.intersection(*(set(range(1, 29)) - set(p.meta["evidence_positions"]) for p in ps))
        for i in common:
            assert len({p.m.contents[i] for p in ps}) == 1


def test_no_corpus_file_is_copied_into_the_repo():
    root = default_corpora_dir()
    if not root.is_dir():
        pytest.skip("corpora not available")
    sizes = {(root / f).stat().st_size for f in tr.REQUIRED_FILES if (root / f).is_file()}
    for p in (project_root() / "data").rglob("*"):
        if p.is_file():
            assert p.stat().st_size not in sizes or p.suffix == ".jsonl", p


@pytest.mark.slow
def test_committed_transfer_regenerates_byte_for_byte(tmp_path: Path, committed):
    _, paired = committed
    try:
        b = tr.build_transfer(paired.pairs, paired.policies, None, seed=0)
    except CorpusError as exc:
        pytest.skip(str(exc))
    out = tr.write_transfer(b, tmp_path)
    for f in sorted((DATA / "transfer").iterdir()):
        assert (out / f.name).read_bytes() == f.read_bytes(), f.name
