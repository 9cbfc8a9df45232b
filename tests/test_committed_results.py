"""The committed results (results/ for the default profile, results/llm/ for the llm profile) come
from one complete run at a clean commit, and the llm tables sit beside the surrogate and the
paper (issue 12)."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from dpmv_lib.experiments import instruments as I

ROOT = Path(__file__).resolve().parent.parent
COMMITTED = {"default": ROOT / "results", "llm": ROOT / "results" / "llm"}


@pytest.mark.parametrize("profile", sorted(COMMITTED))
def test_committed_manifest_is_one_complete_run_at_a_clean_commit(profile):
    path = COMMITTED[profile] / "manifest.json"
    m = json.loads(path.read_text())
    assert m["profile"] == profile, f"{path}: profile {m['profile']!r}"
    assert m["status"] == "ok", f"{path}: status {m['status']!r}"
    assert m["git"]["dirty"] is False, f"{path}: written from a dirty tree"
    assert len(m["git"]["commit"]) == 40
    names = [nb["name"] for nb in m["notebooks"]]
    on_disk = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert sorted(names) == on_disk, f"{path}: notebooks {names} vs {on_disk}"
    for nb in m["notebooks"]:
        assert (nb["status"], nb["run"]) == ("ok", "this"), f"{path}: {nb['name']} {nb['status']} {nb['run']}"
        assert nb["git_commit"] == m["git"]["commit"], f"{path}: {nb['name']} ran at another commit"


def test_llm_run_is_the_full_scale_profile():
    m = json.loads((COMMITTED["llm"] / "manifest.json").read_text())
    s = m["profile_settings"]
    assert s["responder"] == "openvino:smollm2@f32"
    assert s["pairs"] is None and s["transfer_pairs"] is None   # all pairs
    assert list(s["em_seeds"]) == [0, 1, 2]
    assert s["notebook_defaults"] == {"T_max": 16}


@pytest.mark.parametrize("name", sorted(I.TABLES))
def test_llm_instrument_tables_show_surrogate_smollm2_and_paper(name):
    """The committed side-by-side tables have a surrogate, a SmolLM2 and a paper column, and the
    SmolLM2 and paper values are those of the llm run's own tables (nothing copied from elsewhere)."""
    shown = pd.read_csv(COMMITTED["llm"] / "tables" / f"{name}_instruments.csv")
    for col in ("surrogate", "openvino:smollm2@f32", "paper"):
        assert col in shown.columns, f"no {col} column in {list(shown.columns)}"
        assert shown[col].notna().any(), f"{name}: the {col} column is empty"
    spec = I.TABLES[name]
    again = I.side_by_side(spec, [I.read_run(COMMITTED["llm"])])
    keys = [*spec.keys, "metric"]
    cols = keys + ["openvino:smollm2@f32", "paper"]
    pd.testing.assert_frame_equal(shown[cols].reset_index(drop=True), again[cols].reset_index(drop=True),
                                  check_dtype=False, rtol=1e-9)
