"""The evaluation data of notebook 01: build both tracks, Tables 5-7 style counts beside the paper's
figures, example pairs side by side, and the figure. All numbers are measured from the builds.

The ``*_step`` functions are notebook 01's steps: :func:`build_step` builds and freezes both tracks
and returns the build in ``result["build"]``; the others take the notebook's
:class:`~dpmv_lib.experiments.session.Session` and that :class:`Built`, write their tables and
return a :class:`~dpmv_lib.experiments.result.Result` whose finding is computed from the numbers.
"""
from __future__ import annotations

import html
import json
import numbers
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Collection, Mapping, Sequence

import pandas as pd

from .common import reference_dir
from .plots import save_figure
from ..bench import lexicon, transfer_quality
from ..bench.benchmark import Pair
from ..bench.pairedmem_gold import trajectory_problems
from ..bench.phrasebank import OVERLAP_TEMPLATES, TEMPLATES
from ..bench.transfer_corpora import SOURCE_KINDS
from ..core.errors import CorpusError
from .result import Result

if TYPE_CHECKING:
    from .session import Session

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
    """:func:`dpmv_lib.bench.transfer_quality.quality_table` of ``report`` as a frame: figure, its value
    in this build, the goal and whether it is met."""
    return pd.DataFrame(transfer_quality.quality_table(report))[["figure", "measured", "goal", "met"]]


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
    """The benchmark-quality goals 1-4 (charge structure, split leakage, templating, artefacts)
    measured on ``pairs`` (:mod:`dpmv_lib.bench.benchmark_quality`): one row per figure with ours,
    the paper's value where it has one (Table 4's DP bound), the goal, and whether ours meets it."""
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


# ---- notebook 01 steps ----------------------------------------------------------------------------
def _num(x: Any) -> Any:
    """A whole number as an integer (320, not 320.0), another float to 4 decimals; other values as they are."""
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        return x
    f = float(x)
    return int(f) if f.is_integer() else f"{round(f, 4):g}"


def _blank(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with missing values as empty cells (a figure the paper does not give is blank, not
    "nan") and whole numbers as integers."""
    return pd.DataFrame({c: pd.Series([_num(v) if pd.notna(v) else "" for v in df[c]], index=df.index, dtype=object)
                         for c in df.columns})


def _markdown(df: pd.DataFrame) -> str:
    """A Markdown table of ``df`` with blank missing values and ``|`` escaped inside cells."""
    return _blank(df).astype(str).replace(r"\|", r"\\|", regex=True).to_markdown(index=False)


@dataclass(frozen=True)
class Built:
    """Both tracks as built (:class:`DataBuild`) and PairedMem reloaded through the checksummed loader."""

    db: DataBuild
    bench: Any


def policy_step(run: "Session") -> Result:
    """The fixed public policy: the protected groups of every template and the slots."""
    from ..bench import pairedmem_specs

    with run.timer("policy"):
        p0 = next(iter(pairedmem_specs.template_policies().values()))
        groups, slots = template_groups(p0), slot_table(p0)
    caps = sorted({str(c) for c in p0.caps.values()})
    return Result("The fixed public policy", tables={"protected groups I_a per template": groups,
                                                     "slots, views and intents": slots},
                  finding=f"{len(p0.positions)} positions in {len(slots)} slots, {len(groups)} templates "
                          f"({int(groups['overlap'].sum())} with overlapping groups); every cap $B_a$ = "
                          f"{', '.join(caps)} and the scorer's sensitivity is $\\Delta u$ = {p0.sensitivity}.")


def build_step(run: "Session") -> Result:
    """Build and freeze both tracks under the run's data directory (:func:`build_all`) and reload
    PairedMem through the checksummed loader. The committed benchmark is always built in full; a
    throwaway data directory builds a transfer track reduced to the profile's pair count.
    ``result["build"]`` is the :class:`Built` of the later steps."""
    from ..bench.datasets import load_benchmark
    from ..common.paths import project_root

    data = run.data_dir
    committed = data.resolve() == (project_root() / "data").resolve()
    tp = run.profile.transfer_pairs
    speakers = None if (committed or tp is None) else max(1, tp // 4)
    with run.timer("build both tracks"):
        db = build_all(data, seed=run.cfg.seed, corpora_dir=run.params.get("corpora_dir"),
                       transfer_speakers=speakers, progress=run.interactive)
        bench = load_benchmark("pairedmem", data)
    def where(track: str) -> str:
        p = Path(db.paths[track])
        return str(p.relative_to(project_root())) if p.is_relative_to(project_root()) else str(p)

    tracks = pd.DataFrame([{"track": "PairedMem", "pairs": len(bench.pairs), "directory": where("pairedmem")}]
                          + ([{"track": "transfer", "pairs": len(db.transfer.pairs), "directory": where("transfer")}]
                             if db.transfer is not None else []))
    notes = [f"**Transfer track skipped.** {db.transfer_error}"] if db.transfer_error else []
    return Result("Both tracks built and frozen", tables={"tracks": tracks}, notes=notes,
                  finding=f"Built {len(db.pairedmem.pairs)} PairedMem pairs"
                          + (f" and {len(db.transfer.pairs)} transfer pairs" if db.transfer is not None else "")
                          + f"; the checksummed loader reads back {len(bench.pairs)} PairedMem pairs "
                            f"({len(bench.manifest['files'])} files).",
                  data={"build": Built(db, bench)})


def selection_step(run: "Session", built: Built) -> Result:
    """S3: the candidates that failed validation and the selected pairs by attribute and template."""
    cands = built.db.pairedmem.candidates
    fails = failed_candidates(cands)
    c = built.db.pairedmem.counts()
    tables = {"selected pairs by attribute and template": selection_crosstab(built.db.pairedmem.pairs)}
    if len(fails):
        tables = {"candidates that failed validation": fails, **tables}
    return Result("S3: validation and selection", tables=tables,
                  finding=f"{c['passed_validation']} of {len(cands)} candidates pass S3 "
                          f"({len(fails)} fail); {c['selected_pairs']} are selected with an overlap share of "
                          f"{c['overlap_share']:.2f} and {c['reserves']} kept as reserves.")


def _matches(df: pd.DataFrame) -> tuple[int, int, list[str]]:
    known = df[df["difference"].notna()]
    off = known[known["difference"] != 0]
    return (len(known) - len(off), len(known),
            [f"{r.quantity} {_num(r.ours)} against {_num(r.paper)}" for r in off.itertuples()])


def table6_step(run: "Session", built: Built) -> Result:
    """Table 6: PairedMem construction counts beside the paper's; writes ``table6_pairedmem_construction``."""
    t6 = table6(built.db, paper_figures())
    run.write_table("table6_pairedmem_construction", t6, _markdown(t6))
    same, known, off = _matches(t6)
    return Result("Table 6: PairedMem construction", tables={"ours beside the paper": _blank(t6)},
                  finding=f"{same} of {known} counts the paper gives match it exactly"
                          + (f"; the others: {'; '.join(off)}." if off else "."))


def example_pair_step(run: "Session", built: Built) -> Result:
    """An overlap pair side by side (the positions where M and M' differ, and the co-present
    attribute's evidence); the whole pair is written to ``01_example_pair``."""
    ex = next(p for p in built.bench.pairs if p.overlap)
    df = pair_side_by_side(ex)
    run.write_table("01_example_pair", df)
    diff = set(df.loc[df["differs"], "position"])
    group = set(ex.meta["group"])
    shown = df[df["differs"] | (df["role"] != "")]
    return Result(f"Pair {ex.pair_id}: {ex.attribute}, template {ex.template}, split {ex.split}, "
                  f"co-present {', '.join(ex.meta['co_present']) or 'none'}",
                  tables={"the positions in I_a or holding evidence (all 28: 01_example_pair)": shown},
                  finding=f"M and M' differ at positions {sorted(diff)}, "
                          f"{'exactly' if diff == group else 'NOT exactly'} the protected group $I_a$; "
                          f"{int((~shown['differs']).sum())} evidence position(s) of the co-present attribute "
                          f"are the same in both stores.")


def trajectory_step(run: "Session", built: Built) -> Result:
    """S4: the first 16-turn block of the example pair by query type, and the checks on every
    query and trajectory; the whole trajectory is written to ``01_example_trajectory``."""
    bench = built.bench
    ex = next(p for p in bench.pairs if p.overlap)
    traj = trajectory_table(ex, bench.behaviours)
    run.write_table("01_example_trajectory", traj)
    first = traj[traj["block"] == traj["block"].iloc[0]]
    by_type = first.groupby("type", sort=False).agg(turns=("turn", "size"),
                                                    slots=("slot", lambda s: ", ".join(sorted(set(s)))),
                                                    example=("query", "first"),
                                                    target_required=("target-required on M", "first"))
    with run.timer("trajectory checks"):
        checks = trajectory_checks(bench.pairs, bench.policy, bench.behaviours)
    return Result(f"S4: the first block of {ex.pair_id}'s trajectory", tables={"turns by query type": by_type,
                  "checks on every pair": pd.DataFrame([checks])},
                  finding="The block has " + ", ".join(f"{n} {t}" for t, n in by_type["turns"].items())
                          + f" turns; of {checks['queries']} queries {checks['naming_attribute']} name a protected "
                            f"attribute and the trajectories have {checks['trajectory_problems']} problems.")


def quality_step(run: "Session", built: Built) -> Result:
    """Benchmark quality (charge structure, split leakage, templating, artefacts): the goals per
    group and any figure that misses its goal; the full table is written to ``01_benchmark_quality``."""
    from ..bench import benchmark_quality as bq

    bench = built.bench
    with run.timer("benchmark quality"):
        qt = quality_table(bench.pairs, bench.policy)
        top = bq.ngram_shares(bench.pairs, k=5)
    run.write_table("01_benchmark_quality", qt.astype(str), qt.astype(str).to_markdown(index=False))
    per_goal = qt.groupby("goal").agg(figures=("quantity", "size"), met=("meets goal", "sum"))
    missed = qt[~qt["meets goal"]]
    tables = {"goals met per group (all figures: 01_benchmark_quality)": per_goal}
    if len(missed):
        tables["figures that miss their goal"] = _blank(missed)
    return Result("Benchmark quality", tables=tables,
                  notes=["Most frequent 5-grams (share of sentences): "
                         + "; ".join(f"'{g}' {v:.4f}" for g, v in top)],
                  finding=f"{int(qt['meets goal'].sum())} of {len(qt)} figures meet their goal"
                          + (f"; missed: {'; '.join(missed['quantity'])}." if len(missed) else "."))


def table5_step(run: "Session", built: Built) -> Result:
    """Table 5: the two tracks beside the paper, and the structure figure."""
    t5 = table5(built.db, paper_figures())
    run.write_table("table5_tracks", t5, _markdown(t5))
    path = run.figure_path("01_pairedmem_structure")
    with run.timer("structure figure"):
        structure_figure(built.bench.pairs, path)
        import matplotlib.pyplot as plt

        plt.close("all")
    same, known, off = _matches(t5)
    return Result("Table 5: the two tracks", tables={"ours beside the paper": _blank(t5)},
                  figures={"group sizes, overlap and query types": path},
                  notes=["Left: $|I_a|$ per selected pair; middle: the overlap and co-presence share per "
                         "attribute (dashed: the paper's 25%); right: the query types per pair and block."],
                  finding=f"{same} of {known} figures match the paper"
                          + (f"; the others: {'; '.join(off)} (the transfer track keeps pregnancy pairs only for "
                             "speakers whose persona fits)." if off else "."))


def transfer_quality_step(run: "Session", built: Built) -> Result:
    """The transfer track's quality goals, its evidence by source kind and the edit distance of each
    M' replacement; writes ``01_transfer_quality``."""
    tr = built.db.transfer
    if tr is None:
        return Result("Transfer track quality", finding=f"The transfer track was skipped: {built.db.transfer_error}")
    rep = transfer_quality.quality_report(tr)
    tq = transfer_quality_table(rep)
    run.write_table("01_transfer_quality", tq.astype(str), tq.astype(str).to_markdown(index=False))
    missed = list(tq.loc[~tq["met"].astype(bool), "figure"])
    return Result("Transfer track quality",
                  tables={"goals": tq, "distinct evidence by source kind": evidence_kind_table(rep),
                          "words changed in M' (edit distance)": edit_distance_table(rep)},
                  finding=f"{len(tq) - len(missed)} of {len(tq)} quality goals are met"
                          + (f"; missed: {', '.join(missed)}." if missed else "."))


def table7_step(run: "Session", built: Built) -> Result:
    """Table 7: transfer evidence per attribute, the background histories (summarised; written in
    full to ``table7_transfer_background``) and evidence examples."""
    db = built.db
    t7 = table7(db)
    run.write_table("table7_transfer_evidence", t7.astype(str), t7.astype(str).to_markdown(index=False))
    if db.transfer is None:
        return Result("Table 7: transfer evidence", tables={"skipped": t7},
                      finding=f"The transfer track was skipped: {db.transfer_error}")
    bg = background_table(db)
    run.write_table("table7_transfer_background", bg, bg.astype(str).to_markdown(index=False))
    tc = db.transfer.counts()
    counts = t7[["attribute", "evidence_kept", "used_in_pairs", "pairs"]].assign(
        rejected=[sum(d.values()) for d in t7["rejected_by_rule"]])
    bg_sum = bg.drop(columns=["speaker"]).agg(["min", "median", "max"]).T.astype(int)
    return Result("Table 7: transfer evidence and background",
                  tables={"evidence per attribute (sources and rejections by rule: table7_transfer_evidence)": counts,
                          f"background of the {len(bg)} speakers, min / median / max (table7_transfer_background)":
                              bg_sum,
                          "evidence examples": evidence_examples(db.transfer, per_attribute=2)},
                  finding=f"{tc['pairs']} transfer pairs copy {tc['matched_pairedmem_pairs']} PairedMem pairs; no "
                          f"evidence sentence is used more than {tc['max_reuse_of_one_evidence_sentence']} times; "
                          f"{tc['background_slot_fallback_positions']} background positions fall back to a "
                          f"sentence of another slot.")


def transfer_pair_step(run: "Session", built: Built) -> Result:
    """The first transfer pair side by side (the positions where M and M' differ)."""
    tr = built.db.transfer
    if tr is None:
        return Result("A transfer pair", finding=f"The transfer track was skipped: {built.db.transfer_error}")
    tp = tr.pairs[0]
    df = pair_side_by_side(tp)
    diff = set(df.loc[df["differs"], "position"])
    return Result(f"Transfer pair {tp.pair_id} (copies {tp.meta['matched_pair']})",
                  tables={"the positions where M and M' differ": df[df["differs"]]},
                  finding=f"M and M' differ at {len(diff)} positions, "
                          f"{'all' if diff <= set(tp.meta['group']) else 'NOT all'} inside $I_a$.")


def manifest_step(run: "Session") -> Result:
    """The frozen files with their checksums (the loader verifies them before use)."""
    frames = manifest_tables(run.data_dir, ("pairedmem", "transfer"))
    files = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return Result("What was frozen", tables={"files and checksums": files},
                  finding=f"{len(files)} files in {len(frames)} tracks are frozen with their sha256; "
                          "`dpmv_lib.bench.datasets.load_benchmark` verifies them before every use.")
