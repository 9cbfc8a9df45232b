"""PairedMem (paper C.2, S1-S4): policy, phrase banks, invariants on every committed pair, the
validator catching realiser errors, and byte-for-byte regeneration."""
from __future__ import annotations

import itertools
import json
from collections import Counter
from pathlib import Path

import pytest

from dpmv_lib.bench import benchmark_quality as bq
from dpmv_lib.bench import lexicon
from dpmv_lib.bench import pairedmem as pm
from dpmv_lib.bench import pairedmem_specs as PS
from dpmv_lib.bench import pairedmem_realise as PR
from dpmv_lib.bench import pairedmem_gold as PG
from dpmv_lib.generate import writer as W
from dpmv_lib.common.paths import project_root
from dpmv_lib.bench.phrasebank import (ATTRIBUTE_CUES, INTENTS, NEUTRAL_REASONS, OVERLAP_TEMPLATES, POSITION_PARTS,
                                 POSITIONS, QUERIES, REASONS, SLOTS, TEMPLATES, query_variants, view_links)
from dpmv_lib.bench.phrasebank.compose import CHANGE_VERBS, split_part
from dpmv_lib.bench.phrases import all_expansions, render, third_person
from dpmv_lib.core.scorer import LexiconScorer, cue_hits
from dpmv_lib.core.store import MemoryStore, differing_positions, is_adjacent
from dpmv_lib import ParameterError, Query

DATA = project_root() / "data"


@pytest.fixture(scope="module")
def bench(pairedmem_bench):
    return pairedmem_bench


@pytest.fixture(scope="module")
def small_build():
    return pm.build_pairedmem(seed=3, n_candidates_per_attribute=16, n_selected_per_attribute=12)


# ---- the fixed public policy ------------------------------------------------------------------
def test_policy_layout_and_templates():
    pols = PS.template_policies()
    assert len(pols) == len(TEMPLATES) >= 4
    layouts = {p.layout for p in pols.values()}
    assert len(layouts) == 1 and len(POSITIONS) == 28
    assert {s for _, s, _ in POSITIONS} == set(SLOTS) and len(SLOTS) == 6
    vocab = {tuple((s.name, s.view_ids) for s in p.slots) for p in pols.values()}
    assert len(vocab) == 1, "every template shares the same view vocabularies (C1)"
    slot_of = {i: s for i, s, _ in POSITIONS}
    for t, groups in TEMPLATES.items():
        assert set(groups) == set(lexicon.ATTRIBUTES)
        for a, g in groups.items():
            assert 4 <= len(g) <= 6, (t, a)
            assert 2 <= len({slot_of[i] for i in g}) <= 4, (t, a)
        shared = [set(groups[a]) & set(groups[b]) for a, b in itertools.combinations(groups, 2)]
        if t in OVERLAP_TEMPLATES:
            assert all(PS.overlap_partners(t, a) for a in groups), t
        else:
            assert not any(shared), t
    for p in pols.values():
        assert str(p.sensitivity) == "3/5"
        assert all(str(a.cap) == "2" for a in p.attributes)
        for intent in p.intents:
            assert len(p.route(Query("x", intent))) == 1


def test_views_say_how_to_answer_and_every_attribute_is_served():
    pol = next(iter(PS.template_policies().values()))
    links = view_links()
    for s in pol.slots:
        for v in s.views:
            assert not any(w in f" {v.text.lower()} " for w in (" i ", " my ", " user ")), v.id
    for a in lexicon.ATTRIBUTES:
        slots_used = {dict(pol.layout)[i] for t in TEMPLATES.values() for i in t[a]}
        for slot in slots_used:
            assert any(a in links[v.id] and v.intents for v in pol.slot(slot).views), (a, slot)


# ---- phrase banks ---------------------------------------------------------------------------------
def test_reason_bank_signals_and_cues():
    """Every realisation of every attribute reason carries that attribute's signal (and no other)
    and a cue of an attribute-linked view in every slot (so slot compatibility holds anywhere)."""
    pol = next(iter(PS.template_policies().values()))
    links = view_links()
    n = 0
    for a, reasons in REASONS.items():
        assert len(reasons) >= 20, a
        for r in reasons:
            for text in all_expansions(r):
                n += 1
                for t in (text, third_person(text)):
                    assert lexicon.signalled_attributes(t) == (a,), t
                    for slot in SLOTS:
                        views = [v for v in pol.slot(slot).views if a in links[v.id]]
                        assert any(cue_hits(v.cues, t) for v in views), (slot, t)
    assert n >= 250


def test_neutral_parts_are_attribute_neutral_and_fit_their_labels():
    """Background facts, topic phrases, neutral reasons and change verbs carry no signal, cue or
    counter-evidence of any attribute; facts and topic phrases mention their position label."""
    labels = {i: lab for i, _s, lab in POSITIONS}
    texts = [t for r in NEUTRAL_REASONS for t in all_expansions(r)] + list(CHANGE_VERBS)
    for pos, parts in POSITION_PARTS.items():
        assert len(parts) >= 5, pos
        for np_, fact in parts:
            for t in all_expansions(np_) + all_expansions(fact):
                texts.append(t)
                assert bq.label_fits(t, labels[pos]), (labels[pos], t)
    assert len(NEUTRAL_REASONS) >= 40
    for text in texts:
        for t in (text, third_person(text)):
            assert not lexicon.signalled_attributes(t), t
            for a in lexicon.ATTRIBUTES:
                assert not cue_hits(ATTRIBUTE_CUES[a], t), (a, t)
                assert not bq.counter_evidence_hits(t, a), (a, t)
    # the checks can fail
    assert bq.counter_evidence_hits("my credit cards are paid off", "debt")
    assert bq.counter_evidence_hits("They like their current employer", "job_loss")
    assert not bq.label_fits("I owe about $24,000 on my cards", "savings")


def test_phrase_parts_are_partitioned_over_the_splits():
    items = list(range(10))
    parts = {s: set(split_part(items, s)) for s in ("train", "validation", "test")}
    assert parts["train"] | parts["validation"] | parts["test"] == set(items)
    assert not (parts["train"] & parts["validation"] or parts["train"] & parts["test"]
                or parts["validation"] & parts["test"])
    assert (len(parts["train"]), len(parts["validation"]), len(parts["test"])) == (6, 2, 2)
    with pytest.raises(ValueError):
        split_part([1, 2], "train")


def test_queries_never_name_an_attribute():
    for intent, qs in QUERIES.items():
        assert len(qs) >= 5, intent
        assert len(set(qs)) == len(qs)
        variants = query_variants(intent)
        assert len(set(variants)) == len(variants) >= 400, intent
        for q in variants:
            assert lexicon.query_problems(q) == [], (intent, q)
    assert set(QUERIES) == {f"{s}.{i}" for s in SLOTS for i in INTENTS[s]}
    # the check itself can fail
    assert lexicon.query_problems("Meal ideas now that I'm pregnant?")
    assert lexicon.query_problems("How do I budget after being laid off?")


def test_every_group_has_neutral_intents_that_avoid_it():
    """Goal 1: each (template, attribute) has same-domain neutral intents that read no position of
    I_a, and at least 8 target intents."""
    for pid, pol in PS.template_policies().items():
        for a in lexicon.ATTRIBUTES:
            fam = PG.intent_families(pol, a)
            group = pol.attribute(a).group
            assert len(fam["neutral"]) >= 4 and len(fam["target"]) >= 8, (pid, a, fam)
            for intent in fam["neutral"] + fam["distractor"]:
                slot = intent.split(".")[0]
                assert not set(pol.read(Query("x", intent), slot)) & group, (pid, a, intent)


def test_third_person_style():
    assert third_person("I'm saving for my trip and I was busy") == "they're saving for their trip and they were busy"
    assert render("my doctor called me", "first", 0) == "My doctor called me."


# ---- S1-S4 on a reduced build -------------------------------------------------------------------
def test_spec_design_quotas():
    specs = PS.design_specs(seed=0)
    assert len(specs) == 384
    assert Counter(s.attribute for s in specs) == {a: 96 for a in lexicon.ATTRIBUTES}
    assert sum(s.overlap for s in specs) == 96
    assert len({s.spec_id for s in specs}) == 384
    for s in specs:
        assert set(s.evidence_positions) == set(TEMPLATES[s.template][s.attribute])
        if s.overlap:
            assert s.co_present and any(p.role == "target+other" for p in s.plan)


def test_validator_catches_every_injected_writer_error():
    b = pm.build_pairedmem(seed=1, n_candidates_per_attribute=8, n_selected_per_attribute=0, defect_rate=1.0)
    kinds = Counter(c.realisation.defect for c in b.candidates)
    assert set(kinds) <= set(PS.DEFECT_KINDS) and len(kinds) >= 3
    assert all(not c.passed for c in b.candidates), [c.spec.spec_id for c in b.candidates if c.passed]


def test_validate_pair_reports_problems(small_build):
    p = small_build.pairs[0]
    pol = small_build.policies[p.policy_id]
    kw = dict(evidence_positions=p.meta["evidence_positions"], co_present=p.meta["co_present"],
              nontarget_positions={int(k): v for k, v in p.meta["nontarget_positions"].items()})
    assert PR.validate_pair(pol, p.attribute, p.m, p.m_prime, **kw) == []
    outside = next(i for i in p.m.contents if i not in p.meta["group"])
    drift = p.m_prime.replace({outside: "I like kites."})
    assert any("outside I_a" in x for x in PR.validate_pair(pol, p.attribute, p.m, drift, **kw))
    ev = p.meta["evidence_positions"][0]
    leak = p.m_prime.replace({ev: p.m.contents[ev]})
    assert any("keeps target evidence" in x for x in PR.validate_pair(pol, p.attribute, p.m, leak, **kw))
    other = next(b for b in lexicon.ATTRIBUTES if b not in (p.attribute, *p.meta["co_present"]))
    bank = REASONS[other][0]
    new = p.m_prime.replace({ev: all_expansions(bank)[0]})
    assert any("carries evidence of" in x for x in PR.validate_pair(pol, p.attribute, p.m, new, **kw))
    # strict (v2) checks: counter-evidence in M' and label mismatches
    assert PR.validate_pair(pol, p.attribute, p.m, p.m_prime, strict=True, **kw) == []
    counter = {"debt": "My credit cards are paid off.", "job_loss": "I like my current employer.",
               "diabetes": "My blood sugar is normal.", "pregnancy": "I'm not pregnant."}[p.attribute]
    bad = PR.validate_pair(pol, p.attribute, p.m, p.m_prime.replace({ev: counter}), strict=True, **kw)
    assert any("asserts or negates" in x for x in bad)
    assert not any("asserts or negates" in x for x in
                   PR.validate_pair(pol, p.attribute, p.m, p.m_prime.replace({ev: counter}), **kw))


def test_reduced_build_is_byte_identical(tmp_path: Path):
    for d in ("a", "b"):
        b = pm.build_pairedmem(seed=5, n_candidates_per_attribute=8, n_selected_per_attribute=4)
        pm.write_pairedmem(b, tmp_path / d)
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*") if p.is_file())
    assert files and files == sorted(p.relative_to(tmp_path / "b") for p in (tmp_path / "b").rglob("*") if p.is_file())
    for f in files:
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f
    other = pm.build_pairedmem(seed=6, n_candidates_per_attribute=8, n_selected_per_attribute=4)
    pm.write_pairedmem(other, tmp_path / "c")
    assert (tmp_path / "c/pairedmem/pairs.jsonl").read_bytes() != (tmp_path / "a/pairedmem/pairs.jsonl").read_bytes()


@pytest.mark.slow
def test_committed_data_regenerates_byte_for_byte(tmp_path: Path):
    if not (DATA / "pairedmem" / "manifest.json").exists():
        pytest.skip("data/pairedmem not built")
    params = json.loads((DATA / "pairedmem" / "manifest.json").read_text())["params"]
    b = pm.build_pairedmem(params["seed"], params["n_candidates_per_attribute"], params["n_selected_per_attribute"],
                           params["defect_rate"], params["cap"])
    pm.write_pairedmem(b, tmp_path)
    for sub in ("policy", "pairedmem"):
        for f in sorted((DATA / sub).iterdir()):
            assert (tmp_path / sub / f.name).read_bytes() == f.read_bytes(), f"{sub}/{f.name} differs"


def test_atomic_write_leaves_nothing_half_written(tmp_path: Path, monkeypatch, small_build):
    pm.write_pairedmem(small_build, tmp_path)
    before = (tmp_path / "pairedmem" / "pairs.jsonl").read_bytes()

    def boom(*a, **k):
        raise RuntimeError("disk full")
    monkeypatch.setattr(pm, "counts", boom)
    with pytest.raises(RuntimeError):
        pm.write_pairedmem(small_build, tmp_path)
    assert (tmp_path / "pairedmem" / "pairs.jsonl").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pairedmem", "policy"]


# ---- invariants on every committed pair --------------------------------------------------------
def test_counts_and_quotas(bench):
    pairs = bench.pairs
    assert len(pairs) == 320
    assert Counter(p.attribute for p in pairs) == {a: 80 for a in lexicon.ATTRIBUTES}
    assert sum(p.overlap for p in pairs) == 80
    cells = Counter((p.attribute, p.template) for p in pairs)
    assert set(cells.values()) == {10}
    # split quotas 48/16/16 per attribute, exact unless a short cell was filled from another split
    # of the same template (the template quotas above stay exact; reported in the manifest notes)
    moved = sum(1 for v in bench.manifest["selection_notes"].values() if "filled from" in v)
    assert moved <= 2
    for a in lexicon.ATTRIBUTES:
        got = Counter(p.split for p in pairs if p.attribute == a)
        want = {"train": 48, "validation": 16, "test": 16}
        assert sum(abs(got[s] - want[s]) for s in want) <= 2 * moved, (a, got)
    assert len({p.pair_id for p in pairs}) == 320
    assert len({json.dumps(sorted(p.m.contents.items())) for p in pairs}) == 320
    c = bench.manifest["counts"]
    assert c["selected_pairs"] + c["reserves"] == c["passed_validation"] <= c["candidate_specs"] == 384


def test_every_pair_is_adjacent_with_evidence_in_place(bench):
    for p in bench.pairs:
        pol = bench.policy(p)
        group = pol.attribute(p.attribute).group
        assert is_adjacent(p.m, p.m_prime, pol, p.attribute)
        assert differing_positions(p.m, p.m_prime) == group == set(p.meta["evidence_positions"])
        assert p.overlap == bool(PS.overlap_partners(p.template, p.attribute))
        problems = PR.validate_pair(pol, p.attribute, p.m, p.m_prime,
                                    evidence_positions=p.meta["evidence_positions"], co_present=p.meta["co_present"],
                                    nontarget_positions={int(k): v for k, v in p.meta["nontarget_positions"].items()},
                                    strict=True)
        assert problems == [], (p.pair_id, problems)
        if p.overlap:
            for i in p.meta["overlap_positions"]:
                b = p.meta["nontarget_positions"][str(i)]
                assert lexicon.has_signal(p.m_prime.contents[i], b)


def test_every_trajectory(bench):
    for p in bench.pairs:
        pol = bench.policy(p)
        assert len(p.turns) == 32 and [t.index for t in p.turns] == list(range(32))
        assert [t.block for t in p.turns] == [0] * 16 + [1] * 16
        assert PG.trajectory_problems(pol, p, bench.behaviours) == [], p.pair_id
        b0 = {t.query.text for t in p.turns if t.block == 0}
        b1 = {t.query.text for t in p.turns if t.block == 1}
        assert not b0 & b1
        for t in p.turns:
            expected = PG.gold_for_turn(pol, p.attribute, p.meta["co_present"], t.query, t.slot,
                                        {int(k): v for k, v in p.meta["nontarget_positions"].items()})
            assert t.gold == expected
            for bid in t.gold.target_required:
                assert bench.behaviours[bid].kind == "target_required"
                assert bench.behaviours[bid].attribute == p.attribute
            for bid in t.gold.unsupported:
                assert bench.behaviours[bid].kind == "unsupported"


def test_scorer_bound_and_signal_on_adjacent_stores(bench):
    """C.5: u in [0, 1] and |u_M(v) - u_M'(v)| <= 0.6 for every pair, turn and view; and the target
    evidence reaches the scorer: on every target turn some attribute-linked view scores higher on M."""
    scorer = LexiconScorer()
    links = view_links()
    worst = 0.0
    for p in bench.pairs:
        pol = bench.policy(p)
        assert float(pol.sensitivity) == pytest.approx(0.6)
        for t in p.turns:
            read = pol.read(t.query, t.slot)
            rm, rmp = p.m.read(read), p.m_prime.read(read)
            gap = False
            for v in pol.slot(t.slot).views:
                um, ump = scorer(t.query, v, rm), scorer(t.query, v, rmp)
                assert 0.0 <= um <= 1.0 and 0.0 <= ump <= 1.0
                worst = max(worst, abs(um - ump))
                if p.attribute in links[v.id] and t.query.intent in v.intents and um > ump:
                    gap = True
            if t.query.qtype == "target":
                assert gap, (p.pair_id, t.index)
            if t.query.qtype == "distractor":
                assert rm == rmp
    assert worst <= 0.6 + 1e-12


def test_llm_writer_hook_is_validated_like_the_template(small_build):
    """S2 option: an LLM writer rewrites sentences; S3 validates the result the same way."""
    cand = next(c for c in small_build.candidates if c.passed)
    pol = small_build.policies[cand.spec.policy_id]
    kw = dict(evidence_positions=cand.spec.evidence_positions, co_present=cand.spec.co_present,
              nontarget_positions=cand.spec.nontarget_positions())

    def faithful(prompts):          # keeps every fact: returns the sentence it was given
        return [p.rsplit("\n", 1)[1] for p in prompts]

    def lossy(prompts):             # drops the facts: a bad writer
        return ["I like my routine." for _ in prompts]

    for gen, ok in ((faithful, True), (lossy, False)):
        r = PR.llm_rewrite(cand.realisation, gen)
        m = MemoryStore.from_policy(pol, r.m)
        mp = MemoryStore.from_policy(pol, r.m_prime)
        assert (PR.validate_pair(pol, cand.spec.attribute, m, mp, **kw) == []) is ok


class _FakeResponder:
    """A tiny stand-in for a responder backend: ``respond(prompts)`` maps each rewrite request."""

    def __init__(self, fn):
        self.fn = fn

    def respond(self, prompts):
        return [self.fn(p.query.rsplit("\n", 1)[1]) for p in prompts]


def test_llm_realiser_is_validated_per_position(small_build):
    """S2 option: the LLM realiser over a responder; code keeps the target cue on M, keeps it off
    M', and reverts a rejected position to the template wording."""
    cand = next(c for c in small_build.candidates if c.passed and c.spec.attribute == "debt")
    spec, r = cand.spec, cand.realisation
    pol = small_build.policies[spec.policy_id]
    kw = dict(evidence_positions=spec.evidence_positions, co_present=spec.co_present,
              nontarget_positions=spec.nontarget_positions())

    def check(realisation):
        m = MemoryStore.from_policy(pol, realisation.m)
        mp = MemoryStore.from_policy(pol, realisation.m_prime)
        return PR.validate_pair(pol, spec.attribute, m, mp, **kw)

    # a faithful paraphraser: accepted everywhere, and the pair still passes S3
    para = W.responder_writer(_FakeResponder(lambda t: t.replace("I've ", "I have ").replace("they've ", "they have ")))
    out, rejected = PR.validated_rewrite(spec, r, para)
    assert rejected == {} and out.m != r.m and check(out) == []
    # a lossy writer: every position rejected, the template wording is kept
    out, rejected = PR.validated_rewrite(spec, r, W.responder_writer(_FakeResponder(lambda t: "Sure, here it is.")))
    assert set(rejected) == set(r.m) and out.m == r.m and out.m_prime == r.m_prime
    assert any("target cue lost on M" in x for i in spec.evidence_positions for x in rejected[i])
    # a leaky writer adds the attribute to every sentence: rejected on M' (and elsewhere)
    out, rejected = PR.validated_rewrite(spec, r, W.responder_writer(
        _FakeResponder(lambda t: t.rstrip(".") + " and the collectors keep calling.")))
    assert all(any("on M'" in x for x in rejected[i]) for i in spec.evidence_positions)
    assert out.m_prime == r.m_prime and check(out) == []


def test_llm_realiser_through_a_responder_spec():
    """``build_with_writer("responder:surrogate")`` runs the whole build through the responder path;
    the surrogate answers like an assistant, so code validation rejects its rewrites where they lose
    facts and the build still passes S3. Bench alone refuses a realiser without its writer."""
    b = W.build_with_writer("responder:surrogate", seed=2, n_candidates_per_attribute=8, n_selected_per_attribute=4)
    assert b.params["realiser"] == "responder:surrogate"
    assert int(b.notes["llm_rewrite_rejected_positions"]) > 0
    assert len(b.pairs) == 16 and all(c.passed or c.realisation.defect for c in b.candidates)
    with pytest.raises(ParameterError, match="unknown realiser"):
        W.make_writer("mistral")
    with pytest.raises(ParameterError, match="needs its writer.*build_with_writer"):
        pm.build_pairedmem(seed=2, n_candidates_per_attribute=8, n_selected_per_attribute=4,
                           realiser="responder:surrogate")
