"""Exact optimal auditor (dpmv_lib.evaluate.llr and .oracle): brute-force agreement, known answers,
error bounds, transcript tables."""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

from helpers.llr_reference import brute_force

from dpmv_lib.core.errors import ParameterError
from dpmv_lib.evaluate.llr import (_BIG, LLRDistribution, cell_ranks, merge_atoms, mixture,
                                   trajectory_distribution)
from dpmv_lib.evaluate.oracle import ceilings, pair_results, summary
from rq1_synth import make_transcripts


def _probs(rng, V, zero_first=False):
    p = rng.dirichlet(np.ones(V))
    if zero_first and V > 1:
        p[0] = 0
        p /= p.sum()
    return {f"v{i}": float(x) for i, x in enumerate(p)}


@pytest.mark.parametrize("seed", range(25))
def test_matches_brute_force_on_short_trajectories(seed):
    rng = np.random.default_rng(seed)
    turns = []
    for t in range(int(rng.integers(1, 5))):       # T <= 4
        slots = int(rng.integers(1, 3))
        V = int(rng.integers(1, 4))                 # tiny vocabularies
        turns.append(({f"s{j}": _probs(rng, V, seed % 4 == 0 and t == 0) for j in range(slots)},
                      {f"s{j}": _probs(rng, V, seed % 5 == 0 and t == 1) for j in range(slots)}))
    d = trajectory_distribution(turns)
    ref = brute_force(turns)
    assert d.auc() == pytest.approx(ref["auc"], abs=1e-10)
    assert d.tpr_at(0.05)[0] == pytest.approx(ref["tpr"], abs=1e-10)
    assert d.max_loss() == ref["max_loss"] or d.max_loss() == pytest.approx(ref["max_loss"], abs=1e-10)
    assert float(np.sum(d.p_m)) == pytest.approx(1.0) and float(np.sum(d.p_mp)) == pytest.approx(1.0)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 30))
def test_coarsened_results_are_rigorous_bounds(seed, max_atoms):
    """Merging on a coarse grid: the AUC/TPR are achievable (lower bounds) and within the error bound."""
    rng = np.random.default_rng(seed)
    turns = [({"s": _probs(rng, 3)}, {"s": _probs(rng, 3)}) for _ in range(4)]
    ref = brute_force(turns)
    d = trajectory_distribution(turns, max_atoms=max_atoms)
    assert d.auc() <= ref["auc"] + 1e-12 <= d.auc() + d.auc_error() + 1e-9
    tpr, err = d.tpr_at(0.05)
    assert tpr <= ref["tpr"] + 1e-12 <= tpr + err + 1e-9
    assert d.max_loss() == pytest.approx(ref["max_loss"], abs=1e-9)


def test_identical_distributions_give_chance():
    p = {"food": {"a": 0.2, "b": 0.5, "c": 0.3}}
    d = trajectory_distribution([(p, p)] * 4)
    assert d.auc() == pytest.approx(0.5)
    assert d.tpr_at(0.05)[0] == pytest.approx(0.05)   # randomised NP test: TPR = FPR
    assert d.max_loss() == 0.0


def test_disjoint_supports_give_one():
    d = trajectory_distribution([({"g": {"a": 1.0}}, {"g": {"b": 1.0}})])
    assert d.auc() == 1.0 and d.tpr_at(0.05)[0] == 1.0 and math.isinf(d.max_loss())
    s = LLRDistribution.separable()
    assert s.auc() == 1.0 and s.tpr_at(0.01)[0] == 1.0
    # a mixture of one separable and one identical pair: AUC = 1 - (1/2)(1/2)^2
    mix = mixture([s, LLRDistribution.point()])
    assert mix.auc() == pytest.approx(1 - 0.5 * 0.25)


def test_single_release_closed_form_and_power():
    p, q = {"s": {"a": 0.8, "b": 0.2}}, {"s": {"a": 0.4, "b": 0.6}}
    d = trajectory_distribution([(p, q)])
    # LR ranks b < a: AUC = P_M(a) P_M'(b) + 0.5 (P_M(a) P_M'(a) + P_M(b) P_M'(b))
    assert d.auc() == pytest.approx(0.8 * 0.6 + 0.5 * (0.8 * 0.4 + 0.2 * 0.6))
    assert d.max_loss() == pytest.approx(math.log(3))
    # two independent copies == a two-turn trajectory
    assert d.power(2).auc() == pytest.approx(trajectory_distribution([(p, q), (p, q)]).auc())


def test_pair_results_do_not_depend_on_the_worker_count():
    """The pairs run over forked workers: the same rows, distributions included."""
    df = make_transcripts(n_per_attr=6, turns=3)
    one, two = (pair_results(df, 3, keep_dists=True, workers=w) for w in (1, 2))
    pd.testing.assert_frame_equal(one.drop(columns=["dist", "resp_dist"]), two.drop(columns=["dist", "resp_dist"]))
    for a, b in zip(one["dist"], two["dist"]):
        for f in ("llr", "p_m", "p_mp", "lo", "hi"):
            np.testing.assert_array_equal(getattr(a, f), getattr(b, f))


def test_summary_does_not_depend_on_the_worker_count():
    """The (track, model, method) groups of the summary run over forked workers: the
    same table, bit for bit, with a Mapping of caps as well as one cap."""
    df = make_transcripts(n_per_attr=6, turns=3)
    pp = pair_results(df, 3, keep_dists=True, workers=1)
    caps = {a: 1.5 for a in pp["attribute"].unique()}
    for c in (2.0, caps):
        one, two = (summary(pp, caps=c, workers=w) for w in (1, 2))
        pd.testing.assert_frame_equal(one, two, check_exact=True)
        assert len(one) == pp.groupby(["track", "response_model", "method"]).ngroups


def _two_models_two_tracks() -> pd.DataFrame:
    """Two response models (the views shared), a second track, and one method of that track whose
    pairs are all in the train split (its summary then falls back to every pair)."""
    base = make_transcripts(n_per_attr=6, turns=3)
    other = make_transcripts(n_per_attr=3, turns=3, track="transfer", rng_seed=1)
    other.loc[other["method"] == "Views", "split"] = "train"
    two = pd.concat([base, other], ignore_index=True)
    two = pd.concat([two, two.assign(response_model="other-model")], ignore_index=True)
    return two.sample(frac=1.0, random_state=0).reset_index(drop=True)     # row order must not matter


@pytest.mark.parametrize("workers", [1, 2])
def test_ceilings_equal_pair_results_and_summary(workers):
    """``ceilings`` keeps only the evaluation pairs' distributions, in workers: the
    same two tables as pair_results + summary, bit for bit, for several options."""
    df = _two_models_two_tracks()
    caps = {a: 1.5 for a in df["attribute"].unique()}
    tables = []
    for kw in ({}, {"caps": caps, "fpr": 0.1}, {"eval_split": None}, {"source_track": "transfer"}):
        per_pair, table = ceilings(df, 3, workers=workers, **kw)
        tables.append(table)
        pp = pair_results(df, 3, keep_dists=True, fpr=kw.get("fpr", 0.05), workers=1)
        pd.testing.assert_frame_equal(per_pair, pp.drop(columns=["dist", "resp_dist"]), check_exact=True)
        pd.testing.assert_frame_equal(table, summary(pp, workers=1, **kw), check_exact=True)
    t = tables[0].set_index(["track", "response_model", "method"])
    assert t.loc[("pairedmem", "surrogate", "Views"), "n_eval_pairs"] == 8          # the test split
    assert t.loc[("transfer", "other-model", "Views"), "n_eval_pairs"] == 12        # train only: every pair
    with pytest.raises(ParameterError, match="lacks columns"):
        ceilings(df.drop(columns=["view_probs"]), 3)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.integers(-40, 40), st.sampled_from([int(_BIG), -int(_BIG)]),
                          st.integers(-(1 << 40), 1 << 40)), min_size=1, max_size=60))
def test_cell_ranks_are_numpy_unique(keys):
    """The counting grouping of merge_atoms (no sort of up to 4M keys per convolution)
    returns np.unique's cells and inverse exactly: dense ranges, wide ranges (the sort fallback),
    the +-inf sentinels alone or mixed in."""
    key = np.array(keys, dtype=np.int64)
    want, got = np.unique(key, return_inverse=True), cell_ranks(key)
    for w, g in zip(want, got):
        assert w.dtype == g.dtype and np.array_equal(w, g)


@pytest.mark.parametrize("seed", range(20))
def test_merge_atoms_matches_sorting_by_key(seed):
    """merge_atoms against a direct reference (np.unique, stable argsort): the same atoms bit for
    bit, with infinite and zero-mass atoms, exact ties and a forced coarse grid."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    llr = np.round(rng.normal(0, 2, n), int(rng.integers(1, 4)))    # rounding makes exact ties
    llr[rng.random(n) < 0.05] = np.inf
    llr[rng.random(n) < 0.05] = -np.inf
    pm, pq = rng.random(n), rng.random(n)
    pm[llr == -np.inf], pq[llr == np.inf] = 0.0, 0.0
    grid, max_atoms = (1e-9, 10_000) if seed % 2 else (1e-9, int(rng.integers(2, 30)))
    d = merge_atoms(llr, pm, pq, llr.copy(), llr.copy(), grid, max_atoms)
    fin = np.isfinite(llr)
    g = grid
    if fin.any():
        span = float(llr[fin].max() - llr[fin].min())
        g = span / max_atoms if span / grid > max_atoms else grid
    key = np.where(fin, np.floor(np.where(fin, llr, 0.0) / g), 0).astype(np.int64)
    key = np.where(llr == np.inf, _BIG, np.where(llr == -np.inf, -_BIG, key))
    uniq, inv = np.unique(key, return_inverse=True)
    if len(uniq) == n:
        order = np.argsort(key, kind="stable")
        want = (llr[order], pm[order], pq[order])
    else:
        s_pm, s_pq = np.bincount(inv, weights=pm), np.bincount(inv, weights=pq)
        lo, hi = np.full(len(uniq), np.inf), np.full(len(uniq), -np.inf)
        np.minimum.at(lo, inv, llr)
        np.maximum.at(hi, inv, llr)
        with np.errstate(divide="ignore", invalid="ignore"):
            rep = np.log(s_pm) - np.log(s_pq)
        rep = np.where(np.isfinite(rep), np.clip(rep, lo, hi), rep)
        rep[uniq == _BIG], rep[uniq == -_BIG] = np.inf, -np.inf
        want = (rep, s_pm, s_pq)
    for w, got in zip(want, (d.llr, d.p_m, d.p_mp)):
        np.testing.assert_array_equal(got, w)
    assert d.grid == g


def test_bad_probabilities_raise():
    with pytest.raises(ParameterError, match="sum to"):
        LLRDistribution.from_probs({"a": 0.5}, {"a": 1.0})
    with pytest.raises(ParameterError, match=">= 0"):
        LLRDistribution.from_probs({"a": -0.1, "b": 1.1}, {"a": 1.0})


def test_transcript_table_oracle():
    df = make_transcripts(n_per_attr=6, turns=3)
    pp = pair_results(df, 3, keep_dists=True)
    s = summary(pp, caps=2.0).set_index("method")
    assert s.loc["Same", "ceiling_auc"] == 0.5 and s.loc["Same", "max_loss"] == 0.0
    assert s.loc["Leaky", "ceiling_auc"] == pytest.approx(1.0) and not s.loc["Leaky", "max_loss_le_cap_all_pairs"]
    assert s.loc["Leaky", "response_ceiling_auc"] == pytest.approx(1.0)
    v = s.loc["Views"]
    assert 0.5 < v["ceiling_auc"] < v["ceiling_auc_seeds"] < 1.0     # more seeds, more evidence
    assert v["max_loss_le_cap_all_pairs"] and v["max_loss"] < 2.0
    assert v["n_eval_pairs"] == 8                                    # test pairs only for the ceiling
    # a public difference (e.g. a side channel in `released`) makes transcripts separable
    df2 = df.copy()
    sel = (df2["method"] == "Views") & (df2["side"] == "M") & (df2["turn"] == 0)
    df2.loc[sel, "released"] = [json.dumps({**json.loads(r), "top_score": 0.9}) for r in df2.loc[sel, "released"]]
    s2 = summary(pair_results(df2, 3, keep_dists=True)).set_index("method")
    assert s2.loc["Views", "ceiling_auc"] == pytest.approx(1.0) and not s2.loc["Views", "public_path_equal_all"]


def test_released_view_outside_support_is_an_error():
    df = make_transcripts(n_per_attr=1, turns=2, methods=("Views",))
    i = df.index[(df["side"] == "M")][0]
    df.loc[i, "views"] = json.dumps(["food.nonexistent"])
    with pytest.raises(ParameterError, match="zero probability"):
        pair_results(df, 2)


def test_missing_turns_raise():
    df = make_transcripts(n_per_attr=1, turns=2, methods=("Views",))
    with pytest.raises(ParameterError, match="turns 0..2"):
        pair_results(df[df["turn"] == 0], 3)
