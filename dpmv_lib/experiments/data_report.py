"""Notebook 01 helpers: build both tracks, Tables 5-7 style counts beside the paper's figures,
example pairs side by side, and the figure. All numbers are measured from the builds.
"""
from __future__ import annotations

import html
import json
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Collection, Mapping, Sequence

import pandas as pd

from .common import reference_dir
from .plots import save_figure
from ..bench import lexicon, transfer_quality
from ..bench.benchmark import Pair
from ..bench.pairedmem_gold import trajectory_problems
from ..bench.phrasebank import OVERLAP_TEMPLATES, TEMPLATES
from ..bench.transfer_corpora import SOURCE_KINDS
from ..core.errors import CorpusError

PAPER_FIGURES_FILE = "paper_other_figures.csv"


def paper_figures(path: str | Path | None = None) -> dict[str, str]:
    """figure -> value from the paper's reference CSV (``../shared/reference``); {} if absent."""
    p = Path(path) if path else reference_dir() / PAPER_FIGURES_FILE
    if not p.exists():
        return {}
    df = pd.read_csv(p, dtype=str)
    return dict(zip(df["figure"], df["value"]))


@dataclass(frozen=True)
class DataBuild:
    """Both tracks as built by notebook 01 (transfer may be None when the corpora are missing)."""

    pairedmem: Any
    transfer: Any
    transfer_error: str
    seconds: Mapping[str, float]
    paths: Mapping[str, str]


def build_all(data_dir: str | Path, seed: int = 0, corpora_dir: str | Path | None = None,
              transfer_speakers: int | None = None, progress: bool = True) -> DataBuild:
    """Build and freeze PairedMem (S1-S4) and the transfer track (T1-T4) under ``data_dir``.
    A missing corpora directory skips only the transfer track (its CorpusError is returned)."""
    from ..bench import pairedmem as pm
    from ..bench import transfer as tr
    data_dir = Path(data_dir)
    secs: dict[str, float] = {}
    t0 = time.perf_counter()
    build = pm.build_pairedmem(seed=seed, progress=progress)
    paths = {"pairedmem": str(pm.write_pairedmem(build, data_dir))}
    secs["pairedmem"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    tb, err = None, ""
    try:
        tb = tr.build_transfer(build.pairs, build.policies, corpora_dir, seed=seed, n_speakers=transfer_speakers)
        paths["transfer"] = str(tr.write_transfer(tb, data_dir))
    except CorpusError as exc:
        err = str(exc)
    secs["transfer"] = time.perf_counter() - t1
    secs["total"] = time.perf_counter() - t0
    return DataBuild(build, tb, err, secs, paths)


def build_seconds(db: DataBuild) -> pd.DataFrame:
    """The wall time of each build step of :func:`build_all` (columns step, seconds; rounded to 0.01 s)."""
    return pd.DataFrame([{"step": k, "seconds": round(v, 2)} for k, v in db.seconds.items()])


# ---- the public policy (notebook 01, section 1) ------------------------------------------------------
def template_groups(policy: Any, templates: Mapping[str, Mapping[str, Any]] = TEMPLATES,
                    overlap: Collection[str] = OVERLAP_TEMPLATES) -> pd.DataFrame:
    """The protected groups I_a of every template: per template and attribute the sorted positions,
    their number and the slots they lie in (from ``policy``'s layout, shared by all templates), and
    whether the template makes groups overlap.

    Parameters
    ----------
    policy : Policy
        Any template's policy (the layout is the same in all).
    templates : mapping
        template -> attribute -> positions (default: the phrase bank's ``TEMPLATES``).
    overlap : container
        The templates whose groups overlap (default: ``OVERLAP_TEMPLATES``).

    Returns
    -------
    DataFrame
        One row per template: ``template``, one column per attribute, ``overlap``.
    """
    slot_of = dict(policy.layout)

    def cell(g: Any) -> str:
        return f"{sorted(g)} ({len(g)}; slots: {', '.join(sorted({slot_of[i] for i in g}))})"

    return pd.DataFrame([{"template": t, **{a: cell(g) for a, g in groups.items()}, "overlap": t in overlap}
                         for t, groups in templates.items()])


def slot_table(policy: Any) -> pd.DataFrame:
    """Per slot of ``policy``: its number of positions, its view names and its number of public intents."""
    return pd.DataFrame([{"slot": s.name, "positions": len(policy.positions_of(s.name)),
                          "views": ", ".join(v.id.split(".")[1] for v in s.views),
                          "intents": sum(1 for i in policy.intents if i.startswith(s.name + "."))}
                         for s in policy.slots])


# ---- S3 and S4 (notebook 01, sections 3 and 6) -----------------------------------------------------------
def failed_candidates(candidates: Sequence[Any]) -> pd.DataFrame:
    """The S3 candidates that failed validation: spec, attribute, template, the simulated writer error
    and the problems found (an empty frame without columns when none failed)."""
    return pd.DataFrame([{"spec": c.spec.spec_id, "attribute": c.spec.attribute, "template": c.spec.template,
                          "simulated writer error": c.realisation.defect, "problems": "; ".join(c.problems)}
                         for c in candidates if not c.passed])


def selection_crosstab(pairs: Sequence[Pair]) -> pd.DataFrame:
    """Selected pairs by attribute x template with margins (:func:`group_table`)."""
    sel = group_table(pairs)
    return pd.crosstab(sel["attribute"], sel["template"], margins=True)


def trajectory_checks(pairs: Sequence[Pair], policy_of: Any, behaviours: Mapping[str, Any]) -> dict[str, int]:
    """S4's checks on every pair: queries checked, queries that name a protected attribute or a direct
    synonym (:func:`dpmv_lib.bench.lexicon.query_problems`) and trajectory problems
    (:func:`dpmv_lib.bench.pairedmem_gold.trajectory_problems`; ``policy_of``: Pair -> its policy)."""
    bad = [(p.pair_id, t.index) for p in pairs for t in p.turns if lexicon.query_problems(t.query.text)]
    problems = [x for p in pairs for x in trajectory_problems(policy_of(p), p, behaviours)]
    return {"queries": sum(len(p.turns) for p in pairs), "naming_attribute": len(bad),
            "trajectory_problems": len(problems)}


def _row(quantity: str, ours: Any, paper: Any = None, note: str = "") -> dict[str, Any]:
    diff = None
    try:
        if paper is not None and ours is not None:
            diff = round(float(ours) - float(paper), 4)
    except (TypeError, ValueError):
        diff = None
    return {"quantity": quantity, "ours": ours, "paper": paper, "difference": diff, "note": note}


def table5(db: DataBuild, ref: Mapping[str, str]) -> pd.DataFrame:
    """Table 5: summary and scale of the two tracks (counts measured; paper values beside)."""
    c = db.pairedmem.counts()
    rows = [
        _row("PairedMem pairs", c["selected_pairs"], ref.get("pairedmem_selected_pairs")),
        _row("PairedMem positions per store", c["positions_per_store"], ref.get("pairedmem_positions_per_store")),
        _row("PairedMem overlap share", c["overlap_share"], ref.get("pairedmem_overlap_share")),
        _row("PairedMem queries per pair", c["queries_per_pair"], ref.get("queries_per_pair")),
        _row("PairedMem paired query turns", c["paired_query_turns"], 10240, "C.1 Table 5: 320 x 32"),
    ]
    if db.transfer is not None:
        t = db.transfer.counts()
        rows += [_row("Transfer pairs", t["pairs"], ref.get("transfer_pairs")),
                 _row("Transfer background histories", t["speakers"], 20, "C.3 T1"),
                 _row("Transfer paired query turns", t["paired_query_turns"], 2560, "C.1 Table 5: 80 x 32")]
    else:
        rows.append(_row("Transfer pairs", None, ref.get("transfer_pairs"), "skipped: corpora missing"))
    return pd.DataFrame(rows)


def table6(db: DataBuild, ref: Mapping[str, str]) -> pd.DataFrame:
    """Table 6 / C.2: PairedMem construction counts (S1-S4) beside the paper's."""
    c = db.pairedmem.counts()
    q = c["queries_by_type"]
    n = max(1, c["selected_pairs"])
    return pd.DataFrame([
        _row("S1 candidate specifications", c["candidate_specs"], ref.get("pairedmem_candidate_specs")),
        _row("S1 candidates per attribute", min(c["candidates_per_attribute"].values()), 96, "every attribute"),
        _row("S1 candidate overlap share", c["candidate_overlap_share"], ref.get("pairedmem_overlap_share")),
        _row("S1 group size min", c["group_size_min"], ref.get("pairedmem_group_size_min")),
        _row("S1 group size max", c["group_size_max"], ref.get("pairedmem_group_size_max")),
        _row("S2 distinct memory sentences", c["distinct_memory_sentences"], None, "template realiser"),
        _row("S2 distinct evidence sentences (selected)", c["distinct_evidence_sentences"], None),
        _row("S3 passed validation", c["passed_validation"], ref.get("pairedmem_passed_validation"),
             f"failures by kind: {c['failures_by_kind']}"),
        _row("S3 selected pairs", c["selected_pairs"], ref.get("pairedmem_selected_pairs")),
        _row("S3 reserves", c["reserves"], ref.get("pairedmem_reserves")),
        _row("S3 selected overlap share", c["overlap_share"], ref.get("pairedmem_overlap_share")),
        _row("S3 split train/validation/test", "/".join(str(c["pairs_per_split"].get(s, 0))
                                                       for s in ("train", "validation", "test")), None),
        _row("S4 queries per pair", c["queries_per_pair"], ref.get("queries_per_pair")),
        _row("S4 target-relevant queries per pair", q.get("target", 0) / n, 16, "2 blocks x 8"),
        _row("S4 same-domain neutral queries per pair", q.get("neutral", 0) / n, 8, "2 blocks x 4"),
        _row("S4 distractor queries per pair", q.get("distractor", 0) / n, 8, "2 blocks x 4"),
        _row("S4 gold behaviours in the catalogue", c["behaviours"], None, str(c["behaviours_by_kind"])),
    ])


def table7(db: DataBuild) -> pd.DataFrame:
    """Table 7 / C.3: transfer evidence per attribute and source, rejections, background."""
    if db.transfer is None:
        return pd.DataFrame([{"attribute": "-", "note": f"transfer track skipped: {db.transfer_error}"}])
    t = db.transfer.counts()
    rows = []
    for a in sorted(t["evidence_candidates_kept"]):
        rows.append({"attribute": a, "evidence_kept": t["evidence_candidates_kept"][a],
                     "by_source": t["evidence_kept_by_source"][a],
                     "used_in_pairs": t["evidence_sentences_used"][a],
                     "pairs": t["pairs_per_attribute"][a],
                     "rejected_by_rule": t["evidence_rejections"][a]})
    return pd.DataFrame(rows)


def background_table(db: DataBuild) -> pd.DataFrame:
    if db.transfer is None:
        return pd.DataFrame()
    rows = []
    for sid, v in db.transfer.background.items():
        rows.append({"speaker": sid, "utterances": v["utterances"], "sentences_kept": v["kept"],
                     **{f"slot:{k}": n for k, n in v["sentences_by_slot"].items()},
                     "fallback_positions": v["slot_fallback_positions"]})
    return pd.DataFrame(rows)


# ---- the transfer track (notebook 01, section 9) -------------------------------------------------------
def transfer_quality_table(report: Mapping[str, Any]) -> pd.DataFrame:
    """:func:`dpmv_lib.bench.transfer_quality.quality_table` of ``report`` as a frame (figure, v1, v2, now,
    goal, met)."""
    return pd.DataFrame(transfer_quality.quality_table(report))


def evidence_kind_table(report: Mapping[str, Any]) -> pd.DataFrame:
    """Distinct evidence sentences per attribute (rows) and source kind (columns, in the order of
    ``SOURCE_KINDS``; 0 where none) from a transfer quality report."""
    return (pd.DataFrame(report["distinct_evidence_by_kind"]).T.reindex(columns=list(SOURCE_KINDS))
            .fillna(0).astype(int))


def edit_distance_table(report: Mapping[str, Any]) -> pd.DataFrame:
    """Per attribute the word edit distance between each evidence sentence and its M' replacement
    (summary statistics, then the share bins as columns) from a transfer quality report."""
    return pd.DataFrame({a: {k: v for k, v in d.items() if k != "share_bins"} | d["share_bins"]
                         for a, d in report["m_prime_edit_distance"].items()}).T


def evidence_examples(track: Any, per_attribute: int = 3) -> pd.DataFrame:
    """The first ``per_attribute`` evidence sentences of each attribute of a transfer build: attribute,
    source, the sentence in M and its reviewed replacement in M'."""
    return pd.DataFrame([{"attribute": e.attribute, "source": e.source, "M": e.text, "M' (reviewed)": e.edited}
                         for a in lexicon.ATTRIBUTES for e in track.evidence[a][:per_attribute]])


def manifest_tables(data_dir: str | Path, tracks: Sequence[str] = ("pairedmem", "transfer")) -> list[pd.DataFrame]:
    """One table per track of ``tracks`` frozen under ``data_dir``: its manifest's files with their
    checksums and sizes (tracks without a ``manifest.json`` are left out)."""
    out = []
    for track in tracks:
        mf = Path(data_dir) / track / "manifest.json"
        if mf.exists():
            m = json.loads(mf.read_text())
            out.append(pd.DataFrame([{"track": track, "file": k, **v} for k, v in m["files"].items()]))
    return out


def group_table(pairs: Sequence[Pair]) -> pd.DataFrame:
    """Selected pairs by attribute x template (counts, overlap, group size)."""
    rows = [{"attribute": p.attribute, "template": p.template, "overlap": p.overlap,
             "group_size": len(p.meta["group"]), "co_present": bool(p.meta.get("co_present"))} for p in pairs]
    return pd.DataFrame(rows)


def pair_side_by_side(pair: Pair) -> pd.DataFrame:
    """One pair's stores by position: slot, role, M, M' and whether they differ."""
    meta = pair.meta
    group, nt = set(meta.get("group", [])), meta.get("nontarget_positions", {})
    rows = []
    for (pos, slot) in pair.m.layout:
        role = "I_a" if pos in group else ""
        if str(pos) in nt:
            role = (role + "+" if role else "") + f"{nt[str(pos)]} evidence"
        rows.append({"position": pos, "slot": slot, "role": role, "M": pair.m.contents[pos],
                     "M'": pair.m_prime.contents[pos], "differs": pair.m.contents[pos] != pair.m_prime.contents[pos]})
    return pd.DataFrame(rows)


def highlight_html(df: pd.DataFrame) -> str:
    """HTML of :func:`pair_side_by_side` with the differing rows highlighted."""
    out = ["<table><tr><th>pos</th><th>slot</th><th>role</th><th>M</th><th>M'</th></tr>"]
    for r in df.itertuples(index=False):
        style = ' style="background:#ffe9a8"' if r.differs else ""
        out.append(f"<tr{style}><td>{r.position}</td><td>{r.slot}</td><td>{html.escape(r.role)}</td>"
                   f"<td>{html.escape(r.M)}</td><td>{html.escape(r._4)}</td></tr>")
    out.append("</table>")
    return "".join(out)


def trajectory_table(pair: Pair, behaviours: Mapping[str, Any]) -> pd.DataFrame:
    rows = []
    for t in pair.turns:
        rows.append({"turn": t.index, "block": t.block, "type": t.query.qtype, "slot": t.slot,
                     "intent": t.query.intent, "query": t.query.text,
                     "target-required on M": "; ".join(behaviours[b].description for b in t.gold.target_required),
                     "unsupported on M'": "; ".join(behaviours[b].description for b in t.gold.unsupported),
                     "generic": "; ".join(behaviours[b].description for b in t.gold.generic)})
    return pd.DataFrame(rows)


def structure_figure(pairs: Sequence[Pair], path: str | Path):
    """Figure: group sizes and overlap per attribute, and query types per block."""
    import matplotlib.pyplot as plt
    df = group_table(pairs)
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    ct = pd.crosstab(df["attribute"], df["group_size"])
    ct.plot(kind="bar", stacked=True, ax=axes[0], colormap="viridis")
    axes[0].set_title("|I_a| per selected pair")
    axes[0].set_ylabel("pairs")
    ov = df.groupby("attribute")[["overlap", "co_present"]].mean()
    ov.plot(kind="bar", ax=axes[1])
    axes[1].axhline(0.25, ls="--", c="grey", lw=1)
    axes[1].set_title("overlap share (dashed: paper 25%)")
    axes[1].set_ylim(0, 1)
    q = Counter((t.block, t.query.qtype) for p in pairs for t in p.turns)
    qd = pd.DataFrame([{"block": b, "type": k, "n": v / max(1, len(pairs))} for (b, k), v in q.items()])
    qd.pivot(index="block", columns="type", values="n").plot(kind="bar", stacked=True, ax=axes[2])
    axes[2].set_title("queries per pair and block")
    for ax in axes:
        ax.tick_params(axis="x", rotation=0)
    fig.tight_layout()
    return save_figure(fig, path, dpi=120)


PAPER_TABLE4_FILE = "paper_table4_safeguards.csv"


def paper_table4_bounds(path: str | Path | None = None) -> dict[str, str]:
    """variant -> the paper's Table 4 DP-bound column (``../shared/reference``); {} if absent."""
    p = Path(path) if path else reference_dir() / PAPER_TABLE4_FILE
    if not p.exists():
        return {}
    df = pd.read_csv(p, dtype=str)
    return dict(zip(df["variant"], df["dp_bound"]))


def quality_table(pairs: Sequence[Pair], policy_of: Any, horizon: int = 16,
                  paper_bounds: Mapping[str, str] | None = None) -> pd.DataFrame:
    """Issue 10 goals 1-4 measured on ``pairs`` (:mod:`dpmv_lib.bench.benchmark_quality`): one row per
    figure with ours, the paper's value where it has one (Table 4's DP bound), the goal, and
    whether ours meets it."""
    from ..bench import benchmark_quality as bq
    pb = paper_table4_bounds() if paper_bounds is None else paper_bounds
    rep = bq.audit(pairs, policy_of, horizon)
    ch, sl, tp, ln, ce, nt, lab, gold = (rep[k] for k in ("charges", "split_leakage", "templating", "length",
                                                          "counter_evidence", "numbers", "labels", "gold"))
    rows: list[dict[str, Any]] = []

    def add(goal: str, quantity: str, ours: Any, target: str, ok: bool, paper: Any = None) -> None:
        rows.append({"goal": goal, "quantity": quantity, "ours": ours, "paper": paper, "goal value": target,
                     "meets goal": bool(ok)})

    r3 = lambda x: round(float(x), 3)  # noqa: E731
    add("1 charges", f"NoCap reconstructed bound at T={horizon}, max over pairs", r3(ch["NoCap_bound"]["max"]),
        "16/3 on every pair", ch["NoCap_bound"]["min"] == ch["NoCap_bound"]["max"] == 16 / 3, pb.get("NoCap"))
    add("1 charges", "preallocated C_a (min / max over pairs)", f"{ch['C_a']['min']:.0f} / {ch['C_a']['max']:.0f}",
        "8 (eps = 1/4)", ch["C_a"]["min"] == ch["C_a"]["max"] == 8)
    add("1 charges", "neutral turns of the first block reading I_a (max per pair)",
        int(ch["neutral_reading_I_a"]["max"]), "0", ch["neutral_reading_I_a"]["max"] == 0)
    add("1 charges", "IncompleteCharge reconstructed bound, max / mean over pairs",
        f"{r3(ch['IncompleteCharge_bound']['max'])} / {r3(ch['IncompleteCharge_bound']['mean'])}",
        "> B_a (C2 violated); reported", ch["IncompleteCharge_bound"]["max"] > 2, pb.get("IncompleteCharge"))
    add("1 charges", "IncompleteCharge ledger, max / mean over pairs",
        f"{r3(ch['IncompleteCharge_ledger']['max'])} / {r3(ch['IncompleteCharge_ledger']['mean'])}",
        "<= B_a = 2", ch["IncompleteCharge_ledger"]["max"] <= 2, "2.0")
    for s in ("validation", "test"):
        add("2 splits", f"{s} evidence cores occurring in train", f"{sl[s]['evidence_cores_in_train']} of "
            f"{sl[s]['evidence_cores']}", "0", sl[s]["evidence_cores_in_train"] == 0)
        add("2 splits", f"{s} background cores occurring in train", f"{sl[s]['background_cores_in_train']} of "
            f"{sl[s]['background_cores']}", "0", sl[s]["background_cores_in_train"] == 0)
    add("3 templating", "distinct query strings / max uses of one", f"{tp['distinct_query_strings']} / "
        f"{tp['query_max_use']}", ">= 2000 / <= 10", tp["distinct_query_strings"] >= 2000 and tp["query_max_use"] <= 10)
    for a, n in tp["evidence_cores_per_attribute"].items():
        add("3 templating", f"distinct evidence cores, {a}", n, ">= 250", n >= 250)
    add("3 templating", f"most frequent 5-gram ('{tp['top_5gram']}'), share of sentences",
        tp["top_5gram_share"], "<= 0.01", tp["top_5gram_share"] <= 0.01)
    for a, v in ln.items():
        add("4 artefacts", f"length-only AUC (total characters), {a}", v["auc"], "0.45-0.55", 0.45 <= v["auc"] <= 0.55)
        add("4 artefacts", f"paired 'M is the longer store' rate, {a}", v["m_longer_rate"], "0.45-0.55",
            0.45 <= v["m_longer_rate"] <= 0.55)
    add("4 artefacts", "M' sentences asserting or negating the target", ce["mprime_sentences_with_counter_evidence"],
        "0", ce["mprime_sentences_with_counter_evidence"] == 0)
    add("4 artefacts", "evidence positions whose M' numbers are a power-of-ten transform of M's",
        nt["scaled_positions_total"], "0", nt["scaled_positions_total"] == 0)
    add("4 artefacts", "sentences not fitting their position label (evidence / other)",
        f"{lab['evidence_label_mismatches']} / {lab['other_label_mismatches']}", "0 / 0",
        lab["evidence_label_mismatches"] == 0 and lab["other_label_mismatches"] == 0)
    add("4 artefacts", "gold entries removed by the co-present rule (pairs)", f"{gold['removed_entries']} "
        f"({gold['pairs']})", "only where b's evidence is read", True)
    add("4 artefacts", "... of which the turn reads no evidence of the co-present attribute",
        gold["removed_without_evidence_in_read"], "0", gold["removed_without_evidence_in_read"] == 0)
    return pd.DataFrame(rows)
