"""RQ1 pipeline (paper Table 2): data -> generation -> audit / exact oracle / judge -> tables.

    from dpmv_lib.experiments.rq1 import RQ1Config, run_rq1
    res = run_rq1(RQ1Config(profile="smoke"))
    res.table2, res.claims, res.paths

Steps (each timed in ``res.timings``):

1. load the frozen tracks (:func:`dpmv_lib.bench.datasets.load_benchmark`); the profile's ``pairs`` /
   ``transfer_pairs`` select a stratified subset (:func:`select_pairs`); a missing transfer track is
   skipped with a message;
2. transcripts for every response model of the profile, the seven RQ1 methods, the profile's EM
   seeds and the first T turns (:func:`dpmv_lib.generate.generation.generate_transcripts`, B_a, K, and
   T as the preallocation horizon);
3. the embedding auditor (:mod:`dpmv_lib.evaluate.audit`) at every prefix length in ``horizons`` (Table 2
   uses T); the dagger check (identical conditioning under M and M');
4. the exact optimal auditor (:mod:`dpmv_lib.evaluate.oracle`) at T: ceilings and the max realised loss;
5. the blinded utility judge (:mod:`dpmv_lib.evaluate.judge`) at T;
6. Table 2, the paper comparison, the ceiling table, the claims and the figures under
   ``{results_dir}/tables`` and ``{results_dir}/figures``.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from ..bench.benchmark import Benchmark
from ..generate.interfaces import EXTRA_METHODS, PF_METHODS
from ..core.errors import ParameterError, StoreError
from ..common.paths import resolve
from .common import run_encoder
from .profiles import Profile, get_profile
from . import verdicts as V
from ..evaluate.u_validity import UDefinition, try_validate_u
from .rq1_claims import evaluate_claims, DP_MODES, MEMORY_TEXT, PAPER_METHODS

#: beyond the paper: the DP-MemView modes with the permute-and-flip selector (no paper values)
RQ1_METHODS = PAPER_METHODS + PF_METHODS


@dataclass(frozen=True)
class RQ1Config:
    """Parameters of the RQ1 run (the notebook's parameters cell maps onto these)."""

    profile: str = "default"
    seed: int = 0
    results_dir: str = "results"
    data_dir: str = "data"
    B_a: float = 2
    K: int = 3
    T: int = 16
    horizons: tuple[int, ...] | None = None  # prefix lengths for the auditor (None: by profile; T always)
    n_boot: int = 1000
    audit_unit: str = "auto"
    encoder: str | None = None            # None: the profile's
    judge: str | None = None              # None: the profile's
    responders: tuple[str, ...] | None = None  # None: the profile's response model(s)
    methods: tuple[str, ...] = RQ1_METHODS + EXTRA_METHODS   # the paper's, P&F, and the interfaces beyond the paper
    # contract-violating variants whose views go to the exact oracle only (max loss vs B_a)
    oracle_ablations: tuple[str, ...] = ("IncompleteCharge", "CappedArgmax", "NoCap", "ScoreChannel")
    workers: int | None = None            # processes for the conditioning and the oracle; None: the usable cores
    progress: bool = True
    write: bool = True

    def __post_init__(self) -> None:
        if self.T < 1 or self.T > 32:
            raise ParameterError(f"T must be in 1..32, got {self.T}")
        if not self.B_a or float(self.B_a) <= 0 or self.K < 1:
            raise ParameterError(f"need B_a > 0 and K >= 1, got B_a={self.B_a}, K={self.K}")
        hs = self.horizons
        if hs is None:
            hs = (4,) if self.profile == "smoke" else (1, 2, 4, 8, 12)
        hs = tuple(sorted({int(h) for h in hs if 1 <= int(h) <= self.T} | {self.T}))
        object.__setattr__(self, "horizons", hs)


@dataclass
class RQ1Result:
    config: RQ1Config
    profile: Profile
    transcripts: pd.DataFrame
    audit: pd.DataFrame             # summary at every horizon, dagger applied
    identical: pd.DataFrame         # the dagger check
    oracle_pairs: pd.DataFrame      # per (pair, seed) exact ceilings and max loss (no distributions)
    oracle: pd.DataFrame            # pooled ceilings per method
    utility_transcripts: pd.DataFrame
    utility: pd.DataFrame
    table2: pd.DataFrame
    comparison: pd.DataFrame
    claims: pd.DataFrame
    timings: dict[str, float] = field(default_factory=dict)
    paths: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    scores: pd.DataFrame | None = None    # auditor score per evaluated (pair, side, seed, horizon)
    metrics: Any = None                   # verdicts.Metrics: the paired bootstrap behind the claims
    u_validity: Any = None                # u_validity.UValidity: which judge dimensions U holds


# ---- data -----------------------------------------------------------------------------------------
def select_pairs(bench: Benchmark, n: int | Mapping[str, int] | None, seed: int = 0) -> Benchmark:
    """A stratified subset of ``n`` pairs: equal shares per attribute, and within an attribute the
    split proportions of the track with at least one train, validation and test pair where the
    track has them (so every auditor can be fitted, calibrated and evaluated). Deterministic.
    ``n`` may instead map splits to counts (e.g. ``{"train": 96}``): every pair of the splits not
    named, and of each named split that many, with equal shares per attribute."""
    if isinstance(n, Mapping):
        return _select_by_split(bench, n, seed)
    if n is None or n >= len(bench):
        return bench
    if n < 1:
        raise ParameterError(f"need at least one pair, got n={n}")
    rng = np.random.default_rng(seed)
    attrs = sorted({p.attribute for p in bench})
    per = [n // len(attrs) + (1 if i < n % len(attrs) else 0) for i in range(len(attrs))]
    keep: list[str] = []
    for a, k in zip(attrs, per):
        by_split: dict[str, list[str]] = {}
        for p in bench:
            if p.attribute == a:
                by_split.setdefault(p.split, []).append(p.pair_id)
        splits = sorted(by_split)
        total = sum(len(v) for v in by_split.values())
        quota = {s: (1 if k >= len(splits) else 0) for s in splits}
        rest = k - sum(quota.values())
        shares = {s: len(by_split[s]) / total * rest for s in splits}
        for s in splits:
            quota[s] += int(math.floor(shares[s]))
        left = k - sum(quota.values())
        for s in sorted(splits, key=lambda s: -(shares[s] - math.floor(shares[s])))[:left]:
            quota[s] += 1
        for s in splits:
            ids = sorted(by_split[s])
            take = min(quota[s], len(ids))
            keep.extend(rng.choice(ids, size=take, replace=False).tolist())
    return bench.subset(keep)


def _select_by_split(bench: Benchmark, counts: Mapping[str, int], seed: int) -> Benchmark:
    splits = {p.split for p in bench}
    keep = [p.pair_id for p in bench if p.split not in counts]
    for split, k in sorted(counts.items()):
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ParameterError(f"pairs per split must be ints >= 1, got {split!r}: {k!r}")
        if split not in splits:
            continue
        part = select_pairs(bench.subset([p.pair_id for p in bench if p.split == split]), k, seed)
        keep.extend(p.pair_id for p in part)
    return bench.subset(keep)


def load_tracks(data_dir: str, profile: Profile, seed: int = 0, notes: list[str] | None = None) -> dict[str, Benchmark]:
    """PairedMem (required) and transfer (skipped with a note if absent), subset per the profile."""
    from ..bench.datasets import load_benchmark

    notes = notes if notes is not None else []
    out = {"pairedmem": select_pairs(load_benchmark("pairedmem", data_dir), profile.pairs, seed)}
    try:
        out["transfer"] = select_pairs(load_benchmark("transfer", data_dir), profile.transfer_pairs, seed)
    except (StoreError, ParameterError, FileNotFoundError, OSError) as exc:
        notes.append(f"transfer track skipped: {exc}")
    return out


def responder_specs(profile: Profile, override: Sequence[str] | None = None) -> list[str]:
    """The response-model specs of a profile. ``paper``: one ``openai:<url>|<model>`` per model,
    with the server URL from DPMV_OPENAI_URL (e.g. http://127.0.0.1:8000/v1)."""
    import os

    if override:
        return list(override)
    if profile.responder == "openai":
        url = os.environ.get("DPMV_OPENAI_URL", "")
        if not url:
            raise ParameterError("the paper profile serves its response models through an OpenAI-compatible "
                                 "server: set DPMV_OPENAI_URL (e.g. http://127.0.0.1:8000/v1)")
        return [f"openai:{url}|{m}" for m in (profile.response_models or ())]
    return [profile.responder]


# ---- the pipeline ---------------------------------------------------------------------------------
def run_rq1(config: RQ1Config = RQ1Config(), *, log: Callable[[str], None] = print) -> RQ1Result:
    """Run RQ1 end to end (see the module docstring). Writes tables and figures if ``config.write``."""
    from ..evaluate import audit as A
    from ..evaluate import judge as J
    from ..evaluate import oracle as O
    from . import tables as TB
    from ..generate.generation import InterfaceParams, generate_transcripts
    from ..generate.responders import make_responder

    prof = get_profile(config.profile).for_seed(config.seed)
    results = resolve(config.results_dir)
    timings: dict[str, float] = {}
    notes: list[str] = []
    t0 = time.perf_counter()

    # 1. data
    benches = load_tracks(config.data_dir, prof, config.seed, notes)
    timings["load"] = time.perf_counter() - t0
    log("[rq1] tracks: " + ", ".join(f"{k} ({len(v)} pairs)" for k, v in benches.items()))

    # 2. transcripts
    t = time.perf_counter()
    policies = [p for b in benches.values() for p in b.policies.values()]
    frames = []
    for spec in responder_specs(prof, config.responders):
        resp = make_responder(spec, policies, salt=config.seed) if spec == "surrogate" else make_responder(spec)
        try:
            for bench in benches.values():
                frames.append(generate_transcripts(
                    bench, resp, config.methods, seeds=tuple(prof.em_seeds), turns=config.T,
                    params=InterfaceParams(B_a=config.B_a, K=config.K, plan_horizon=config.T),
                    workers=config.workers, progress=config.progress))
        finally:
            resp.close()
    transcripts = pd.concat(frames, ignore_index=True)
    timings["generation"] = time.perf_counter() - t
    log(f"[rq1] transcripts: {len(transcripts)} rows, {transcripts['response'].nunique()} distinct responses "
        f"({timings['generation']:.0f} s)")

    # 3. auditor + dagger check
    t = time.perf_counter()
    encoder = run_encoder(config.encoder or prof.encoder, results)
    assert config.horizons is not None  # set by RQ1Config.__post_init__
    acfg = A.AuditConfig(horizons=config.horizons, n_boot=config.n_boot, seed=config.seed, unit=config.audit_unit)
    audit_sum, scores = A.run_audit(transcripts, encoder, acfg, progress=config.progress)
    identical = A.conditioning_identical(transcripts, horizon=config.T)
    audit_sum = A.apply_dagger(audit_sum, identical)
    timings["audit"] = time.perf_counter() - t
    unit = audit_sum["embedding_unit"].iloc[0]
    if unit != "response":
        notes.append(f"embedding unit '{unit}': each response is represented by the normalised mean of its "
                     f"sentence embeddings (an approximation of C.5 chosen for CPU speed; use audit_unit='response' "
                     f"for the exact protocol)")
    log(f"[rq1] auditor: {len(audit_sum)} summaries, unit={unit} ({timings['audit']:.0f} s)")

    # 4. exact oracle (RQ1 methods + the views of the contract-violating variants)
    t = time.perf_counter()
    oracle_input = transcripts
    if config.oracle_ablations:
        abl = ablation_views(benches, config, prof, model=str(transcripts["response_model"].iloc[0]))
        oracle_input = pd.concat([transcripts, abl], ignore_index=True)
    oracle_pairs, osum = O.ceilings(oracle_input, config.T, caps=float(config.B_a), workers=config.workers)
    timings["oracle"] = time.perf_counter() - t
    log(f"[rq1] exact oracle: {len(oracle_pairs)} (pair, seed) rows ({timings['oracle']:.0f} s)")

    # 5. judge
    t = time.perf_counter()
    judge_spec = config.judge or prof.judge
    judge = J.make_judge(judge_spec, encoder)
    util_t = J.score_transcripts(transcripts, benches, judge, config.T, progress=config.progress)
    u_valid = try_validate_u(judge, config.data_dir, notes, cache_dir=resolve(config.results_dir) / "cache")
    udef = u_valid.definition if u_valid is not None else UDefinition()
    util_t = udef.apply(util_t)
    notes.append(udef.sentence())
    util = J.summarise_utility(util_t, n_boot=config.n_boot, seed=config.seed)
    timings["judge"] = time.perf_counter() - t
    if util["n_failed"].sum():
        notes.append(f"judge failures: {int(util['n_failed'].sum())} transcripts (excluded, see utility_transcripts)")
    log(f"[rq1] judge {judge.id}: {len(util_t)} transcripts ({timings['judge']:.0f} s)")

    # 6. tables, claims, figures
    t = time.perf_counter()
    table2 = TB.build_table2(audit_sum, util, config.T)
    try:
        comparison = TB.compare_with_paper(table2)
    except ParameterError as exc:
        notes.append(f"paper comparison skipped: {exc}")
        comparison = pd.DataFrame()
    dagger = [tuple(k) for k in identical.loc[identical["identical"], ["track", "response_model", "method"]].to_numpy()]
    metrics = V.paired_bootstrap(scores[scores["horizon"] == config.T], util_t, n_boot=max(config.n_boot, V.N_BOOT),
                                 seed=config.seed, by_construction=dagger)
    claims = evaluate_claims(metrics, osum, audit_sum[audit_sum["horizon"] == config.T], identical,
                             float(config.B_a), config.methods, u_label=udef.label)
    res = RQ1Result(config, prof, transcripts, audit_sum, identical, oracle_pairs, osum, util_t, util, table2,
                    comparison, claims, timings, {}, notes, scores, metrics, u_valid)
    if config.write:
        res.paths = write_outputs(res, results)
    timings["tables"] = time.perf_counter() - t
    timings["total"] = time.perf_counter() - t0
    if config.write:
        (results / "tables" / "rq1_run.json").write_text(json.dumps(
            {"config": asdict(config), "profile": prof.to_dict(), "timings_s": timings, "notes": notes,
             "judge": judge.id, "encoder": encoder.id, "embedding_unit": unit}, indent=1, default=str))
    log(f"[rq1] done in {timings['total']:.0f} s")
    return res


def ablation_views(benches: Mapping[str, Benchmark], config: RQ1Config, prof: Profile, model: str) -> pd.DataFrame:
    """Rows of the transcript schema for ``config.oracle_ablations`` without responses (the exact
    oracle needs only the released views, their probabilities and the public release)."""
    from ..generate.generation import ROW_FIELDS, InterfaceParams, conditioning_table

    frames = []
    for bench in benches.values():
        rows = conditioning_table(bench, config.oracle_ablations, seeds=tuple(prof.em_seeds), turns=config.T,
                                  params=InterfaceParams(B_a=config.B_a, K=config.K, plan_horizon=config.T),
                                  workers=config.workers, progress=config.progress)
        frames.append(pd.DataFrame.from_records(rows, columns=list(ROW_FIELDS)))
    df = pd.concat(frames, ignore_index=True)
    df["response_model"] = model
    df["response"] = ""
    return df


def run_scope(transcripts: pd.DataFrame) -> str:
    """What a transcript table ran on: pairs per track (of which test, the evaluated split of the
    learned auditors) and the EM seeds."""
    parts = [f"{t}: {g['pair_id'].nunique()} pairs ({g.loc[g['split'] == 'test', 'pair_id'].nunique()} test)"
             for t, g in transcripts.groupby("track", sort=True)]
    seeds = sorted(int(x) for x in transcripts["seed"].unique() if int(x) >= 0)
    return "; ".join(parts) + f"; EM seeds {seeds}"


def write_outputs(res: RQ1Result, results: Path) -> dict[str, str]:
    """Tables (CSV + Markdown) under {results}/tables and figures under {results}/figures."""
    from . import plots as P
    from . import tables as TB

    tdir, fdir = results / "tables", results / "figures"
    paths: dict[str, str] = {}
    cfg = res.config
    head = (f"Table 2 reproduction (RQ1) at T={cfg.T}, B_a={cfg.B_a}, K={cfg.K}; profile {res.profile.name}; "
            f"response model(s): {', '.join(sorted(res.table2['response_model'].unique()))}; encoder "
            f"{cfg.encoder or res.profile.encoder}; judge {cfg.judge or res.profile.judge}; "
            f"{run_scope(res.transcripts)}; "
            f"{res.u_validity.definition.label if res.u_validity is not None else UDefinition().label}.\n\n")
    written = {"table2": TB.write_table(res.table2, tdir, "table2_rq1", head + TB.table2_markdown(res.table2))}
    if not res.comparison.empty:
        written["comparison"] = TB.write_table(res.comparison, tdir, "table2_rq1_vs_paper",
                                               f"Profile {res.profile.name}; {run_scope(res.transcripts)}.\n\n"
                                               + TB.comparison_markdown(res.comparison))
    aT = res.audit[res.audit["horizon"] == cfg.T]
    written["oracle"] = TB.write_table(res.oracle, tdir, "rq1_oracle_ceiling",
                                       TB.oracle_markdown(res.oracle, aT, float(cfg.B_a)))
    written["claims"] = TB.write_table(res.claims, tdir, "rq1_claims", V.claims_markdown(res.claims))
    if res.u_validity is not None:
        written["u_validity"] = TB.write_table(res.u_validity.table, tdir, "rq1_u_validity",
                                               res.u_validity.markdown())
        if not res.u_validity.enriched.empty:
            written["u_validity_enriched"] = TB.write_table(res.u_validity.enriched, tdir, "rq1_u_validity_enriched",
                                                            res.u_validity.enriched_markdown())
    for key, files in written.items():
        paths.update({f"{key}_{kind}": str(path) for kind, path in files._asdict().items()})
    res.audit.to_csv(tdir / "rq1_audit_by_horizon.csv", index=False)
    res.identical.to_csv(tdir / "rq1_dagger_check.csv", index=False)
    paths["audit_csv"] = str(tdir / "rq1_audit_by_horizon.csv")
    import matplotlib.pyplot as plt
    for name, fig in (("rq1_privacy_utility", P.privacy_utility_figure(res.table2)),
                      ("rq1_leakage_horizon", P.leakage_horizon_figure(res.audit)),
                      ("rq1_ceiling", P.ceiling_figure(res.oracle[res.oracle["method"].isin(res.config.methods)], aT))):
        P.save_figure(fig, fdir / f"{name}.png", dpi=130)
        plt.close(fig)
        paths[name] = str(fdir / f"{name}.png")
    if res.metrics is not None:
        fig = P.auc_forest_figure(res.metrics, res.oracle, methods=res.config.methods,
                                  path=fdir / "rq1_auc_intervals.png")
        plt.close(fig)
        paths["rq1_auc_intervals"] = str(fdir / "rq1_auc_intervals.png")
    return paths


# ---- notebook steps (each returns a Result) -------------------------------------------------------
def run(session: Any, **overrides: Any) -> Any:
    """Notebook step: :func:`run_rq1` under the session's parameters (``B_a``, ``K``, ``T``,
    ``n_boot``, ``audit_unit``; ``overrides`` for any other :class:`RQ1Config` field). Stage logs and
    progress only when interactive. ``result["rq1"]`` is the :class:`RQ1Result`."""
    from .result import Result

    c = session.cfg
    cfg = RQ1Config(profile=c.profile, seed=c.seed, results_dir=c.results_dir, data_dir=c.data_dir, B_a=c.B_a,
                    K=c.K, T=c.T, audit_unit=c.audit_unit, n_boot=int(c.n_boot), workers=c.workers,
                    progress=session.interactive, **overrides)
    with session.timer("rq1"):
        res = run_rq1(cfg, log=print if session.interactive else (lambda s: None))
    prof = res.profile
    times = pd.Series(res.timings, name="seconds").round(1).rename_axis("stage").reset_index()
    tr = res.transcripts
    finding = (f"{len(tr)} transcript rows ({tr['response'].nunique()} distinct responses) of "
               f"{tr['method'].nunique()} interfaces, {run_scope(tr)}, audited, checked by the exact oracle and "
               f"judged in {res.timings['total']:.0f} s.")
    notes = [f"Profile `{prof.name}`: {prof.description}. Response model(s): "
             f"{', '.join(responder_specs(prof, cfg.responders))}; encoder {cfg.encoder or prof.encoder}; judge "
             f"{cfg.judge or prof.judge}; EM seeds {list(prof.em_seeds)}."] + [f"Note: {n}" for n in res.notes]
    return Result("RQ1 run", finding, tables={"time per stage": times}, notes=notes, data={"rq1": res}, precision=1)


def result_of(rq1: Any) -> RQ1Result:
    """The :class:`RQ1Result` of a step result of :func:`run` (or the RQ1Result itself)."""
    res = rq1["rq1"] if not isinstance(rq1, RQ1Result) else rq1
    if not isinstance(res, RQ1Result):
        raise ParameterError(f"need the result of dx.rq1.run, got {type(rq1).__name__}")
    return res


def example_turn(rq1: Any) -> Any:
    """Notebook step: what every interface passed the response model at the first target turn of the
    first PairedMem pair, under M and M' (first EM seed for the stochastic ones), and the response."""
    from .result import Result

    res = result_of(rq1)
    tr = res.transcripts
    pm = tr[(tr["track"] == "pairedmem") & (tr["qtype"] == "target")]
    if pm.empty:
        raise ParameterError("the run has no PairedMem target turn")
    pid, turn = pm["pair_id"].iloc[0], int(pm["turn"].iloc[0])
    seed0 = min(int(s) for s in res.profile.em_seeds)
    ex = tr[(tr["pair_id"] == pid) & (tr["turn"] == turn) & tr["seed"].isin([-1, seed0])]
    wide = (ex.pivot_table(index="method", columns="side", values=["conditioning", "response"], aggfunc="first")
            .reindex([m for m in res.config.methods if m in set(ex["method"])]))
    wide.columns = [f"{v} ({s})" for v, s in wide.columns]
    differ = [m for m in wide.index if wide.at[m, "conditioning (M)"] != wide.at[m, "conditioning (M')"]] \
        if {"conditioning (M)", "conditioning (M')"} <= set(wide.columns) else []
    finding = (f"At this turn {len(differ)} of {len(wide)} interfaces pass the model different conditioning under "
               f"M and M'" + (f": {', '.join(differ)}." if differ else "."))
    return Result(f"Pair {pid}, turn {turn}: {ex['query'].iloc[0]!r}", finding, tables={"conditioning and response":
                                                                                          wide.reset_index()})


def dagger(rq1: Any) -> Any:
    """Notebook step: the dagger check per method and track (cells whose conditioning, views or
    public record differ between M and M'); the full table is ``tables/rq1_dagger_check.csv``."""
    from .result import Result

    idt = result_of(rq1).identical
    wide = idt.assign(cells=lambda d: d["differing"].astype(int).astype(str) + " of " + d["cells"].astype(int)
                      .astype(str)).pivot_table(index="method", columns="track", values="cells", aggfunc="first")
    order = [m for m in result_of(rq1).config.methods if m in wide.index]
    wide = wide.reindex(order).rename_axis(None, axis=1).reset_index()
    same = list(dict.fromkeys(idt.loc[idt.groupby("method")["identical"].transform("all"), "method"]))
    finding = (f"Identical conditioning under M and M' in every (pair, seed, turn) cell: {', '.join(same) or 'none'}; "
               f"these rows get 0.500 / 0.050 in Table 2. Every other method differs in some cell.")
    return Result("Cells whose conditioning differs between M and M'", finding, tables={"differing cells": wide})


def table2(rq1: Any) -> Any:
    """Notebook step: Table 2 in the paper's layout (Markdown, with 95% CIs) and the permute-and-flip
    rows beside the Eq. (7) rows; the finding compares memory-text and DP-MemView AUCs."""
    from .result import Result
    from .tables import table2_markdown

    res = result_of(rq1)
    t2 = res.table2
    pf = t2[t2["method"].str.startswith("DP-MemView (on") | t2["method"].str.startswith("DP-MemView (pre")][
        ["track", "response_model", "method", "auc", "tpr", "trec", "u", "unsup"]]
    def span(x: pd.Series) -> str:
        return f"{x.min():.3f}" if np.isclose(x.min(), x.max()) else f"{x.min():.3f}-{x.max():.3f}"

    parts = []
    for track, g in t2.groupby("track", sort=False):
        g = g.set_index("method")
        mt = g.loc[g.index.intersection(MEMORY_TEXT), "auc"]
        dp = g.loc[g.index.intersection(DP_MODES), "auc"]
        tr = g.loc[g.index.intersection(DP_MODES), "trec"]
        if len(mt) and len(dp):
            parts.append(f"on {track} the memory-text methods reach AUC {span(mt)} and the "
                         f"DP-MemView modes {span(dp)}, with tRec {span(tr)} "
                         f"(GenericOnly {g.at['GenericOnly', 'trec']:.3f}, "
                         f"RawReadSet {g.at['RawReadSet', 'trec']:.3f})")
    unit = res.audit["embedding_unit"].iloc[0]
    text = "; ".join(parts) + "."
    return Result(f"Table 2 at T={res.config.T}, B_a={res.config.B_a:g}, K={res.config.K} (embedding unit: {unit})",
                  text[:1].upper() + text[1:], tables={"DP-MemView: Eq. (7) and permute-and-flip": pf},
                  notes=[table2_markdown(t2)])


def u_validity(rq1: Any) -> Any:
    """Notebook step: which judge dimensions U holds (held-out kappa per dimension,
    :mod:`dpmv_lib.evaluate.u_validity`); full table ``tables/rq1_u_validity.csv``."""
    from .result import Result

    uv = result_of(rq1).u_validity
    if uv is None:
        return Result("U's validity", "No labels for this run's judge: U is the mean of the four dimensions.")
    cols = [c for c in ("dimension", "response_model", "units_held_out", "positives_held_out", "kappa_raw",
                        "kappa_fitted", "kappa_fitted_min", "kappa_fitted_max", "goal_met") if c in uv.table.columns]
    shown = uv.table[uv.table["response_model"] == "all"] if len(uv.table) > 12 else uv.table
    tables = {"held-out agreement (pooled over response models; per model in the CSV)"
              if len(shown) < len(uv.table) else "held-out agreement": shown[cols]}
    if not uv.enriched.empty:
        tables["enriched SmolLM2 draw: kappa as drawn and weighted to its population"] = uv.enriched
    return Result(f"U's validity: held-out kappa per judge dimension ({uv.judge_id})", uv.summary(), tables=tables)


def comparison(rq1: Any) -> Any:
    """Notebook step: ours beside the paper's mean over its three models (Markdown per track), and
    the finding: per metric, the mean and the largest difference from the paper."""
    from .result import Result
    from .tables import DAGGER, METRIC_LABELS, fmt

    cmp = result_of(rq1).comparison
    if cmp.empty:
        return Result("Beside the paper", "The paper's reference table is not available to this run.")
    d = cmp.dropna(subset=["diff_vs_paper_mean"])
    d = d[~d["by_construction"]]
    parts = []
    for metric, g in d.groupby("metric", sort=False):
        worst = g.loc[g["diff_vs_paper_mean"].abs().idxmax()]
        parts.append(f"{metric}: mean |diff| {g['diff_vs_paper_mean'].abs().mean():.3f}, largest "
                     f"{worst['diff_vs_paper_mean']:+.3f} ({worst['method']}, {worst['track']})")
    finding = ("Ours minus the paper's mean over its three models, over the methods and tracks the paper reports "
               "(dagger cells left out): " + "; ".join(parts) + ". Section 4b splits tRec and Unsup into reach and "
               "credit to show where the differences come from.")
    out = Result("Ours beside the paper (mean of its three response models; per-model values and differences: "
                 "tables/table2_rq1_vs_paper.md)", finding)
    for (track, model), g in cmp.groupby(["track", "response_model"], sort=False):
        cell = g.assign(v=[f"{fmt(o)}{DAGGER if b else ''} ({fmt(p)})" for o, p, b in
                           zip(g["ours"], g["paper_mean"], g["by_construction"])])
        wide = cell.pivot_table(index="method", columns="metric", values="v", aggfunc="first", sort=False)
        out.show_table(f"{track}, {model}: ours (paper mean)", wide[[m for m in METRIC_LABELS.values()
                                                                      if m in wide.columns]].reset_index())
    return out


def oracle(rq1: Any) -> Any:
    """Notebook step: the exact optimal auditor per method (ceilings, learned AUC, max realised loss
    on both tracks, summarised; full table ``tables/rq1_oracle_ceiling.md``) and its figure. The
    finding restates X2 and X3 from their verdicts and values."""
    from .result import Result

    res = result_of(rq1)
    B = float(res.config.B_a)
    aT = res.audit[res.audit["horizon"] == res.config.T]
    m = res.oracle.merge(aT[["track", "response_model", "method", "auc_indep"]], how="left",
                         on=["track", "response_model", "method"])
    wide = m.pivot_table(index="method", columns="track", values=["ceiling_auc", "auc_indep", "max_loss"],
                         aggfunc="first", dropna=False)
    wide.columns = [f"{v} ({t})" for v, t in wide.columns]
    order = list(res.config.methods) + [x for x in res.config.oracle_ablations]
    wide = wide.reindex([x for x in order if x in wide.index]).rename(columns=lambda c: c.replace(
        "ceiling_auc", "ceiling AUC").replace("auc_indep", "learned AUC").replace("max_loss", "max loss"))
    cl = res.claims.set_index("id")
    abl = m[m["method"].isin(res.config.oracle_ablations)]
    inf_m = list(dict.fromkeys(abl.loc[np.isinf(abl["max_loss"]), "method"]))
    over = list(dict.fromkeys(abl.loc[~abl["max_loss_le_cap_all_pairs"].astype(bool) & np.isfinite(abl["max_loss"]),
                                      "method"]))
    within = abl[abl["max_loss_le_cap_all_pairs"].astype(bool)].groupby("method")["max_loss"].max()
    dp = m[m["method"].isin(DP_MODES)]
    parts = [f"Every DP-MemView mode stays within B_a = {B:g} on every pair (largest realised loss "
             f"{dp['max_loss'].max():.3f}; X2 {cl.at['X2', 'verdict']})." if len(dp) and "X2" in cl.index else ""]
    if len(abl) and "X3" in cl.index:
        bits = []
        def verb(names: Sequence[str], one: str, many: str) -> str:
            return f"{' and '.join(names)} {one if len(names) == 1 else many}"

        if inf_m:
            bits.append(verb(inf_m, "realises", "realise") + " an unbounded loss (inf: a view released with "
                        "probability 0 under one store)")
        if over:
            bits.append(verb(over, "exceeds", "exceed") + " B_a on some pair")
        if len(within):
            bits.append(verb(list(within.index), "stays", "stay") + f" within B_a at T = {res.config.T} (largest "
                        + ", ".join(f"{v:.3f}" for v in within) + ")")
        parts.append(f"Of the contract-violating variants, {'; '.join(bits)}; so X3 {cl.at['X3', 'verdict']}"
                     + (": a violated contract need not show as a realised loss above the cap at this horizon."
                        if len(within) else "."))
    out = Result("The exact optimal auditor and the realised privacy loss", " ".join(p for p in parts if p),
                 tables={"per method (full table: tables/rq1_oracle_ceiling.md)": wide.reset_index()})
    if "rq1_ceiling" in res.paths:
        out.show_figure("ceiling", res.paths["rq1_ceiling"])
    return out


def figures(rq1: Any) -> Any:
    """Notebook step: the privacy-utility figure and the learned AUC against the prefix length."""
    from .result import Result

    res = result_of(rq1)
    a = res.audit[res.audit["track"] == "pairedmem"]
    hs = sorted(a["horizon"].unique())
    parts = []
    for fam, names in (("memory-text", MEMORY_TEXT), ("DP-MemView", DP_MODES)):
        g = a[a["method"].isin(names)].groupby("horizon")["auc"].mean()
        if len(g):
            parts.append(f"{fam} methods {' -> '.join(f'{g[h]:.3f}' for h in hs if h in g.index)}")
    finding = (f"Mean learned AUC on PairedMem at t = {', '.join(str(int(h)) for h in hs)}: " + "; ".join(parts) + ".")
    out = Result("Privacy against utility, and leakage against the horizon", finding)
    for name in ("rq1_privacy_utility", "rq1_leakage_horizon"):
        if name in res.paths:
            out.show_figure(name, res.paths[name])
    return out


def files(rq1: Any, session: Any = None) -> Any:
    """Notebook step: the tables and figures this run wrote, and (with ``session``) its wall time."""
    from .result import Result

    res = result_of(rq1)
    files = pd.DataFrame({"path": sorted({Path(p) for p in res.paths.values()})})
    files["folder"] = [str(p.parent) for p in files["path"]]
    files["name"] = [p.name for p in files["path"]]
    grouped = files.groupby("folder", sort=True)["name"].agg(lambda x: ", ".join(x)).reset_index()
    finding = f"{len(files)} files written by the RQ1 run under {res.config.results_dir}"
    if session is not None:
        finding += f"; the notebook has run {session.timer.total:.0f} s"
    return Result("Files written by the RQ1 run", finding + ".", tables={"files": grouped})


def run_judge(session: Any) -> Any:
    """The rubric judge of a notebook run (the profile's encoder, shared through
    :func:`~.common.run_encoder`), or None when the run's judge is another one (the judge checks of
    notebook 03 are defined for the rubric judge)."""
    from ..evaluate.judge import make_judge

    spec = session.params.get("judge") or session.profile.judge
    if spec != "rubric":
        return None
    return make_judge("rubric", run_encoder(session.params.get("encoder") or session.profile.encoder,
                                            session.cfg.results_dir))


def claims(rq1: Any) -> Any:
    """Notebook step: the RQ1 claims table (:func:`evaluate_claims` of the run) with the evidence of
    every claim that does not hold plainly and of X1-X3; the full evidence is in
    ``tables/rq1_claims.md``. The finding counts the verdicts and names the claims."""
    from .result import Result

    res = result_of(rq1)
    c = res.claims
    shown = [r.id for r in c.itertuples() if r.verdict != "HOLDS" or r.id.startswith("X")]
    by = {v: list(c.loc[c["verdict"] == v, "id"]) for v in V.VERDICTS if (c["verdict"] == v).any()}
    finding = (f"Of {len(c)} claims: " + "; ".join(f"{v} {len(ids)} ({', '.join(ids)})" for v, ids in by.items())
               + ". The paper's claims are C1-C13; X1-X3 go beyond it.")
    out = Result("Which of the paper's RQ1 claims hold in this run", finding,
                 notes=[V.claims_markdown(c, evidence=shown)])
    if "rq1_auc_intervals" in res.paths:
        out.show_figure("AUC intervals", res.paths["rq1_auc_intervals"])
    return out
