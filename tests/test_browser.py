"""Notebooks 02-05 and 07 in a real browser: JupyterLab on loopback, headless Chromium.

* notebook 05 runs with the smoke profile and ``INTERACTIVE = True``; the B_a slider (key), the T
  slider (typed value and a drag), the mode toggle and the view toggle each change the displayed
  setting and the figure with exactly one frame and no collapse of the widget; no console errors;
* notebook 07 (the MemView playground) runs with the smoke profile and ``INTERACTIVE = True``; picking
  another pair, typing a turn, typing a query, choosing its intent, the B_a slider (key) and the method
  toggle each change the summary and the figure with exactly one frame and no collapse; no console errors;
* notebooks 02-04 run with the smoke profile without an error and show their tables as styled
  HTML tables (every cell that calls ``styled`` renders one).

Needs the Debian packages chromium + chromium-driver and ``pip install -e '.[browser]'``. Without
them the tests are skipped with the reason; in CI (CI=true, .ci/run installs them) they fail.
Screenshots go to $DPMV_SCREENSHOT_DIR (e.g. results/figures) when set, else to the tmp dir.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import nbformat
import pytest

from dpmv_lib import run as runner
from dpmv_lib.common.paths import project_root

ROOT = project_root()
NB = ROOT / "notebooks"
pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    from tests.helpers import lab as L

    why = L.missing()
    if why:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true but {why}: .ci/run must install them")
        pytest.skip(why)
    work = tmp_path_factory.mktemp("lab")
    env = {"PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
           **{k: os.environ.get(k, v) for k, v in runner.KERNEL_ENV_DEFAULTS.items()}}
    srv = L.LabServer.start(work, env=env)
    br = None
    try:
        br = L.Browser(srv)
        yield L, srv, br, work
    finally:
        if br is not None:
            br.close()
        srv.stop()


def _shots(tmp: Path) -> Path:
    d = Path(os.environ.get("DPMV_SCREENSHOT_DIR") or tmp)
    d.mkdir(parents=True, exist_ok=True)
    return d


def _prepare(name: str, work: Path, interactive: bool) -> tuple[str, nbformat.NotebookNode]:
    """A copy of notebooks/<name>.ipynb with the smoke parameters injected (as papermill does)."""
    from papermill.iorw import load_notebook_node
    from papermill.parameterize import parameterize_notebook

    src = NB / f"{name}.ipynb"
    declared = runner.notebook_parameters(src)
    params = {"profile": "smoke", "seed": 0, "results_dir": str(work / f"results_{name}"),
              "INTERACTIVE": interactive}
    if "data_dir" in declared:
        params["data_dir"] = str(ROOT / "data")
    nb = parameterize_notebook(load_notebook_node(str(src)), params)
    nb.metadata.pop("papermill", None)
    nbformat.write(nb, str(work / src.name))
    return src.name, nb


def _run(br, rel: str, nb) -> list[dict]:
    br.open_notebook(rel)
    br.run_all(timeout=600)
    cells = br.cells()
    n_code = sum(c.cell_type == "code" for c in nb.cells)
    assert len(cells) == n_code, f"{rel}: {len(cells)} code cells in the page, {n_code} in the notebook"
    errors = [(i, e[:400]) for i, c in enumerate(cells) for e in c["errors"]]
    assert not errors, f"{rel}: errors in the browser run: {errors}"
    return cells


def _severe(br) -> list[str]:
    return [e["message"][:300] for e in br.severe()]


def _stepper(br, start):
    """``step(act, *expect)``: do one input; exactly one new frame, whose label names ``expect``,
    and the widget keeps its height."""
    seen = {start["src"]}

    def step(act, *expect):
        m = br.measure(act)
        assert all(e in m.label for e in expect), f"label {m.label!r} lacks {expect}"
        assert m.src not in seen, "the figure did not change"
        seen.add(m.src)
        assert m.frames == 1, f"{m.frames} frames for one input"
        assert m.height_min >= 0.9 * m.height_before, f"the widget collapsed ({m.height_before} -> {m.height_min} px)"
        return m
    return step


def test_notebook05_widget_in_the_browser(lab, tmp_path):
    L, srv, br, work = lab
    rel, nb = _prepare("05_budget_sensitivity", work, interactive=True)
    _run(br, rel, nb)
    br.install_probe(".dpmv-explorer")
    el = br.element(".dpmv-explorer img.widget-image")
    # the notebook goes on past the widget: bring it into view (JupyterLab skips rendering what is off
    # screen, so the label is read as textContent, which does not depend on rendering)
    br.driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", el)
    br._wait(lambda: br.read()["label"], 120, "the widget's label")
    wd = L.WidgetDriver(br)
    shots = _shots(tmp_path)
    br.element(".dpmv-explorer").screenshot(str(shots / "widget_exact_grid.png"))
    start = br.read()
    assert "mode=on" in start["label"] and "B_a=2" in start["label"] and "T=16" in start["label"]
    step = _stepper(br, start)

    step(lambda: wd.key_b_a(True), "B_a=4", "T=16")
    step(lambda: wd.type_T(20), "B_a=4", "T=20")
    step(lambda: wd.click_toggle("dpmv-mode", "pre"), "mode=pre", "T=20")

    def drag():  # a drag sends one value on release (continuous_update=False): one frame
        from selenium.webdriver import ActionChains
        h = br.element(".dpmv-explorer .dpmv-T .noUi-handle")
        ActionChains(br.driver).click_and_hold(h).move_by_offset(-15, 0).move_by_offset(-15, 0) \
            .move_by_offset(-15, 0).release().perform()

    m = step(drag, "mode=pre")
    assert "T=20" not in m.label
    step(lambda: wd.click_toggle("dpmv-view", "paper's view"), "paper's view")
    step(lambda: wd.click_toggle("dpmv-mode", "on"), "mode=on", "paper's view")
    br.element(".dpmv-explorer").screenshot(str(shots / "widget_paper_view.png"))
    assert not _severe(br), f"browser console errors: {_severe(br)}"


def test_notebook07_playground_in_the_browser(lab, tmp_path):
    L, srv, br, work = lab
    rel, nb = _prepare("07_memview_playground", work, interactive=True)
    _run(br, rel, nb)
    root = ".dpmv-playground"
    br.install_probe(root)
    br.element(f"{root} img.widget-image")
    wd = L.WidgetDriver(br, root=root)
    shots = _shots(tmp_path)
    br.element(root).screenshot(str(shots / "playground_start.png"))
    start = br.read()
    assert "pair=pm-diabetes-000" in start["label"] and "turn=4/16" in start["label"], start["label"]
    step = _stepper(br, start)

    picked = {}
    step(lambda: picked.setdefault("pair", wd.key_select("dpmv-pair")), "turn=4/16")
    assert picked["pair"] != "pm-diabetes-000" and f"pair={picked['pair']}" in br.read()["label"]
    step(lambda: wd.type_slider("dpmv-turn", 9), f"pair={picked['pair']}", "turn=9/16")
    step(lambda: wd.type_text("dpmv-query", "Any quick dinner ideas for tonight?"), "turn=9/16", "typed")
    step(lambda: picked.setdefault("intent", wd.key_select("dpmv-intent")), "typed")
    assert f"intent={picked['intent']}" in br.read()["label"]
    step(lambda: wd.key_b_a(True), "B_a=4", "typed")
    step(lambda: wd.click_toggle("dpmv-method", "DP-MemView (pre)"), "DP-MemView (pre)", "B_a=4")
    br.element(root).screenshot(str(shots / "playground_after.png"))
    assert "responses" in br.driver.execute_script(
        "return document.querySelector(arguments[0]).innerText", root)
    assert not _severe(br), f"browser console errors: {_severe(br)}"


@pytest.mark.parametrize("name", ["02_mechanism", "03_rq1_privacy_utility", "04_rq2_safeguards"])
def test_notebooks_render_styled_tables(lab, name, tmp_path):
    L, srv, br, work = lab
    rel, nb = _prepare(name, work, interactive=False)
    cells = _run(br, rel, nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    # a cell that calls styled(), or a step cell (one dx.<module>.<step>(...) call, or run.timings()) that
    # shows a table other than a Markdown one (a claims table with its evidence): the result's tables are styled
    step = re.compile(r"^(dx\.\w+\.\w+\(.*\)|run\.timings\(\))$", re.S)
    want = [i for i, c in enumerate(code) if ("styled(" in c.source and not c.source.lstrip().startswith("if "))
            or (step.match(c.source.strip()) and cells[i]["tables"] > cells[i]["mdtables"])]
    assert want, f"{name}: no cell calls styled() or a step that shows a table"
    plain = [i for i in want if cells[i]["styled"] == 0]
    assert not plain, f"{name}: cells {plain} show no styled HTML table ({[cells[i]['texts'][:1] for i in plain]})"
    if name == "04_rq2_safeguards":
        from selenium.webdriver.common.by import By
        t = br.driver.find_elements(By.CSS_SELECTOR, ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-OutputArea-output "
                                                     "table[id^='T_']")[0]
        br.driver.execute_script("arguments[0].scrollIntoView()", t)
        t.screenshot(str(_shots(tmp_path) / "widget_styled_table_04.png"))
    assert not _severe(br), f"{name}: browser console errors: {_severe(br)}"
