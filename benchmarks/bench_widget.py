"""Redraw latency of notebook 05's budget widget, measured in a real browser.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_widget.py [--inputs 20] [--impl redraw explorer]
                                                             [--grid results/grids/05_budget_grid.csv]

Starts JupyterLab on loopback and headless Chromium (tests/helpers/lab.py; needs the Debian
packages chromium and chromium-driver and ``pip install -e '.[browser]'``), runs a two-cell
notebook that loads the exact grid and displays the widget of each implementation:

* ``redraw``: :func:`dpmv_lib.experiments.budget_explorer.make_redraw_widget` (pyplot figure redrawn into an
  Output area);
* ``explorer``: :func:`dpmv_lib.experiments.budget_explorer.make_explorer` (precomputed arrays, one figure updated
  in place, a PNG pushed into a fixed-size Image, sliders sending their value on release).

Then ``--inputs`` inputs in turn, every one reaching a setting not shown before: a B_a slider key
(arrow right/left on the focused handle), a mode toggle click, a typed T (readout + Enter).
Latency = input event -> the last image of the widget finished loading (browser clock,
``performance.now()``); frames = images loaded per input; collapse = the widget's height fell
below 90 % of its height before the input. Writes benchmarks/results/widget.json and .md with the
machine description and load averages.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from machine_info import describe, loadavg, machine  # noqa: E402

OUT = ROOT / "benchmarks" / "results"

CELLS = {
    "redraw": """from dpmv_lib.experiments import budget_explorer as E
box = E.make_redraw_widget(grid, mode="on", b_a=2, k=3, T=16)
(b, k), (t, m) = box.children[0].children, box.children[1].children
for w, c in ((box, "explorer"), (b, "b_a"), (k, "k"), (t, "T"), (m, "mode")):
    w.add_class("dpmv-" + c)
display(box)""",
    "explorer": """from dpmv_lib.experiments import budget_explorer as E
box = E.make_explorer(grid, mode="on", b_a=2, k=3, T=16)
display(box)""",
}


def bench_notebook(path: Path, impl: str, grid: Path) -> None:
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(f"import pandas as pd\nfrom IPython.display import display\n"
                                          f"grid = pd.read_csv({str(grid)!r})"),
                nbformat.v4.new_code_cell(CELLS[impl])]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, str(path))


def inputs(n: int, b_count: int, b_start: int, modes: list[str], mode0: str):
    """``n`` (kind, argument) inputs, each reaching a new (B_a, mode, T) setting."""
    b, m, ts = b_start, modes.index(mode0), iter([20, 8, 24, 4, 28, 12, 30, 2, 26, 6, 22, 10, 18, 14, 31, 3])
    right = True
    out = []
    for i in range(n):
        kind = ("b_a", "mode", "T")[i % 3]
        if kind == "b_a":
            if (right and b == b_count - 1) or (not right and b == 0):
                right = not right
            b += 1 if right else -1
            out.append(("b_a", right))
        elif kind == "mode":
            m = (m + 1) % len(modes)
            out.append(("mode", modes[m]))
        else:
            out.append(("T", next(ts)))
    return out


def run_impl(impl: str, grid: Path, n: int, work: Path) -> dict:
    import pandas as pd

    from tests.helpers.lab import Browser, LabServer, WidgetDriver

    g = pd.read_csv(grid)
    b_as = sorted(float(x) for x in g["b_a"].unique())
    nb = work / f"bench_{impl}.ipynb"
    bench_notebook(nb, impl, grid)
    srv = LabServer.start(work, env={"PYTHONPATH": str(ROOT)})
    br = None
    try:
        br = Browser(srv)
        br.open_notebook(nb.name)
        run_s = br.run_all(timeout=300)
        br.install_probe(".dpmv-explorer")
        br.element(".dpmv-explorer img")
        time.sleep(1.0)
        wd = WidgetDriver(br)
        modes, active = wd.toggle_labels("dpmv-mode")
        rows = []
        for kind, arg in inputs(n, len(b_as), b_as.index(2.0), modes, active or "on"):
            act = {"b_a": lambda a=arg: wd.key_b_a(a), "mode": lambda a=arg: wd.click_toggle("dpmv-mode", a),
                   "T": lambda a=arg: wd.type_T(a)}[kind]
            m = br.measure(act)
            rows.append({"input": kind, "arg": arg, "latency_ms": round(m.latency_ms, 1), "frames": m.frames,
                         "height_before": m.height_before, "height_min": m.height_min,
                         "collapsed": m.height_min < 0.9 * m.height_before, "label": m.label[:160]})
            print(f"  {impl:6s} {kind:4s} {arg!s:8s} {m.latency_ms:7.1f} ms  frames {m.frames}  "
                  f"height {m.height_before:.0f} -> min {m.height_min:.0f}", flush=True)
        severe = [e["message"][:300] for e in br.severe()]
    finally:
        if br is not None:
            br.close()
        srv.stop()
    lat = [r["latency_ms"] for r in rows]
    q = statistics.quantiles(lat, n=10, method="inclusive") if len(lat) > 1 else lat * 9
    by_kind = {k: round(statistics.median([r["latency_ms"] for r in rows if r["input"] == k]), 1)
               for k in dict.fromkeys(r["input"] for r in rows)}
    return {"impl": impl, "inputs": len(rows), "median_ms": round(statistics.median(lat), 1), "p90_ms": round(q[8], 1),
            "max_ms": max(lat), "median_by_input_ms": by_kind,
            "frames_mean": round(statistics.mean(r["frames"] for r in rows), 2),
            "frames_max": max(r["frames"] for r in rows), "collapses": sum(r["collapsed"] for r in rows),
            "run_all_s": round(run_s, 1), "console_severe": severe, "rows": rows}


def markdown(res: dict) -> str:
    lines = ["# Budget widget redraw latency in the browser (notebook 05)", "",
             f"Machine: {describe(res['machine'])}; load average before/after: "
             f"{res['load_before']} / {res['load_after']}.",
             f"Grid: `{res['grid']}` ({res['grid_cells']} cells). JupyterLab + headless Chromium (selenium); "
             f"{res['inputs']} inputs per implementation (B_a key, mode click, typed T in turn, every one a new "
             "setting).",
             "Latency: input event -> last widget image loaded (browser clock). Command: "
             "`PYTHONPATH=. .venv/bin/python benchmarks/bench_widget.py`.", "",
             "| implementation | median ms | p90 ms | max ms | median by input (ms) | frames/input (mean, max) "
             "| collapses | console errors |",
             "|---|---|---|---|---|---|---|---|"]
    for r in res["results"]:
        kinds = ", ".join(f"{k} {v:g}" for k, v in r["median_by_input_ms"].items())
        lines.append(f"| {r['impl']} | {r['median_ms']:g} | {r['p90_ms']:g} | {r['max_ms']:g} | {kinds} | "
                     f"{r['frames_mean']:g}, {r['frames_max']} | {r['collapses']} of {r['inputs']} | "
                     f"{len(r['console_severe'])} |")
    lines += ["", "`redraw`: `budget_explorer.make_redraw_widget` (pyplot figure into an Output area: clear + show); "
              "`explorer`: `budget_explorer.make_explorer` (artists updated in place and blitted over a background "
              "cached per mode, PNG into a fixed-size Image). A collapse is the widget's height falling below 90 % "
              "of its height before the input (the Output area emptied between frames).", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--inputs", type=int, default=20)
    ap.add_argument("--impl", nargs="+", default=["redraw", "explorer"], choices=list(CELLS))
    ap.add_argument("--grid", default=str(ROOT / "results" / "grids" / "05_budget_grid.csv"))
    ap.add_argument("--label", default="", help="suffix of the result files (widget_LABEL.json)")
    ap.add_argument("--markdown-only", action="store_true", help="rewrite widget[_LABEL].md from its .json")
    a = ap.parse_args(argv)
    stem = "widget" + (f"_{a.label}" if a.label else "")
    if a.markdown_only:
        (OUT / f"{stem}.md").write_text(markdown(json.loads((OUT / f"{stem}.json").read_text())))
        return 0
    from tests.helpers.lab import missing

    if (why := missing()) is not None:
        print(f"bench_widget: skipped, {why}")
        return 0
    grid = Path(a.grid).resolve()
    import pandas as pd

    res = {"machine": machine(), "load_before": loadavg(),
           "grid": str(grid.relative_to(ROOT) if grid.is_relative_to(ROOT) else grid),
           "grid_cells": len(pd.read_csv(grid)), "inputs": a.inputs, "results": []}
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="dpmv-bench-widget-") as work:
        for impl in a.impl:
            res["results"].append(run_impl(impl, grid, a.inputs, Path(work)))
    res["load_after"], res["wall_s"] = loadavg(), round(time.time() - t0, 1)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{stem}.json").write_text(json.dumps(res, indent=1, default=str) + "\n")
    (OUT / f"{stem}.md").write_text(markdown(res))
    print(markdown(res))
    print(f"wrote {OUT / stem}.json/.md in {res['wall_s']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
