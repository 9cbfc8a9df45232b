"""The judge against independent labels: the committed labels load, the statistics
are the textbook ones (recomputed here from the committed files), and the judge's grades per unit
come from the pair's real rubric."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import cohen_kappa_score

from dpmv_lib.common.paths import project_root
from dpmv_lib.core.errors import ParameterError
from dpmv_lib.evaluate import judge_agreement as JA
from dpmv_lib.evaluate.encoders import HashingEncoder
from dpmv_lib.evaluate.rubric_judge import RubricJudge

ROOT = project_root()
LABELS = "data/judge_labels"


def test_committed_labels_cover_the_issue_minimum():
    units = JA.load_units(LABELS, "a")
    assert len(units) >= 400
    assert set(units["response_model"]) == {"surrogate", "smollm2"}
    assert set(units["track"]) == {"pairedmem", "transfer"} and set(units["side"]) == {"M", "M'"}
    assert units["method"].nunique() >= 7
    kinds = units["item_kind"].value_counts()
    assert kinds["target_required"] >= 150 and kinds["unsupported"] >= 150


def test_stats_match_a_hand_computation():
    # binary (>= 2): reference F F T T, compared F T T F -> accuracy 0.5, kappa 0, precision 0.5, recall 0.5
    s = JA._stats(np.array([0, 0, 3, 4]), np.array([0, 2, 3, 1]), "x", "units")
    assert s["accuracy"] == 0.5 and s["kappa"] == pytest.approx(0.0)
    assert s["precision"] == 0.5 and s["recall"] == 0.5
    assert s["weighted_kappa"] == pytest.approx(cohen_kappa_score([0, 0, 3, 4], [0, 2, 3, 1], weights="quadratic",
                                                                  labels=list(range(5))))


def test_inter_annotator_kappa_is_recomputed_from_the_committed_files():
    if not (Path(LABELS) / "labels_b.jsonl").exists():
        pytest.skip("no second annotator yet")
    t = JA.inter_annotator(LABELS).set_index("what")
    a = pd.read_json(f"{LABELS}/labels_a.jsonl", lines=True).set_index("unit_id")
    b = pd.read_json(f"{LABELS}/labels_b.jsonl", lines=True).set_index("unit_id")
    units = pd.read_json(f"{LABELS}/sample.jsonl", lines=True).set_index("unit_id")
    assert len(b) >= 100
    for kind, name in JA.KINDS.items():
        ids = [i for i in b.index if units.at[i, "item_kind"] == kind]
        if len({*(a.loc[ids, "shown"] >= 2), *(b.loc[ids, "shown"] >= 2)}) < 2:
            continue
        k = cohen_kappa_score(a.loc[ids, "shown"] >= 2, b.loc[ids, "shown"] >= 2)
        assert t.at[f"shown: {name}", "kappa"] == pytest.approx(k)
    k = cohen_kappa_score(a.loc[b.index, "relevance"] >= 2, b["relevance"] >= 2)
    assert t.at["U: relevance", "kappa"] == pytest.approx(k)


def test_judge_units_grades_each_unit_with_its_pairs_rubric():
    from dpmv_lib.bench.datasets import load_benchmark

    units = JA.load_units(LABELS, "a")
    units = units[units["track"] == "pairedmem"].head(12)
    judged = JA.judge_units(units, {"pairedmem": load_benchmark("pairedmem", "data")}, RubricJudge(HashingEncoder()))
    assert judged["judge_shown"].between(0, 4).all() and not judged["judge_failed"].any()
    for d in JA.DIMENSIONS:
        assert judged[f"judge_{d}"].between(0, 4).all()
    t = JA.agreement(judged, by_model=False)
    assert set(t["what"]) >= {"shown: tRec items", "U: relevance"} and (t["units"] <= 12).all()


def test_default_labels_are_the_projects_whatever_the_cwd(tmp_path, monkeypatch):
    """A kernel started elsewhere (JupyterLab, papermill's cwd) reads the committed labels."""
    monkeypatch.chdir(tmp_path)
    assert len(JA.load_units()) == len(JA.load_units(ROOT / LABELS))
    assert not JA.inter_annotator().empty


def test_bad_labels_are_named(tmp_path):
    d = tmp_path / "labels"
    shutil.copytree(LABELS, d, ignore=shutil.ignore_patterns("*.parquet"))
    with pytest.raises(ParameterError, match="not found"):
        JA.load_units(d, "z")
    rows = [json.loads(x) for x in (d / "labels_a.jsonl").read_text().splitlines()]
    rows[0]["shown"] = 7
    (d / "labels_a.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    with pytest.raises(ParameterError, match="outside 0-4"):
        JA.load_units(d, "a")
    rows[0]["shown"], rows[1]["unit_id"] = 1, rows[0]["unit_id"]
    (d / "labels_a.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    with pytest.raises(ParameterError, match="duplicate"):
        JA.load_units(d, "a")


def test_fit_item_thresholds_reports_both_halves_and_picks_the_best_fit():
    from dpmv_lib.bench.datasets import load_benchmark

    units = JA.load_units(LABELS, "a")
    units = units[units["track"] == "pairedmem"].head(60)
    grid, chosen = JA.fit_item_thresholds(units, {"pairedmem": load_benchmark("pairedmem", "data")}, HashingEncoder(),
                                          floors=(0.05, 0.08), margin_steps=(0.0, 0.03), current=(0.08, 0.03))
    assert len(grid) == 4 and grid["chosen"].sum() == 1 and grid["current"].sum() == 1
    assert chosen["kappa_fit"] == pytest.approx(grid["kappa_fit"].max())
    assert {"kappa_held_out", "kappa_fit_tRec", "kappa_held_out_Unsup"} <= set(grid.columns)


@pytest.mark.parametrize("reading", ["enriched SmolLM2 draw", "second surrogate extension"])
def test_a_second_reading_is_recomputed_from_the_committed_files(reading):
    from dpmv_lib.experiments.judge_labels import SECOND_READINGS

    suffix, sample, first, again = SECOND_READINGS[reading]
    t = JA.inter_annotator(LABELS, JA.annotator_name(first), JA.annotator_name(again), sample).set_index("what")
    a = pd.read_json(f"{LABELS}/{first}", lines=True).set_index("unit_id")
    b = pd.read_json(f"{LABELS}/{again}", lines=True).set_index("unit_id")
    subset_file = {"smollm2": "subset_smollm2_c_b.txt", "surrogate_b": "subset_extra_b_b.txt"}[suffix]
    subset = (Path(LABELS) / subset_file).read_text().split()
    assert list(b.index) == subset and len(subset) == 60
    for d in ("relevance", "correctness", "actionability", "personalisation"):
        k = cohen_kappa_score(a.loc[subset, d] >= 2, b.loc[subset, d] >= 2)
        assert t.at[f"U: {d}", "kappa"] == pytest.approx(k, nan_ok=True) and t.at[f"U: {d}", "units"] == 60
    for d in ("relevance", "correctness", "actionability", "personalisation"):
        k = cohen_kappa_score(a.loc[subset, d] >= 2, b.loc[subset, d] >= 2)
        assert t.at[f"U: {d}", "kappa"] == pytest.approx(k, nan_ok=True) and t.at[f"U: {d}", "units"] == 60
