"""Learned auditors beside C.5: known answers on constructed transcripts, the pooled
interpolated TPR, power against a ceiling, and the uncalibrated C.5 scores."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score

from dpmv_lib.core.errors import ParameterError
from dpmv_lib.evaluate import auditors as AU
from dpmv_lib.evaluate import auditor_summary as AS
from dpmv_lib.evaluate.audit import AuditConfig, fit_auditor, prefix_features, run_audit
from dpmv_lib.evaluate.encoders import HashingEncoder
from rq1_synth import make_transcripts

ATTRS = ("diabetes", "pregnancy", "debt", "job_loss")
CFG = AU.LearnedConfig(horizons=(4,), Cs=(0.1, 1.0, 10.0), folds=3)
ENC = HashingEncoder(256)
NULL_TOL = 0.12   # |AUC - 0.5| under the null: ~3.5 SD of the macro AUC over 4 x 12 test pairs


def split_of(i: int) -> str:
    return ("train", "train", "train", "validation", "test", "test")[i % 6]


def views_table(kind: str, *, n: int = 36, turns: int = 4, seeds=(0, 1), rng_seed: int = 0) -> pd.DataFrame:
    """A view-releasing method with one slot per turn. Turn 0's slot reads the pair's attribute
    (``affected``); the other turns read another attribute's items and release the same random
    view under M and M'. ``kind``: "view" - at turn 0 M releases ``food.special`` and M'
    ``food.generic`` (responses identical); "word" - identical views, the turn-0 response says
    "sugar" under M and "snack" under M'; "none" - identical views and responses; "law" - turn 0
    drawn independently per side from the SAME law."""
    rng = np.random.default_rng(rng_seed)
    rows = []
    for a in ATTRS:
        other = ATTRS[(ATTRS.index(a) + 1) % 4]
        for i in range(n):
            for seed in seeds:
                shared = [str(rng.choice(["food.generic", "food.special", "food.quick"])) for _ in range(turns)]
                for side in ("M", "M'"):
                    for t in range(turns):
                        v = shared[t]
                        if t == 0 and kind == "view":
                            v = "food.special" if side == "M" else "food.generic"
                        if t == 0 and kind == "law":
                            v = str(rng.choice(["food.generic", "food.special"]))
                        aff = [a] if t == 0 else [other]
                        released = json.dumps({"slots": [{"slot": "food", "view": v, "affected": aff,
                                                          "charged": aff, "fallback": False}]})
                        word = ("sugar" if side == "M" else "snack") if (t == 0 and kind == "word") else "meal"
                        rows.append(dict(track="pairedmem", pair_id=f"pm-{a}-{i:03d}", attribute=a, split=split_of(i),
                                         response_model="surrogate", method="V", side=side, seed=seed, turn=t,
                                         conditioning=f"View: {v}", views=json.dumps([v]), released=released,
                                         view_probs="{}", response=f"Plan {i} turn {t}: a {word} idea."))
    return pd.DataFrame(rows)


def auc_of(scores: pd.DataFrame, auditor: str) -> float:
    s = AS.summarise(scores)
    return float(s.loc[s["auditor"] == auditor, "auc"].iloc[0])


# ---- known answers ---------------------------------------------------------------------------------------
def test_views_auditor_separates_one_differing_view():
    df = views_table("view")
    assert auc_of(AU.views_scores(df, CFG), "views") >= 0.99
    links = {"food.special": list(ATTRS)}
    assert auc_of(AU.views_scores(df, CFG, view_links=links), "views-links") >= 0.99
    assert auc_of(AU.tfidf_scores(df, CFG), "tfidf") == 0.5    # the responses are identical


def test_tfidf_auditor_separates_one_differing_word():
    df = views_table("word")
    assert auc_of(AU.tfidf_scores(df, CFG), "tfidf") >= 0.99
    assert auc_of(AU.views_scores(df, CFG), "views") == 0.5    # the views are identical


def test_scores_do_not_depend_on_the_worker_count():
    """The learned auditors' fits run over forked workers: identical scores, in order."""
    df = views_table("law")
    for run in (lambda w: AU.views_scores(df, CFG, workers=w), lambda w: AU.tfidf_scores(df, CFG, workers=w)):
        pd.testing.assert_frame_equal(run(1), run(2))


def test_identical_transcripts_give_exactly_chance():
    df = views_table("none")
    for sc in (AU.views_scores(df, CFG), AU.tfidf_scores(df, CFG)):
        s = AS.summarise(sc).iloc[0]
        assert s["auc"] == 0.5 and s["auc_per_seed"] == 0.5
        assert s["tpr"] == pytest.approx(0.05)    # all scores tied: the ROC is the diagonal


def test_same_law_gives_chance_within_tolerance():
    df = views_table("law")
    for sc in (AU.views_scores(df, CFG), AU.tfidf_scores(df, CFG)):
        s = AS.summarise(sc).iloc[0]
        assert abs(s["auc"] - 0.5) < NULL_TOL and abs(s["auc_indep"] - 0.5) < NULL_TOL


def test_slots_not_reading_the_attribute_are_ignored():
    # turns 1..3 read another attribute's items: making their views differ under M and M' (an
    # impossible release for a compliant method) changes nothing, the auditor never looks there
    df = views_table("view")
    df2 = df.copy()
    here = (df2["turn"] > 0) & (df2["side"] == "M")
    df2.loc[here, "released"] = df2.loc[here, "released"].str.replace('"view": "food.', '"view": "food.x', regex=False)
    df2.loc[here, "views"] = json.dumps(["food.xquick"])
    assert (df2["released"] != df["released"]).sum() > 0
    a, b = AU.views_scores(df, CFG), AU.views_scores(df2, CFG)
    assert np.allclose(a["score"], b["score"])


# ---- splits, schema, determinism ---------------------------------------------------------------------------
def test_schema_splits_and_transfer_without_refit():
    pm = views_table("law", n=12)
    tr = pm[pm["split"] == "test"].assign(track="transfer", split="train")
    tr["pair_id"] = "tr" + tr["pair_id"].str[2:]
    df = pd.concat([pm, tr], ignore_index=True)
    for fn in (AU.views_scores, AU.tfidf_scores):
        sc = fn(df, CFG)
        assert list(sc.columns) == list(AU.SCORE_COLUMNS)
        ev = sc[sc["track"] == "pairedmem"]
        assert set(ev["pair_id"].str[-3:].astype(int) % 6) <= {4, 5}      # test pairs only
        a = ev.assign(k=ev["pair_id"].str[2:]).set_index(["k", "side", "seed"])["score"].sort_index()
        t = sc[sc["track"] == "transfer"]
        b = t.assign(k=t["pair_id"].str[2:]).set_index(["k", "side", "seed"])["score"].sort_index()
        assert np.allclose(a.to_numpy(), b.to_numpy())                  # same fitted auditor
        only_pm = fn(pm, CFG)
        assert np.allclose(only_pm["score"], ev["score"])                # transfer rows do not change the fit
        assert fn(df, CFG).equals(sc)                                    # deterministic


def test_scores_match_run_audit_schema_plus_auditor():
    df = make_transcripts(n_per_attr=6, turns=2)
    _, ref = run_audit(df, ENC, AuditConfig(horizons=(2,), n_boot=0))
    sc = AU.c5_scores(df, ENC, AuditConfig(horizons=(2,), n_boot=0))
    assert list(sc.columns) == list(ref.columns) + ["auditor"]
    k = list(AU.KEY_COLUMNS)
    c5 = sc[sc["auditor"] == "c5"].drop(columns="auditor").sort_values(k).reset_index(drop=True)
    ref = ref.sort_values(k).reset_index(drop=True)
    pd.testing.assert_frame_equal(c5[k], ref[k], check_dtype=False)
    assert np.allclose(c5["score"], ref["score"])                        # the paper's column, unchanged


def test_uncalibrated_scores_are_the_decision_function():
    df = make_transcripts(n_per_attr=6, turns=2, methods=("Views",))
    sc = AU.c5_scores(df, ENC, AuditConfig(horizons=(2,), n_boot=0))
    keys, feats, _ = prefix_features(df, ENC, (2,))
    keys["y"] = (keys["side"] == "M").astype(int)
    x, raw = feats[2], sc[sc["auditor"] == "c5-raw"]
    for attr in ATTRS:
        k = keys[keys["attribute"] == attr]
        tr, va, te = (k.index[k["split"] == s].to_numpy() for s in ("train", "validation", "test"))
        aud = fit_auditor(x[tr], keys["y"][tr], x[va], keys["y"][va], response_model="surrogate", method="Views",
                          attribute=attr, horizon=2)
        d = pd.Series(aud.clf.decision_function(x[te]),
                      index=pd.MultiIndex.from_frame(k.loc[te, ["pair_id", "side", "seed"]]))
        r = raw[raw["attribute"] == attr].set_index(["pair_id", "side", "seed"])["score"]
        assert np.allclose(r.sort_index().to_numpy(), d.sort_index().to_numpy())
        m = d.groupby(level=["pair_id", "side"]).mean().reset_index()   # seed-averaged, as summarise
        want = roc_auc_score(m["side"] == "M", m[0])
        got = AS.summarise(raw[raw["attribute"] == attr])["auc"].iloc[0]
        assert got == pytest.approx(want)


def test_inverting_platt_fit_is_undone_by_raw_scores():
    # validation pairs carry the cue on the OTHER side: Platt fits A > 0 and inverts the ranking
    df = make_transcripts(n_per_attr=6, turns=2, methods=("Leaky",))
    val = df["split"] == "validation"
    flip = {"M": "M'", "M'": "M"}
    df.loc[val, "side"] = df.loc[val, "side"].map(flip)
    s = AS.summarise(AU.c5_scores(df, ENC, AuditConfig(horizons=(2,), n_boot=0))).set_index("auditor")
    assert s.loc["c5", "auc"] == 0.0 and s.loc["c5-raw", "auc"] == 1.0


# ---- metrics -------------------------------------------------------------------------------------------
def test_pooled_interpolated_tpr_hand_computed():
    # two attributes x 5 pairs, one seed: 10 pooled negatives, so the lowest nonzero FPR is 0.1.
    pos = {"debt": [0.95, 0.8, 0.6, 0.4, 0.2], "diabetes": [0.9, 0.7, 0.5, 0.3, 0.1]}
    neg = {"debt": [0.8, 0.25, 0.15, 0.05, 0.0], "diabetes": [0.35, 0.24, 0.14, 0.04, 0.01]}
    rows = []
    for a in pos:
        for i in range(5):
            for side, v in (("M", pos[a][i]), ("M'", neg[a][i])):
                rows.append(dict(auditor="x", track="pairedmem", response_model="r", method="m", pair_id=f"{a}{i}",
                                 attribute=a, side=side, seed=0, horizon=1, score=v))
    s = AS.summarise(pd.DataFrame(rows)).iloc[0]
    # pooled ROC: 0.95, 0.9 positives -> (0, 0.2); 0.8 one positive tied with one negative ->
    # (0.1, 0.3); FPR 0.05 lies halfway along that diagonal: TPR 0.25
    assert s["tpr"] == pytest.approx(0.25)
    assert s["min_fpr"] == pytest.approx(0.1) and s["n_neg"] == 10 and s["n_pos"] == 10
    p, n = sum(pos.values(), []), sum(neg.values(), [])
    assert AS.tpr_at_fpr_interp(p, n, 0.1) == pytest.approx(0.7)      # top of the vertical run at FPR 0.1
    assert AS.tpr_at_fpr_interp(p, n, 0.0) == pytest.approx(0.2)
    assert AS.tpr_at_fpr_interp(p, n, 1.0) == 1.0
    assert AS.tpr_at_fpr_interp([1.0, 2.0], [0.0], 0.05) == 1.0
    with pytest.raises(ParameterError, match="fpr"):
        AS.tpr_at_fpr_interp(p, n, 1.5)


def test_power_against_the_ceiling():
    rng = np.random.default_rng(0)
    rows = []
    for method, n_seeds in (("det", 1), ("em", 3), ("flat", 1)):
        for a in ATTRS[:2]:
            for i in range(8):
                for seed in range(n_seeds):
                    for side in ("M", "M'"):
                        rows.append(dict(auditor="views", track="pairedmem", response_model="r", method=method,
                                         pair_id=f"{a}{i}", attribute=a, side=side, seed=seed if n_seeds > 1 else -1,
                                         horizon=16, score=rng.normal(0.6 if side == "M" else 0.0)))
    ceil = pd.DataFrame({"method": ["det", "em", "flat"], "ceiling_auc": [0.9, 0.7, 0.5],
                         "ceiling_auc_seeds": [0.9, 0.8, 0.5]})
    s = AS.summarise(pd.DataFrame(rows), ceil, n_boot=200, seed=1).set_index("method")
    assert s.loc["det", "ceiling"] == 0.9 and s.loc["em", "ceiling"] == 0.8    # all-seeds ceiling with seeds
    assert s.loc["det", "power"] == pytest.approx((s.loc["det", "auc"] - 0.5) / 0.4)
    assert s.loc["em", "power"] == pytest.approx((s.loc["em", "auc"] - 0.5) / 0.3)
    assert s.loc["em", "power_indep"] == pytest.approx((s.loc["em", "auc_indep"] - 0.5) / 0.2)
    assert np.isnan(s.loc["flat", "power"]) and np.isnan(s.loc["flat", "power_indep"])
    for m in ("det", "em"):
        assert s.loc[m, "auc_lo"] <= s.loc[m, "auc"] <= s.loc[m, "auc_hi"]
        assert s.loc[m, "power_lo"] <= s.loc[m, "power"] <= s.loc[m, "power_hi"]
    worse = s.reset_index().assign(auditor="tfidf", power=lambda d: d["power"] - 0.1)
    best = AS.best_auditor(pd.concat([worse, s.reset_index()]))
    assert set(best["auditor"]) == {"views"} and set(best["method"]) == {"det", "em"}
    with pytest.raises(ParameterError, match="several rows"):
        AS.summarise(pd.DataFrame(rows), pd.concat([ceil, ceil]))


def test_bad_inputs():
    df = views_table("none", n=6)
    with pytest.raises(ParameterError, match="fit_splits"):
        AU.LearnedConfig(fit_splits=("train", "test"))
    with pytest.raises(ParameterError, match="Cs"):
        AU.LearnedConfig(Cs=(0.0,))
    with pytest.raises(ParameterError, match="lacks columns"):
        AU.views_scores(df.drop(columns=["released"]), CFG)
    with pytest.raises(ParameterError, match="turns 0..4"):
        AU.tfidf_scores(df, AU.LearnedConfig(horizons=(5,)))
    with pytest.raises(ParameterError, match="absent"):
        AU.tfidf_scores(df.assign(track="transfer"), CFG)
    with pytest.raises(ParameterError, match="encoder"):
        AU.learned_audit(df, ("c5",))
    with pytest.raises(ParameterError, match="unknown auditors"):
        AU.learned_audit(df, ("nope",))
    assert AU.views_scores(make_transcripts(n_per_attr=6, turns=2, methods=("Same",)), CFG).empty
