"""The committed results (results/ for the default profile, results/llm/ for the llm profile) come
from one complete run at a clean commit, and the llm tables sit beside the surrogate and the
paper."""
from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from dpmv_lib.experiments import instruments as I

ROOT = Path(__file__).resolve().parent.parent
COMMITTED = {"default": ROOT / "results", "llm": ROOT / "results" / "llm"}


def _notebooks_at(commit: str) -> list[str]:
    """The notebooks of the repository at ``commit`` (those on disk when git cannot tell)."""
    r = subprocess.run(["git", "ls-tree", "--name-only", commit, "notebooks/"], cwd=ROOT, capture_output=True,
                       text=True)
    if r.returncode != 0:
        return sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    return sorted(Path(f).stem for f in r.stdout.split() if re.fullmatch(r"notebooks/\d\d_\w+\.ipynb", f))


@pytest.mark.parametrize("profile", sorted(COMMITTED))
def test_committed_manifest_is_one_complete_run_at_a_clean_commit(profile):
    path = COMMITTED[profile] / "manifest.json"
    m = json.loads(path.read_text())
    assert m["profile"] == profile, f"{path}: profile {m['profile']!r}"
    assert m["status"] == "ok", f"{path}: status {m['status']!r}"
    assert m["git"]["dirty"] is False, f"{path}: written from a dirty tree"
    assert len(m["git"]["commit"]) == 40
    names = [nb["name"] for nb in m["notebooks"]]
    expected = _notebooks_at(m["git"]["commit"])   # a notebook added after the run is not in it
    assert sorted(names) == expected, f"{path}: notebooks {names} vs {expected} at {m['git']['commit'][:8]}"
    for nb in m["notebooks"]:
        assert (nb["status"], nb["run"]) == ("ok", "this"), f"{path}: {nb['name']} {nb['status']} {nb['run']}"
        assert nb["git_commit"] == m["git"]["commit"], f"{path}: {nb['name']} ran at another commit"


def test_llm_run_is_the_llm_profile():
    """The committed llm results ran under the llm profile's current settings (SmolLM2 through
    OpenVINO, its pairs and seeds), not under an earlier version of it."""
    from dpmv_lib.experiments.profiles import get_profile

    m = json.loads((COMMITTED["llm"] / "manifest.json").read_text())
    ran = {k: v for k, v in m["profile_settings"].items() if k != "description"}
    want = {k: v for k, v in json.loads(json.dumps(get_profile("llm").to_dict())).items() if k != "description"}
    assert ran["responder"] == "openvino:smollm2@f32"
    assert ran == want


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


@pytest.mark.parametrize("name", sorted(I.TABLES))
def test_default_instrument_tables_are_committed_with_the_run(name):
    """A default run writes results/tables/<name>_instruments.* (notebooks 03-05): they are
    committed results, and their surrogate column is the default run's own table."""
    shown = pd.read_csv(COMMITTED["default"] / "tables" / f"{name}_instruments.csv")
    assert (COMMITTED["default"] / "tables" / f"{name}_instruments.md").is_file()
    spec = I.TABLES[name]
    again = I.side_by_side(spec, [I.read_run(COMMITTED["default"])])
    cols = [*spec.keys, "metric", "surrogate", "paper"]
    pd.testing.assert_frame_equal(shown[cols].reset_index(drop=True), again[cols].reset_index(drop=True),
                                  check_dtype=False, rtol=1e-9)
