"""Read without running (issue 31): the executed notebooks of a committed result set are committed
beside its tables, one per notebook of its manifest, executed by that run, small (no widget state,
no progress-bar spam) and free of errors."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAX_BYTES = 3 * 2**20          # "a few MB" per executed copy
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def _tracked(path: Path) -> bool:
    r = subprocess.run(["git", "ls-files", "--error-unmatch", str(path.relative_to(ROOT))], cwd=ROOT,
                       capture_output=True, text=True)
    return r.returncode == 0


def _check_result_set(results: Path) -> None:
    m = json.loads((results / "manifest.json").read_text())
    assert m["notebooks"], results
    for entry in m["notebooks"]:
        path = ROOT / entry["output"]
        assert path.is_file() and _tracked(path), f"{path} is not committed"
        assert path.stat().st_size <= MAX_BYTES, f"{path}: {path.stat().st_size} bytes"
        nb = json.loads(path.read_text(encoding="utf-8"))
        assert "widgets" not in nb["metadata"], f"{path}: widget state"
        params = nb["metadata"]["papermill"]["parameters"]
        assert params["profile"] == m["profile"] and params["seed"] == m["seeds"]["seed"], path
        for i, cell in enumerate(nb["cells"]):
            if cell["cell_type"] != "code":
                continue
            assert cell["execution_count"] is not None, f"{path}: cell {i} not executed"
            for out in cell.get("outputs", []):
                assert out["output_type"] != "error", f"{path}: cell {i} raised"
                assert WIDGET_VIEW not in out.get("data", {}), f"{path}: cell {i} widget view"
                text = "".join(out.get("text", ""))
                assert "\r" not in text and "it/s]" not in text, f"{path}: cell {i} progress bar"


def test_default_executed_notebooks_are_committed_and_readable():
    _check_result_set(ROOT / "results")


@pytest.mark.xfail(strict=True, reason="the llm profile's full-scale rerun (issues 27 and 33) has not run since "
                   "executed copies were committed: hours of SmolLM2 generation on 2 CPU cores")
def test_llm_executed_notebooks_are_committed_and_readable():
    _check_result_set(ROOT / "results" / "llm")


def test_readme_links_the_executed_notebooks_first():
    readme = (ROOT / "README.md").read_text()
    first = readme.index("results/notebooks/")
    assert first < readme.index("## Profiles"), "the executed notebooks are not the first thing to read"
