"""Exact optimal auditor of the augmented transcript (beyond the paper).

For one pair M ~_a M' and a fixed query trajectory, the public ledger path (read sets, charge
sets, eps, cap decisions) does not depend on which views were sampled (C4/C5: charges are
committed before sampling and the router reads only public history), so given that path the
slot-level EM draws are independent across slots and turns. The log-likelihood ratio of a whole
augmented transcript omega,

    L(omega) = log P[omega | M] / P[omega | M'] = sum_{t,g} log p_{t,g}(v_{t,g}) / p'_{t,g}(v_{t,g}),

is therefore a sum of independent per-slot terms whose distributions under M and under M' are
known exactly from the ``view_probs`` column of the transcript table. Convolving them gives the
exact distribution of L under both stores, hence (Neyman-Pearson) the best ROC of ANY auditor of
the augmented transcript: its AUC (ties counted one half, i.e. randomised at the threshold), its
TPR at 5% FPR (randomised at the threshold to hit the FPR exactly) and the maximum realised
privacy loss max |L| over transcripts of positive probability (+inf on a support mismatch).
Responses are post-processing of (queries, views) with randomness keyed by (pair, turn, seed),
identical under M and M', so these ceilings also bound any auditor of the responses (C6).

The distributions and their merging (with rigorous error bounds) live in
:mod:`dpmv_lib.evaluate.llr`.

Deterministic memory-text methods release no views: for them the augmented transcript is
(queries, conditioning), which is either identical under M and M' (AUC 0.5) or differs
(AUC 1, loss +inf); the same rule applied to the response texts gives the response-level ceiling.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from ..common.parallel import parallel_map
from ..core.attribute_decision import REUSE
from ..core.errors import ParameterError
from .llr import DEFAULT_GRID, DEFAULT_MAX_ATOMS, LLRDistribution, mixture, trajectory_distribution


# ---- transcript tables --------------------------------------------------------------------------
NEEDED = ("track", "response_model", "method", "pair_id", "attribute", "split", "side", "seed", "turn",
          "conditioning", "views", "released", "view_probs", "response")


def _released_json(released: str) -> Any:
    """The parsed ``released`` column of one turn ({} when empty)."""
    try:
        return json.loads(released) if released else {}
    except (TypeError, ValueError) as exc:
        raise ParameterError(f"the 'released' column holds invalid JSON: {released[:80]!r}") from exc


def _strip_views(obj):
    if isinstance(obj, dict):
        return {k: _strip_views(v) for k, v in obj.items() if k not in ("view", "views", "query")}
    if isinstance(obj, list):
        return [_strip_views(v) for v in obj]
    return obj


class _Parser:
    """Memoised JSON parsing of the transcript table's JSON columns (many cells repeat)."""

    def __init__(self) -> None:
        self.paths: dict[str, str] = {}
        self.probs: dict[str, dict] = {}
        self.views: dict[str, frozenset] = {}
        self.dists: dict[tuple[str, str, frozenset], LLRDistribution] = {}
        self.reuses: dict[str, frozenset] = {}

    def path(self, released: str) -> str:
        """The public release of one turn minus the sampled views (the ledger path given h)."""
        hit = self.paths.get(released)
        if hit is None:
            hit = self.paths[released] = json.dumps(_strip_views(_released_json(released)), sort_keys=True)
        return hit

    def prob(self, s: str) -> dict:
        hit = self.probs.get(s)
        if hit is None:
            try:
                obj = json.loads(s) if s else {}
            except (TypeError, ValueError) as exc:
                raise ParameterError(f"the 'view_probs' column holds invalid JSON: {s[:80]!r}") from exc
            if not isinstance(obj, dict) or not all(isinstance(v, dict) for v in obj.values()):
                raise ParameterError(f"view_probs must be a JSON object slot -> {{view: prob}}, got {s[:80]!r}")
            hit = self.probs[s] = obj
        return hit

    def view_set(self, s: str) -> frozenset:
        hit = self.views.get(s)
        if hit is None:
            try:
                obj = json.loads(s) if s else []
            except (TypeError, ValueError):
                raise ParameterError(f"the 'views' column holds invalid JSON: {s[:80]!r}") from None
            hit = self.views[s] = frozenset(obj.values() if isinstance(obj, dict) else obj)
        return hit

    def reused(self, released: str) -> frozenset:
        """The slots of a turn whose release is a reuse (mechanism ``"reuse"``): a fixed function of
        the public prefix, so their likelihood ratio given the prefix is 1 (attribute decisions)."""
        hit = self.reuses.get(released)
        if hit is None:
            obj = _released_json(released)
            slots = obj.get("slots", []) if isinstance(obj, dict) else []
            hit = self.reuses[released] = frozenset(s.get("slot") for s in slots
                                                    if isinstance(s, dict) and s.get("mechanism") == REUSE)
        return hit

    def turn_dist(self, pm_s: str, pq_s: str, skip: frozenset = frozenset()) -> LLRDistribution:
        """The LLR distribution of one turn (all its slots but ``skip``), memoised by the two JSON
        strings."""
        k = (pm_s, pq_s, skip)
        hit = self.dists.get(k)
        if hit is None:
            pm, pq = self.prob(pm_s), self.prob(pq_s)
            if skip:
                pm = {g: d for g, d in pm.items() if g not in skip}
                pq = {g: d for g, d in pq.items() if g not in skip}
            hit = self.dists[k] = trajectory_distribution([(pm, pq)])
        return hit


def pair_oracle(rows: Mapping[str, Sequence], horizon: int, parser: _Parser | None = None, *,
                grid: float = DEFAULT_GRID, max_atoms: int = DEFAULT_MAX_ATOMS) -> dict:
    """Exact ceilings for one (track, method, pair). ``rows``: column -> values for both sides,
    every seed, turns < horizon (any order). Returns {"kind", "public_path_equal", "dists":
    {seed: LLRDistribution}} with one single-transcript distribution per EM seed."""
    parser = parser or _Parser()
    n = len(rows["turn"])
    order = sorted(range(n), key=lambda i: (rows["seed"][i], rows["side"][i] != "M", rows["turn"][i]))
    col = {c: [rows[c][i] for i in order] for c in ("seed", "side", "turn", "conditioning", "views",
                                                       "released", "view_probs", "pair_id")}
    pid = col["pair_id"][0] if n else "?"
    views = any((p or "").strip() not in ("", "{}") for p in col["view_probs"])
    out: dict = {"kind": "views" if views else "memory_text", "public_path_equal": True, "dists": {}}
    i = 0
    while i < n:
        seed = col["seed"][i]
        j = i
        while j < n and col["seed"][j] == seed:
            j += 1
        m = [k for k in range(i, j) if col["side"][k] == "M"]
        mp = [k for k in range(i, j) if col["side"][k] != "M"]
        if [col["turn"][k] for k in m] != list(range(horizon)) or [col["turn"][k] for k in mp] != list(range(horizon)):
            raise ParameterError(f"pair {pid!r} seed {seed}: turns 0..{horizon - 1} must be present once per "
                                 f"side (got {len(m)} M rows and {len(mp)} M' rows)")
        i = j
        if not views:
            same = all(col["conditioning"][a] == col["conditioning"][b] and
                       (col["released"][a] or "") == (col["released"][b] or "") for a, b in zip(m, mp))
            out["dists"][int(seed)] = LLRDistribution.point() if same else LLRDistribution.separable()
            continue
        if any(parser.path(col["released"][a] or "") != parser.path(col["released"][b] or "") for a, b in zip(m, mp)):
            out["public_path_equal"] = False
            out["dists"][int(seed)] = LLRDistribution.separable()
            continue
        d = LLRDistribution.point()
        for a, b in zip(m, mp):
            for k in (a, b):  # consistency: released views have positive probability
                probs = parser.prob(col["view_probs"][k] or "")
                support = {v for slot in probs.values() for v, p in slot.items() if p > 0}
                bad = parser.view_set(col["views"][k] or "") - support
                if bad:
                    raise ParameterError(f"pair {pid!r} side {col['side'][k]} turn {col['turn'][k]}: released "
                                         f"views {sorted(bad)} have zero probability in view_probs")
            td = parser.turn_dist(col["view_probs"][a] or "", col["view_probs"][b] or "",
                                  parser.reused(col["released"][a] or ""))
            if not (td.n_atoms == 1 and td.llr[0] == 0):
                d = d.convolve(td, grid=grid, max_atoms=max_atoms)
        out["dists"][int(seed)] = d
    return out


def pair_results(transcripts: pd.DataFrame, horizon: int = 16, *, fpr: float = 0.05,
                 grid: float = DEFAULT_GRID, max_atoms: int = DEFAULT_MAX_ATOMS,
                 keep_dists: bool = False, workers: int | None = None) -> pd.DataFrame:
    """One row per (track, response_model, method, pair, seed) with the exact single-transcript
    ceilings (AUC, TPR@fpr), the maximum realised privacy loss and the merge error bounds; for
    memory-text methods also the response-level ceiling (identical responses: 0.5, else 1).
    The views and conditioning do not depend on the response model, so each (track, method,
    pair) is computed once (from the first response model's rows) and shared; the (track, method)
    groups run over ``workers`` forked processes (None: the usable cores;
    :func:`~dpmv_lib.common.parallel.parallel_map`), with the same result for any count.

    Raises
    ------
    ParameterError
        If columns are missing, no row lies below ``horizon``, or a pair's turns are incomplete."""
    job = _MethodJob.build(transcripts, horizon, fpr=fpr, grid=grid, max_atoms=max_atoms, keep_dists=keep_dists)
    return job.run(workers)[0]


def ceilings(transcripts: pd.DataFrame, horizon: int = 16, *, fpr: float = 0.05,
             caps: Mapping[str, float] | float = 2.0, source_track: str = "pairedmem",
             eval_split: str | None = "test", grid: float = DEFAULT_GRID, max_atoms: int = DEFAULT_MAX_ATOMS,
             workers: int | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(pair_results(transcripts, horizon), summary(...))``, the same numbers in the same order,
    without holding every distribution at once: each forked worker computes one (track, method,
    attribute), keeps only the distributions of evaluation pairs, and returns that attribute's
    pooled ceilings (:func:`_attribute_ceilings`) with scalar rows. For the default profile's RQ1,
    whose distributions take about 1 GB, notebook 03's peak summed PSS went 4.28 -> 3.67 GB.

    Raises
    ------
    ParameterError
        As :func:`pair_results`."""
    rule = _SummaryRule(fpr, caps, source_track, eval_split)
    job = _MethodJob.build(transcripts, horizon, fpr=fpr, grid=grid, max_atoms=max_atoms, keep_dists=False,
                           rule=rule)
    per_pair, parts = job.run(workers)
    rows = []
    groups = per_pair.groupby(["track", "response_model", "method"], sort=True).indices
    for (track, model, method), idx in groups.items():
        g = per_pair.iloc[idx]
        ev = rule.eval_rows(track, g)
        rows.append(rule.row((track, model, method), g, ev,
                             [parts[(track, model, method, attr)] for attr in sorted(ev["attribute"].unique())]))
    return per_pair, pd.DataFrame.from_records(rows)


_GROUP = ["track", "response_model", "method", "pair_id"]
# one (track, method, attribute): its rows of the table, and per pair (pair_id, the first response
# model's rows, {model: rows}), the rows as positions in the unit's
_Unit = tuple[tuple[str, str, str], np.ndarray, list[tuple[str, np.ndarray, dict[str, np.ndarray]]]]


@dataclass
class _MethodJob:
    """The per-pair rows of one (track, method, attribute) for every response model (run by
    :func:`parallel_map`); with a summary ``rule`` also that attribute's pooled ceilings per
    model, the distributions then staying in the worker."""

    source: pd.DataFrame
    horizon: int
    models: list[str]
    # sorted by (track, method, attribute), their pairs by pair_id. A worker takes its unit's cells
    # from ``source`` itself: built in the parent, Python copies of every cell of a pyarrow-backed
    # table would take about 0.8 GB for the default profile's RQ1
    units: list[_Unit]
    fpr: float
    grid: float
    max_atoms: int
    keep_dists: bool
    rule: "_SummaryRule | None" = None
    fallback: frozenset = frozenset()   # (track, model, method) groups without an eval-split pair

    @classmethod
    def build(cls, transcripts: pd.DataFrame, horizon: int, *, rule: "_SummaryRule | None" = None,
              **kw) -> "_MethodJob":
        missing = set(NEEDED) - set(transcripts.columns)
        if missing:
            raise ParameterError(f"transcript table lacks columns {sorted(missing)}")
        keep = np.flatnonzero((transcripts["turn"] < horizon).to_numpy())
        if not len(keep):
            raise ParameterError("no transcript rows below the horizon")
        keys = transcripts[[*_GROUP, "attribute", "split"]].take(keep).reset_index(drop=True)
        attribute, split = keys["attribute"].tolist(), keys["split"].tolist()
        models = sorted(keys["response_model"].unique())
        rows: dict[tuple[str, str, str], dict[str, dict[str, np.ndarray]]] = {}
        has_eval: set[tuple[str, str, str]] = set()
        for (track, model, method, pair_id), idx in keys.groupby(_GROUP, sort=True).indices.items():
            i0 = idx[0]
            rows.setdefault((track, method, attribute[i0]), {}).setdefault(pair_id, {})[model] = keep[idx]
            if rule is not None and split[i0] == rule.eval_split:
                has_eval.add((track, model, method))
        units: list[_Unit] = []
        for key in sorted(rows):
            pairs = []
            take: list[int] = []
            for pair_id in sorted(rows[key]):
                per_model = rows[key][pair_id]
                if models[0] not in per_model:
                    raise ParameterError(f"{key[0]}/{key[1]}/{pair_id}: missing for response model {models[0]!r}")
                local = {}
                for model, idx in per_model.items():
                    local[model] = np.arange(len(take), len(take) + len(idx))
                    take.extend(idx)
                pairs.append((pair_id, local[models[0]], local))
            units.append((key, np.asarray(take), pairs))
        fallback = (frozenset((t, m, me) for t, me, _ in rows for m in models) - has_eval if rule is not None
                    else frozenset())
        return cls(transcripts, horizon, models, units, rule=rule, fallback=fallback, **kw)

    def run(self, workers: int | None) -> tuple[pd.DataFrame, dict[tuple, tuple]]:
        recs, parts = [], {}
        for r, p in parallel_map(self, self.units, workers=workers):
            recs.extend(r)
            parts.update(p)
        recs.sort(key=lambda r: tuple(r[c] for c in _GROUP))   # stable: a pair's seeds keep their order
        return pd.DataFrame.from_records(recs), parts

    def __call__(self, unit: _Unit) -> tuple[list[dict], dict[tuple, tuple]]:
        (track, method, attribute), take, pairs = unit
        cols = {c: self.source[c].take(take).tolist() for c in NEEDED}
        fpr, rule = self.fpr, self.rule
        parser = _Parser()  # one memo per unit: its cells rarely repeat in another unit
        recs = []
        ev_dists: dict[str, list[dict]] = {}      # per model: rows of evaluation pairs, with distributions
        for pair_id, first, per_model in pairs:
            res = pair_oracle({c: [cols[c][i] for i in first] for c in cols}, self.horizon, parser,
                              grid=self.grid, max_atoms=self.max_atoms)
            for model in self.models:
                idx = per_model.get(model)
                if idx is None:
                    continue
                resp = _response_dists(cols, idx) if res["kind"] == "memory_text" else {}
                split = cols["split"][idx[0]]
                for seed, d in res["dists"].items():
                    tpr, tpr_err = d.tpr_at(fpr)
                    rec = {"track": track, "response_model": model, "method": method, "pair_id": pair_id,
                           "attribute": attribute, "split": split, "seed": seed,
                           "kind": res["kind"], "public_path_equal": res["public_path_equal"],
                           "oracle_auc": d.auc(), "oracle_auc_err": d.auc_error(), "oracle_tpr": tpr,
                           "oracle_tpr_err": tpr_err, "max_loss": d.max_loss(), "n_atoms": d.n_atoms,
                           "grid": d.grid, "response_auc": resp[seed].auc() if seed in resp else np.nan}
                    if self.keep_dists:
                        rec.update(dist=d, resp_dist=resp.get(seed))
                    recs.append(rec)
                    if rule is not None and ((track, model, method) in self.fallback
                                             or rule.evaluates(track, split)):
                        ev_dists.setdefault(model, []).append({"pair_id": pair_id, "dist": d,
                                                               "resp_dist": resp.get(seed)})
        parts = {(track, model, method, attribute): _attribute_ceilings(pd.DataFrame.from_records(r), fpr)
                 for model, r in ev_dists.items()}
        return recs, parts


def _response_dists(cols: Mapping[str, list], idx: np.ndarray) -> dict[int, LLRDistribution]:
    """Per seed: L = 0 if the responses are identical under M and M' at every turn, else +-inf
    (the response-level ceiling of a deterministic method with a deterministic responder)."""
    by: dict[tuple, dict[int, str]] = {}
    for i in idx:
        by.setdefault((cols["seed"][i], cols["side"][i]), {})[cols["turn"][i]] = cols["response"][i]
    out = {}
    for seed in {k[0] for k in by}:
        same = by.get((seed, "M")) == by.get((seed, "M'"))
        out[int(seed)] = LLRDistribution.point() if same else LLRDistribution.separable()
    return out


def summary(per_pair: pd.DataFrame, *, fpr: float = 0.05, caps: Mapping[str, float] | float = 2.0,
            source_track: str = "pairedmem", eval_split: str | None = "test",
            workers: int | None = None) -> pd.DataFrame:
    """Per (track, response_model, method): pooled ceilings over the auditor's evaluation pairs
    (``eval_split`` of ``source_track``, every pair of other tracks), macro over attributes, for one
    transcript per pair (``ceiling_auc``/``ceiling_tpr``) and for all EM seeds of a pair observed
    together (``*_seeds``: the ceiling of the seed-averaged auditor); the mean per-pair ceiling;
    and over EVERY pair the maximum realised loss and whether it is <= B_a (``caps``).
    ``per_pair`` must come from ``pair_results(..., keep_dists=True)``. The groups run over
    ``workers`` forked processes (None: the usable cores), each by the same code, so the table
    does not depend on the count. :func:`ceilings` gives the same table with less memory."""
    if "dist" not in per_pair.columns:
        raise ParameterError("summary needs pair_results(..., keep_dists=True)")
    groups = list(per_pair.groupby(["track", "response_model", "method"], sort=True).indices.items())
    job = _SummaryJob(per_pair, _SummaryRule(fpr, caps, source_track, eval_split))
    return pd.DataFrame.from_records(parallel_map(job, groups, workers=workers))


def _attribute_ceilings(ga: pd.DataFrame, fpr: float) -> tuple[float, float, float, float, float, float | None]:
    """One attribute's pooled ceilings over the rows ``ga`` (``pair_id``, ``dist``, ``resp_dist``):
    AUC and TPR for one transcript per pair (every (pair, seed) equally likely) and for all seeds
    of a pair together, the larger merge error of the two, and the response-level AUC (None
    unless every row has a response distribution)."""
    single = mixture(list(ga["dist"]))
    multi = []
    for _, gp in ga.groupby("pair_id"):
        d = gp["dist"].iloc[0]
        for other in gp["dist"].iloc[1:]:
            d = d.convolve(other)
        multi.append(d)
    mm = mixture(multi)
    resp = mixture(list(ga["resp_dist"])).auc() if ga["resp_dist"].notna().all() else None
    return (single.auc(), single.tpr_at(fpr)[0], mm.auc(), mm.tpr_at(fpr)[0],
            max(single.auc_error(), mm.auc_error()), resp)


@dataclass(frozen=True)
class _SummaryRule:
    """Which pairs a :func:`summary` row pools, and how it combines the attributes' ceilings."""

    fpr: float
    caps: Mapping[str, float] | float
    source_track: str
    eval_split: str | None

    def cap_of(self, attribute: str) -> float:
        return float(self.caps[attribute]) if isinstance(self.caps, Mapping) else float(self.caps)

    def pools_all(self, track: str) -> bool:
        """Whether every pair of ``track`` is an evaluation pair (not only its ``eval_split``)."""
        return track != self.source_track or self.eval_split is None

    def evaluates(self, track: str, split: str) -> bool:
        return self.pools_all(track) or split == self.eval_split

    def eval_rows(self, track: str, g: pd.DataFrame) -> pd.DataFrame:
        """The evaluation pairs of one group (all of them where it has none of ``eval_split``)."""
        ev = g if self.pools_all(track) else g[g["split"] == self.eval_split]
        return g if ev.empty else ev

    def row(self, key: tuple[str, str, str], g: pd.DataFrame, ev: pd.DataFrame, parts: Sequence[tuple]) -> dict:
        """The summary row of group ``key`` from its rows, evaluation rows and per-attribute ceilings."""
        track, model, method = key
        single_auc, single_tpr, multi_auc, multi_tpr, errs, resp = (list(x) for x in zip(*parts))
        resp = [r for r in resp if r is not None]
        pair_loss = g.groupby(["pair_id", "attribute"])["max_loss"].max().reset_index()
        over = [r.max_loss > self.cap_of(r.attribute) + 1e-9 for r in pair_loss.itertuples()]
        return {
            "track": track, "response_model": model, "method": method, "kind": g["kind"].iloc[0],
            "n_eval_pairs": int(ev["pair_id"].nunique()), "n_pairs": int(g["pair_id"].nunique()),
            "n_seeds": int(g["seed"].nunique()),
            "ceiling_auc": float(np.mean(single_auc)), "ceiling_tpr": float(np.mean(single_tpr)),
            "ceiling_auc_seeds": float(np.mean(multi_auc)), "ceiling_tpr_seeds": float(np.mean(multi_tpr)),
            "mean_pair_auc": float(ev["oracle_auc"].mean()), "auc_err": float(max(errs)),
            "max_loss": float(g["max_loss"].max()), "max_loss_le_cap_all_pairs": not any(over),
            "pairs_over_cap": int(sum(over)),
            "public_path_equal_all": bool(g["public_path_equal"].all()),
            "response_ceiling_auc": float(np.mean(resp)) if resp else np.nan,
        }


@dataclass(frozen=True)
class _SummaryJob:
    """One (track, response_model, method) row of :func:`summary` (run by :func:`parallel_map`)."""

    per_pair: pd.DataFrame
    rule: _SummaryRule

    def __call__(self, group: tuple[tuple, np.ndarray]) -> dict:
        key, idx = group
        g = self.per_pair.iloc[idx]
        ev = self.rule.eval_rows(key[0], g)
        parts = [_attribute_ceilings(ga, self.rule.fpr) for _, ga in ev.groupby("attribute")]
        return self.rule.row(key, g, ev, parts)
