"""Paper-vs-reproduced Table 2: loading the reference, merging, differences, rendering."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from dpmv_lib.core.errors import ParameterError
from dpmv_lib.experiments.tables import (DAGGER, build_table2, compare_with_paper, comparison_markdown,
                                         load_paper_table2, paper_model_of, table2_markdown, write_table)


@pytest.fixture(scope="module")
def paper():
    return load_paper_table2()


def test_paper_reference_loads(paper):
    assert set(paper["track"]) == {"pairedmem", "transfer"}
    assert len(paper) == 2 * 7 * 3
    g = paper[(paper["method"] == "GenericOnly")]
    assert g["by_construction"].all() and (g["auc"] == 0.5).all()
    with pytest.raises(ParameterError, match="not found"):
        load_paper_table2("/nonexistent/x.csv")


def test_paper_model_names():
    assert paper_model_of("Qwen2.5-7B-Instruct") == "Qwen2.5-7B"
    assert paper_model_of("gemma-2-9b-it") == "Gemma-2-9B"
    assert paper_model_of("llama-3.1-8b-instruct") == "Llama-3.1-8B"
    assert paper_model_of("surrogate") is None


def _table2(model="surrogate"):
    audit = pd.DataFrame({"track": ["pairedmem"] * 2, "response_model": [model] * 2,
                          "method": ["GenericOnly", "RawReadSet"], "horizon": [16, 16], "auc": [0.5, 0.9],
                          "tpr": [0.05, 0.6], "auc_lo": [0.5, 0.85], "auc_hi": [0.5, 0.95], "tpr_lo": [0.0, 0.5],
                          "tpr_hi": [0.0, 0.7], "by_construction": [True, False]})
    audit.loc[1, "tpr_lo"] = 0.0
    util = pd.DataFrame({"track": ["pairedmem"] * 2, "response_model": [model] * 2,
                         "method": ["GenericOnly", "RawReadSet"], "U": [0.8, 0.7], "tRec": [0.4, 0.5],
                         "Unsup": [0.05, 0.2], "n_failed": [0, 0]})
    return build_table2(audit, util, 16)


def test_comparison_differences(paper):
    t2 = _table2()
    assert list(t2["method"]) == ["GenericOnly", "RawReadSet"]
    cmp = compare_with_paper(t2, paper)
    r = cmp[(cmp["method"] == "RawReadSet") & (cmp["metric"] == "AUC")].iloc[0]
    assert r["paper_mean"] == pytest.approx(np.mean([0.842, 0.942, 0.925]))
    assert r["diff_vs_paper_mean"] == pytest.approx(0.9 - r["paper_mean"])
    assert math.isnan(r["diff_vs_same_model"])            # the surrogate is not a paper model
    cq = compare_with_paper(_table2("Qwen2.5-7B-Instruct"), paper)
    rq = cq[(cq["method"] == "RawReadSet") & (cq["metric"] == "U")].iloc[0]
    assert rq["diff_vs_same_model"] == pytest.approx(0.7 - 0.775)


def test_markdown_marks_dagger_and_writes(tmp_path, paper):
    t2 = _table2()
    md = table2_markdown(t2)
    assert "0.500" + DAGGER in md and "0.900 [0.85, 0.95]" in md
    assert "0.600 [0.00, 0.70]" in md                     # a CI is shown even when its bound is 0
    assert "RawReadSet" in comparison_markdown(compare_with_paper(t2, paper))
    paths = write_table(t2, tmp_path / "tables", "t2", md)
    assert paths.csv.exists() and paths.md.read_text().startswith("**PairedMem")
    assert len(pd.read_csv(paths.csv)) == 2


def test_build_table2_needs_the_horizon():
    with pytest.raises(ParameterError, match="horizon 8"):
        build_table2(pd.DataFrame({"horizon": [16], "track": ["p"], "response_model": ["m"], "method": ["x"]}),
                     pd.DataFrame(), 8)
