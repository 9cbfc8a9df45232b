"""Notebook 01's tables, built by dpmv_lib.experiments.data_report (a notebook cell calls one
function and displays its result): the policy's groups and slots, the build timing, the failed S3
candidates, the selection crosstab, the S4 checks, the transfer quality tables, the evidence examples
and the frozen manifests."""
from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import pandas as pd
import pytest

from dpmv_lib.bench import pairedmem_specs as PS
from dpmv_lib.bench import transfer_quality as TQ
from dpmv_lib.bench.phrasebank import OVERLAP_TEMPLATES, TEMPLATES
from dpmv_lib.bench.transfer_corpora import SOURCE_KINDS
from dpmv_lib.common.paths import project_root
from dpmv_lib.core.policy import Query
from dpmv_lib.experiments import data_report as dr


@pytest.fixture(scope="module")
def policy():
    return next(iter(PS.template_policies().values()))


def test_template_groups_list_every_template_with_positions_and_slots(policy):
    tab = dr.template_groups(policy)
    assert list(tab["template"]) == list(TEMPLATES)
    assert set(tab.loc[tab["overlap"], "template"]) == set(OVERLAP_TEMPLATES)
    slot_of = dict(policy.layout)
    t, groups = next(iter(TEMPLATES.items()))
    for a, g in groups.items():
        slots = ", ".join(sorted({slot_of[i] for i in g}))
        assert tab.loc[0, a] == f"{sorted(g)} ({len(g)}; slots: {slots})"
    pos, slot = policy.layout[0]
    mini = dr.template_groups(policy, {"x": {"diabetes": [pos]}}, overlap=("x",))
    assert mini.to_dict("records") == [{"template": "x", "diabetes": f"[{pos}] (1; slots: {slot})", "overlap": True}]


def test_slot_table_counts_positions_views_and_intents(policy):
    tab = dr.slot_table(policy)
    assert list(tab.columns) == ["slot", "positions", "views", "intents"]
    assert list(tab["slot"]) == [s.name for s in policy.slots]
    assert tab["positions"].sum() == len(policy.layout) == 28
    assert tab["intents"].sum() == len(policy.intents)
    first = policy.slots[0]
    assert tab.loc[0, "views"].split(", ") == [v.id.split(".")[1] for v in first.views]


def test_build_seconds_and_failed_candidates():
    db = dr.DataBuild(None, None, "", {"pairedmem": 1.234, "transfer": 0.5, "total": 1.734}, {})
    assert dr.build_seconds(db).to_dict("records") == [{"step": "pairedmem", "seconds": 1.23},
                                                       {"step": "transfer", "seconds": 0.5},
                                                       {"step": "total", "seconds": 1.73}]

    def cand(i, passed, defect="", problems=()):
        spec = SimpleNamespace(spec_id=f"s{i}", attribute="debt", template="t1")
        return SimpleNamespace(spec=spec, realisation=SimpleNamespace(defect=defect), passed=passed,
                               problems=list(problems))

    fails = dr.failed_candidates([cand(0, True), cand(1, False, "dropped cue", ["no evidence", "D not in I_a"])])
    assert fails.to_dict("records") == [{"spec": "s1", "attribute": "debt", "template": "t1",
                                         "simulated writer error": "dropped cue",
                                         "problems": "no evidence; D not in I_a"}]
    assert len(dr.failed_candidates([cand(0, True)])) == 0


def test_selection_crosstab_and_trajectory_checks(pairedmem_bench):
    pairs = pairedmem_bench.pairs[:8]
    ct = dr.selection_crosstab(pairs)
    assert ct.loc["All", "All"] == len(pairs)
    assert set(ct.index) - {"All"} == {p.attribute for p in pairs}
    checks = dr.trajectory_checks(pairs, pairedmem_bench.policy, pairedmem_bench.behaviours)
    assert checks == {"queries": 32 * len(pairs), "naming_attribute": 0, "trajectory_problems": 0}
    # a query that names the protected attribute is counted
    p = pairs[0]
    t0 = p.turns[0]
    named = dataclasses.replace(t0, query=Query("I have diabetes, any ideas?", t0.query.intent, t0.query.qtype))
    bad = dataclasses.replace(p, turns=(named,) + tuple(p.turns[1:]))
    assert dr.trajectory_checks([bad], pairedmem_bench.policy, pairedmem_bench.behaviours)["naming_attribute"] == 1


def _transfer_report():
    ed = TQ.edit_distribution([("I was laid off last month.", "I was moved to a new team last month."),
                               ("My sugar is high.", "My tea is hot.")])
    return {"unsupported_target_required": 0, "target_required": 10, "pairs_differing_outside_group": 0,
            "pairs_d_not_evidence": 0, "rule_violations": 0, "evidence_sentences_checked": 5, "m_prime_problems": 0,
            "background_conflicts": 0, "pregnancy_pairs_persona_misfit": 0,
            "distinct_evidence": {"diabetes": 1, "job_loss": 1}, "max_reuse": {"diabetes": 1, "job_loss": 1},
            "max_reuse_within_pair": 1, "evidence_without_source_kind": 0,
            "distinct_evidence_by_kind": {"diabetes": {SOURCE_KINDS[0]: 2}, "job_loss": {SOURCE_KINDS[-1]: 1}},
            "m_prime_edit_distance": {"diabetes": ed, "job_loss": ed}}


def test_transfer_quality_tables():
    rep = _transfer_report()
    tq = dr.transfer_quality_table(rep)
    assert list(tq.columns) == ["figure", "measured", "goal", "met"]
    assert tq.equals(pd.DataFrame(TQ.quality_table(rep))[["figure", "measured", "goal", "met"]])
    kinds = dr.evidence_kind_table(rep)
    assert list(kinds.columns) == list(SOURCE_KINDS) and list(kinds.index) == ["diabetes", "job_loss"]
    assert kinds.loc["diabetes", SOURCE_KINDS[0]] == 2 and kinds.loc["job_loss", SOURCE_KINDS[0]] == 0
    assert all(pd.api.types.is_integer_dtype(t) for t in kinds.dtypes)
    ed = dr.edit_distance_table(rep)
    assert list(ed.index) == ["diabetes", "job_loss"] and "share_bins" not in ed.columns
    assert list(ed.columns) == ["n", "words_min", "words_median", "words_max", "share_median",
                                *(lbl for _, lbl in TQ.EDIT_BINS)]
    assert ed.loc["diabetes", "n"] == 2 and ed[[lbl for _, lbl in TQ.EDIT_BINS]].sum(axis=1).tolist() == [2, 2]


def test_evidence_examples_take_the_first_of_each_attribute():
    from dpmv_lib.bench import lexicon

    def ev(a, i):
        return SimpleNamespace(attribute=a, source=f"src{i}", text=f"{a} {i}", edited=f"neutral {i}")

    track = SimpleNamespace(evidence={a: [ev(a, i) for i in range(5)] for a in lexicon.ATTRIBUTES})
    tab = dr.evidence_examples(track, per_attribute=2)
    assert list(tab.columns) == ["attribute", "source", "M", "M' (reviewed)"]
    assert list(tab["attribute"]) == [a for a in lexicon.ATTRIBUTES for _ in range(2)]
    assert list(tab["M"][:2]) == [f"{lexicon.ATTRIBUTES[0]} 0", f"{lexicon.ATTRIBUTES[0]} 1"]


def test_manifest_tables_one_per_frozen_track(tmp_path):
    files = {"pairs.jsonl": {"bytes": 10, "rows": 2, "sha256": "ab"}, "specs.jsonl": {"bytes": 4, "rows": 1,
                                                                                      "sha256": "cd"}}
    (tmp_path / "pairedmem").mkdir()
    (tmp_path / "pairedmem" / "manifest.json").write_text(json.dumps({"files": files}))
    (tmp_path / "transfer").mkdir()                              # no manifest: left out
    tabs = dr.manifest_tables(tmp_path)
    assert len(tabs) == 1
    assert tabs[0].to_dict("records") == [{"track": "pairedmem", "file": k, **v} for k, v in files.items()]
    committed = project_root() / "data"
    if (committed / "pairedmem" / "manifest.json").exists():
        m = json.loads((committed / "pairedmem" / "manifest.json").read_text())
        assert list(dr.manifest_tables(committed, ("pairedmem",))[0]["file"]) == list(m["files"])


# ---- notebook 01 steps ----------------------------------------------------------------------------------
def test_shown_tables_blank_missing_figures_and_print_counts_as_integers():
    df = pd.DataFrame({"q": ["a", "b|c"], "ours": [320.0, 16 / 3], "paper": ["384", float("nan")],
                       "ok": [True, False]})
    shown = dr._blank(df)
    assert shown.to_dict("records") == [{"q": "a", "ours": 320, "paper": "384", "ok": True},
                                        {"q": "b|c", "ours": "5.3333", "paper": "", "ok": False}]
    md = dr._markdown(df)
    assert "nan" not in md and "b\\|c" in md and "320.0" not in md


@pytest.fixture(scope="module")
def built(pairedmem_bench):
    """The committed PairedMem benchmark as a build: its manifest's counts stand for the build's."""
    counts = pairedmem_bench.manifest["counts"]
    pm = SimpleNamespace(counts=lambda: counts, pairs=pairedmem_bench.pairs, candidates=())
    return dr.Built(dr.DataBuild(pm, None, "corpora missing", {}, {}), pairedmem_bench)


@pytest.fixture
def run(tmp_path):
    from dpmv_lib.experiments import session

    return session.start("01", profile="smoke", results_dir=str(tmp_path / "results"))


def test_table_steps_write_their_tables_and_count_the_matches(built, run):
    t6 = dr.table6_step(run, built)
    shown = t6.tables["ours beside the paper"]
    assert "nan" not in shown.astype(str).to_string() and shown.loc[0, "ours"] == 384
    assert t6.finding.startswith("11 of 13 counts the paper gives match it exactly; the others: S3 passed validation")
    assert (run.tables_dir / "table6_pairedmem_construction.csv").is_file()
    t5 = dr.table5_step(run, built)
    assert t5.figures["group sizes, overlap and query types"].is_file()
    assert t5.finding == "5 of 5 figures match the paper."
    assert "skipped" in dr.transfer_quality_step(run, built).finding
    assert "skipped" in dr.table7_step(run, built).finding


def test_example_and_trajectory_steps(built, run):
    ex = dr.example_pair_step(run, built)
    assert "exactly the protected group $I_a$" in ex.finding
    assert len(pd.read_csv(run.tables_dir / "01_example_pair.csv")) == 28
    tr = dr.trajectory_step(run, built)
    assert tr.finding.startswith("The block has 4 neutral, 8 target, 4 distractor turns; of 10240 queries 0 name")
    assert len(pd.read_csv(run.tables_dir / "01_example_trajectory.csv")) == 32


def test_policy_and_manifest_steps(tmp_path):
    from dpmv_lib.experiments import session

    run = session.start("01", profile="smoke", results_dir=str(tmp_path / "r"), data_dir=str(project_root() / "data"))
    assert "8 templates (2 with overlapping groups)" in dr.policy_step(run).finding
    files = dr.manifest_step(run)
    assert files.finding.startswith(f"{len(files.tables['files and checksums'])} files in")
