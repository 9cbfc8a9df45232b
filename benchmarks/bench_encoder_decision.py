"""The auditor-encoder decision on the default profile: run the encoder-dependent steps of
notebooks 03, 04 and 05 (learned auditor, rubric judge, claims) with a reference and a candidate
encoder on the same transcripts, and list how far each AUC, verdict and judge kappa moves.

    nice -n 5 .venv/bin/python benchmarks/bench_encoder_decision.py \
        [--reference minilm@bf16] [--candidate minilm-ov@bf16] [--profile default] [--work DIR]

Acceptance (issue text): every verdict of the claims tables of 03, 04 and 05 identical, every AUC
within 0.01, every judge kappa within 0.02. The encoder-independent steps (transcripts from the
surrogate, accounting, exact grid) are computed once and shared; the two encoders each get their
own embedding cache (keyed by encoder id). Writes benchmarks/results/encoder_decision.json and .md
(or ``--out``); never touches results/.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from machine_info import describe, machine  # noqa: E402  (benchmarks/ is on sys.path when run as a script)

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results"
AUC_TOL, KAPPA_TOL = 0.01, 0.02
TABLE_KEYS = ("03_auc", "03_claims", "03_judge_agreement", "04_auc", "04_table4", "04_claims", "05_table3",
              "05_claims")


PARTS = ("03", "04", "05")


def run_one(spec: str, profile: str, work: Path, grid_path: Path, parts: tuple[str, ...] = PARTS,
            save=None) -> dict:
    """Every encoder-dependent table of notebooks ``parts`` for one encoder spec (frames as records);
    ``save(out)`` is called after each notebook's part."""
    from dpmv_lib.experiments.common import run_encoder

    rdir = work / spec.replace("@", "_").replace(":", "_")
    (rdir / "cache").mkdir(parents=True, exist_ok=True)
    shared = work / "transcripts"
    shared.mkdir(parents=True, exist_ok=True)
    link = rdir / "cache" / "transcripts"
    if not link.exists():
        link.symlink_to(shared, target_is_directory=True)
    out: dict = {"spec": spec, "profile": profile, "seconds": {}}
    save = save or (lambda _: None)
    enc = run_encoder(spec, str(rdir))
    out["encoder_id"] = enc.id
    if "03" in parts:
        _part03(out, spec, profile, rdir, enc)
        save(out)
    if "04" in parts or "05" in parts:
        _parts0405(out, spec, profile, rdir, enc, grid_path, parts, save)
    return out


def _part03(out: dict, spec: str, profile: str, rdir: Path, enc) -> None:
    from dpmv_lib.common.paths import resolve
    from dpmv_lib.evaluate import judge_agreement
    from dpmv_lib.evaluate.judge import make_judge
    from dpmv_lib.bench.datasets import load_benchmark
    from dpmv_lib.experiments.rq1 import RQ1Config, run_rq1

    t = time.perf_counter()
    res = run_rq1(RQ1Config(profile=profile, results_dir=str(rdir), encoder=spec, progress=False, write=False))
    out["seconds"]["03 run_rq1"] = time.perf_counter() - t
    out["03_auc"] = res.audit[["track", "response_model", "method", "horizon", "auc"]].to_dict("records")
    out["03_claims"] = res.claims[["id", "estimate", "p", "verdict"]].to_dict("records")
    t = time.perf_counter()
    judge = make_judge("rubric", enc)
    data_dir = resolve("data")
    units = judge_agreement.load_units(data_dir / "judge_labels")
    benches = {tr: load_benchmark(tr, str(data_dir)) for tr in sorted(set(units["track"]))}
    agr = judge_agreement.agreement(judge_agreement.judge_units(units, benches, judge))
    out["03_judge_agreement"] = agr[["what", "response_model", "kappa", "weighted_kappa"]].to_dict("records")
    out["seconds"]["03 judge agreement"] = time.perf_counter() - t


def _parts0405(out: dict, spec: str, profile: str, rdir: Path, enc, grid_path: Path, parts, save) -> None:
    from dpmv_lib.evaluate.audit import AuditConfig, run_audit
    from dpmv_lib.evaluate.judge import make_judge, score_transcripts, summarise_utility
    from dpmv_lib.experiments import pipeline, rq2, sensitivity, verdicts
    from dpmv_lib.experiments.common import ExperimentConfig, load_paper_csv
    from dpmv_lib.experiments.profiles import get_profile

    prof = get_profile(profile).for_seed(0)
    cfg = ExperimentConfig(profile=profile, results_dir=str(rdir), progress=False)
    bench = pipeline.load_pairs(cfg, prof)
    responder = pipeline.make_surrogate_or_profile_responder(prof, bench, 0)
    judge = make_judge(prof.judge, enc)
    if "04" in parts:
        t = time.perf_counter()
        methods = rq2.HORIZON_METHODS + (rq2.SCORE_CHANNEL,)
        tr = pipeline.cached_transcripts(bench, responder, methods, seeds=prof.em_seeds, turns=cfg.T_max,
                                         B_a=cfg.B_a, K=cfg.K, plan_horizon=cfg.T,
                                         cache_dir=cfg.cache_dir / "transcripts", workers=cfg.workers, progress=False)
        acc = rq2.accounting_per_pair(tr, horizons=range(1, cfg.T_max + 1), methods=rq2.HORIZON_METHODS)
        acc_sum = rq2.accounting_summary(acc, cfg.B_a)
        acfg = AuditConfig(horizons=cfg.learned_horizons, n_boot=cfg.n_boot, seed=cfg.seed, unit=cfg.audit_unit)
        audit_sum, scores = run_audit(tr[tr["method"].isin(rq2.HORIZON_METHODS)], enc, acfg)
        util_t = score_transcripts(tr[tr["method"].isin(rq2.TABLE4_METHODS)], {"pairedmem": bench}, judge, cfg.T)
        util = summarise_utility(util_t, n_boot=cfg.n_boot, seed=cfg.seed)
        t4 = rq2.table4(acc_sum, audit_sum, util, paper=load_paper_csv("paper_table4_safeguards.csv"), horizon=cfg.T)
        at_t = scores[(scores["horizon"] == cfg.T) & scores["method"].isin(rq2.TABLE4_METHODS)]
        metrics = verdicts.paired_bootstrap(at_t, util_t, n_boot=max(cfg.n_boot, verdicts.N_BOOT), seed=cfg.seed)
        claims = rq2.claims(t4, cfg.B_a, metrics)
        out["04_auc"] = audit_sum[["method", "horizon", "auc"]].to_dict("records")
        out["04_table4"] = t4[["variant", "auc", "trec", "u", "unsup"]].to_dict("records")
        out["04_claims"] = claims[["id", "estimate", "p", "verdict"]].to_dict("records")
        out["seconds"]["04 audit, judge, claims"] = time.perf_counter() - t
        save(out)
    if "05" not in parts:
        return
    t = time.perf_counter()
    settings = sensitivity.table3_settings(selectors=("em", "pf"))
    tr5 = sensitivity.budget_transcripts(bench, responder, settings, seeds=prof.em_seeds, turns=cfg.T,
                                         cache_dir=cfg.cache_dir / "transcripts", workers=cfg.workers, progress=False)
    audit5, scores5 = run_audit(tr5, enc, AuditConfig(horizons=(cfg.T,), n_boot=cfg.n_boot, seed=cfg.seed,
                                                      unit=cfg.audit_unit))
    util_t5 = score_transcripts(tr5, {"pairedmem": bench}, judge, cfg.T)
    util5 = summarise_utility(util_t5, n_boot=cfg.n_boot, seed=cfg.seed)
    grid = _grid(bench, cfg, prof, grid_path)
    t3 = sensitivity.table3(settings, audit5, util5, horizon=cfg.T, paper=load_paper_csv("paper_table3_budget.csv"),
                            grid=grid)
    metrics5 = verdicts.paired_bootstrap(scores5[scores5["horizon"] == cfg.T], util_t5,
                                         n_boot=max(cfg.n_boot, verdicts.N_BOOT), seed=cfg.seed)
    claims5 = sensitivity.table3_claims(t3, metrics5)
    out["05_table3"] = t3[["sweep", "selector", "b_a", "k", "auc", "trec", "u", "unsup"]].to_dict("records")
    out["05_claims"] = claims5[["id", "estimate", "p", "verdict"]].to_dict("records")
    out["seconds"]["05 audit, judge, claims"] = time.perf_counter() - t
    save(out)


def _grid(bench, cfg, prof, path: Path):
    """Notebook 05's exact grid (encoder-independent): reused from ``path`` when its key matches."""
    from dpmv_lib.bench.datasets import load_gold_rules
    from dpmv_lib.experiments import sensitivity

    spec = sensitivity.GridSpec(b_as=tuple(sorted({1, 2, 4, 8, float(cfg.B_a)})),
                                ks=tuple(sorted({2, 3, 4, int(cfg.K)})), horizon=cfg.T_max, plan_horizon=cfg.T,
                                modes=sensitivity.MODES)
    pairs = [p for p in bench.pairs if p.split == "test"] or list(bench.pairs)
    return sensitivity.cached_grid(bench, pairs, spec, view_links=load_gold_rules("data")["view_links"], path=path,
                                   n_seeds=len(prof.em_seeds))


def compare(ref: dict, cand: dict) -> dict:
    """AUC, verdict and kappa deltas (candidate - reference) per table."""
    import pandas as pd

    def delta(key: str, on: list[str], cols: list[str]) -> pd.DataFrame:
        a, b = pd.DataFrame(ref[key]), pd.DataFrame(cand[key])
        m = a.merge(b, on=on, suffixes=("_ref", "_cand"), validate="one_to_one")
        for c in cols:
            m[f"d_{c}"] = m[f"{c}_cand"] - m[f"{c}_ref"]
        return m

    out: dict = {"auc": {}, "verdicts": {}, "kappa": {}, "utility": {},
                 "missing": sorted(k for k in TABLE_KEYS if k not in ref or k not in cand)}
    for key, on in (("03_auc", ["track", "response_model", "method", "horizon"]), ("04_auc", ["method", "horizon"]),
                    ("04_table4", ["variant"]), ("05_table3", ["sweep", "selector", "b_a", "k"])):
        if key in out["missing"]:
            continue
        cols = ["auc"] + (["trec", "u", "unsup"] if "table" in key else [])
        m = delta(key, on, cols)
        i = m["d_auc"].abs().idxmax()
        out["auc"][key] = {"rows": len(m), "max_abs": float(m["d_auc"].abs().max()),
                           "at": {k: (str(m.loc[i, k])) for k in on}, "ref": float(m.loc[i, "auc_ref"]),
                           "cand": float(m.loc[i, "auc_cand"])}
        for c in cols[1:]:
            out["utility"][f"{key} {c}"] = float(m[f"d_{c}"].abs().max())
    for key in ("03_claims", "04_claims", "05_claims"):
        if key in out["missing"]:
            continue
        m = delta(key, ["id"], ["estimate"])
        changed = m[m["verdict_ref"] != m["verdict_cand"]]
        out["verdicts"][key] = {"claims": len(m),
                                "changed": changed[["id", "verdict_ref", "verdict_cand"]].to_dict("records"),
                                "max_abs_estimate_delta": float(m["d_estimate"].abs().max(skipna=True) or 0.0)}
    if "03_judge_agreement" not in out["missing"]:
        m = delta("03_judge_agreement", ["what", "response_model"], ["kappa", "weighted_kappa"])
        out["kappa"] = {"rows": len(m), "max_abs_kappa": float(m["d_kappa"].abs().max()),
                        "max_abs_weighted_kappa": float(m["d_weighted_kappa"].abs().max()),
                        "table": m[["what", "response_model", "kappa_ref", "kappa_cand", "d_kappa"]].to_dict("records")}
    passed = bool(all(v["max_abs"] <= AUC_TOL for v in out["auc"].values())
                  and not any(v["changed"] for v in out["verdicts"].values())
                  and out["kappa"].get("max_abs_kappa", 0.0) <= KAPPA_TOL
                  and out["kappa"].get("max_abs_weighted_kappa", 0.0) <= KAPPA_TOL)
    out["accepted"] = passed and not out["missing"]
    out["passed_so_far"] = passed
    return out


def _sizes(profile: str) -> str:
    from dpmv_lib.core.errors import ParameterError
    from dpmv_lib.experiments.profiles import get_profile
    try:
        p = get_profile(profile)
    except ParameterError:
        return "sizes not recorded"
    return f"{p.pairs} PairedMem pairs of 320, {p.transfer_pairs} transfer pairs of 67"


def markdown(m: dict, ref: dict, cand: dict, d: dict, profile: str) -> str:
    lines = [f"# Auditor encoder decision: `{cand['spec']}` against `{ref['spec']}` ({profile} profile)", "",
             f"Machine: {describe(m)}; load average at start {m['loadavg_at_start']} (2 shared cores, other "
             f"agents' jobs running beside it: the seconds below are not benchmarks).", "",
             *([f"Profile `{profile}`: a stratified subset of the default profile ({_sizes(profile)}); its "
                f"verdicts are those of the subset, not of the full run (less power), so identical verdicts here "
                f"are evidence for the full run, not proof.", ""] if profile.endswith("-subset") else []),
             f"Reference `{ref['spec']}` = `{ref['encoder_id']}`; candidate `{cand['spec']}` = `{cand['encoder_id']}`. "
             f"Acceptance: every verdict identical, every AUC within {AUC_TOL}, every judge kappa within {KAPPA_TOL}. "
             f"**Accepted: {'yes' if d['accepted'] else 'no'}**"
             + (f" (not measured: {', '.join(d['missing'])}; the measured parts "
                f"{'pass' if d['passed_so_far'] else 'fail'})." if d["missing"] else "."), "",
             "| table | rows | largest AUC change | where | reference | candidate |",
             "| --- | ---: | ---: | --- | ---: | ---: |"]
    for key, v in d["auc"].items():
        where = ", ".join(f"{k}={x}" for k, x in v["at"].items())
        lines.append(f"| {key} | {v['rows']} | {v['max_abs']:.4f} | {where} | {v['ref']:.4f} | {v['cand']:.4f} |")
    lines += ["", "| claims table | claims | verdicts changed | largest change of an estimate |",
              "| --- | ---: | --- | ---: |"]
    for key, v in d["verdicts"].items():
        ch = "; ".join(f"{c['id']}: {c['verdict_ref']} -> {c['verdict_cand']}" for c in v["changed"]) or "none"
        lines.append(f"| {key} | {v['claims']} | {ch} | {v['max_abs_estimate_delta']:.4f} |")
    k = d["kappa"]
    if k:
        lines += ["", f"Judge against the labels (03_judge_agreement, {k['rows']} rows): largest kappa change "
                  f"{k['max_abs_kappa']:.4f}, weighted kappa {k['max_abs_weighted_kappa']:.4f}."]
    if d["utility"]:
        lines += ["", "Largest utility changes (tables 4 and 3): "
                  + ", ".join(f"{a} {b:.4f}" for a, b in d["utility"].items()) + "."]
    lines += ["", "Seconds per step (shared machine): " + "; ".join(
                  f"{r['spec']}: " + ", ".join(f"{a} {b:.0f}" for a, b in r["seconds"].items())
                  for r in (ref, cand)) + "."]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reference", default="minilm@bf16")
    ap.add_argument("--candidate", default="minilm-ov@bf16")
    ap.add_argument("--profile", default="default")
    ap.add_argument("--pairs", type=int, default=None,
                    help="PairedMem pairs (default: the profile's); with --transfer-pairs a stratified subset "
                         "run as its own profile '<profile>-subset' (its verdicts are not the full run's)")
    ap.add_argument("--transfer-pairs", type=int, default=None)
    ap.add_argument("--work", default=None, help="working directory (default: a new temporary one)")
    ap.add_argument("--out", default=str(OUT / "encoder_decision"), help="output path without suffix")
    ap.add_argument("--only", choices=("reference", "candidate"), default=None,
                    help="run one encoder and write <out>.json with its run alone (two such processes side by side "
                         "take two shares of a loaded machine; --combine then compares them)")
    ap.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS),
                    help="the notebooks whose encoder-dependent steps run (default: all)")
    ap.add_argument("--combine", nargs="+", metavar="JSON", default=None,
                    help="merge the runs of these files (written by this script) per encoder spec and compare "
                         "--reference with --candidate instead of running")
    args = ap.parse_args()
    profile = args.profile
    if args.pairs is not None or args.transfer_pairs is not None:
        from dataclasses import replace

        from dpmv_lib.experiments.profiles import PROFILES, get_profile
        base = get_profile(args.profile)
        profile = f"{args.profile}-subset"
        PROFILES[profile] = replace(base, name=profile, pairs=args.pairs or base.pairs,
                                    transfer_pairs=args.transfer_pairs or base.transfer_pairs)
    if args.combine:
        merged: dict[str, dict] = {}
        for f in args.combine:
            for r in json.loads(Path(f).read_text())["runs"]:
                cur = merged.setdefault(r["spec"], {"seconds": {}})
                cur.update({k: v for k, v in r.items() if k != "seconds"})
                cur["seconds"].update(r["seconds"])
        ref, cand = merged[args.reference], merged[args.candidate]
        m = json.loads(Path(args.combine[0]).read_text())["machine"]
        d = compare(ref, cand)
        Path(args.out + ".json").write_text(json.dumps({"machine": m, "runs": [ref, cand], "deltas": d}, indent=1,
                                                       default=str) + "\n")
        Path(args.out + ".md").write_text(markdown(m, ref, cand, d, ref.get("profile", profile)))
        print(Path(args.out + ".md").read_text())
        return
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.path.insert(0, str(ROOT))
    import shutil
    import tempfile

    m = machine()
    work = Path(args.work or tempfile.mkdtemp(prefix="encoder_decision_"))
    work.mkdir(parents=True, exist_ok=True)   # a --work that does not exist yet
    grid_path = work / "05_budget_grid.csv"
    committed = ROOT / "results" / "grids" / "05_budget_grid.csv"
    if profile == "default" and committed.exists() and not grid_path.exists():
        for f in (committed, committed.with_name(committed.name + ".key")):
            if f.exists():
                shutil.copy(f, work / f.name)     # reused only if its key matches (else recomputed)
    runs = []
    specs = {"reference": [args.reference], "candidate": [args.candidate]}.get(args.only or "",
                                                                            [args.reference, args.candidate])
    Path(args.out + ".json").parent.mkdir(parents=True, exist_ok=True)

    def save(run: dict) -> None:   # the finished runs and this one so far
        Path(args.out + ".json").write_text(json.dumps({"machine": m, "runs": runs + [run]}, indent=1,
                                                       default=str) + "\n")
    for spec in specs:
        runs.append(run_one(spec, profile, work, grid_path, tuple(args.parts), save))
        print(f"{spec}: {runs[-1]['seconds']}", flush=True)
    if args.only:
        return
    d = compare(runs[0], runs[1])
    Path(args.out + ".json").write_text(json.dumps({"machine": m, "runs": runs, "deltas": d}, indent=1,
                                                   default=str) + "\n")
    Path(args.out + ".md").write_text(markdown(m, runs[0], runs[1], d, profile))
    print(Path(args.out + ".md").read_text())


if __name__ == "__main__":
    main()
