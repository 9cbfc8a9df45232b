"""Auditors with power: the paper's C.5 column beside the strongest honest
learned auditors and the exact ceiling, as a table and a figure (notebooks 03-05).

Every auditor of :mod:`dpmv_lib.evaluate.auditors` (``c5``, ``c5-raw``, ``views``,
``views-links``, ``tfidf``) is fitted on the same splits; :func:`power_table` gives, per method,
each auditor's AUC with its bootstrap interval, the exact ceiling and the power
(AUC - 0.5) / (ceiling - 0.5) of the best one. ``views-links`` reads the public gold rules'
view -> attribute links (public, like the policy); ``views`` uses no gold at all.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from ..core.errors import ParameterError
from ..evaluate.auditor_summary import best_auditor, summarise
from ..evaluate.auditors import AUDITORS, LearnedConfig, learned_audit
from ..evaluate.encoders import Encoder
from .plots import save_figure

#: the goal for the best learned auditor's power (AUC - 0.5) / (ceiling - 0.5)
POWER_GOAL = 0.8


def views_ceilings(oracle: pd.DataFrame) -> pd.DataFrame:
    """One ceiling row per (track, response_model, method) of an oracle summary (the released-views
    row where a method has several kinds)."""
    o = oracle.copy()
    if "kind" in o.columns:
        o = o.assign(_v=(o["kind"] != "views")).sort_values("_v", kind="stable").drop(columns="_v")
    keys = [k for k in ("track", "response_model", "method") if k in o.columns]
    return o.drop_duplicates(keys)


def auditor_power(transcripts: pd.DataFrame, encoder: Encoder, ceilings: pd.DataFrame, *, horizon: int,
                  view_links: Mapping[str, Sequence[str]] | None, seed: int = 0, n_boot: int = 1000,
                  auditors: Sequence[str] = AUDITORS, progress: bool = False) -> pd.DataFrame:
    """Every auditor's summary at ``horizon`` (:func:`dpmv_lib.evaluate.auditor_summary.summarise`:
    macro AUC with a bootstrap interval, pooled interpolated TPR@5%FPR, ceiling, power).

    Raises
    ------
    ParameterError
        No transcripts, or ``views-links`` asked for without ``view_links``.
    """
    if transcripts.empty:
        raise ParameterError("no transcripts to audit")
    if view_links is None:
        auditors = [a for a in auditors if a != "views-links"]
    scores = learned_audit(transcripts[transcripts["turn"] < horizon], auditors, encoder=encoder,
                           config=LearnedConfig(horizons=(int(horizon),), seed=seed), view_links=view_links,
                           progress=progress)
    return summarise(scores, views_ceilings(ceilings), n_boot=n_boot, seed=seed)


def power_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Per (track, response_model, method): the ceiling, every auditor's AUC and the best
    auditor's power with its interval (``meets_goal``: power >= :data:`POWER_GOAL`)."""
    keys = ["track", "response_model", "method"]
    wide = summary.pivot_table(index=keys, columns="auditor", values="auc", aggfunc="first")
    wide = wide[[a for a in AUDITORS if a in wide.columns]].add_prefix("auc ")
    best = best_auditor(summary).set_index(keys)
    out = summary.drop_duplicates(keys).set_index(keys)[["ceiling"]].join(wide)
    out["best"] = best["auditor"]
    for c in ("power", "power_lo", "power_hi"):
        out[f"best {c}"] = best[c] if c in best.columns else np.nan
    out["meets_goal"] = out["best power"] >= POWER_GOAL
    return out.reset_index()


def power_figure(summary: pd.DataFrame, path: str | Path | None = None, *, methods: Sequence[str] | None = None,
                 title: str = ""):
    """Every auditor's AUC with its 95% bootstrap interval, per method, beside the exact ceiling
    (black bar), on an axis centred on chance (seaborn styling; one panel per track)."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    s = summary if methods is None else summary[summary["method"].isin(methods)]
    if s.empty:
        raise ParameterError("nothing to plot")
    panels = list(dict.fromkeys(s["track"] + " / " + s["response_model"]))
    order = list(dict.fromkeys(s["method"]))
    auds = [a for a in AUDITORS if a in set(s["auditor"])]
    colors = dict(zip(auds, sns.color_palette("colorblind", len(auds))))
    vals = (s[["auc", "auc_lo", "auc_hi", "ceiling"]].to_numpy(float) if "auc_lo" in s.columns
            else s[["auc", "ceiling"]].to_numpy(float))
    dev = min(0.5, float(np.nanmax(np.abs(vals - 0.5))) + 0.04)
    with sns.axes_style("whitegrid"):
        fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 0.55 * len(order) + 1.8),
                                 squeeze=False, sharey=True)
        for ax, panel in zip(axes[0], panels):
            p = s[(s["track"] + " / " + s["response_model"]) == panel]
            for i, a in enumerate(auds):
                q = p[p["auditor"] == a].set_index("method").reindex(order)
                y = np.arange(len(order)) + (i - (len(auds) - 1) / 2) * 0.13
                err = None
                if "auc_lo" in q.columns:
                    err = np.vstack([q["auc"] - q["auc_lo"], q["auc_hi"] - q["auc"]]).clip(min=0)
                ax.errorbar(q["auc"], y, xerr=err, fmt="o", ms=4, capsize=2, color=colors[a], label=a)
            c = p.drop_duplicates("method").set_index("method").reindex(order)["ceiling"]
            ax.scatter(c, np.arange(len(order)), marker="|", s=400, color="k", zorder=5, label="exact ceiling")
            ax.axvline(0.5, color="grey", ls="--", lw=1)
            ax.set(xlim=(0.5 - dev, 0.5 + dev), title=panel, xlabel="AUC (0.5 = chance)")
            ax.set_yticks(range(len(order)), order)
        axes[0][0].invert_yaxis()
        axes[0][-1].legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
        fig.suptitle(title or "Learned auditors (95% bootstrap intervals) beside the exact ceiling", fontsize=10)
        fig.tight_layout()
    return save_figure(fig, path, dpi=130)


def rq1_power(session: Any, rq1: Any, track: str = "pairedmem") -> Any:
    """Notebook step: :func:`auditor_power` on an RQ1 run's transcripts at T (the result of
    :func:`dpmv_lib.experiments.rq1.run`), against its exact ceilings; writes
    ``tables/<notebook>_auditor_power`` (:func:`power_table`), ``<notebook>_auditors.csv`` (every
    auditor) and the figure. Shown: the power table on ``track``."""
    import matplotlib.pyplot as plt

    from ..bench.datasets import load_gold_rules
    from .common import run_encoder
    from .result import Result
    from .rq1 import result_of

    res = result_of(rq1)
    cfg = session.cfg
    enc = run_encoder(session.params.get("encoder") or session.profile.encoder, cfg.results_dir)
    power = auditor_power(res.transcripts, enc, res.oracle, horizon=res.config.T,
                          view_links=load_gold_rules(cfg.data_dir)["view_links"], seed=cfg.seed,
                          n_boot=int(cfg.n_boot))
    ptab = power_table(power)
    session.write_table(f"{session.notebook}_auditor_power", ptab)
    power.to_csv(session.tables_dir / f"{session.notebook}_auditors.csv", index=False)
    path = session.figure_path(f"{session.notebook}_auditor_power")
    plt.close(power_figure(power, path))
    open_ = ptab[ptab["ceiling"] > 0.5 + 1e-9]
    goal = open_[open_["meets_goal"].astype(bool)]
    finding = (f"Where the exact ceiling is above 0.5 ({len(open_)} method-track cases), the best honest auditor "
               f"reaches power >= {POWER_GOAL} in {len(goal)}"
               + (f" ({', '.join(f'{r.method} on {r.track}' for r in goal.itertuples())})"
                  if 0 < len(goal) <= 6 else "")
               + "; the best auditor is chosen on the evaluation pairs, so its power is optimistic.")
    if len(open_):
        low = open_.loc[open_["best power"].idxmin()]
        finding += (f" The weakest case is {low['method']} on {low['track']}: best AUC power {low['best power']:.3f} "
                    f"({low['best']}) against a ceiling of {low['ceiling']:.3f}.")
    return Result(f"Auditors with power at T = {res.config.T} (every track: "
                  f"tables/{session.notebook}_auditor_power.csv)", finding,
                  tables={f"AUC per auditor and the best auditor's power on {track}":
                          ptab[ptab["track"] == track].drop(columns=["track", "response_model", "best power_lo",
                                                                      "best power_hi"], errors="ignore")},
                  figures={"power": path})
