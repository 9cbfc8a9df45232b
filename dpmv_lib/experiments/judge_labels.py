"""The judge against independent labels, as notebook steps: the annotators' own agreement, the
judge's agreement with annotator A (:mod:`dpmv_lib.evaluate.judge_agreement`) and the item
thresholds fitted on half of the labels. Full tables go to ``tables/``; the notebook shows the
pooled rows."""
from __future__ import annotations

from typing import Any

import pandas as pd

from ..evaluate.rubric import DIMENSIONS
from ..evaluate.u_validity import (SMOL_LABELS_C, SMOL_LABELS_C_B, SMOL_SAMPLE_C, SURR_LABELS_B, SURR_LABELS_B_B,
                                   SURR_SAMPLE_B)
from .result import Result

#: Cohen's kappa goal of "behaviour shown" on tRec and Unsup items
KAPPA_GOAL = 0.6
_KINDS = ("shown: tRec items", "shown: Unsup items")
#: label extensions read a second time on a subset: name -> (table suffix, sample, first and second labels)
SECOND_READINGS = {"enriched SmolLM2 draw": ("smollm2", SMOL_SAMPLE_C, SMOL_LABELS_C, SMOL_LABELS_C_B),
                   "second surrogate extension": ("surrogate_b", SURR_SAMPLE_B, SURR_LABELS_B, SURR_LABELS_B_B)}


def _labels(session: Any) -> tuple[pd.DataFrame, dict]:
    from ..bench.datasets import load_benchmark
    from ..evaluate import judge_agreement

    units = judge_agreement.load_units(session.data_dir / "judge_labels")
    return units, {t: load_benchmark(t, session.cfg.data_dir) for t in sorted(set(units["track"]))}


def _kappas(table: pd.DataFrame) -> str:
    t = table.set_index("what")["kappa"]
    return " and ".join(f"{t[w]:.2f} on {w.split(': ')[1]}" for w in _KINDS if w in t.index)


def _kappa_text(kappa: float) -> str:
    """A kappa to two decimals; NaN where both readings put every unit in one class."""
    return "undefined (one class in both readings)" if pd.isna(kappa) else f"{kappa:.2f}"


def agreement(session: Any) -> Result:
    """Notebook step: annotator A against annotator B, then the run's rubric judge against A
    (accuracy, Cohen's kappa, precision and recall of "shown", per item kind and U dimension);
    written to ``tables/<notebook>_judge_inter_annotator`` and ``<notebook>_judge_agreement``
    (pooled and per response model), shown pooled."""
    from ..evaluate import judge_agreement
    from .rq1 import run_judge

    judge = run_judge(session)
    if judge is None:
        return Result("The judge against independent labels", "This run's judge is not the rubric judge: the judge "
                                                                "checks run for the rubric judge only.")
    label_dir = session.data_dir / "judge_labels"
    ia = judge_agreement.inter_annotator(label_dir)
    session.write_table(f"{session.notebook}_judge_inter_annotator", ia)
    second = {}
    for name, (suffix, sample, first, again) in SECOND_READINGS.items():
        if (label_dir / again).exists():
            second[name] = judge_agreement.inter_annotator(label_dir, judge_agreement.annotator_name(first),
                                                           judge_agreement.annotator_name(again), sample)
            session.write_table(f"{session.notebook}_judge_inter_annotator_{suffix}", second[name])
    units, benches = _labels(session)
    agr = judge_agreement.agreement(judge_agreement.judge_units(units, benches, judge))
    session.write_table(f"{session.notebook}_judge_agreement", agr)
    pooled = agr[agr["response_model"] == "all"].drop(columns=["response_model"]) if "response_model" in agr else agr
    k = pooled.set_index("what")["kappa"]
    met = all(k.get(w, float("nan")) >= KAPPA_GOAL for w in _KINDS)
    finding = (f"The annotators agree with kappa {_kappas(ia)}; the judge agrees with annotator A with kappa "
               f"{_kappas(pooled)} (goal >= {KAPPA_GOAL}: {'met' if met else 'not met'} on both kinds).")
    tables = {f"annotator A vs annotator B ({int(ia['units'].max())} units)": ia}
    for name, ia2 in second.items():
        u, n = ia2.set_index("what")["kappa"], int(ia2["units"].max())
        finding += (f" On the {name} a second annotator agrees with the first with kappa "
                    + ", ".join(f"{d} {_kappa_text(u[f'U: {d}'])}" for d in DIMENSIONS) + f" ({n} units).")
        tables[f"{name}: two annotators ({n} units)"] = ia2
    tables["judge vs annotator A, pooled over response models (per model: "
           f"tables/{session.notebook}_judge_agreement.csv)"] = pooled
    return Result(f"The judge ({judge.id}) against independent labels", finding, tables=tables,
                  data={"units": units})


def threshold_fit(session: Any) -> Result:
    """Notebook step: the judge's item thresholds fitted on half of the labelled pairs
    (:func:`dpmv_lib.evaluate.judge_agreement.fit_item_thresholds`), reported on the other half;
    the grid is written to ``tables/<notebook>_judge_threshold_fit``, the notebook shows the fitted
    and the in-use candidates. MiniLM judge only: the hashing encoder keeps its own scale."""
    from ..evaluate import judge_agreement
    from .common import run_encoder
    from .rq1 import run_judge

    judge = run_judge(session)
    if judge is None or "[hashing" in judge.id:
        return Result("Item thresholds fitted on the labels",
                      f"Not fitted for this run's judge ({getattr(judge, 'id', 'not the rubric judge')}): the fit is "
                      "defined for the MiniLM rubric judge; the hashing encoder keeps its own scale.")
    units, benches = _labels(session)
    grid, chosen = judge_agreement.fit_item_thresholds(
        units, benches, run_encoder(session.params.get("encoder") or session.profile.encoder, session.cfg.results_dir),
        current=(judge.thresholds[0], judge.margins[1]))
    session.write_table(f"{session.notebook}_judge_threshold_fit", grid)
    cur = grid[grid["current"]]
    same = bool(grid.loc[grid["chosen"], "current"].all())
    finding = (f"The fit chooses floor {chosen['floor']:g} and margin step {chosen['margin_step']:g} (kappa "
               f"{chosen['kappa_fit']:.3f} on the fitting half, {chosen['kappa_held_out']:.3f} held out); the judge "
               f"uses floor {judge.thresholds[0]:g} and margin step {judge.margins[1]:g}"
               + (": the fitted values are the ones in use." if same else
                  f" (held-out kappa {float(cur['kappa_held_out'].iloc[0]):.3f})." if len(cur) else "."))
    return Result(f"Item thresholds fitted on the labels ({len(grid)} candidates: "
                  f"tables/{session.notebook}_judge_threshold_fit.csv)", finding,
                  tables={"fitted and in-use candidates": grid[grid["chosen"] | grid["current"]]})
