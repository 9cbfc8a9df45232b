"""The claims on U decided on the held-out labels (beyond the paper): does the judge's error in U
change a verdict?

C7, C9, C11 (:mod:`.rq1_claims`) and R5 (:mod:`.rq2`) compare U between methods, so what matters
for them is less the judge's agreement with the labels overall (:mod:`dpmv_lib.evaluate.u_validity`)
than whether its error differs between the methods a claim compares. On the held-out half of
``data/judge_labels`` (units the judge's model and cuts never saw; :attr:`~dpmv_lib.evaluate.
u_validity.UValidity.held_out`) every unit has U twice: from the annotator's grades and from the
judge's scores, each the mean of U's dimensions over 4, as :meth:`~dpmv_lib.evaluate.u_validity.
UDefinition.apply` forms it for a transcript.

* **per method** (:func:`method_metrics`): per response model and method, U is the mean over the
  units weighted by ``design_weight``; its bootstrap replicates resample the cell's distinct
  (query, response) pairs with replacement (numpy, seeded per cell), the same resamples for the
  labels' U and the judge's, so their difference (the judge's error) is paired.
* **claims** (:func:`decide_on_labels`): the claims' own case functions on these metrics, decided
  by :func:`.verdicts.decide` (one Holm family of the four claims) once with the labels' U and once
  with the judge's. The tracks are pooled (:data:`TRACK`): the labelled units are too few per track.

Caveats: the labelled units are turns drawn per item kind (``data/judge_labels/README.md``), not the
run's transcripts, and a method has 25-75 held-out units per response model, so a verdict here speaks
for the labelled sample; it is the judge's error, not the methods' U, that this step measures.
"""
from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from ..core.errors import ParameterError
from ..evaluate.rubric import DIMENSIONS
from .rq1_claims import bootstrap_claims
from .rq2 import TABLE4_METHODS, u_claim
from .verdicts import ALPHA, Metrics, decide

#: the pseudo-track of the pooled labelled units (a claim's case reads "<TRACK>/<response model>")
TRACK = "held-out labels"
#: the claims on U, in the order shown
U_CLAIMS = ("C7", "C9", "C11", "R5")
SOURCES = ("labels", "judge")
N_BOOT = 2000


def unit_u(held_out: pd.DataFrame, dimensions: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """(labels' U, judge's U) of every held-out unit: the mean of ``dimensions`` over 4."""
    dims = list(dimensions)
    if not dims:
        raise ParameterError("U holds no dimension: nothing to compare")
    bad = [d for d in dims if d not in DIMENSIONS]
    if bad:
        raise ParameterError(f"unknown U dimensions {bad}; the judge scores {DIMENSIONS}")
    need = {"response_model", "method", "query", "response", *dims, *(f"judge_{d}" for d in dims)}
    if need - set(held_out.columns):
        raise ParameterError(f"held-out units lack columns {sorted(need - set(held_out.columns))}")
    label = held_out[dims].to_numpy(float).mean(axis=1) / 4.0
    judge = held_out[[f"judge_{d}" for d in dims]].to_numpy(float).mean(axis=1) / 4.0
    return label, judge


def _scored_units(held_out: pd.DataFrame, dimensions: Sequence[str]) -> pd.DataFrame:
    """The held-out units with a label and a judge score in every dimension: their cell, response,
    weight ``w`` (``design_weight``, else 1), U from each source (``U_labels``, ``U_judge``) and each
    dimension's error over 4 x len(dimensions) (``err_<dimension>``; they sum to U_judge - U_labels)."""
    label, judge = unit_u(held_out, dimensions)
    w = held_out["design_weight"].to_numpy(float) if "design_weight" in held_out else np.ones(len(held_out))
    ok = np.isfinite(label) & np.isfinite(judge) & np.isfinite(w)
    units = held_out.loc[ok, ["response_model", "method", "query", "response"]].assign(
        w=w[ok], U_labels=label[ok], U_judge=judge[ok])
    for d in dimensions:
        units[f"err_{d}"] = (held_out.loc[ok, f"judge_{d}"].to_numpy(float)
                             - held_out.loc[ok, d].to_numpy(float)) / (4.0 * len(dimensions))
    return units


def method_metrics(held_out: pd.DataFrame, dimensions: Sequence[str], *, n_boot: int = N_BOOT,
                   seed: int = 0) -> dict[str, Metrics]:
    """Per source (:data:`SOURCES`), the U of every (response model, method) of the held-out units
    as :class:`~.verdicts.Metrics` keyed ``(TRACK, model, method, "U")``, with ``n_boot`` replicates
    that resample the cell's distinct (query, response) pairs; both sources share the resamples.
    Units without a label or a judge score in a dimension are left out."""
    return _metrics(_scored_units(held_out, dimensions), n_boot, seed)


def _metrics(units: pd.DataFrame, n_boot: int, seed: int) -> dict[str, Metrics]:
    if n_boot < 1:
        raise ParameterError(f"n_boot must be at least 1, got {n_boot}")
    weighted = units.assign(**{f"wU_{s}": units["w"] * units[f"U_{s}"] for s in SOURCES})
    point: dict[str, dict[tuple, float]] = {s: {} for s in SOURCES}
    boot: dict[str, dict[tuple, np.ndarray]] = {s: {} for s in SOURCES}
    for (model, method), cell in weighted.groupby(["response_model", "method"], sort=True):
        pairs = cell.groupby(["query", "response"], sort=True)[["w", *(f"wU_{s}" for s in SOURCES)]].sum()
        W = pairs["w"].to_numpy()
        if W.sum() <= 0:
            continue
        rng = np.random.default_rng([int(seed) & 0xFFFFFFFF, zlib.crc32(f"{model}|{method}".encode())])
        idx = rng.integers(0, len(W), size=(n_boot, len(W)))
        key = (TRACK, str(model), str(method), "U")
        for s in SOURCES:
            S = pairs[f"wU_{s}"].to_numpy()
            point[s][key] = float(S.sum() / W.sum())
            boot[s][key] = S[idx].sum(axis=1) / W[idx].sum(axis=1)
    return {s: Metrics(point[s], boot[s], n_boot) for s in SOURCES}


def _gaps(units: pd.DataFrame, metrics: Mapping[str, Metrics], dimensions: Sequence[str]) -> pd.DataFrame:
    """One row per (response model, method): held-out units, distinct responses, the labels' U, the
    judge's U and the judge's error ``gap`` = judge - labels with its 95% percentile interval over
    the paired replicates (``gap_lo``, ``gap_hi``), and each dimension's share of the gap
    (``gap_<dimension>``, the weighted mean of ``err_<dimension>``; they sum to ``gap``)."""
    lab, jud = metrics["labels"], metrics["judge"]
    cells = units.groupby(["response_model", "method"], sort=True)
    recs = []
    for key in lab.point:
        _, model, method, _ = key
        cell = cells.get_group((model, method))
        d = jud.boot[key] - lab.boot[key]
        rec = {"response_model": model, "method": method, "units": len(cell),
               "responses": int(cell[["query", "response"]].drop_duplicates().shape[0]),
               "label_U": lab.point[key], "judge_U": jud.point[key], "gap": jud.point[key] - lab.point[key],
               "gap_lo": float(np.quantile(d, ALPHA / 2)), "gap_hi": float(np.quantile(d, 1 - ALPHA / 2))}
        rec.update({f"gap_{dim}": float(np.average(cell[f"err_{dim}"], weights=cell["w"])) for dim in dimensions})
        recs.append(rec)
    return pd.DataFrame.from_records(recs, columns=["response_model", "method", "units", "responses", "label_U",
                                                    "judge_U", "gap", "gap_lo", "gap_hi",
                                                    *(f"gap_{d}" for d in dimensions)])


def u_claims(metrics: Metrics, u_label: str = "") -> list:
    """C7, C9, C11 (:func:`.rq1_claims.bootstrap_claims`) and R5 (:func:`.rq2.u_claim`, the
    Table 4 ablations against its compliant row, on each response model that has them) on
    ``metrics``; a claim whose methods the metrics lack is left out."""
    claims = [c for c in bootstrap_claims(metrics, u_label) if c.id in U_CLAIMS]
    compliant, ablations = TABLE4_METHODS[0], TABLE4_METHODS[1:]
    r5 = []
    for track, model in metrics.combos():
        have = tuple(a for a in ablations if metrics.has(track, model, a, "U"))
        if have and metrics.has(track, model, compliant, "U"):
            r5.append((track, model, u_claim(have, compliant, track, model, u_label=u_label)))
    if r5:   # one claim, its cases named by (track, model) as the RQ1 claims' are
        claims.append(replace(r5[0][2], cases=tuple(replace(c, label=f"{track}/{model}/{c.label}")
                                                    for track, model, claim in r5 for c in claim.cases)))
    return claims


def case_table(claims: Sequence[Any], metrics: Mapping[str, Metrics]) -> pd.DataFrame:
    """Every case of ``claims`` (:func:`u_claims`) with its statistic per source: ``value_<source>``
    and its 95% percentile interval (``lo_<source>``, ``hi_<source>``), beside the case's margin and side."""
    recs = []
    for claim in claims:
        for case in claim.cases:
            rec = {"id": claim.id, "case": case.label, "direction": case.direction, "margin": case.margin}
            for s in SOURCES:
                reps = np.asarray(case.value(metrics[s].getter(True)), float)
                rec.update({f"value_{s}": float(case.value(metrics[s].getter(False))),
                            f"lo_{s}": float(np.quantile(reps, ALPHA / 2)),
                            f"hi_{s}": float(np.quantile(reps, 1 - ALPHA / 2))})
            recs.append(rec)
    return pd.DataFrame.from_records(recs)


@dataclass(frozen=True)
class LabelClaims:
    """The claims on U decided with the labels' U and with the judge's on the held-out units."""

    gaps: pd.DataFrame
    claims: pd.DataFrame
    cases: pd.DataFrame
    dimensions: tuple[str, ...]
    n_boot: int
    seed: int

    def agreement(self) -> tuple[int, int]:
        """(claims decided alike by both sources, claims decided by both)."""
        c = self.claims.dropna(subset=["verdict_labels", "verdict_judge"])
        return int((c["verdict_labels"] == c["verdict_judge"]).sum()), len(c)

    def summary(self) -> str:
        """One paragraph from the numbers."""
        same, n = self.agreement()
        g = self.gaps
        if g.empty:
            return "No held-out labelled unit has U from both the labels and the judge."
        out = (f"On the {int(g['units'].sum())} held-out labelled units (U = mean({', '.join(self.dimensions)}) / 4, "
               f"design-weighted; {self.n_boot} bootstrap replicates over distinct responses, seed {self.seed}), "
               f"the judge's U minus the labels' ranges from {g['gap'].min():+.3f} ({_cell(g, g['gap'].idxmin())}) to "
               f"{g['gap'].max():+.3f} ({_cell(g, g['gap'].idxmax())}) across methods")
        sig = g[(g["gap_lo"] > 0) | (g["gap_hi"] < 0)]
        out += f"; its 95% interval excludes 0 for {len(sig)} of {len(g)} (response model, method) cells. "
        diff = self.claims[self.claims["verdict_labels"] != self.claims["verdict_judge"]]
        out += f"{same} of {n} claims on U get the same verdict from the labels' U as from the judge's"
        if len(diff):
            out += ": " + "; ".join(
                f"{r.id} {r.verdict_labels} on the labels ({_f(r.estimate_labels)} "
                f"[{_f(r.ci_lo_labels)}, {_f(r.ci_hi_labels)}]), {r.verdict_judge} on the judge "
                f"({_f(r.estimate_judge)} [{_f(r.ci_lo_judge)}, {_f(r.ci_hi_judge)}])" for r in diff.itertuples())
        else:
            out += " (" + "; ".join(f"{r.id} {r.verdict_labels}" for r in self.claims.itertuples()) + ")"
        absent = [c for c in U_CLAIMS if c not in set(self.claims["id"])]
        if absent:
            whose = "its" if len(absent) == 1 else "their"
            out += f"; {', '.join(absent)} not decided here (no labelled unit of {whose} methods)"
        if not self.cases.empty:
            c = self.cases.loc[(self.cases["value_judge"] - self.cases["value_labels"]).abs().idxmax()]
            out += (f". The sources differ most in {c['id']}'s case {c['case']}: labels {_f(c['value_labels'])} "
                    f"[{_f(c['lo_labels'])}, {_f(c['hi_labels'])}], judge {_f(c['value_judge'])} "
                    f"[{_f(c['lo_judge'])}, {_f(c['hi_judge'])}] ({c['direction']} {c['margin']:g} holds the claim)")
        r = g.loc[g["gap"].abs().idxmax()]
        shares = sorted(((float(r[f"gap_{d}"]), d) for d in self.dimensions), key=lambda x: -abs(x[0]))
        out += (f". The largest error is the judge's on {r['method']} ({r['response_model']}): {r['gap']:+.3f} "
                f"[{r['gap_lo']:+.3f}, {r['gap_hi']:+.3f}], of which " + ", ".join(f"{d} {v:+.3f}" for v, d in shares))
        return out + " (intervals: numpy percentile bootstrap; verdicts: dpmv_lib.experiments.verdicts.decide)."

def _f(x: float) -> str:
    return "nan" if x is None or math.isnan(x) else f"{x:+.3f}"


def _cell(g: pd.DataFrame, row: Any) -> str:
    return f"{g.at[row, 'method']}, {g.at[row, 'response_model']}"


def decide_on_labels(held_out: pd.DataFrame, dimensions: Sequence[str], u_label: str = "", *,
                     n_boot: int = N_BOOT, seed: int = 0) -> LabelClaims:
    """The judge's error per method and the claims on U (:func:`u_claims`) decided per source: one row per
    claim with ``estimate``, ``ci_lo``, ``ci_hi`` and ``verdict`` of the labels and of the judge
    and the binding case of each."""
    units = _scored_units(held_out, dimensions)
    metrics = _metrics(units, n_boot, seed)
    claims_on_u = u_claims(metrics["labels"], u_label)     # both sources hold the same cells
    tables = {s: decide(claims_on_u, metrics[s]) for s in SOURCES}
    keep = ["id", "estimate", "ci_lo", "ci_hi", "verdict", "statistic", "evidence"]
    merged = None
    for s in SOURCES:
        t = tables[s].reindex(columns=keep).rename(columns={c: f"{c}_{s}" for c in keep if c != "id"})
        merged = t if merged is None else merged.merge(t, on="id", how="outer")
    claims = merged if merged is not None else pd.DataFrame(columns=["id"])
    claims = claims.set_index("id").reindex([c for c in U_CLAIMS if c in set(claims["id"])]).reset_index()
    claims["agree"] = claims["verdict_labels"] == claims["verdict_judge"]
    return LabelClaims(_gaps(units, metrics, dimensions), claims, case_table(claims_on_u, metrics),
                       tuple(dimensions), n_boot, seed)


def rq1_label_claims(rq1: Any, *, name: str = "03_u_label_claims") -> Any:
    """Notebook step: :func:`decide_on_labels` on the held-out units of the RQ1 run's U validation
    whose response model the run used (its claims are about those), with U's dimensions; with
    ``config.write`` the tables go to ``{results_dir}/tables/<name>.csv|md``."""
    from ..common.paths import resolve
    from .common import markdown_table
    from .result import Result
    from .rq1 import result_of
    from .tables import write_table

    res = result_of(rq1)
    uv = res.u_validity
    if uv is None or uv.held_out.empty:
        return Result("The claims on U, decided on the labels", "This run's judge has no held-out labels.")
    if not uv.definition.dimensions:
        return Result("The claims on U, decided on the labels",
                      f"{uv.definition.label}: no claim on U has a U to compare, on the labels or on the judge.")
    models = sorted(set(res.table2["response_model"].astype(str)))
    held = uv.held_out[uv.held_out["response_model"].isin(models)]
    if held.empty:
        return Result("The claims on U, decided on the labels",
                      f"No held-out labelled unit comes from this run's response model(s) ({', '.join(models)}).")
    lc = decide_on_labels(held, uv.definition.dimensions, uv.definition.label, seed=res.config.seed)
    finding = f"Held-out units of this run's response model(s), {', '.join(models)}. {lc.summary()}"
    if res.config.write:
        tdir = resolve(res.config.results_dir) / "tables"
        write_table(lc.claims, tdir, name, f"{finding}\n\n{markdown_table(lc.claims)}")
        write_table(lc.cases, tdir, f"{name}_cases")
        write_table(lc.gaps, tdir, f"{name}_by_method")
    return Result(f"The claims on U decided with the labels' U and with the judge's, on the held-out units "
                  f"(tables/{name}.csv, {name}_cases.csv, {name}_by_method.csv)",
                  finding,
                  tables={"claims": lc.claims.drop(columns=[f"{c}_{s}" for c in ("statistic", "evidence")
                                                            for s in SOURCES]),
                          "every case": lc.cases,
                          "judge's U minus the labels' U, per method": lc.gaps},
                  data={"label_claims": lc})
