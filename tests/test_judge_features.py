"""Choosing the features of the judge's holistic dimensions (dpmv_lib.experiments.judge_features):
the kappa used to choose reads the fitting half only, finds a feature that carries the label, and
the fit refuses feature sets it cannot read."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dpmv_lib.core.errors import ParameterError
from dpmv_lib.evaluate import holistic as H
from dpmv_lib.evaluate import u_validity as UV
from dpmv_lib.evaluate.rubric import DIMENSIONS
from dpmv_lib.experiments import judge_features as JF


@pytest.fixture(scope="module")
def synthetic():
    """240 units (200 distinct responses) whose relevance follows feature ``query_max`` and nothing else."""
    rng = np.random.default_rng(3)
    n = 200
    F = rng.normal(size=(n, len(H.FEATURES)))
    signal = F[:, H.FEATURES.index("query_max")]
    labels = np.clip(np.rint(2 + 1.5 * signal + rng.normal(scale=0.5, size=n)), 0, 4)
    units = pd.DataFrame({"query": [f"q{i % 40}" for i in range(n)], "response": [f"answer {i}" for i in range(n)],
                          "response_model": np.where(np.arange(n) % 3 == 0, "smollm2", "surrogate"),
                          **{d: labels if d == "relevance" else rng.integers(0, 5, n) for d in DIMENSIONS}})
    dup = units.iloc[:40]                               # a response labelled in two units counts once in a fit
    units = pd.concat([units, dup], ignore_index=True)
    F = np.vstack([F, F[:40]])
    mask = np.zeros(len(units), bool)
    mask[np.r_[0:120, 200:240]] = True                  # duplicates stay with their original's half
    return units, F, mask


def test_a_feature_that_carries_the_label_is_found(synthetic):
    units, F, mask = synthetic
    good = JF.fitting_half_kappa(units, F, mask, "relevance", ("query_max",), shuffles=(0,))
    noise = JF.fitting_half_kappa(units, F, mask, "relevance", ("echo", "claim"), shuffles=(0,))
    assert good["all"] > 0.6 and abs(noise["all"]) < 0.25
    assert set(good) == {"all", "smollm2", "surrogate"}


def test_the_held_out_half_is_never_read(synthetic):
    units, F, mask = synthetic
    before = JF.fitting_half_kappa(units, F, mask, "relevance", ("query_max", "query_mean"), shuffles=(0,))
    scrambled = units.copy()
    rng = np.random.default_rng(0)
    scrambled.loc[~mask, "relevance"] = rng.integers(0, 5, int((~mask).sum()))
    F2 = F.copy()
    F2[~mask] = rng.normal(size=F2[~mask].shape)
    assert JF.fitting_half_kappa(scrambled, F2, mask, "relevance", ("query_max", "query_mean"), shuffles=(0,)) == before
    # while scrambling the fitting half's labels takes the signal away
    noisy = units.copy()
    noisy.loc[mask, "relevance"] = rng.permutation(noisy.loc[mask, "relevance"].to_numpy())
    assert JF.fitting_half_kappa(noisy, F, mask, "relevance", ("query_max",), shuffles=(0,))["all"] < 0.3


def test_bad_feature_sets_are_named(synthetic):
    units, F, mask = synthetic
    with pytest.raises(ParameterError, match="unknown or no columns"):
        JF.fitting_half_kappa(units, F, mask, "relevance", ("no_such_feature",))
    with pytest.raises(ParameterError, match="unknown dimension"):
        JF.fitting_half_kappa(units, F, mask, "fluency", ("query_max",))
    feats = pd.DataFrame(F, columns=list(H.FEATURES))
    with pytest.raises(ParameterError, match="dimension features"):
        H.fit(feats, units[list(DIMENSIONS)], anchors={"specific": ("a",), "generic": ("b",)},
              dimension_features={"relevance": ("no_such_feature",)})
    # a candidate set is what the fitted model reads
    m = H.fit(feats, units[list(DIMENSIONS)], anchors={"specific": ("a",), "generic": ("b",)},
              dimension_features={"relevance": ("query_max",)})
    assert all(b.columns in ((), ("query_max",)) for b in m.dimensions["relevance"])
    assert m.dimensions["correctness"][1].columns == H.DIMENSION_FEATURES["correctness"]


def test_candidates_are_valid_sets_other_than_the_committed_ones():
    assert set(JF.CANDIDATES) <= set(DIMENSIONS)
    for d, sets in JF.CANDIDATES.items():
        for cols in sets.values():
            assert set(cols) <= set(H.FEATURES) and set(H.FORM) <= set(cols)
            assert tuple(cols) != tuple(H.DIMENSION_FEATURES[d])


def test_content_features_are_projected_inside_each_training_part(synthetic):
    """A label carried by a direction of the content vectors is found through the content features,
    whose projection each training part fits on its own vectors (the held-out half's are never read)."""
    units, F, mask = synthetic
    rng = np.random.default_rng(4)
    V = rng.normal(size=(len(units), 80)) * np.r_[4.0, np.ones(79)]
    V[200:] = V[:40]
    y = units["relevance"].to_numpy(float)
    V[:, 0] = 4.0 * (y - 2) + rng.normal(scale=0.5, size=len(units))
    cols = ("echo", *H.CONTENT)
    got = JF.fitting_half_kappa(units, F, mask, "relevance", cols, V, shuffles=(0,))
    assert got["all"] > 0.6
    V2 = V.copy()
    V2[~mask] = rng.normal(size=V2[~mask].shape)
    assert JF.fitting_half_kappa(units, F, mask, "relevance", cols, V2, shuffles=(0,)) == got
    with pytest.raises(ParameterError, match="content vector per unit"):
        JF.fitting_half_kappa(units, F, mask, "relevance", cols)


def test_method_gaps_are_each_cells_weighted_error_on_u_scale():
    """method_gaps: per (response model, method), sum w (score - label) / 16 / sum w (a dimension's
    share of U, the mean of four 0-4 dimensions over 4); the largest in
    size is named with its cell; mismatched or non-finite inputs are refused."""
    units = pd.DataFrame({"response_model": ["m1", "m1", "m1", "m2"], "method": ["A", "A", "B", "A"]})
    y = np.array([0.0, 4.0, 2.0, 1.0])
    s = np.array([2.0, 4.0, 2.0, 0.0])
    w = np.array([1.0, 3.0, 1.0, 1.0])
    g = JF.method_gaps(units, y, s, w)
    assert g[("m1", "A")] == pytest.approx((1 * 2.0 + 3 * 0.0) / 16 / 4)
    assert g[("m1", "B")] == 0.0 and g[("m2", "A")] == pytest.approx(-1 / 16)
    assert JF._largest_gap(g) == {"largest method gap": -1 / 16, "gap at": "A (m2)"}
    with pytest.raises(ParameterError, match="method gaps"):
        JF.method_gaps(units, y, s[:3], w)
    with pytest.raises(ParameterError, match="method gaps"):
        JF.method_gaps(units, y, np.array([np.nan, 1, 1, 1]), w)


def test_the_study_reports_each_candidates_gap_in_the_committed_sets_worst_cell():
    """compare_feature_sets (hashing encoder, committed labels): the gap columns come last; the
    committed row's gap in its own worst cell is its largest gap; a candidate's is the same cell's."""
    from dpmv_lib.evaluate.encoders import HashingEncoder

    study = JF.compare_feature_sets(HashingEncoder(), {"correctness": {"separate + narration": (*H.SEPARATE,
                                                                                              *H.NARRATION)}})
    t = study.table
    assert list(t.columns[-3:]) == ["largest method gap", "gap at", JF.GAP_AT_COMMITTED]
    committed, candidate = t.iloc[0], t.iloc[1]
    assert committed[JF.GAP_AT_COMMITTED] == committed["largest method gap"]
    assert abs(candidate[JF.GAP_AT_COMMITTED]) <= abs(candidate["largest method gap"]) + 1e-12
    units, F, V, _ = UV.holistic_inputs(HashingEncoder(), None, "data")
    mask = UV.split_halves(units, UV.SPLIT_SEED)
    sub, _, y, w = JF._fitting_half(units, mask, "correctness")
    oof = JF._fitting_half_study(units, F, mask, "correctness", (*H.SEPARATE, *H.NARRATION), V)[1]
    gaps = pd.concat([JF.method_gaps(sub, y, s, w) for s in oof], axis=1).mean(axis=1)
    method, model = committed["gap at"].rsplit(" (", 1)
    assert candidate[JF.GAP_AT_COMMITTED] == pytest.approx(gaps[(model.rstrip(")"), method)], abs=1e-12)
    assert candidate["columns"] == committed["columns"] + 1 and "degradation other_user" in t
