"""Paper-vs-reproduced tables (CSV + Markdown) for RQ1 (Table 2) and the oracle ceiling table.

The paper's numbers come from ``../shared/reference/paper_table2_rq1.csv`` (columns track, method,
response_model, auc, tpr_at_5fpr, trec, u, unsup, note). Our response model is usually not one of
the paper's three (the surrogate or SmolLM2), so every row is compared with the paper's value for
each of its models and with their mean ("paper mean", clearly labelled); when our response model
IS one of the paper's (``paper`` profile) the same-model difference is given too.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from ..common.io import write_atomic
from ..core.errors import ParameterError
from .common import markdown_table, reference_dir

METRICS = ("auc", "tpr", "trec", "u", "unsup")
METRIC_LABELS = {"auc": "AUC", "tpr": "TPR@5", "trec": "tRec", "u": "U", "unsup": "Unsup"}
PAPER_MODELS = ("Qwen2.5-7B", "Llama-3.1-8B", "Gemma-2-9B")
TRACK_LABELS = {"pairedmem": "PairedMem (synthetic)", "transfer": "Public-corpus transfer"}
_PAPER_TRACK = {"PairedMem": "pairedmem", "Transfer": "transfer"}
DAGGER = "\u2020"


def paper_csv_path() -> Path:
    """``paper_table2_rq1.csv`` in :func:`~dpmv_lib.experiments.common.reference_dir`
    (``../shared/reference`` next to the project; DPMV_REFERENCE overrides the dir)."""
    return reference_dir() / "paper_table2_rq1.csv"


def load_paper_table2(path: str | Path | None = None) -> pd.DataFrame:
    """The paper's Table 2 as a long table with our track names and metric names."""
    p = Path(path) if path is not None else paper_csv_path()
    if not p.exists():
        raise ParameterError(f"paper reference table not found: {p} (set DPMV_REFERENCE to its directory)")
    df = pd.read_csv(p)
    need = {"track", "method", "response_model", "auc", "tpr_at_5fpr", "trec", "u", "unsup"}
    if need - set(df.columns):
        raise ParameterError(f"{p} lacks columns {sorted(need - set(df.columns))}")
    df = df.rename(columns={"tpr_at_5fpr": "tpr"})
    df["track"] = df["track"].map(lambda t: _PAPER_TRACK.get(t, str(t).lower()))
    df["by_construction"] = df.get("note", pd.Series([""] * len(df))).fillna("").eq("by_construction")
    return df


def paper_model_of(name: str) -> str | None:
    """Map a served model name to the paper's label (e.g. 'Qwen2.5-7B-Instruct' -> 'Qwen2.5-7B')."""
    low = str(name).lower()
    for m in PAPER_MODELS:
        if low.startswith(m.lower()):
            return m
    return None


def build_table2(audit: pd.DataFrame, utility: pd.DataFrame, horizon: int) -> pd.DataFrame:
    """Our Table 2 (one row per track x response model x method) from the dagger-applied audit
    summary (:func:`dpmv_lib.evaluate.audit.apply_dagger`) at ``horizon`` and the utility summary."""
    a = audit[audit["horizon"] == horizon].copy()
    if a.empty:
        raise ParameterError(f"the audit summary has no rows at horizon {horizon}")
    keep_a = [c for c in ("track", "response_model", "method", "auc", "tpr", "auc_lo", "auc_hi", "tpr_lo",
                          "tpr_hi", "auc_measured", "tpr_measured", "auc_indep", "by_construction",
                          "n_pairs", "n_seeds", "embedding_unit") if c in a.columns]
    u = utility.rename(columns={"U": "u", "tRec": "trec", "Unsup": "unsup", "U_lo": "u_lo", "U_hi": "u_hi",
                                "tRec_lo": "trec_lo", "tRec_hi": "trec_hi", "Unsup_lo": "unsup_lo",
                                "Unsup_hi": "unsup_hi", "n_pairs": "n_judged_pairs", "U_dims": "u_dims"})
    keep_u = [c for c in ("track", "response_model", "method", "trec", "u", "unsup", "trec_lo", "trec_hi", "u_lo",
                          "u_hi", "unsup_lo", "unsup_hi", "n_judged_pairs", "n_failed", "u_dims") if c in u.columns]
    out = a[keep_a].merge(u[keep_u], on=["track", "response_model", "method"], how="outer")
    from ..generate.interfaces import RQ1_METHODS, RQ2_METHODS
    order = {m: i for i, m in enumerate(RQ1_METHODS + RQ2_METHODS)}
    out["_o"] = out["method"].map(lambda m: order.get(m, 99))
    out["_t"] = out["track"].map(lambda t: 0 if t == "pairedmem" else 1)
    return out.sort_values(["_t", "response_model", "_o"]).drop(columns=["_o", "_t"]).reset_index(drop=True)


def compare_with_paper(table2: pd.DataFrame, paper: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per (track, response_model, method, metric): ours, the paper's value per model, the
    paper mean over its three models, ours - paper mean, and ours - same model when it matches."""
    paper = load_paper_table2() if paper is None else paper
    recs = []
    for r in table2.itertuples(index=False):
        rd = r._asdict()
        same = paper_model_of(rd["response_model"])
        sub = paper[(paper["track"] == rd["track"]) & (paper["method"] == rd["method"])]
        for m in METRICS:
            ours = rd.get(m, np.nan)
            rec = {"track": rd["track"], "response_model": rd["response_model"], "method": rd["method"],
                   "metric": METRIC_LABELS[m], "ours": ours,
                   "ours_lo": rd.get(f"{m}_lo", np.nan), "ours_hi": rd.get(f"{m}_hi", np.nan),
                   "by_construction": bool(rd.get("by_construction", False)) if m in ("auc", "tpr") else False}
            vals = []
            for pm in PAPER_MODELS:
                v = sub.loc[sub["response_model"] == pm, m]
                rec[f"paper[{pm}]"] = float(v.iloc[0]) if len(v) else np.nan
                if len(v):
                    vals.append(float(v.iloc[0]))
            rec["paper_mean"] = float(np.mean(vals)) if vals else np.nan
            rec["diff_vs_paper_mean"] = ours - rec["paper_mean"] if vals else np.nan
            rec["diff_vs_same_model"] = (ours - rec[f"paper[{same}]"]) if same else np.nan
            recs.append(rec)
    return pd.DataFrame.from_records(recs)


# ---- rendering ------------------------------------------------------------------------------------
def fmt(x: float, nd: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if isinstance(x, float) and math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:.{nd}f}"


def _finite(x) -> bool:
    return x is not None and isinstance(x, (int, float, np.floating)) and math.isfinite(float(x))


def _md(df: pd.DataFrame) -> str:
    cols = list(df.columns)
    lines = ["| " + " | ".join(map(str, cols)) + " |", "| " + " | ".join("---" for _ in cols) + " |"]
    for r in df.itertuples(index=False):
        lines.append("| " + " | ".join(str(v).replace("|", "\\|") for v in r) + " |")
    return "\n".join(lines)


def table2_markdown(table2: pd.DataFrame, *, with_ci: bool = True) -> str:
    """Table 2 in the paper's layout: per track, one row per method, AUC / TPR@5 / tRec / U / Unsup
    per response model; dagger = chance by construction (checked from the transcripts)."""
    out = []
    for track, gt in table2.groupby("track", sort=False):
        out.append(f"**{TRACK_LABELS.get(track, track)}**\n")
        rows = []
        for method, gm in gt.groupby("method", sort=False):
            row = {"Method": method}
            for r in gm.itertuples(index=False):
                rd = r._asdict()
                pre = f"{rd['response_model']}: " if gt["response_model"].nunique() > 1 else ""
                for m in METRICS:
                    v = fmt(rd.get(m, np.nan))
                    if m in ("auc", "tpr") and rd.get("by_construction"):
                        v += DAGGER
                    elif with_ci and _finite(rd.get(f"{m}_lo")) and _finite(rd.get(f"{m}_hi")):
                        v += f" [{fmt(rd[f'{m}_lo'], 2)}, {fmt(rd[f'{m}_hi'], 2)}]"
                    row[pre + METRIC_LABELS[m]] = v
            rows.append(row)
        out.append(_md(pd.DataFrame(rows)))
        out.append("")
    out.append(f"{DAGGER} identical conditioning under M and M' for every pair, seed and turn (checked from "
               "the transcripts): chance by construction (0.500 / 0.050); the measured auditor values are "
               "in the CSV columns auc_measured / tpr_measured. Brackets: 95% bootstrap CIs over pairs.")
    return "\n".join(out)


def comparison_markdown(cmp: pd.DataFrame) -> str:
    """Per track: ours, the paper mean over its three models and the difference, per metric."""
    out = []
    for (track, model), g in cmp.groupby(["track", "response_model"], sort=False):
        out.append(f"**{TRACK_LABELS.get(track, track)} - ours: {model}; paper: mean of "
                   f"{', '.join(PAPER_MODELS)} (per-model values in the CSV)**\n")
        rows = []
        for method, gm in g.groupby("method", sort=False):
            row = {"Method": method}
            for r in gm.itertuples(index=False):
                d = DAGGER if r.by_construction else ""
                row[f"{r.metric} ours"] = fmt(r.ours) + d
                row[f"{r.metric} paper"] = fmt(r.paper_mean)
                row[f"{r.metric} \u0394"] = ("+" if (r.diff_vs_paper_mean or 0) > 0 else "") + fmt(r.diff_vs_paper_mean)
            rows.append(row)
        out.append(_md(pd.DataFrame(rows)))
        out.append("")
    return "\n".join(out)


def oracle_markdown(oracle: pd.DataFrame, audit_at_T: pd.DataFrame, caps: float) -> str:
    """The exact-ceiling table: learned auditor vs the best possible auditor, and the max loss."""
    m = oracle.merge(audit_at_T[[c for c in ("track", "response_model", "method", "auc_measured", "auc_lo", "auc_hi",
                                              "auc_indep", "auc_indep_lo", "auc_indep_hi") if c in audit_at_T.columns]],
                     on=["track", "response_model", "method"], how="left")
    rows = []
    for r in m.itertuples(index=False):
        rd = r._asdict()
        rows.append({
            "Track": rd["track"], "Model": rd["response_model"], "Method": rd["method"],
            "learned AUC (seed-avg)": fmt(rd.get("auc_measured", np.nan)),
            "ceiling (all seeds)": fmt(rd["ceiling_auc_seeds"]),
            "learned AUC (1 transcript, indep.)": fmt(rd.get("auc_indep", np.nan)),
            "ceiling (1 transcript)": fmt(rd["ceiling_auc"]),
            "ceiling TPR@5": fmt(rd["ceiling_tpr"]),
            "max loss": fmt(rd["max_loss"]),
            f"<= B_a={caps:g} on every pair": ("yes" if rd["max_loss_le_cap_all_pairs"]
                                               else f"no ({rd['pairs_over_cap']} pairs over)"),
        })
    return _md(pd.DataFrame(rows))


class TablePaths(NamedTuple):
    """The two files of a result table written by :func:`write_table`."""

    csv: Path
    md: Path


def write_table(df: pd.DataFrame, directory: str | Path, name: str, markdown: str | None = None) -> TablePaths:
    """Write a result table as ``<name>.csv`` (``df.to_csv(index=False)``) and ``<name>.md`` (the
    Markdown and a final newline) under ``directory`` (created if needed), each atomically
    (:func:`dpmv_lib.common.io.write_atomic`): a reader never sees a half-written table. The one
    writer of result tables for the library and the notebooks.

    Parameters
    ----------
    df : DataFrame
        The table (the CSV holds it exactly, without the index).
    directory : str or Path
        Usually ``<results_dir>/tables``.
    name : str
        The file stem, e.g. ``04_table4_safeguards``.
    markdown : str, optional
        The Markdown file's text; None: :func:`~dpmv_lib.experiments.common.markdown_table` of ``df``.

    Returns
    -------
    TablePaths
        ``(csv, md)``: the two paths (a named tuple: ``paths.csv``, ``paths.md`` or unpacked).
    """
    d = Path(directory)
    out = TablePaths(d / f"{name}.csv", d / f"{name}.md")
    text = markdown_table(df) if markdown is None else markdown
    write_atomic(out.csv, df.to_csv(index=False))
    write_atomic(out.md, text + "\n")
    return out
