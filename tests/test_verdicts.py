"""Verdicts from stated tests: the statistics, not only that they run."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dpmv_lib.core.errors import ParameterError
from dpmv_lib.evaluate.audit import AuditConfig, summarise_scores
from dpmv_lib.experiments import verdicts as V

ATTRS = ("debt", "diabetes", "job_loss", "pregnancy")


def _scores(shifts: dict[str, float], n: int = 20, seeds=(0, 1, 2), seed: int = 0, common: bool = True) -> pd.DataFrame:
    """Auditor scores: per pair a common latent value (shared by every method when ``common``),
    plus per-method M-side shift and small noise."""
    rng = np.random.default_rng(seed)
    latent = rng.normal(size=(len(ATTRS), n, 2))
    rows = []
    for method, shift in shifts.items():
        own = rng.normal(size=(len(ATTRS), n, 2)) if not common else 0
        for ai, a in enumerate(ATTRS):
            for i in range(n):
                for si, side in enumerate(("M", "M'")):
                    for s in seeds:
                        base = (latent if common else own)[ai, i, si]
                        rows.append({"track": "pairedmem", "response_model": "surrogate", "method": method,
                                     "pair_id": f"{a}-{i}", "attribute": a, "side": side, "seed": s, "horizon": 16,
                                     "score": base + (shift if side == "M" else 0.0) + 0.01 * rng.normal()})
    return pd.DataFrame(rows)


def _auc_claim(a: str, b: str, margin: float = 0.0) -> V.BootClaim:
    get = lambda g: g("pairedmem", "surrogate", a, "auc") - g("pairedmem", "surrogate", b, "auc")  # noqa: E731
    return V.BootClaim("T", f"AUC of {a} above {b}", "AUC difference", (V.Case("pairedmem/surrogate", get, margin),))


def test_point_estimates_match_the_table_summaries():
    sc = _scores({"A": 0.5, "B": 0.0})
    met = V.paired_bootstrap(sc, n_boot=200, seed=1)
    summ = summarise_scores(sc, AuditConfig(n_boot=0)).set_index("method")
    for m in ("A", "B"):
        assert met.point[("pairedmem", "surrogate", m, "auc")] == pytest.approx(summ.at[m, "auc"], abs=1e-12)
        assert met.point[("pairedmem", "surrogate", m, "tpr")] == pytest.approx(summ.at[m, "tpr"], abs=1e-12)
    assert len(met.boot[("pairedmem", "surrogate", "A", "auc")]) == 200


def test_difference_inside_the_noise_is_inconclusive():
    sc = _scores({"A": 0.0, "B": 0.0}, common=False, seed=0)
    t = V.decide([_auc_claim("A", "B")], V.paired_bootstrap(sc, n_boot=400, seed=0))
    assert t["verdict"].iloc[0] == "INCONCLUSIVE"
    assert t["ci_lo"].iloc[0] < 0 < t["ci_hi"].iloc[0]


def test_false_verdicts_under_the_null_are_rare():
    """With no true difference, HOLDS or DOES NOT HOLD comes out in about 5% of data sets (the
    nominal level; the bound 0.15 leaves room for 60 draws: P(>= 10 of 60 | 5%) < 0.3%)."""
    decided = 0
    for sd in range(60):
        sc = _scores({"A": 0.0, "B": 0.0}, common=False, seed=100 + sd, seeds=(0,))
        t = V.decide([_auc_claim("A", "B")], V.paired_bootstrap(sc, n_boot=300, seed=sd))
        decided += t["verdict"].iloc[0] != "INCONCLUSIVE"
    assert decided / 60 <= 0.15


def test_clear_difference_holds_and_its_reverse_does_not():
    met = V.paired_bootstrap(_scores({"A": 3.0, "B": 0.0}, common=False), n_boot=400, seed=0)
    t = V.decide([_auc_claim("A", "B"), _auc_claim("B", "A")], met)
    assert list(t["verdict"]) == ["HOLDS", "DOES NOT HOLD"]
    assert t["ci_lo"].iloc[0] > 0 and t["ci_hi"].iloc[1] < 0
    assert np.allclose(t["p_holm"], 2 * 2 / 401)  # smallest bootstrap p, doubled (two-sided), times m = 2


def test_pairing_resolves_a_small_shift_that_unpaired_cis_would_not():
    """A and B share each pair's latent value; A adds a small shift on M. The paired difference is
    decided although the two AUC CIs overlap."""
    met = V.paired_bootstrap(_scores({"A": 0.35, "B": 0.0}, n=30, seed=5), n_boot=500, seed=0)
    t = V.decide([_auc_claim("A", "B")], met)
    a, b = (met.boot[("pairedmem", "surrogate", m, "auc")] for m in ("A", "B"))
    assert np.quantile(a, 0.025) < np.quantile(b, 0.975)  # marginal CIs overlap
    assert t["verdict"].iloc[0] == "HOLDS"


def test_ceiling_check_is_two_sided():
    met = V.paired_bootstrap(_scores({"A": 3.0}, common=False), n_boot=300, seed=0)
    auc = lambda g: g("pairedmem", "surrogate", "A", "auc")  # noqa: E731
    above = V.BootClaim("X", "learned <= ceiling", "AUC", (V.Case("c", auc, 0.6, "<"),), kind="ceiling")
    below = V.BootClaim("Y", "learned <= ceiling", "AUC", (V.Case("c", auc, 1.0001, "<"),), kind="ceiling")
    t = V.decide([above, below], met)
    assert list(t["verdict"]) == ["ERROR", "HOLDS"]
    assert t["p_holm"].isna().all()  # consistency checks stay outside the Holm family


def test_claim_over_cases_is_decided_by_its_weakest_case():
    met = V.paired_bootstrap(_scores({"A": 3.0, "B": 0.0, "C": 0.0}, common=False, seed=2), n_boot=300, seed=0)
    g = lambda m: (lambda get: get("pairedmem", "surrogate", m, "auc"))  # noqa: E731
    c = V.BootClaim("Z", "A and B above chance", "AUC", (V.Case("A", g("A"), 0.5), V.Case("B", g("B"), 0.5)))
    t = V.decide([c], met)
    assert t["verdict"].iloc[0] != "HOLDS"
    assert "binding case: B" in t["statistic"].iloc[0]


def test_holm_matches_a_hand_computation():
    p = [0.01, 0.04, 0.03, 0.005]
    # sorted 0.005, 0.01, 0.03, 0.04 -> 4*0.005=0.02, 3*0.01=0.03, 2*0.03=0.06, 1*0.04 -> max(0.06, 0.04)
    assert np.allclose(V.holm(p), [0.03, 0.06, 0.06, 0.02])
    assert np.isnan(V.holm([np.nan, 0.1])[0])


def test_holm_turns_a_marginal_claim_inconclusive():
    """Among many noise claims, a claim significant only without correction is INCONCLUSIVE."""
    met = V.paired_bootstrap(_scores({"A": 0.0, "B": 0.0}, common=False, seed=11), n_boot=1000, seed=0)
    t1 = V.decide([_auc_claim("A", "B", margin=-0.2)], met)
    assert t1["verdict"].iloc[0] == "HOLDS"
    p_single = float(t1["p"].iloc[0])
    fam = [_auc_claim("A", "B", margin=-0.2)] + [_auc_claim("A", "B")] * 30
    t = V.decide(fam, V.paired_bootstrap(_scores({"A": 0.0, "B": 0.0}, common=False, seed=11), n_boot=1300, seed=0))
    assert t["p_holm"].iloc[0] >= p_single
    with pytest.raises(ParameterError, match="n_boot >= 1240"):
        V.decide(fam, met)


def test_utility_bootstrap_matches_summarise_utility():
    from dpmv_lib.evaluate.judge import summarise_utility

    rng = np.random.default_rng(0)
    rows = []
    for m in ("A", "B"):
        for a in ATTRS:
            for i in range(6):
                for side in ("M", "M'"):
                    for s in (0, 1):
                        rows.append({"track": "pairedmem", "response_model": "surrogate", "method": m,
                                     "pair_id": f"{a}-{i}", "attribute": a, "side": side, "seed": s, "failed": False,
                                     **{d: 2.0 for d in ("relevance", "correctness", "actionability",
                                                         "personalisation")},
                                     "U": rng.uniform(), "tRec": rng.uniform() if side == "M" else np.nan,
                                     "Unsup": rng.uniform() if side == "M'" else np.nan})
    ut = pd.DataFrame(rows)
    met = V.paired_bootstrap(utility=ut, n_boot=200, seed=0)
    su = summarise_utility(ut, n_boot=0).set_index("method")
    for m in ("A", "B"):
        for k in ("U", "tRec", "Unsup"):
            assert met.point[("pairedmem", "surrogate", m, k)] == pytest.approx(su.at[m, k], abs=1e-12)


def test_exact_claims_and_missing_cases():
    t = V.decide([V.ExactClaim("E", "exact", "loss", True, "ok"),
                  V.BootClaim("N", "needs a method the run lacks", "AUC",
                              (V.Case("x", lambda g: g("pairedmem", "surrogate", "nope", "auc")),))],
                 V.paired_bootstrap(_scores({"A": 0.0}), n_boot=100))
    assert list(t["verdict"]) == ["HOLDS", "NOT EVALUATED"]
    assert t["test"].iloc[0] == "exact"
    assert "| E |" in V.claims_markdown(t)


def test_bad_input_is_named():
    with pytest.raises(ParameterError, match="n_boot"):
        V.paired_bootstrap(_scores({"A": 0.0}), n_boot=10)
    with pytest.raises(ParameterError, match="lacks columns"):
        V.paired_bootstrap(_scores({"A": 0.0}).drop(columns=["score"]))
    with pytest.raises(ParameterError, match="direction"):
        V.Case("x", lambda g: 0.0, 0.0, ">=")


def test_flips_ignore_inconclusive():
    a = pd.DataFrame({"id": ["C1", "C2", "C3"], "verdict": ["HOLDS", "HOLDS", "INCONCLUSIVE"]})
    b = pd.DataFrame({"id": ["C1", "C2", "C3"], "verdict": ["DOES NOT HOLD", "INCONCLUSIVE", "HOLDS"]})
    assert list(V.flips(a, b)["id"]) == ["C1"]


def test_seed_stability_reads_runs_and_flags_flips(tmp_path):
    for seed, verdicts in ((0, ["HOLDS", "INCONCLUSIVE"]), (1, ["DOES NOT HOLD", "HOLDS"])):
        (tmp_path / str(seed) / "tables").mkdir(parents=True)
        pd.DataFrame({"id": ["C1", "C2"], "claim": ["a", "b"], "verdict": verdicts}).to_csv(
            tmp_path / str(seed) / "tables" / "rq1_claims.csv", index=False)
    t = V.seed_stability({0: str(tmp_path / "0"), 1: str(tmp_path / "1")}).set_index("id")
    assert bool(t.loc["C1", "flip"]) and not bool(t.loc["C2", "flip"])
    assert t.loc["C2", "seed 1"] == "HOLDS"
    with pytest.raises(ParameterError, match="no claims tables"):
        V.seed_stability({0: str(tmp_path / "missing")})
