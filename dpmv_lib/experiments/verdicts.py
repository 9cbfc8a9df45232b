"""Verdicts with uncertainty: every claim names its statistic, its margin and its test.

A claim is a statistic of the per-method metrics of Tables 2-4 (AUC, TPR@5, U, tRec, Unsup) that
must lie on one side of a margin. The uncertainty comes from a **paired, attribute-stratified
percentile bootstrap over pairs** (:func:`paired_bootstrap`): in each replicate the pairs of every
attribute are resampled with replacement, once per (track, response model), and the *same*
resample feeds every method, so a difference between two methods is bootstrapped as a difference
of paired values. Within a pair, EM seeds are averaged first, as the C.5 auditor does
(calibrated scores) and as the judge summary does (utility). AUCs are Mann-Whitney (ties 1/2,
equal to ``sklearn.metrics.roc_auc_score``) per attribute, then the macro mean.

Each claim gets a bootstrap p-value for "the claim fails" and one for "the claim holds" (the share
of replicates on the wrong side of the margin, +1 smoothed), and its two-sided p-value enters a
**Holm step-down correction** over the family of bootstrapped claims of one table (family-wise
error 5%). Verdicts:

* ``HOLDS``: the Holm-adjusted p < 0.05 and the replicates lie on the claim's side (then the 95%
  percentile CI lies wholly on the claim's side of the margin, too);
* ``DOES NOT HOLD``: the same on the other side;
* ``INCONCLUSIVE``: anything else (the CI straddles the margin, or only the uncorrected test
  decides; the table shows the uncorrected p beside the adjusted one);
* ``ERROR``: a consistency check failed (a learned AUC whose CI lies wholly above its exact
  ceiling, which no auditor can beat);
* exact claims (the dagger check, the oracle, the accounting) have no sampling error: ``HOLDS`` /
  ``DOES NOT HOLD`` with test "exact", outside the Holm family.

A claim over several cases ("for every model and track", "for every ablation") is the minimum of
the cases' signed distances to their margins, computed replicate by replicate (an
intersection-union statistic: it holds only if every case does).
"""
from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence, TypeAlias

import numpy as np
import pandas as pd

from ..core.errors import ParameterError
from ..evaluate.audit import auc_rows, tpr_rows

VERDICTS = ("HOLDS", "DOES NOT HOLD", "INCONCLUSIVE", "ERROR", "NOT EVALUATED")
ALPHA = 0.05
#: replicates for a verdict table: enough for Holm over up to 25 claims (see :func:`min_replicates`)
N_BOOT = 1000
COLUMNS = ("id", "claim", "statistic", "estimate", "ci_lo", "ci_hi", "margin", "test", "p", "p_holm",
           "verdict", "holds", "evidence")
BOOT_TEST = "paired bootstrap over pairs, stratified by attribute, seeds averaged; Holm over the table"
UTILITY = ("U", "tRec", "Unsup")

#: a point estimate or an array of bootstrap replicates
Value: TypeAlias = "float | np.ndarray"


# ---- the paired bootstrap ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Metrics:
    """Point estimates and paired bootstrap replicates of per-method metrics.

    Keys are ``(track, response_model, method, metric)``; ``boot[key]`` has ``n_boot`` replicates,
    aligned across keys of one (track, response model) (paired) and independent across them."""

    point: Mapping[tuple, float]
    boot: Mapping[tuple, np.ndarray]
    n_boot: int

    def has(self, *key: str) -> bool:
        return tuple(key) in self.point

    def getter(self, replicates: bool) -> Callable[..., "Value"]:
        """``get(track, model, method, metric)``: the point estimate or the replicate array."""
        src = self.boot if replicates else self.point

        def get(track: str, model: str, method: str, metric: str):
            key = (track, model, method, metric)
            if key not in src:
                raise KeyError(key)
            return src[key]
        return get

    def combos(self) -> list[tuple[str, str]]:
        """The (track, response model) combinations present, in first-seen order."""
        return list(dict.fromkeys((k[0], k[1]) for k in self.point))


def _rng(seed: int, *parts: str) -> np.random.Generator:
    """An independent, reproducible stream per (seed, parts) (no dependence on call order)."""
    return np.random.default_rng([int(seed) & 0xFFFFFFFF, zlib.crc32("|".join(parts).encode())])


def _strata(pairs_by_attr: Mapping[str, Sequence[str]], n_boot: int, rng: np.random.Generator
            ) -> dict[str, np.ndarray]:
    return {a: rng.integers(0, len(p), size=(n_boot, len(p))) for a, p in sorted(pairs_by_attr.items())}


def paired_bootstrap(scores: pd.DataFrame | None = None, utility: pd.DataFrame | None = None, *,
                     n_boot: int = 1000, seed: int = 0, fpr: float = 0.05,
                     by_construction: Iterable[tuple[str, str, str]] = ()) -> Metrics:
    """Point estimates and paired, attribute-stratified bootstrap replicates of the metrics.

    Parameters
    ----------
    scores : DataFrame, optional
        Auditor scores, one row per evaluated (track, response_model, method, pair_id, attribute,
        side, seed) with ``score`` (one horizon: filter before), e.g. the second output of
        :func:`dpmv_lib.evaluate.audit.run_audit`. Gives ``auc`` and ``tpr`` (macro over attributes).
    utility : DataFrame, optional
        Per-transcript judge results (:func:`dpmv_lib.evaluate.judge.score_transcripts`): gives
        ``U`` (both sides), ``tRec`` (M) and ``Unsup`` (M') as means over pairs.
    n_boot : int
        Replicates (>= 100).
    seed : int
        Seed of the resampling (one independent stream per track, model and metric family).
    by_construction : iterable of (track, response_model, method)
        Methods whose conditioning is identical under M and M' (the dagger check): their AUC and
        TPR are 0.5 and 0.05 exactly, with no sampling error (as Table 2 prints them).

    Raises
    ------
    ParameterError
        Missing columns, fewer than 100 replicates, or a method that lacks a pair its track has.
    """
    if n_boot < 100:
        raise ParameterError(f"n_boot must be >= 100 for a bootstrap verdict, got {n_boot}")
    point: dict[tuple, float] = {}
    boot: dict[tuple, np.ndarray] = {}
    dagger = set(by_construction)
    if scores is not None and len(scores):
        _need(scores, {"track", "response_model", "method", "pair_id", "attribute", "side", "seed", "score"}, "scores")
        if "horizon" in scores.columns and scores["horizon"].nunique() > 1:
            raise ParameterError("scores hold several horizons; pass one (filter on 'horizon')")
        _audit_metrics(scores, n_boot, seed, fpr, dagger, point, boot)
    if utility is not None and len(utility):
        _need(utility, {"track", "response_model", "method", "pair_id", "attribute", "side", *UTILITY}, "utility")
        _utility_metrics(utility, n_boot, seed, point, boot)
    if not point:
        raise ParameterError("paired_bootstrap needs auditor scores or judge results")
    return Metrics(point, boot, n_boot)


def _need(df: pd.DataFrame, cols: set[str], what: str) -> None:
    missing = cols - set(df.columns)
    if missing:
        raise ParameterError(f"{what} table lacks columns {sorted(missing)}")


def _pairs_by_attr(df: pd.DataFrame) -> dict[str, list[str]]:
    return {a: sorted(g.unique()) for a, g in df.groupby("attribute")["pair_id"]}


def _audit_metrics(scores, n_boot, seed, fpr, dagger, point, boot) -> None:
    for (track, model), g in scores.groupby(["track", "response_model"], sort=False):
        strata = _pairs_by_attr(g)
        idx = _strata(strata, n_boot, _rng(seed, track, model, "audit"))
        for method, gm in g.groupby("method", sort=False):
            key = (track, model, method)
            if key in dagger:
                point[key + ("auc",)], boot[key + ("auc",)] = 0.5, np.full(n_boot, 0.5)
                point[key + ("tpr",)], boot[key + ("tpr",)] = fpr, np.full(n_boot, fpr)
                continue
            avg = gm.groupby(["attribute", "pair_id", "side"])["score"].mean()
            aucs, tprs, baucs, btprs = [], [], [], []
            for attr, pairs in strata.items():
                try:
                    pos = avg.loc[attr].xs("M", level="side").reindex(pairs).to_numpy(float)
                    neg = avg.loc[attr].xs("M'", level="side").reindex(pairs).to_numpy(float)
                except KeyError:
                    pos = neg = np.array([np.nan])
                if np.isnan(pos).any() or np.isnan(neg).any():
                    raise ParameterError(f"{track}/{model}/{method}/{attr}: every pair needs M and M' scores")
                aucs.append(auc_rows(pos[None], neg[None])[0])
                tprs.append(tpr_rows(pos[None], neg[None], fpr)[0])
                ii = idx[attr]
                baucs.append(auc_rows(pos[ii], neg[ii]))
                btprs.append(tpr_rows(pos[ii], neg[ii], fpr))
            point[key + ("auc",)], boot[key + ("auc",)] = float(np.mean(aucs)), np.mean(baucs, axis=0)
            point[key + ("tpr",)], boot[key + ("tpr",)] = float(np.mean(tprs)), np.mean(btprs, axis=0)


def _utility_metrics(util, n_boot, seed, point, boot) -> None:
    ok = util[~util["failed"].astype(bool)] if "failed" in util.columns else util
    for (track, model), g in ok.groupby(["track", "response_model"], sort=False):
        strata = _pairs_by_attr(g)
        idx = _strata(strata, n_boot, _rng(seed, track, model, "utility"))
        for method, gm in g.groupby("method", sort=False):
            by = gm.groupby(["pair_id", "side"])[list(UTILITY)].mean()
            sides = by.index.get_level_values("side")
            per = {"U": by["U"].groupby(level="pair_id").mean(),
                   "tRec": by["tRec"][sides == "M"].droplevel("side"),
                   "Unsup": by["Unsup"][sides == "M'"].droplevel("side")}
            for metric, s in per.items():
                vals = [s.reindex(pairs).to_numpy(float) for pairs in strata.values()]
                allv = np.concatenate(vals)
                if np.isnan(allv).all():
                    continue
                if np.isnan(allv).any():
                    raise ParameterError(f"{track}/{model}/{method}: {metric} missing for some pairs")
                point[(track, model, method, metric)] = float(allv.mean())
                sums = sum(v[idx[a]].sum(axis=1) for a, v in zip(strata, vals))
                boot[(track, model, method, metric)] = sums / len(allv)


# ---- claims -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    """One case of a claim: a statistic that must lie on one side of a margin (``direction`` ">"
    or "<"). ``value`` is a function of a getter (point or replicates, see :meth:`Metrics.getter`)."""

    label: str
    value: Callable[[Callable[..., "Value"]], "Value"]
    margin: float = 0.0
    direction: str = ">"

    def __post_init__(self) -> None:
        if self.direction not in (">", "<"):
            raise ParameterError(f"direction must be '>' or '<', got {self.direction!r}")

    def distance(self, get) -> "Value":
        """Signed distance to the margin, positive on the claim's side."""
        v = self.value(get)
        return v - self.margin if self.direction == ">" else self.margin - v


@dataclass(frozen=True)
class BootClaim:
    """A claim decided by the paired bootstrap: every case must lie on its side of the margin."""

    id: str
    claim: str
    statistic: str
    cases: tuple[Case, ...]
    kind: str = "claim"       # "claim" (Holm family) or "ceiling" (ERROR when wholly on the wrong side)


@dataclass(frozen=True)
class ExactClaim:
    """A claim decided without a bootstrap of its own: exact (dagger check, exact oracle,
    accounting), or a consistency check on a CI computed elsewhere (``test`` says which; with
    ``error=True`` a failure is an ``ERROR``, not ``DOES NOT HOLD``)."""

    id: str
    claim: str
    statistic: str
    holds: bool | None
    evidence: str
    estimate: float = math.nan
    margin: float = math.nan
    ci: tuple[float, float] = (math.nan, math.nan)
    test: str = "exact"
    error: bool = False
    undecided: bool = False   # True: the check ran and cannot decide (INCONCLUSIVE; ``holds`` is None)


def lowest(*xs: "Value") -> "Value":
    """Elementwise minimum of points or replicate arrays (for claims over several methods)."""
    return np.min(np.stack(np.broadcast_arrays(*xs)), axis=0)


def highest(*xs: "Value") -> "Value":
    """Elementwise maximum of points or replicate arrays."""
    return np.max(np.stack(np.broadcast_arrays(*xs)), axis=0)


def _f3(x: float) -> str:
    if x is None or np.isnan(x):
        return "nan"
    return ("inf" if x > 0 else "-inf") if np.isinf(x) else f"{x:.3f}"


def _cell(text: object) -> str:
    """A Markdown table cell: a ``|`` in the text is escaped, so the row keeps its columns."""
    return str(text).replace("|", "\\|")


def _evaluate(claim: BootClaim, metrics: Metrics) -> dict:
    pt, bt = metrics.getter(False), metrics.getter(True)
    rows = []
    for case in claim.cases:
        try:
            rows.append((case, float(case.value(pt)), np.asarray(case.value(bt), float),
                         float(case.distance(pt)), np.asarray(case.distance(bt), float)))
        except KeyError:
            continue
    if not rows:
        return {"id": claim.id, "claim": claim.claim, "statistic": claim.statistic, "verdict": "NOT EVALUATED",
                "test": BOOT_TEST, "evidence": "the run lacks what the claim needs", "_p2": math.nan}
    d_pt = min(r[3] for r in rows)
    d_bt = np.min([r[4] for r in rows], axis=0)
    B = len(d_bt)
    p_hold = (1 + int((d_bt <= 0).sum())) / (B + 1)     # H0: the claim fails
    p_fail = (1 + int((d_bt >= 0).sum())) / (B + 1)     # H0: the claim holds
    binding = min(rows, key=lambda r: (np.median(r[4]), r[3]))
    case, est, reps = binding[0], binding[1], binding[2]
    lo, hi = np.quantile(reps, [ALPHA / 2, 1 - ALPHA / 2])
    ev = "; ".join(f"{c.label}: {_f3(v)} [{_f3(np.quantile(b, ALPHA / 2))}, {_f3(np.quantile(b, 1 - ALPHA / 2))}]"
                   f" {c.direction} {c.margin:g}" for c, v, b, _, _ in rows)
    if len(rows) < len(claim.cases):
        ev += f" ({len(claim.cases) - len(rows)} of {len(claim.cases)} cases not in this run)"
    return {"id": claim.id, "claim": claim.claim, "statistic": f"{claim.statistic} (binding case: {case.label})",
            "estimate": est, "ci_lo": float(lo), "ci_hi": float(hi), "margin": case.margin,
            "direction": case.direction, "test": BOOT_TEST if claim.kind == "claim" else
            "paired bootstrap, two-sided consistency check at 95% (outside the Holm family)",
            "p": min(1.0, 2 * min(p_hold, p_fail)), "_p2": min(1.0, 2 * min(p_hold, p_fail)),
            "_side": "hold" if p_hold < p_fail else ("fail" if p_fail < p_hold else "none"),
            "_d": d_pt, "_kind": claim.kind, "evidence": ev}


def min_replicates(m: int, alpha: float = ALPHA) -> int:
    """Fewest replicates with which a family of ``m`` two-sided bootstrap tests can reject under
    Holm: the smallest p is 2 / (B + 1), and Holm multiplies it by m."""
    return int(math.floor(2 * m / alpha)) if m else 0


def holm(p: Sequence[float]) -> np.ndarray:
    """Holm step-down adjusted p-values (monotone; NaN stays NaN)."""
    pv = np.asarray(p, float)
    out = np.full_like(pv, np.nan)
    ok = np.flatnonzero(~np.isnan(pv))
    order = ok[np.argsort(pv[ok], kind="stable")]
    m, running = len(order), 0.0
    for k, i in enumerate(order):
        running = max(running, min(1.0, (m - k) * pv[i]))
        out[i] = running
    return out


def decide(claims: Sequence[BootClaim | ExactClaim], metrics: Metrics | None, *, alpha: float = ALPHA) -> pd.DataFrame:
    """The claims table: estimate, CI, margin, test, p, Holm-adjusted p and one verdict per claim.

    Bootstrapped claims of kind "claim" form one Holm family; "ceiling" checks are tested alone at
    ``alpha`` (an ERROR is never hidden by a correction); exact claims carry no p-value."""
    recs = []
    for c in claims:
        if isinstance(c, ExactClaim):
            verdict = ("INCONCLUSIVE" if c.undecided else "NOT EVALUATED") if c.holds is None else (
                "HOLDS" if c.holds else ("ERROR" if c.error else "DOES NOT HOLD"))
            recs.append({"id": c.id, "claim": c.claim, "statistic": c.statistic, "estimate": c.estimate,
                         "ci_lo": c.ci[0], "ci_hi": c.ci[1], "margin": c.margin, "test": c.test, "verdict": verdict,
                         "evidence": c.evidence, "_p2": math.nan, "_kind": "fixed"})
        else:
            if metrics is None:
                raise ParameterError(f"claim {c.id} needs bootstrap metrics")
            recs.append(_evaluate(c, metrics))
    df = pd.DataFrame.from_records(recs)
    for col in ("estimate", "ci_lo", "ci_hi", "margin", "p", "_d"):
        if col not in df.columns:
            df[col] = math.nan
    fam = df.get("_kind", pd.Series(index=df.index, dtype=object)).eq("claim")
    need = min_replicates(int(fam.sum()), alpha)
    if metrics is not None and fam.any() and metrics.n_boot < need:
        raise ParameterError(f"{metrics.n_boot} bootstrap replicates cannot reach a Holm-adjusted p < {alpha} for "
                             f"{int(fam.sum())} claims; use n_boot >= {need}")
    df["p_holm"] = math.nan
    if "verdict" not in df.columns:
        df["verdict"] = None
    if fam.any():
        df.loc[fam, "p_holm"] = holm(df.loc[fam, "_p2"].to_numpy(float))
    for i, r in df.iterrows():
        if r.get("_kind") == "fixed" or r.get("verdict") == "NOT EVALUATED":
            continue
        kind = r.get("_kind")
        p = r["p_holm"] if kind == "claim" else r["p"]
        side = r.get("_side")
        if not (p < alpha) or side == "none":
            v = "INCONCLUSIVE"
        elif side == "hold":
            v = "HOLDS"
        else:
            v = "DOES NOT HOLD" if kind == "claim" else "ERROR"
        df.at[i, "verdict"] = v
    df["holds"] = df["verdict"].map({"HOLDS": True, "DOES NOT HOLD": False, "ERROR": False})
    return df[list(COLUMNS)].reset_index(drop=True)


def claims_markdown(claims: pd.DataFrame, evidence: Iterable[str] | None = None) -> str:
    """Claims as a Markdown table: verdict, estimate with its 95% CI, margin, p (Holm) and test,
    then the evidence of each claim (of the claims ``evidence`` names, if given)."""
    if "verdict" not in claims.columns:
        raise ParameterError("a claims table needs the columns of verdicts.decide (verdict, estimate, CI, ...)")
    lines = ["| id | claim | verdict | estimate [95% CI] | margin | p (Holm) | test |", "|---|---|---|---|---|---|---|"]
    for r in claims.to_dict("records"):
        est = "-" if not np.isfinite(r["estimate"]) else (
            _f3(r["estimate"]) + (f" [{_f3(r['ci_lo'])}, {_f3(r['ci_hi'])}]" if np.isfinite(r["ci_lo"]) else ""))
        margin = "-" if not np.isfinite(r["margin"]) else f"{r['margin']:g}"
        p = "-" if not np.isfinite(r["p"]) else (
            f"{r['p']:.3g}" + (f" ({r['p_holm']:.3g})" if np.isfinite(r["p_holm"]) else ""))
        lines.append("| " + " | ".join(_cell(x) for x in (r["id"], r["claim"], f"**{r['verdict']}**", est, margin, p,
                                                          r["test"])) + " |")
    lines.append("")
    keep = None if evidence is None else set(evidence)
    lines += [f"- {r['id']} ({r['statistic']}): {r['evidence'] or '-'}" for r in claims.to_dict("records")
              if keep is None or r["id"] in keep]
    return "\n".join(lines)


def verdict_counts(claims: pd.DataFrame) -> dict[str, int]:
    """How many claims got each verdict (every verdict listed, zeros included)."""
    vc = claims["verdict"].value_counts()
    return {v: int(vc.get(v, 0)) for v in VERDICTS}


def flips(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """Claims whose verdict went from HOLDS to DOES NOT HOLD or the reverse between two runs
    (INCONCLUSIVE on either side is not a flip)."""
    m = a[["id", "verdict"]].merge(b[["id", "verdict"]], on="id", suffixes=("_a", "_b"))
    strong = {"HOLDS", "DOES NOT HOLD"}
    return m[m["verdict_a"].isin(strong) & m["verdict_b"].isin(strong) & (m["verdict_a"] != m["verdict_b"])]


#: claims tables of a run (under ``{results_dir}/tables``) whose verdicts are compared across seeds
CLAIMS_TABLES = ("rq1_claims", "04_rq2_claims", "05_table3_claims")


def seed_runs(results_dir: str, seed: int = 0) -> dict[int, str]:
    """This run (``seed``, ``results_dir``) and the runs with other seeds under
    ``{results_dir}/seeds/<s>`` (written by ``python -m dpmv_lib.run --seed s --results-dir
    {results_dir}/seeds/s``, or ``make seeds``), as input to :func:`seed_stability`."""
    from pathlib import Path

    runs = {int(seed): str(results_dir)}
    base = Path(results_dir) / "seeds"
    for d in sorted(base.iterdir()) if base.is_dir() else ():
        if d.name.isdigit() and (d / "tables").is_dir() and int(d.name) != int(seed):
            runs[int(d.name)] = str(d)
    return runs


def seed_stability(runs: Mapping[int, str], tables: Sequence[str] = CLAIMS_TABLES) -> pd.DataFrame:
    """Verdicts by run seed: one row per (table, claim) with the verdict of every run and whether
    any two runs flip between HOLDS and DOES NOT HOLD (INCONCLUSIVE is not a flip).

    Parameters
    ----------
    runs : mapping of int to str
        Run seed -> results directory of a run with that ``--seed`` (its ``tables/<name>.csv``).
    tables : sequence of str
        Claims tables to compare; a table missing from a run is skipped for that run.

    Raises
    ------
    ParameterError
        No run holds any of the tables.
    """
    from pathlib import Path

    frames = []
    for seed, rd in runs.items():
        for name in tables:
            f = Path(rd) / "tables" / f"{name}.csv"
            if f.exists():
                t = pd.read_csv(f)
                if "verdict" in t.columns:
                    frames.append(t[["id", "claim", "verdict"]].assign(table=name, seed=int(seed)))
    if not frames:
        raise ParameterError(f"no claims tables {list(tables)} with verdicts under {list(runs.values())}")
    long = pd.concat(frames, ignore_index=True)
    wide = long.pivot_table(index=["table", "id", "claim"], columns="seed", values="verdict", aggfunc="first")
    wide.columns = [f"seed {c}" for c in wide.columns]
    strong = wide.isin(["HOLDS", "DOES NOT HOLD"])
    wide["flip"] = [(r[s].nunique() > 1) for (_, r), (_, s) in zip(wide.iterrows(), strong.iterrows())]
    return wide.reset_index()


def by_seed(session: Any, tables: Sequence[str] = CLAIMS_TABLES) -> Any:
    """Notebook step: :func:`seed_stability` of this run (``session``) and the runs with other seeds
    under ``{results_dir}/seeds/``, written to ``tables/<notebook>_verdicts_by_seed``; shown: the
    claims whose verdict differs between runs (all of them when there is one run and few claims)."""
    from .result import Result

    runs = seed_runs(session.cfg.results_dir, session.cfg.seed)
    wide = seed_stability(runs, tables)
    session.write_table(f"{session.notebook}_verdicts_by_seed", wide)
    cols = [c for c in wide.columns if c.startswith("seed ")]
    moved = wide[wide[cols].nunique(axis=1) > 1]
    n_flip = int(wide["flip"].sum())
    if len(runs) > 1:
        finding = (f"Runs with seeds {sorted(runs)}: {n_flip} of {len(wide)} claims flip between HOLDS and DOES NOT "
                   f"HOLD; {len(moved)} change verdict at all (INCONCLUSIVE in one run is not a flip).")
    else:
        finding = (f"Only the run with seed {session.cfg.seed} is under {session.cfg.results_dir}: no runs with other "
                   f"seeds to compare (make seeds writes them to {session.cfg.results_dir}/seeds/).")
    out = Result("Verdicts by run seed", finding)
    if len(moved):
        out.show_table("claims whose verdict differs between runs", moved.drop(columns=["table"]))
    return out
