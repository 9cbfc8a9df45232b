"""`make reproduce` timed per notebook and per stage, before and after, in one run.

For each git revision in ``--refs`` (default: ``HEAD``) a detached worktree is checked out under
``--work`` (beside a link to this checkout's ``../shared``) and the notebooks run there as
``make reproduce`` runs them (``python -m dpmv_lib.run --profile <profile>``) with this
checkout's interpreter, into the worktree's own ``results/`` with an empty cache and no committed
exact grid: the cost of a fresh clone after the install. Recorded per revision: wall time per notebook (run manifest),
each notebook's slow cells (papermill's cell durations), the stage timings the experiments write
(``results/tables/*_run.json``) and the peak memory of the whole process tree (the runner, its
kernels and their forked workers: summed PSS and RSS, sampled every 0.5 s). With two or more
revisions every table the runs write (``results/tables/*.csv``) is compared with the first:
byte-identical, or the largest absolute difference of every AUC column and whether every verdict
and boolean column agrees.

    .venv/bin/python benchmarks/bench_reproduce.py --refs 61eb918 HEAD
    .venv/bin/python benchmarks/bench_reproduce.py --refs HEAD --only 03 06   # quicker look
    .venv/bin/python benchmarks/bench_reproduce.py --add --refs 61eb918       # one more run, same report

Writes ``benchmarks/results/reproduce.json`` and ``reproduce.md`` (``--out``).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import psutil

from machine_info import describe, machine  # noqa: E402  (also puts this checkout on sys.path)

ROOT = Path(__file__).resolve().parent.parent
SLOW_CELL_S = 2.0
VERDICT_COLS = ("verdict", "supported", "meets_goal", "check", "holds", "flip")


def _git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def checkout(ref: str, work: Path, i: int) -> tuple[str, Path]:
    """A fresh detached worktree of ``ref`` at ``work/<i>-<sha>/main`` with ``../shared`` linked."""
    sha = _git("rev-parse", ref)
    base = work / f"{i}-{sha[:12]}"
    tree = base / "main"
    if tree.exists():
        _git("worktree", "remove", "--force", str(tree))
    base.mkdir(parents=True, exist_ok=True)
    _git("worktree", "add", "--detach", "--force", str(tree), sha)
    # the committed results hold notebook 05's exact grid with its key: a revision whose code
    # matches that key would reuse it and skip the grid, so every grid is removed first
    for grids in sorted((tree / "results").rglob("grids")):
        if grids.is_dir():
            shutil.rmtree(grids)
    shared = base / "shared"
    if not shared.exists():
        shared.symlink_to((ROOT.parent / "shared").resolve())
    return sha, tree


class TreeMemory:
    """Peak summed memory of a process and all its descendants, sampled every ``every`` s: RSS, and
    PSS where Linux reports it (forked workers share pages copy-on-write; RSS counts them once
    per process, PSS splits them, so its sum is the memory the run really holds). With the
    runner's ``log``, also the peak PSS of each notebook and the cell it was running then (from
    the runner's "[k/n] name" and papermill's "Executing Cell N" lines)."""

    NOTEBOOK = re.compile(r"^\[\d+/\d+\] (\S+)", re.M)
    CELL = re.compile(r"^Executing Cell (\d+)", re.M)

    def __init__(self, pid: int, every: float = 0.5, log: Path | None = None) -> None:
        self.proc, self.every, self.peak_rss, self.peak_pss = psutil.Process(pid), every, 0, 0
        self.log, self._pos, self._tail = log, 0, ""
        self.notebook: str | None = None
        self.cell: int | None = None
        self.by_notebook: dict[str, dict] = {}   # name -> {"pss": bytes, "cell": int | None}
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _where(self) -> None:
        """Advance through the log: the notebook and cell running now."""
        if self.log is None or not self.log.exists():
            return
        with open(self.log, "rb") as f:
            f.seek(self._pos)
            new = f.read()
        self._pos += len(new)
        text = self._tail + new.decode("utf-8", "replace")
        cut = text.rfind("\n") + 1
        text, self._tail = text[:cut], text[cut:]
        for m in sorted([*self.NOTEBOOK.finditer(text), *self.CELL.finditer(text)], key=lambda m: m.start()):
            if m.re is self.NOTEBOOK:
                self.notebook, self.cell = m.group(1), None
            else:
                self.cell = int(m.group(1)) - 1   # papermill counts from 1; slow_cells() from 0

    def _run(self) -> None:
        while not self._stop.is_set():
            rss = pss = 0
            try:
                procs = [self.proc, *self.proc.children(recursive=True)]
            except psutil.Error:
                return
            for p in procs:
                try:
                    full = p.memory_full_info()
                    rss += full.rss
                    pss += getattr(full, "pss", full.rss)
                except psutil.Error:
                    pass
            self.peak_rss, self.peak_pss = max(self.peak_rss, rss), max(self.peak_pss, pss)
            self._where()
            if self.notebook is not None:
                cur = self.by_notebook.setdefault(self.notebook, {"pss": 0, "cell": None})
                if pss > cur["pss"]:
                    cur.update(pss=pss, cell=self.cell)
            self._stop.wait(self.every)

    def stop(self) -> tuple[int, int]:
        self._stop.set()
        self._t.join()
        return self.peak_rss, self.peak_pss


def slow_cells(notebook: Path) -> list[dict]:
    """Cells that took more than SLOW_CELL_S, labelled by their first source line."""
    if not notebook.exists():
        return []
    nb = json.loads(notebook.read_text())
    out = []
    for i, c in enumerate(nb["cells"]):
        dur = (c.get("metadata", {}).get("papermill") or {}).get("duration")
        if c["cell_type"] == "code" and dur and dur > SLOW_CELL_S:
            first = "".join(c["source"]).strip().splitlines()[0][:90]
            out.append({"cell": i, "seconds": round(dur, 1), "first_line": first})
    return out


def run_one(i: int, ref: str, work: Path, profile: str, only: list[str]) -> dict:
    sha, tree = checkout(ref, work, i)
    env = {**os.environ, "PYTHONPATH": str(tree)}
    export_s = None
    if profile.startswith("llm"):
        # what `make reproduce PROFILE=llm` runs first: the one-off OpenVINO export of SmolLM2 into
        # the tree's own results/cache (the exporter's overlay is this checkout's, an install artifact)
        t = time.perf_counter()
        subprocess.run(["bash", "tools/export_openvino.sh", sys.executable, "smollm2"], cwd=tree, check=True,
                       env={**env, "DPMV_OV_OVERLAY": str(ROOT / ".venv-ov" / "site")}, stdout=subprocess.DEVNULL)
        export_s = round(time.perf_counter() - t, 1)
    cmd = [sys.executable, "-m", "dpmv_lib.run", "--profile", profile, *(["--only", *only] if only else [])]
    print(f"[{ref} = {sha[:10]}] {' '.join(cmd)} in {tree}", flush=True)
    load = [round(x, 2) for x in os.getloadavg()]
    started = time.time()
    t = time.perf_counter()
    with open(tree / "bench_reproduce.log", "w") as log:
        proc = subprocess.Popen(cmd, cwd=tree, env=env, stdout=log, stderr=subprocess.STDOUT)
        mem = TreeMemory(proc.pid, log=tree / "bench_reproduce.log")
        rc = proc.wait()
        peak_rss, peak_pss = mem.stop()
    wall = time.perf_counter() - t
    results = tree / "results" if profile == "default" else tree / "results" / profile
    manifest = json.loads((results / "manifest.json").read_text()) if (results / "manifest.json").exists() else {}
    def peak(name: str) -> dict:
        p = mem.by_notebook.get(name) or mem.by_notebook.get(f"{name}.ipynb") or {}
        return {"peak_pss_gb": round(p["pss"] / 2**30, 2), "peak_cell": p["cell"]} if p else {}
    notebooks = [{"name": n["name"], "status": n["status"], "wall_s": n.get("wall_s"), **peak(n["name"]),
                  "slow_cells": slow_cells(results / "notebooks" / f"{n['name']}.ipynb")}
                 for n in manifest.get("notebooks", []) if n.get("run") == "this"]
    rec = {"ref": ref, "commit": sha, "profile": profile, "rc": rc, "wall_s": round(wall, 1), "export_s": export_s,
           "loadavg_at_start": load,
           "started": started, "stages": stage_times(results, started),
           "notebook_s": round(sum(n["wall_s"] or 0 for n in notebooks), 1),
           "peak_rss_gb": round(peak_rss / 2**30, 2), "peak_pss_gb": round(peak_pss / 2**30, 2),
           "notebooks": notebooks,
           "results": str(results)}
    print(f"[{ref}] rc {rc}, notebooks {rec['notebook_s']} s, peak PSS {rec['peak_pss_gb']} GB "
          f"(RSS {rec['peak_rss_gb']} GB)", flush=True)
    return rec


def written(results: Path, pattern: str, since: float | None) -> list[Path]:
    """The files ``results/tables/<pattern>`` that the run started at ``since`` wrote (all if None):
    with ``--only`` the other tables are the committed ones, which no revision recomputed."""
    return [f for f in sorted((results / "tables").glob(pattern)) if since is None or f.stat().st_mtime >= since]


def stage_times(results: Path, since: float | None) -> dict[str, dict[str, float]]:
    """Stage timings (seconds) of the experiments' ``*_run.json`` written by this run."""
    stages = {}
    for f in written(results, "*_run.json", since):
        d = json.loads(f.read_text())
        stages[f.stem] = {k: round(float(v), 1) for k, v in (d.get("timings_s") or d).items()
                          if isinstance(v, (int, float))}
    return stages


def notebook_of(run_file: str, names: list[str]) -> str | None:
    """The notebook that writes ``run_file`` (``rq1_run``: 03, ``NN_run``: NN), by name prefix."""
    prefix = "03" if run_file.startswith("rq1") else run_file.split("_", 1)[0]
    return next((n for n in names if n.startswith(prefix)), None)


def stage_table(rec: dict) -> dict[tuple[str, str], float]:
    """(notebook, stage) -> seconds for one run: the stages of the notebook's ``*_run.json`` and
    "other cells" (the notebook's wall time less its timed stages), every notebook without a run
    file as one "whole notebook" row."""
    names = [n["name"] for n in rec["notebooks"]]
    wall = {n["name"]: n["wall_s"] for n in rec["notebooks"] if n["wall_s"] is not None}
    out: dict[tuple[str, str], float] = {}
    timed: dict[str, float] = {}
    for run_file, stages in rec["stages"].items():
        nb = notebook_of(run_file, names)
        if nb is None:
            continue
        for stage, sec in stages.items():
            if stage != "total":
                out[(nb, stage)] = sec
                timed[nb] = timed.get(nb, 0.0) + sec
    for nb in names:
        if nb in wall:
            key = (nb, "other cells") if nb in timed else (nb, "whole notebook")
            out[key] = round(wall[nb] - timed.get(nb, 0.0), 1)
    return out


def compare_tables(a: Path, b: Path, since: tuple[float | None, float | None] = (None, None)) -> list[dict]:
    """Every CSV table written by both runs (``since``: their start times), ``a`` against ``b``:
    identical bytes, else AUC and verdict drift."""
    rows = []
    later = {f.name for f in written(b, "*.csv", since[1])}
    for fa in written(a, "*.csv", since[0]):
        fb = b / "tables" / fa.name
        if since[1] is not None and fb.exists() and fa.name not in later:
            continue
        if not fb.exists():
            rows.append({"table": fa.name, "identical": False, "note": "missing in the later run"})
            continue
        if fa.read_bytes() == fb.read_bytes():
            rows.append({"table": fa.name, "identical": True})
            continue
        da, db = pd.read_csv(fa), pd.read_csv(fb)
        row = {"table": fa.name, "identical": False}
        if da.shape != db.shape or list(da.columns) != list(db.columns):
            row["note"] = f"shape {da.shape} -> {db.shape}"
            rows.append(row)
            continue
        numeric = [c for c in da.columns
                   if pd.api.types.is_numeric_dtype(da[c]) and not pd.api.types.is_bool_dtype(da[c])
                   and pd.api.types.is_numeric_dtype(db[c]) and not pd.api.types.is_bool_dtype(db[c])]
        auc = [c for c in numeric if "auc" in c.lower()]
        if auc:
            row["max_auc_diff"] = float((da[auc] - db[auc]).abs().max().max())
        verdict = [c for c in da.columns if any(v in c.lower() for v in VERDICT_COLS)]
        row["verdicts_same"] = (bool(all(da[c].astype(str).equals(db[c].astype(str)) for c in verdict))
                                if verdict else None)
        row["max_numeric_diff"] = float((da[numeric] - db[numeric]).abs().max().max()) if numeric else None
        rows.append(row)
    return rows


def markdown(recs: list[dict], comparisons: dict[str, list[dict]], info: dict) -> str:
    lines = ["# `make reproduce`, timed per notebook and stage", "",
             f"Machine: {describe(info)}; load average at start {info.get('loadavg_at_start')}.", "",
             "Each revision ran in a fresh worktree with an empty cache (`python -m dpmv_lib.run`, "
             "install time excluded); peak memory is the summed PSS of the runner, its kernels and their workers.", "",
             "| notebook | " + " | ".join(f"{r['ref']} ({r['commit'][:8]})" for r in recs) + " |",
             "| --- |" + " --- |" * len(recs)]
    names = list(dict.fromkeys(n["name"] for r in recs for n in r["notebooks"]))
    for name in names:
        cells = []
        for r in recs:
            n = next((n for n in r["notebooks"] if n["name"] == name), None)
            cells.append(f"{n['wall_s']:.0f} s" if n and n["wall_s"] is not None else "-")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append("| **all notebooks** | " + " | ".join(f"**{r['notebook_s']:.0f} s** ({r['notebook_s'] / 60:.1f} min)"
                                                    for r in recs) + " |")
    lines.append("| peak memory (summed PSS) | "
                 + " | ".join(f"{r.get('peak_pss_gb', float('nan')):.2f} GB" for r in recs) + " |")
    lines.append("| peak summed RSS (shared pages counted per process) | "
                 + " | ".join(f"{r['peak_rss_gb']:.2f} GB" for r in recs) + " |")
    if any(r.get("export_s") is not None for r in recs):
        lines.append("| one-off OpenVINO export before the run (llm profiles) | "
                     + " | ".join("-" if r.get("export_s") is None else f"{r['export_s']:.0f} s" for r in recs)
                     + " |")
        lines.append("| runner wall time (all notebooks and the runner) | "
                     + " | ".join(f"{r['wall_s']:.0f} s" for r in recs) + " |")
    lines.append("| exit code | " + " | ".join(str(r["rc"]) for r in recs) + " |")
    lines.append("| load average at start (1/5/15 min) | "
                 + " | ".join(str(r.get("loadavg_at_start", "-")) for r in recs) + " |")
    if any("peak_pss_gb" in n for r in recs for n in r["notebooks"]):
        lines += ["", "## Peak memory by notebook (summed PSS; the cell running at the peak, numbered as below)", "",
                  "| notebook | " + " | ".join(r["ref"] for r in recs) + " |", "| --- |" + " --- |" * len(recs)]
        for name in names:
            cells = []
            for r in recs:
                n = next((n for n in r["notebooks"] if n["name"] == name), None)
                cells.append(f"{n['peak_pss_gb']:.2f} GB (cell {n['peak_cell']})"
                             if n and "peak_pss_gb" in n else "-")
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "## Where the time goes: seconds per notebook and stage", "",
              "Stages from the experiments' `*_run.json` (`rq1_run.json`: notebook 03); \"other cells\" is the "
              "notebook's wall time less its timed stages (the slow ones are listed below).", ""]
    tables = [stage_table(r) for r in recs]
    keys = list(dict.fromkeys(k for t in tables for k in t))
    lines += ["| notebook | stage | " + " | ".join(r["ref"] for r in recs) + " |",
              "| --- | --- |" + " --- |" * len(recs)]
    for nb, stage in keys:
        lines.append(f"| {nb} | {stage} | " + " | ".join(str(t.get((nb, stage), "-")) for t in tables) + " |")
    lines += ["", f"## Slow cells (> {SLOW_CELL_S:g} s)", ""]
    for r in recs:
        lines.append(f"**{r['ref']}**")
        lines.append("")
        for n in r["notebooks"]:
            for c in n["slow_cells"]:
                lines.append(f"- {n['name']} cell {c['cell']}: {c['seconds']} s `{c['first_line']}`")
        lines.append("")
    for ref, rows in comparisons.items():
        same = sum(r["identical"] for r in rows)
        lines += [f"## Tables: {ref} against {recs[0]['ref']}", "",
                  f"{same} of {len(rows)} CSV tables byte-identical.", ""]
        diff = [r for r in rows if not r["identical"]]
        if diff:
            lines += ["| table | max AUC diff | max numeric diff | verdicts same | note |",
                      "| --- | --- | --- | --- | --- |"]
            for r in diff:
                f = lambda x: "-" if x is None else (f"{x:.2g}" if isinstance(x, float) else str(x))  # noqa: E731
                lines.append(f"| {r['table']} | {f(r.get('max_auc_diff'))} | {f(r.get('max_numeric_diff'))} | "
                             f"{f(r.get('verdicts_same'))} | {r.get('note', '')} |")
            lines.append("")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--refs", nargs="+", default=["HEAD"])
    ap.add_argument("--profile", default="default")
    ap.add_argument("--only", nargs="*", default=[])
    ap.add_argument("--work", default="/tmp/dpmv-bench-reproduce")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "reproduce"))
    ap.add_argument("--add", action="store_true", help="append these runs to the records already in "
                    "<out>.json (a rerun in quieter conditions, say) instead of starting afresh")
    ap.add_argument("--rerender", action="store_true", help="run nothing: rebuild <out>.md (stages and "
                    "table comparisons) from the recorded runs' results directories, which must still exist")
    a = ap.parse_args(argv)
    info = machine()
    out = Path(a.out)
    recs = json.loads(out.with_suffix(".json").read_text())["runs"] if (a.add or a.rerender) else []
    if a.rerender:
        info = json.loads(out.with_suffix(".json").read_text())["machine"]
        for r in recs:
            r["stages"] = stage_times(Path(r["results"]), r.get("started"))
    for i, ref in enumerate([] if a.rerender else a.refs, start=len(recs)):
        rec = run_one(i, ref, Path(a.work), a.profile, a.only)
        if any(r["ref"] == rec["ref"] for r in recs):
            rec["ref"] = f"{rec['ref']} (run {i + 1})"
        recs.append(rec)
    comparisons = {r["ref"]: compare_tables(Path(recs[0]["results"]), Path(r["results"]),
                                            since=(recs[0].get("started"), r.get("started"))) for r in recs[1:]}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({"machine": info, "runs": recs, "tables": comparisons}, indent=1))
    out.with_suffix(".md").write_text(markdown(recs, comparisons, info))
    print(out.with_suffix(".md").read_text())
    return max(r["rc"] for r in recs)


if __name__ == "__main__":
    raise SystemExit(main())
