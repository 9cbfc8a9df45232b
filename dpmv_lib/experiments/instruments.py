"""Tables 2-4 with one column per instrument: every response model we ran (the surrogate of the
``default`` profile, SmolLM2 of the ``llm`` profile, ...) beside the paper's value.

Each run keeps its own tables (``results/tables``, ``results/llm/tables``, ...); this module only
reads them back, with the run's manifest as provenance (profile, commit, clean or not), so a
column is always a number some run computed. Nothing here recomputes or copies a figure."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd

from ..common.paths import project_root, resolve
from ..core.errors import ParameterError
from .profiles import PROFILES
from .tables import fmt, write_table


@dataclass(frozen=True)
class TableSpec:
    """Where a paper table lives in a run's ``tables/`` and how to read it: ``keys`` identify a
    row; ``metrics`` maps our column to the paper's (None: no paper value). ``long``: the CSV has
    one row per metric (columns ``metric``, ``ours``, ``paper_mean``) instead of one per row key."""

    name: str
    file: str
    keys: tuple[str, ...]
    metrics: Mapping[str, str | None] = field(default_factory=dict)
    long: bool = False


TABLE2 = TableSpec("Table 2 (RQ1)", "table2_rq1_vs_paper.csv", ("track", "method"),
                   {"AUC": "paper_mean", "TPR@5": "paper_mean", "tRec": "paper_mean", "U": "paper_mean",
                    "Unsup": "paper_mean"}, long=True)
TABLE3 = TableSpec("Table 3 (budget)", "05_table3_budget.csv", ("sweep", "selector", "b_a", "k"),
                   {"auc": "paper_auc", "trec": "paper_trec", "u": None, "unsup": "paper_unsup"})
TABLE4 = TableSpec("Table 4 (RQ2)", "04_table4_safeguards.csv", ("variant",),
                   {"dp_bound": "paper_dp_bound", "auc": "paper_auc", "trec": "paper_trec", "u": "paper_u",
                    "unsup": "paper_unsup"})
TABLES = {"table2": TABLE2, "table3": TABLE3, "table4": TABLE4}


@dataclass(frozen=True)
class Run:
    """One finished notebook run: its results directory and what its manifest says."""

    label: str          # the response model (profile_settings.responder)
    profile: str
    tables: Path
    commit: str | None
    dirty: bool | None
    finished: str | None


def read_run(results_dir: str | Path) -> Run:
    """The run recorded in ``results_dir/manifest.json`` (ParameterError when there is none)."""
    d = Path(results_dir)
    path = d / "manifest.json"
    if not path.is_file():
        raise ParameterError(f"no run manifest at {path}")
    try:
        m = json.loads(path.read_text(encoding="utf-8"))
        label = str(m["profile_settings"]["responder"])
        profile = str(m["profile"])
    except (ValueError, KeyError, TypeError) as exc:
        raise ParameterError(f"malformed run manifest {path}: {exc}") from exc
    git = m.get("git") or {}
    return Run(label, profile, d / "tables", git.get("commit"), git.get("dirty"), m.get("finished"))


def find_runs(results_root: str | Path, current: str | Path | None = None) -> list[Run]:
    """The runs under ``results_root`` (itself and its direct subdirectories, the layout of
    ``dpmv_lib.run``); one run per response model (``current`` wins, then the results root), the
    smoke profiles left out unless one is ``current``; in the order of the profiles (default first)."""
    root = Path(results_root)
    dirs = ([Path(current)] if current is not None else []) + [root] + sorted(p for p in root.glob("*") if p.is_dir())
    runs: list[Run] = []
    seen: set[Path] = set()
    for d in dirs:
        key = d.resolve()
        if key in seen or not (d / "manifest.json").is_file():
            continue
        seen.add(key)
        run = read_run(d)
        if run.profile.endswith("smoke") and (current is None or key != Path(current).resolve()):
            continue
        if all(r.label != run.label for r in runs):
            runs.append(run)
    order = list(PROFILES)        # columns in profile order: surrogate (default), then SmolLM2 (llm), ...
    return sorted(runs, key=lambda r: order.index(r.profile) if r.profile in order else len(order))


def _values(spec: TableSpec, path: Path) -> pd.DataFrame:
    """Long rows (keys..., metric, value, paper) of one run's table."""
    df = pd.read_csv(path)
    if spec.long:
        need = set(spec.keys) | {"metric", "ours", "paper_mean"}
        missing = need - set(df.columns)
        if missing:
            raise ParameterError(f"{path}: columns {sorted(missing)} missing for {spec.name}")
        out = df[df["metric"].isin(list(spec.metrics))][[*spec.keys, "metric", "ours", "paper_mean"]]
        return out.rename(columns={"ours": "value", "paper_mean": "paper"}).reset_index(drop=True)
    missing = (set(spec.keys) | set(spec.metrics)) - set(df.columns)
    if missing:
        raise ParameterError(f"{path}: columns {sorted(missing)} missing for {spec.name}")
    parts = []
    for metric, paper_col in spec.metrics.items():
        part = df[list(spec.keys)].copy()
        part["metric"] = metric
        part["value"] = df[metric]
        part["paper"] = df[paper_col] if paper_col and paper_col in df.columns else float("nan")
        parts.append(part)
    return pd.concat(parts, ignore_index=True)


def side_by_side(spec: TableSpec, runs: Sequence[Run]) -> pd.DataFrame:
    """One row per (keys, metric): a column per run (its label) and ``paper``. Rows are those of
    the first run; a run without the table or a row gives NaN (shown as "-")."""
    frames = [(r, r.tables / spec.file) for r in runs]
    frames = [(r, p) for r, p in frames if p.is_file()]
    if not frames:
        raise ParameterError(f"no run has {spec.file}; run the notebook that writes {spec.name} first")
    base = None
    for run, path in frames:
        vals = _values(spec, path)
        keys = [*spec.keys, "metric"]
        if base is None:
            base = vals[keys + ["paper"]].copy()
        base = base.merge(vals[keys + ["value"]].rename(columns={"value": run.label}), on=keys, how="left")
    assert base is not None  # frames is not empty (checked above)
    return base[[*spec.keys, "metric", *[r.label for r, _ in frames], "paper"]]


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(project_root().resolve()))
    except ValueError:
        return str(path)


def provenance(runs: Sequence[Run]) -> pd.DataFrame:
    """Which run each column comes from (tables relative to the project root when inside it)."""
    return pd.DataFrame([{"column": r.label, "profile": r.profile, "tables": _shown(r.tables),
                          "commit": (r.commit or "")[:10], "clean": r.dirty is False,
                          "finished": r.finished or "(running: this run)"}
                         for r in runs])


def side_by_side_markdown(spec: TableSpec, table: pd.DataFrame) -> str:
    """Rows = the row keys, columns = metric x (each instrument, paper)."""
    labels = [c for c in table.columns if c not in (*spec.keys, "metric", "paper")]
    metrics = list(dict.fromkeys(table["metric"]))
    head = [*spec.keys] + [f"{m} {lab}" for m in metrics for lab in (*labels, "paper")]
    lines = ["| " + " | ".join(head) + " |", "| " + " | ".join("---" for _ in head) + " |"]
    for key, grp in table.groupby(list(spec.keys), sort=False):
        key = key if isinstance(key, tuple) else (key,)
        by = grp.set_index("metric")
        cells = [str(k) for k in key]
        for m in metrics:
            for lab in (*labels, "paper"):
                v = by[lab].get(m) if m in by.index else None
                cells.append(fmt(v) if v is not None and pd.notna(v) else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return f"**{spec.name}: ours per response model, beside the paper**\n\n" + "\n".join(lines)


@dataclass(frozen=True)
class SideBySide:
    table: pd.DataFrame
    provenance: pd.DataFrame
    markdown: str


def write_side_by_side(name: str, results_dir: str | Path, results_root: str | Path | None = None) -> SideBySide:
    """Table ``name`` ("table2" | "table3" | "table4") of the run in ``results_dir`` beside every
    other run under ``results_root`` (default: the project's ``results/``), written to
    ``results_dir/tables/<name>_instruments.{csv,md}``."""
    if name not in TABLES:
        raise ParameterError(f"unknown table {name!r}; valid: {', '.join(TABLES)}")
    spec = TABLES[name]
    current = resolve(results_dir)
    runs = find_runs(results_root if results_root is not None else project_root() / "results", current=current)
    table = side_by_side(spec, runs)
    used = [r for r in runs if r.label in table.columns]
    prov = provenance(used)
    md = side_by_side_markdown(spec, table) + "\n\nColumns from:\n\n" + prov.to_markdown(index=False)
    write_table(table, current / "tables", f"{name}_instruments", md)
    return SideBySide(table, prov, md)


def side_by_side_step(run: Any, name: str) -> Any:
    """Notebook step: :func:`write_side_by_side` for the run's results as a result (the table per
    response model beside the paper, and where each column came from)."""
    from .result import Result

    sbs = write_side_by_side(name, run.cfg.results_dir)
    return Result(f"{name}: every instrument beside the paper", notes=[sbs.markdown],
                  finding=f"{len(sbs.provenance)} runs set beside the paper.", data={"table": sbs.table})
