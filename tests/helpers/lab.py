"""Drive JupyterLab in headless Chromium (selenium) for the browser test and the widget benchmark.

``LabServer.start(root)`` runs ``jupyter lab`` on 127.0.0.1 (free port, random token, config,
settings and workspaces in a throw-away directory, news and update checks off) serving ``root``;
``Browser(server)`` opens headless Chromium through chromedriver with the browser console log on.
``missing()`` names what is absent (chromium, chromedriver, jupyterlab, selenium) or is None.

Measuring a widget redraw (:meth:`Browser.measure`): a capture-phase listener stamps the input
(keydown / mousedown, ``performance.now()``), a load listener stamps every image that finishes
loading inside the widget (one per frame shown), and a MutationObserver records the widget's
height at every change (a collapse shows as a minimum far below the height before).
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from .net import free_port

CHROMIUM = ("chromium", "chromium-browser", "google-chrome")
DRIVER = ("chromedriver", "chromium-driver")


def _which(names: tuple[str, ...]) -> str | None:
    for n in names:
        p = shutil.which(n) or (f"/usr/bin/{n}" if os.access(f"/usr/bin/{n}", os.X_OK) else None)
        if p:
            return p
    return None


def missing() -> str | None:
    """What the browser harness lacks, or None when everything is there."""
    out = []
    if _which(CHROMIUM) is None:
        out.append("chromium (apt-get install chromium)")
    if _which(DRIVER) is None:
        out.append("chromedriver (apt-get install chromium-driver)")
    for mod, pkg in (("jupyterlab", "jupyterlab"), ("selenium", "selenium")):
        try:
            __import__(mod)
        except ImportError:
            out.append(f"{pkg} (pip install -e '.[browser]')")
    return ", ".join(out) + " not installed" if out else None


@dataclass
class LabServer:
    root: Path
    port: int
    token: str
    proc: subprocess.Popen
    home: Path
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @classmethod
    def start(cls, root: str | Path, *, env: dict[str, str] | None = None, timeout: float = 90) -> "LabServer":
        root = Path(root).resolve()
        home = Path(tempfile.mkdtemp(prefix="dpmv-lab-"))
        settings = home / "settings" / "@jupyterlab" / "apputils-extension"
        settings.mkdir(parents=True)
        (settings / "notification.jupyterlab-settings").write_text(
            json.dumps({"fetchNews": "false", "checkForUpdates": False}))
        port, token = free_port(), secrets.token_hex(16)
        e = dict(os.environ, **(env or {}))
        e.update(JUPYTER_CONFIG_DIR=str(home / "config"), JUPYTER_RUNTIME_DIR=str(home / "runtime"),
                 JUPYTERLAB_SETTINGS_DIR=str(home / "settings"), JUPYTERLAB_WORKSPACES_DIR=str(home / "ws"),
                 IPYTHONDIR=str(home / "ipython"), MPLBACKEND="module://matplotlib_inline.backend_inline")
        log = home / "lab.log"
        cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
               "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
               "--ServerApp.disable_check_xsrf=False", "--LabApp.news_url=", "--allow-root"]
        proc = subprocess.Popen(cmd, cwd=root, env=e, stdout=log.open("wb"), stderr=subprocess.STDOUT,
                                start_new_session=True)
        srv = cls(root, port, token, proc, home, log)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"jupyter lab exited ({proc.returncode}): {log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{srv.url}/api/status?token={token}", timeout=2) as r:
                    if r.status == 200:
                        return srv
            except OSError:
                time.sleep(0.3)
        srv.stop()
        raise RuntimeError(f"jupyter lab did not answer within {timeout} s: {log.read_text()[-2000:]}")

    def _api(self, method: str, path: str):
        req = urllib.request.Request(f"{self.url}/api/{path}?token={self.token}", method=method)
        with urllib.request.urlopen(req, timeout=30) as r:
            body = r.read()
        return json.loads(body) if body else None

    def shutdown_sessions(self) -> None:
        """Shut the kernels of earlier notebooks down (CPU and memory for the next one)."""
        for sess in self._api("GET", "sessions") or []:
            self._api("DELETE", f"sessions/{sess['id']}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        shutil.rmtree(self.home, ignore_errors=True)


JS_STATE = """
const prompts = [...document
    .querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell .jp-InputArea-prompt')]
  .map(p => p.textContent.trim());
const ind = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook-ExecutionIndicator');
return {prompts: prompts, status: ind ? ind.getAttribute('data-status') : null};
"""

JS_SCROLL_TO_CELL = """
const c = document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell')[arguments[0]];
if (c) c.scrollIntoView();
const txt = () => c ? [...c.querySelectorAll('.jp-OutputArea-output')].map(e => e.innerText).join('\\n') : '';
"""

JS_SELECT_KERNEL = """
const b = [...document.querySelectorAll('.jp-Dialog button')].find(x => x.textContent.trim() === 'Select');
if (b) { b.click(); return true; } return false;
"""

JS_KERNEL_IDLE = """
const s = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook-ExecutionIndicator');
const name = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-KernelName');
return !document.querySelector('.jp-Dialog') && !!s && s.getAttribute('data-status') === 'idle'
  && !!name && !/No Kernel/.test(name.textContent);
"""

JS_CELL_OUTPUTS = """
return [...document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell')].map(c => ({
  prompt: (c.querySelector('.jp-InputArea-prompt') || {}).textContent || '',
  source: (c.querySelector('.jp-InputArea-editor .cm-content') || {}).innerText || '',
  errors: [...c.querySelectorAll('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')]
            .map(e => e.innerText).filter(t => /Traceback|Error:|Exception/.test(t)),
  styled: c.querySelectorAll('.jp-OutputArea-output table[id^="T_"]').length,
  tables: c.querySelectorAll('.jp-OutputArea-output table').length,
  mdtables: c.querySelectorAll('.jp-OutputArea-output[data-mime-type="text/markdown"] table').length,
  texts: [...c.querySelectorAll('.jp-OutputArea-output[data-mime-type="text/plain"]')].map(e => e.innerText),
}));
"""

JS_INSTALL = """
const root = document.querySelector(arguments[0]);
if (!root) return false;
const s = window.__dpmv = {root: root, input: null, loads: [], mut: [], sel: arguments[0]};
document.addEventListener('keydown', e => { s.input = performance.now(); s.loads = []; s.mut = []; }, true);
document.addEventListener('mousedown', e => { s.input = performance.now(); s.loads = []; s.mut = []; }, true);
root.addEventListener('load', e => { if (e.target.tagName === 'IMG') s.loads.push(performance.now()); }, true);
new MutationObserver(() => { s.mut.push([performance.now(), root.getBoundingClientRect().height]); })
  .observe(root, {subtree: true, childList: true, attributes: true, characterData: true});
return true;
"""

JS_READ = """
const s = window.__dpmv; const img = [...s.root.querySelectorAll('img')].pop();
return {input: s.input, loads: s.loads.slice(), mut: s.mut.slice(), now: performance.now(),
        height: s.root.getBoundingClientRect().height, src: img ? img.src.slice(-64) + ':' + img.src.length : null,
        label: (s.root.querySelector('.widget-html-content') || {}).textContent || ''};
"""


@dataclass
class Measurement:
    latency_ms: float
    frames: int
    height_before: float
    height_min: float
    label: str
    src: str | None


class Browser:
    """Headless Chromium on a :class:`LabServer`."""

    def __init__(self, server: LabServer, *, width: int = 1400, height: int = 1100):
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        self.server = server
        opts = webdriver.ChromeOptions()
        opts.binary_location = _which(CHROMIUM)
        for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                  f"--window-size={width},{height}", "--disable-extensions", "--no-first-run"):
            opts.add_argument(a)
        opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        self.driver = webdriver.Chrome(service=Service(_which(DRIVER)), options=opts)
        self.driver.set_script_timeout(30)
        self.console: list[dict] = []
        self._opened = 0

    def close(self) -> None:
        try:
            self.driver.quit()
        except Exception:  # noqa: BLE001 - best effort at teardown
            pass

    def logs(self) -> list[dict]:
        """Browser console entries since the last call (accumulated in ``console``)."""
        new = self.driver.get_log("browser")
        self.console.extend(new)
        return new

    def severe(self) -> list[dict]:
        self.logs()
        return [e for e in self.console if e.get("level") == "SEVERE"]

    def _wait(self, cond, timeout: float, what: str, poll: float = 0.25):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            last = cond()
            if last:
                return last
            time.sleep(poll)
        raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")

    def open_notebook(self, rel: str, timeout: float = 120) -> None:
        d = self.driver
        self.server.shutdown_sessions()
        self._opened += 1  # a fresh workspace: only this notebook is open (no restored tabs)
        d.get(f"{self.server.url}/lab/workspaces/dpmv{self._opened}/tree/{rel}?reset&token={self.server.token}")
        self._wait(lambda: d.execute_script(JS_STATE)["prompts"], timeout, "the notebook to render")

        def kernel_ready():  # JupyterLab may ask which kernel to start: accept its choice (the notebook's)
            if d.execute_script(JS_SELECT_KERNEL):
                return False
            return d.execute_script(JS_KERNEL_IDLE)

        self._wait(kernel_ready, timeout, "the kernel to start and be idle")

    def run_all(self, timeout: float = 600) -> float:
        """Run > Run All Cells; wait until every code cell has an execution count. Returns seconds."""
        from selenium.webdriver.common.by import By

        d = self.driver
        t0 = time.monotonic()
        menu = [e for e in d.find_elements(By.CSS_SELECTOR, ".lm-MenuBar-itemLabel") if e.text == "Run"]
        if not menu:
            raise RuntimeError("JupyterLab's Run menu not found")
        menu[0].click()
        self._wait(lambda: d.find_elements(By.CSS_SELECTOR, "li[data-command='runmenu:run-all']"), 60,
                   "the Run All Cells menu entry")[0].click()

        stalled: list[float] = []

        def done():
            st = d.execute_script(JS_STATE)
            ps = st["prompts"]
            if st["status"] == "idle":  # Run All stops at the first error: report it now, not at the timeout
                errors = [(c["prompt"], e) for c in self.cells() for e in c["errors"]]
                if errors:
                    raise RuntimeError(f"a cell failed during Run All Cells, at {errors[0][0]}\n{errors[0][1][-2000:]}")
                # an error output off screen is not rendered (JupyterLab's windowed notebook): a kernel
                # idle for 40 s with cells neither run nor queued means Run All stopped; show the cell
                ran = [i for i, p in enumerate(ps) if p[1:-2].strip().isdigit()]
                if ran and any(p == "[ ]:" for p in ps):
                    stalled.append(time.monotonic())
                    if stalled[-1] - stalled[0] > 40:
                        raise RuntimeError(f"Run All Cells stopped after cell {ps[ran[-1]].rstrip(':')} "
                                           f"(source {ran[-1] + 1} of the code cells): {self.cell_text(ran[-1])}")
                else:
                    stalled.clear()
            return st["status"] == "idle" and ps and all(p.startswith("[") and p[1:-2].strip().isdigit() for p in ps)

        time.sleep(1.0)
        try:
            self._wait(done, timeout, "Run All Cells to finish", poll=0.5)
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}; page state {d.execute_script(JS_STATE)}") from None
        return time.monotonic() - t0

    def cell_text(self, index: int) -> str:
        """The outputs of code cell ``index`` as text, after scrolling it into view (so it renders)."""
        d = self.driver
        d.execute_script(JS_SCROLL_TO_CELL, index)
        time.sleep(1.0)
        return d.execute_script(JS_SCROLL_TO_CELL + "return txt();", index)[-3000:]

    def cells(self) -> list[dict]:
        return self.driver.execute_script(JS_CELL_OUTPUTS)

    def element(self, css: str, timeout: float = 60):
        from selenium.webdriver.common.by import By

        return self._wait(lambda: self.driver.find_elements(By.CSS_SELECTOR, css), timeout, css)[0]

    def install_probe(self, root_css: str) -> None:
        self.element(root_css)
        if not self.driver.execute_script(JS_INSTALL, root_css):
            raise RuntimeError(f"widget {root_css} not found")

    def read(self) -> dict:
        return self.driver.execute_script(JS_READ)

    def measure(self, act, *, settle_s: float = 0.8, timeout: float = 80) -> Measurement:
        """Perform ``act()`` (one input) and wait until the widget is quiet for ``settle_s`` after at
        least one frame. Latency: input -> last image loaded; frames: images loaded."""
        before = self.read()
        act()
        t_end = time.monotonic() + timeout
        while time.monotonic() < t_end:
            time.sleep(0.05)
            r = self.read()
            if r["input"] is None or not r["loads"]:
                continue
            last = max([r["loads"][-1]] + [m[0] for m in r["mut"]])
            if r["now"] - last >= settle_s * 1000:
                hs = [m[1] for m in r["mut"]] + [r["height"]]
                return Measurement(r["loads"][-1] - r["input"], len(r["loads"]), before["height"], min(hs),
                                   r["label"], r["src"])
        raise TimeoutError(f"no frame within {timeout} s of the input (state {self.read()})")


@dataclass
class WidgetDriver:
    """Inputs on a budget widget whose controls carry the CSS classes dpmv-b_a, dpmv-T, dpmv-mode
    (and dpmv-view) inside ``root`` (see :func:`dpmv_lib.experiments.budget_explorer.make_explorer`)."""

    browser: Browser
    root: str = ".dpmv-explorer"
    modes: list[str] = field(default_factory=list)

    def _el(self, css: str):
        return self.browser.element(f"{self.root} {css}")

    def key_b_a(self, right: bool = True) -> None:
        from selenium.webdriver.common.keys import Keys

        self._el(".dpmv-b_a .noUi-handle").send_keys(Keys.ARROW_RIGHT if right else Keys.ARROW_LEFT)

    def type_T(self, value: int) -> None:
        self.type_slider("dpmv-T", value)

    def type_slider(self, cls: str, value: int) -> None:
        """Type ``value`` into the readout of the slider with CSS class ``cls`` (sent on Enter)."""
        from selenium.webdriver import ActionChains
        from selenium.webdriver.common.keys import Keys

        ro = self._el(f".{cls} .widget-readout")
        ActionChains(self.browser.driver).double_click(ro).perform()
        ro.send_keys(Keys.CONTROL, "a")
        ro.send_keys(str(value))
        ro.send_keys(Keys.ENTER)

    def type_text(self, cls: str, text: str) -> None:
        """Replace the text of the Text widget with CSS class ``cls`` and press Enter (a Text with
        ``continuous_update=False`` sends its value then)."""
        from selenium.webdriver.common.keys import Keys

        box = self._el(f".{cls} input")
        box.click()
        box.send_keys(Keys.CONTROL, "a")
        box.send_keys(text)
        box.send_keys(Keys.ENTER)

    def key_select(self, cls: str, down: bool = True) -> str:
        """Move the Dropdown with CSS class ``cls`` one option down (or up) as a user does: click
        it open, an arrow key, Enter (headless Chromium ignores an arrow key on a closed select);
        returns the option now selected."""
        from selenium.webdriver.common.keys import Keys
        from selenium.webdriver.support.ui import Select

        sel = self._el(f".{cls} select")
        sel.click()
        sel.send_keys(Keys.ARROW_DOWN if down else Keys.ARROW_UP)
        sel.send_keys(Keys.ENTER)
        return Select(sel).first_selected_option.text.strip()

    def click_toggle(self, cls: str, label: str) -> None:
        from selenium.webdriver.common.by import By

        for b in self.browser.driver.find_elements(By.CSS_SELECTOR, f"{self.root} .{cls} button"):
            if b.text.strip() == label:
                b.click()
                return
        raise RuntimeError(f"no {cls} button {label!r}")

    def toggle_labels(self, cls: str) -> tuple[list[str], str | None]:
        from selenium.webdriver.common.by import By

        bs = self.browser.driver.find_elements(By.CSS_SELECTOR, f"{self.root} .{cls} button")
        act = [b.text.strip() for b in bs if "mod-active" in (b.get_attribute("class") or "")]
        return [b.text.strip() for b in bs], (act[0] if act else None)
