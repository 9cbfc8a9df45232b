"""Stale results named: each result set records per notebook a fingerprint of the code,
data and profile that produced it, and ``python -m dpmv_lib.run --status`` compares it with the
checkout. Uses a tiny fake project tree (package, notebooks, data, results) in tmp_path."""
from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import pytest

from dpmv_lib import run as runner
from dpmv_lib.common import fingerprint as fp
from dpmv_lib.common.paths import project_root

SETTINGS = {"name": "default", "em_seeds": [0, 1, 2], "pairs": None}
MODULES = {
    "__init__.py": '"""api"""\nfrom .core import a\n',
    "core/__init__.py": '"""core"""\n',
    "core/a.py": "X = 1\n",
    "core/unused.py": "Z = 0\n",
    "bench/__init__.py": "",
    "bench/d.py": 'from pathlib import Path\nREVIEW = Path(__file__).with_name("review.json")\n',
    "bench/review.json": "{}\n",
    "experiments/__init__.py": "",
    "experiments/b.py": "def f():\n    from ..bench import d   # lazy imports count too\n    return d\n",
    "experiments/c.py": "import dpmv_lib.core.a as A\n",
}
NOTEBOOKS = {
    "01_uses_b": ["%matplotlib inline\nfrom dpmv_lib.experiments import b\n", "!echo shell lines are skipped"],
    "02_uses_c": ["import dpmv_lib.experiments.c\nprint(1)"],
}


def _notebook(path: Path, cells: list[str]) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    nbformat.write(nb, str(path))


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A project with two notebooks, a package, two data sets and a recorded result set."""
    for rel, text in MODULES.items():
        (tmp_path / "dpmv_lib" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "dpmv_lib" / rel).write_text(text)
    (tmp_path / "notebooks").mkdir()
    for name, cells in NOTEBOOKS.items():
        _notebook(tmp_path / "notebooks" / f"{name}.ipynb", cells)
    (tmp_path / "data" / "bench").mkdir(parents=True)
    (tmp_path / "data" / "bench" / "manifest.json").write_text('{"files": {"pairs.jsonl": "aaa"}}')
    (tmp_path / "data" / "labels").mkdir()
    (tmp_path / "data" / "labels" / "labels.jsonl").write_text('{"y": 1}\n')
    entries = []
    for name in NOTEBOOKS:
        f = fp.fingerprint(tmp_path / "notebooks" / f"{name}.ipynb", package_dir=tmp_path / "dpmv_lib",
                           root=tmp_path, data_dir=tmp_path / "data", profile_settings=SETTINGS)
        entries.append({"name": name, "input": f"notebooks/{name}.ipynb", "status": "ok", "run": "this",
                        "git_commit": "c0ffee" * 6 + "abcd", "fingerprint": f.to_dict()})
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "manifest.json").write_text(json.dumps(
        {"profile": "default", "git": {"commit": "c0ffee" * 6 + "abcd"}, "notebooks": entries}))
    return tmp_path


def _status(tree: Path, profiles=None) -> dict[str, fp.NotebookStatus]:
    rows = fp.result_status(tree / "results" / "manifest.json", root=tree, package_dir=tree / "dpmv_lib",
                            profiles={"default": SETTINGS} if profiles is None else profiles)
    return {r.notebook: r for r in rows}


def test_closure_follows_imports_parents_lazy_imports_and_package_data(tree):
    files = set(fp.source_files(tree / "notebooks" / "01_uses_b.ipynb", tree / "dpmv_lib", tree))
    assert files == {"notebooks/01_uses_b.ipynb", "dpmv_lib/__init__.py", "dpmv_lib/core/__init__.py",
                     "dpmv_lib/core/a.py", "dpmv_lib/experiments/__init__.py", "dpmv_lib/experiments/b.py",
                     "dpmv_lib/bench/__init__.py", "dpmv_lib/bench/d.py", "dpmv_lib/bench/review.json"}
    other = set(fp.source_files(tree / "notebooks" / "02_uses_c.ipynb", tree / "dpmv_lib", tree))
    assert "dpmv_lib/experiments/c.py" in other and "dpmv_lib/bench/d.py" not in other
    assert "dpmv_lib/core/unused.py" not in files | other


def test_unchanged_tree_is_current(tree):
    assert {n: (r.state, r.reasons) for n, r in _status(tree).items()} == {
        "01_uses_b": ("current", ()), "02_uses_c": ("current", ())}


def test_a_changed_module_makes_the_notebooks_using_it_stale_and_is_named(tree):
    d = tree / "dpmv_lib" / "bench" / "d.py"
    d.write_text(d.read_text() + "X = 2\n")
    st = _status(tree)
    assert st["01_uses_b"].state == "stale"
    assert st["01_uses_b"].reasons == ("code changed: dpmv_lib/bench/d.py",)
    assert st["02_uses_c"].state == "current"          # it does not import bench.d
    (tree / "dpmv_lib" / "bench" / "review.json").write_text('{"x": 1}\n')   # package data counts
    assert "dpmv_lib/bench/review.json" in _status(tree)["01_uses_b"].reasons[0]


def test_a_new_import_is_named(tree):
    (tree / "dpmv_lib" / "experiments" / "c.py").write_text("from ..core import unused\n")
    reasons = _status(tree)["02_uses_c"].reasons
    assert reasons == ("code changed: dpmv_lib/experiments/c.py", "code now also uses: dpmv_lib/core/unused.py")


def test_data_change_is_stale_with_reason_data(tree):
    (tree / "data" / "bench" / "manifest.json").write_text('{"files": {"pairs.jsonl": "bbb"}}')
    (tree / "data" / "labels" / "labels.jsonl").write_text('{"y": 0}\n')   # no manifest: its files count
    for r in _status(tree).values():
        assert r.state == "stale" and r.reasons == ("data: bench changed, labels changed",)


def test_profile_change_is_stale_and_names_the_settings(tree):
    st = _status(tree, {"default": {**SETTINGS, "em_seeds": [0, 1]}})
    assert st["01_uses_b"].reasons == ("profile settings changed: em_seeds",)
    assert _status(tree, {})["01_uses_b"].reasons == ("profile: no longer defined",)
    # tuples (a live Profile.to_dict()) and lists (JSON) are the same settings
    assert _status(tree, {"default": {**SETTINGS, "em_seeds": (0, 1, 2)}})["01_uses_b"].state == "current"


def test_results_without_fingerprint_or_unfinished_are_unknown(tree):
    path = tree / "results" / "manifest.json"
    m = json.loads(path.read_text())
    del m["notebooks"][0]["fingerprint"]
    m["notebooks"][1].update(status="failed")
    path.write_text(json.dumps(m))
    st = _status(tree)
    assert (st["01_uses_b"].state, st["01_uses_b"].reasons) == ("unknown",
                                                                ("no fingerprint recorded (run at c0ffeec)",))
    assert (st["02_uses_c"].state, st["02_uses_c"].reasons) == ("unknown", ("last run failed",))
    m["notebooks"][0]["fingerprint"] = {"error": "OSError: gone"}
    path.write_text(json.dumps(m))
    assert _status(tree)["01_uses_b"].state == "unknown"


def test_removed_notebook_is_stale(tree):
    (tree / "notebooks" / "02_uses_c.ipynb").unlink()
    assert _status(tree)["02_uses_c"].reasons == ("notebook notebooks/02_uses_c.ipynb no longer exists",)


def test_result_sets_are_found_and_formatted(tree):
    (tree / "results" / "llm").mkdir()
    (tree / "results" / "llm" / "manifest.json").write_text(json.dumps({"profile": "llm", "notebooks": []}))
    (tree / "results" / "llm" / "samples").mkdir()
    (tree / "results" / "llm" / "samples" / "manifest.json").write_text('{"files": []}')   # not a run
    (tree / "results" / "cache").mkdir()
    (tree / "results" / "cache" / "manifest.json").write_text('{"profile": "x", "notebooks": []}')
    found = fp.find_result_sets(tree / "results")
    assert [p.relative_to(tree).as_posix() for p in found] == ["results/manifest.json", "results/llm/manifest.json"]
    (tree / "dpmv_lib" / "core" / "a.py").write_text("X = 3\n")
    text = fp.format_status({"results/manifest.json": list(_status(tree).values())},
                            ["01_uses_b", "02_uses_c", "03_new"])
    assert re.search(r"^  01_uses_b +stale +code changed: dpmv_lib/core/a\.py$", text, re.M)
    assert "not in this result set: 03_new" in text
    assert text.splitlines()[-1] == "0 current, 2 stale, 0 unknown"


def test_cli_status_exits_0_and_checks_its_arguments(tmp_path, capsys):
    rd = tmp_path / "r"
    rd.mkdir()
    (rd / "manifest.json").write_text(json.dumps({"profile": "smoke", "notebooks": [
        {"name": "02_mechanism", "input": "notebooks/02_mechanism.ipynb", "status": "ok"}]}))
    assert runner.main(["--status", "--results-dir", str(rd)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^  02_mechanism +unknown +no fingerprint recorded$", out, re.M)
    assert runner.main(["--status", "--results-dir", str(tmp_path / "none")]) == 2
    assert "no run manifest" in capsys.readouterr().err


def test_make_test_prints_the_status_without_touching_pytest_exit_codes():
    script = (project_root() / "tools" / "run_tests.sh").read_text()
    line = next(ln for ln in script.splitlines() if "-m dpmv_lib.run --status" in ln and not ln.startswith("#"))
    assert "|| " in line, "a failing status print must not fail make test"
    assert script.index(line) < script.index("-m pytest")


def test_a_description_edit_is_not_a_change_and_old_sets_still_name_profile_changes(tree):
    assert _status(tree, {"default": {**SETTINGS, "description": "reworded"}})["01_uses_b"].state == "current"
    path = tree / "results" / "manifest.json"
    m = json.loads(path.read_text())
    m["profile_settings"] = SETTINGS
    for e in m["notebooks"]:
        del e["fingerprint"]
    path.write_text(json.dumps(m))
    r = _status(tree, {"default": {**SETTINGS, "pairs": 16}})["01_uses_b"]
    assert (r.state, r.reasons) == ("unknown", ("no fingerprint recorded (run at c0ffeec)",
                                                "profile settings changed: pairs"))
