"""Notebook 05's steps: the verdicts against the exact ceilings, the "learned > ceiling" flags
explained with their intervals, and Table 3's figure (one labelled panel per metric)."""

import pandas as pd
import pytest

import dpmv_lib.experiments as dx
from dpmv_lib.core.errors import ParameterError

S, E = dx.sensitivity, dx.budget_explorer


def _t3(learned8=0.492, ceiling8=0.702):
    b = [1.0, 2.0, 4.0, 8.0]
    return pd.DataFrame({"sweep": "cap_magnitude", "selector": "em", "b_a": b, "k": 3,
                         "auc": [0.49, 0.5, 0.51, learned8], "ceiling_auc_seeds": [0.52, 0.54, 0.59, ceiling8]})


def _power(views_links8=0.695):
    methods = [S.setting_label(b, 3, "em") for b in (1, 2, 4, 8)]
    return pd.DataFrame({"method": methods, "best": "views-links", "auc views-links": [0.5, 0.52, 0.58, views_links8]})


def _claims(s1, s2, s6):
    return pd.DataFrame({"id": ["S1", "S2", "S6"], "verdict": [s1, s2, s6]})


def test_auditor_limits_says_the_learned_verdicts_reflect_the_auditor_with_the_numbers():
    tab, text = S.auditor_limits(_t3(), _claims("DOES NOT HOLD", "INCONCLUSIVE", "HOLDS"), _power())
    assert "At B_a = 8, K = 3 the C.5 auditor's AUC is 0.492 against an exact ceiling of 0.702" in text
    assert "while the views-links auditor reaches 0.695" in text
    assert "S1 is DOES NOT HOLD and S2 INCONCLUSIVE beside S6" in text and "reflect the auditor" in text
    assert list(tab["b_a"]) == [1.0, 2.0, 4.0, 8.0]


def test_auditor_limits_blames_nobody_when_the_auditor_reaches_the_ceiling():
    _, text = S.auditor_limits(_t3(learned8=0.69), _claims("HOLDS", "INCONCLUSIVE", "HOLDS"), _power())
    assert "reflect the auditor" not in text and text.endswith("S1 is HOLDS, S2 INCONCLUSIVE and S6 HOLDS.")


def test_auditor_limits_names_a_missing_setting():
    with pytest.raises(ParameterError, match="no Eq. \\(7\\) row at B_a=16"):
        S.auditor_limits(_t3(), _claims("HOLDS", "HOLDS", "HOLDS"), _power(), b_a=16)


def _scores(method, attr, pos, neg, seeds=(0, 1)):
    rows = []
    for i, (p, q) in enumerate(zip(pos, neg)):
        for s in seeds:
            rows += [{"method": method, "attribute": attr, "horizon": 16, "pair_id": f"{attr}{i}", "side": "M",
                      "seed": s, "score": p},
                     {"method": method, "attribute": attr, "horizon": 16, "pair_id": f"{attr}{i}", "side": "M'",
                      "seed": s, "score": q}]
    return pd.DataFrame(rows)


def test_attribute_intervals_match_the_auc_and_bracket_it():
    m = S.setting_label(2, 3, "em")
    sc = pd.concat([_scores(m, "diabetes", [0.9, 0.8, 0.7], [0.1, 0.2, 0.95]),
                    _scores(m, "debt", [0.6, 0.4], [0.5, 0.5])])
    iv = E.attribute_auc_intervals(sc, horizon=16, n_boot=200, seed=1).set_index("attribute")
    from sklearn.metrics import roc_auc_score
    ref = roc_auc_score([1, 1, 1, 0, 0, 0], [0.9, 0.8, 0.7, 0.1, 0.2, 0.95])
    assert iv.at["diabetes", "learned_auc"] == pytest.approx(ref)
    assert iv.at["diabetes", "auc_lo"] <= ref <= iv.at["diabetes", "auc_hi"]
    assert int(iv.at["debt", "n_test_pairs"]) == 2
    with pytest.raises(ParameterError, match="no auditor scores at horizon 8"):
        E.attribute_auc_intervals(sc, horizon=8)


def _paper_view(learned):
    return pd.DataFrame({"selector": "em", "b_a": 2.0, "k": 3, "mode": "on",
                         "attribute": [E.MACRO, "diabetes", "pregnancy"], "learned_auc": learned,
                         "ceiling_auc_seeds": [0.54, 0.54, 0.53]})


def test_learned_above_ceiling_is_explained_as_sampling_error_when_the_interval_reaches_it():
    m = S.setting_label(2, 3, "em")
    iv = pd.DataFrame({"method": [m, m], "attribute": ["diabetes", "pregnancy"], "learned_auc": [0.6, 1.0],
                       "auc_lo": [0.3, 0.5], "auc_hi": [0.9, 1.0], "n_test_pairs": [12, 12]})
    flags = E.above_ceiling(_paper_view([0.5, 0.6, 1.0]), iv)
    assert list(flags["attribute"]) == ["diabetes", "pregnancy"] and flags["sampling_error"].all()
    text = E.above_ceiling_sentence(flags, mode="on", b_a=2, k=3)
    assert "pregnancy: learned 1.000 (95% CI 0.500 to 1.000, 12 test pairs) vs ceiling 0.530" in text
    assert "each interval reaches down to its ceiling: the flags are the sampling error" in text
    wrong = E.above_ceiling(_paper_view([0.5, 0.6, 1.0]), iv.assign(auc_lo=[0.3, 0.9]))
    assert "is in error" in E.above_ceiling_sentence(wrong, mode="on", b_a=2, k=3)
    one_pair = E.above_ceiling(_paper_view([0.5, 0.6, 1.0]), iv.assign(auc_lo=[0.3, 1.0], n_test_pairs=1))
    assert one_pair["sampling_error"].all()
    assert "fewer than 5 test pairs" in E.above_ceiling_sentence(one_pair, mode="on", b_a=2, k=3)
    assert "no attribute's learned AUC" in E.above_ceiling_sentence(flags, mode="on", b_a=4, k=3)


def test_table3_figure_has_one_labelled_panel_per_metric(tmp_path):
    t3 = pd.DataFrame({"sweep": ["cap_magnitude"] * 2 + ["granularity"] * 2, "selector": "em",
                       "b_a": [1.0, 8.0, 2.0, 2.0], "k": [3, 3, 2, 4], "auc": 0.5, "paper_auc": 0.55, "trec": 0.1,
                       "paper_trec": 0.5, "unsup": 0.1, "paper_unsup": 0.12, "ceiling_auc": 0.6})
    fig = S.plot_table3(t3, tmp_path / "t3.png")
    labels = [ax.get_ylabel() for ax in fig.axes]
    assert labels == ["AUC (auditor)", "tRec (judge, on M)", "Unsup (judge, on M')"] * 2
    assert (tmp_path / "t3.png").is_file()
