"""The public-corpus transfer track (paper C.3, Table 7, steps T1-T4).

* T1 skeleton: one pair per (LoCoMo speaker history, attribute); each copies the scaffold (template
  policy, I_a), the 32-query trajectory and the gold of a matching PairedMem pair. Pregnancy pairs
  only for speakers whose persona fits
  (:func:`~dpmv_lib.bench.transfer_corpora.pregnancy_persona_fits`).
* T2 memory sourcing: background = the speaker's own first-person LoCoMo sentences, assigned to
  slots by keyword rules (:data:`~dpmv_lib.bench.transfer_evidence.SLOT_KEYWORDS`), minus sentences
  that contradict an attribute the speaker has a pair for
  (:data:`~dpmv_lib.bench.transfer_evidence.CONFLICTS`). Target evidence = first-person corpus
  sentences (real patient questions: iCliniq-style, MeQSum, LiveQA; real posts: Dreaddit, SDCNL,
  CAMS, SAD/LiveJournal; dialogues: ACI-Bench, MTS-Dialog; crowd-written: EmpatheticDialogues,
  SAD/mTurk; machine-generated: GenMedGPT-5k) that pass the T3 rules
  (:func:`~dpmv_lib.bench.transfer_evidence.evidence_problems`) and are on the reviewed allow-list
  (``transfer_review.json``), which also holds each sentence's hand-written a-neutral M' replacement
  and the reason for every rejected candidate. Each sentence records its source kind; the pool puts
  real text first (:data:`KIND_TIER`). Evidence is placed at a set of I_a positions that every
  target-relevant turn reads (:func:`~dpmv_lib.bench.transfer_support.support_positions`), so each
  target-required behaviour is supported by what the turn reads on M; M and M' differ exactly there.
  Least-used sentences are placed first, none in more than MAX_EVIDENCE_REUSE slots.
* T3 validation: :func:`~dpmv_lib.bench.transfer_support.pair_problems` (scaffold, D = evidence
  positions within I_a, target signal on M, no signal/residual/counter-evidence on M', support of
  every gold behaviour) and :func:`~dpmv_lib.bench.transfer_quality.quality_report` (the measured
  figures tests assert on the committed data).
* T4: the frozen protocol (queries, router, reads, scorer, vocabularies, gold) is reused as is.

The track (this module: the build and its files; the steps in ``transfer_corpora``,
``transfer_evidence``, ``transfer_support``, ``transfer_quality``) depends only on the Pair / Policy
/ Query / GoldTurn / MemoryStore interfaces (and the attribute lexicon): any PairedMem build can
serve as the skeleton source. Corpora are read from ``corpora_dir`` (default
:func:`dpmv_lib.common.paths.default_corpora_dir`); missing files raise
:class:`~dpmv_lib.core.errors.CorpusError` naming what is needed and where to get it. Corpus files
are never copied; only the selected sentences enter the generated pairs.
"""
from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import random
import sys
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from .benchmark import Behaviour, Pair, pair_to_json
from .datafiles import dump_json, file_entries, replace_dir_atomically
from ..common.io import write_jsonl
from ..core.errors import CorpusError, StoreError
from ..core.policy import Policy
from ..core.scorer import cue_hits
from ..core.store import MemoryStore
from .transfer_corpora import (ATTRIBUTES, FORMAT_VERSION, KIND_OF_SOURCE, MAX_EVIDENCE_REUSE, MIN_DISTINCT_EVIDENCE,
                               SOURCE_KINDS, TRACK, WHERE, SourceText, check_corpora, read_empathetic, read_finance,
                               read_health, read_locomo, read_medical)
from .transfer_evidence import (Evidence, Review, SLOT_PRIORITY, background_sentences, load_rejections, load_review,
                                select_evidence)
from .transfer_support import views_at, linked_view, pair_problems, support_positions
from .transfer_quality import quality_report


# =============================================================================================
# T1-T4: build
# =============================================================================================
@dataclass(frozen=True)
class TransferBuild:
    seed: int
    policies: Mapping[str, Policy]
    pairs: tuple[Pair, ...]
    behaviours: Mapping[str, Behaviour]
    evidence: Mapping[str, tuple[Evidence, ...]]
    evidence_reasons: Mapping[str, Mapping[str, int]]
    background: Mapping[str, Mapping[str, Any]]
    params: Mapping[str, Any] = field(default_factory=dict)

    def counts(self) -> dict[str, Any]:
        return counts(self)


# preference tiers of source kinds (real text preferred): real, dialogue, crowd, machine
KIND_TIER: Mapping[str, int] = {"real patient question": 0, "real forum post": 0, "role-played dialogue": 1,
                                "annotator-written dialogue": 1, "crowd-written": 2, "machine-generated": 3}


def _kind_tier(source: str) -> int:
    return KIND_TIER.get(KIND_OF_SOURCE.get(source, ""), len(SOURCE_KINDS))


def _interleave(kept: list[Evidence], rng: random.Random) -> list[Evidence]:
    """Use order of the evidence pool: real text first (KIND_TIER), then whole sentences before
    clauses, sources taken in turn so that no single corpus dominates, seeded order within a source."""
    groups: dict[tuple[int, int, str], list[Evidence]] = defaultdict(list)
    for e in kept:
        groups[(_kind_tier(e.source), 0 if e.unit == "sentence" else 1, e.source.split("-")[0])].append(e)
    out: list[Evidence] = []
    for tier_unit in sorted({k[:2] for k in groups}):
        lists = [groups[k] for k in sorted(groups) if k[:2] == tier_unit]
        for lst in lists:
            rng.shuffle(lst)
        for row in itertools.zip_longest(*lists):
            out.extend(e for e in row if e is not None)
    return out


def _real_first(texts: Sequence[SourceText]) -> list[SourceText]:
    """Corpus texts in preference order (stable): of near-duplicates the real one is kept."""
    return sorted(texts, key=lambda t: _kind_tier(t.source))


_SPLIT_ORDER = {"test": 0, "validation": 1, "train": 2}


def skeletons(pairedmem_pairs: Sequence[Pair], attribute: str, policies: Mapping[str, Policy],
              rng: random.Random) -> list[tuple[Pair, tuple[int, ...]]]:
    """T1: PairedMem pairs of ``attribute`` usable as skeletons, with their support positions:
    every target-relevant turn reads I_a. Order: no overlap / co-present attribute first, fewest
    evidence positions, test split first, then seeded."""
    out = []
    for p in pairedmem_pairs:
        if p.attribute != attribute:
            continue
        pos = support_positions(policies[p.policy_id], p, prefer=p.meta.get("evidence_positions", ()))
        if pos:
            out.append((p, pos))
    rng.shuffle(out)
    out.sort(key=lambda x: (bool(x[0].overlap) or bool(x[0].meta.get("co_present")), len(x[1]),
                            _SPLIT_ORDER.get(x[0].split, 3)))
    return out


def _attribute_cues(policies: Mapping[str, Policy], behaviours: Mapping[str, Behaviour]) -> tuple[str, ...]:
    """Cues of every view a target-required behaviour stands for (kept out of the background)."""
    out: dict[str, None] = {}
    for pol in policies.values():
        for b in behaviours.values():
            if b.kind == "target_required":
                v = linked_view(pol, b.id)
                if v is not None:
                    out.update(dict.fromkeys(v.cues))
    return tuple(out)


def _place(pool: Sequence[Evidence], usage: Counter, policy: Policy, base: Pair,
           positions: Sequence[int]) -> list[tuple[int, int]] | None:
    """Pool index per support position: distinct within the pair, used in fewer than
    MAX_EVIDENCE_REUSE slots so far, its M text hits a cue of every view required at that position
    and its M' text none; least used first (then pool order). None if some position has no fitting sentence."""
    placed: list[tuple[int, int]] = []
    for pos in positions:
        views = views_at(policy, base, pos)
        taken = {k for k, _ in placed}
        fit = [k for k, e in enumerate(pool) if k not in taken and usage[k] < MAX_EVIDENCE_REUSE
               and all(cue_hits(v.cues, e.text) for v in views) and not any(cue_hits(v.cues, e.edited) for v in views)]
        if not fit:
            return None
        placed.append((min(fit, key=lambda k: (usage[k], k)), pos))
    return placed


def build_transfer(pairedmem_pairs: Sequence[Pair], policies: Mapping[str, Policy],
                   corpora_dir: str | Path | None = None, seed: int = 0, n_speakers: int | None = None,
                   progress: bool = False, behaviours: Mapping[str, Behaviour] | None = None,
                   review: Mapping[str, Mapping[str, Review]] | None = None,
                   rejected: Mapping[str, Mapping[str, str]] | None = None) -> TransferBuild:
    """T1-T4 (C.3): one pair per (speaker, attribute); pregnancy only for fitting personas.

    ``behaviours`` defaults to the PairedMem catalogue; ``review`` to :func:`load_review` and
    ``rejected`` to :func:`load_rejections` (to none when ``review`` is given)."""
    root = check_corpora(corpora_dir)
    if behaviours is None:
        from .pairedmem_gold import behaviour_catalogue   # the frozen gold catalogue (T4)
        behaviours = behaviour_catalogue()
    if review is None:
        review, rejected = load_review(), load_rejections() if rejected is None else rejected
    rejected = {} if rejected is None else rejected
    speakers = read_locomo(root)
    if n_speakers is not None:
        speakers = speakers[:n_speakers]
    ed, med, health, fin = read_empathetic(root), read_medical(root), read_health(root), read_finance(root)
    sources = {"diabetes": health + med + ed, "pregnancy": health + med + ed, "debt": fin + ed + med,
               "job_loss": fin + ed + health + med}
    evidence: dict[str, tuple[Evidence, ...]] = {}
    reasons: dict[str, dict[str, int]] = {}
    for a in ATTRIBUTES:
        kept, why = select_evidence(_real_first(sources[a]), a, review.get(a, {}), rejected.get(a, {}))
        unknown = sorted({e.source for e in kept if e.source_kind not in SOURCE_KINDS})
        if unknown:
            raise CorpusError(f"{a} evidence from sources of no known kind: {unknown}; add them to KIND_OF_SOURCE")
        kept = _interleave(kept, random.Random(f"transfer:{seed}:evidence:{a}"))
        evidence[a], reasons[a] = tuple(kept), dict(sorted(why.items()))
    speaker_attrs = {sp.speaker_id: [a for a in ATTRIBUTES if a != "pregnancy" or sp.pregnancy_fits]
                     for sp in speakers}
    cues = _attribute_cues(policies, behaviours)
    names = [s.name for s in speakers]
    bg_info: dict[str, dict[str, Any]] = {}
    bg_stores: dict[str, dict[int, str]] = {}
    layout = next(iter(policies.values())).layout
    for sp in speakers:
        by_slot, why = background_sentences(sp, [n for n in names if n != sp.name], speaker_attrs[sp.speaker_id], cues)
        rng = random.Random(f"transfer:{seed}:background:{sp.speaker_id}")
        pools = {g: list(v) for g, v in sorted(by_slot.items())}
        for v in pools.values():
            rng.shuffle(v)
        contents, fallback = {}, 0
        for pos, slot in layout:
            if pools.get(slot):
                contents[pos] = pools[slot].pop()
            else:
                spare = pools.get("unassigned") or max((v for v in pools.values() if v), key=len, default=None)
                if not spare:
                    raise CorpusError(f"speaker {sp.speaker_id} has too few usable background sentences")
                contents[pos] = spare.pop()
                fallback += 1
        bg_stores[sp.speaker_id] = contents
        bg_info[sp.speaker_id] = {"name": sp.name, "conversation": sp.conversation,
                                  "utterances": len(sp.utterances),
                                  "persona": {"she_refs": sp.she_refs, "he_refs": sp.he_refs,
                                              "persona_conflicts": sp.persona_conflicts,
                                              "pregnancy_fits": sp.pregnancy_fits},
                                  "attributes": speaker_attrs[sp.speaker_id],
                                  "sentences_by_slot": {g: len(by_slot.get(g, []))
                                                        for g in (*SLOT_PRIORITY, "unassigned")},
                                  "dropped": dict(sorted((k, v) for k, v in why.items() if k != "kept")),
                                  "kept": why.get("kept", 0), "slot_fallback_positions": fallback}
    pairs: list[Pair] = []
    for a in ATTRIBUTES:
        cands = skeletons(pairedmem_pairs, a, policies, random.Random(f"transfer:{seed}:skeleton:{a}"))
        if not cands:
            raise StoreError(f"no PairedMem pair can serve as a transfer skeleton for {a!r} "
                             "(every target-relevant turn must read a position of I_a)")
        pool = evidence[a]
        usage: Counter = Counter()
        cursor = 0
        for sp in (s for s in speakers if a in speaker_attrs[s.speaker_id]):
            for _ in range(len(cands)):   # the next skeleton whose positions the reviewed pool can fill
                base, positions = cands[cursor % len(cands)]
                cursor += 1
                placed = _place(pool, usage, policies[base.policy_id], base, positions)
                if placed is not None:
                    break
            else:
                raise CorpusError(f"no reviewed {a} evidence fits the support positions of any skeleton (views' cues); "
                                  f"the allow-list holds {len(pool)} usable {a} sentences")
            pol = policies[base.policy_id]
            usage.update(k for k, _ in placed)
            m_c = dict(bg_stores[sp.speaker_id])
            mp_c = dict(m_c)
            for k, pos in placed:
                m_c[pos], mp_c[pos] = pool[k].text, pool[k].edited
            pid = f"tr-{sp.speaker_id}-{a}"
            m = MemoryStore.from_policy(pol, m_c, name=f"{pid}/M")
            mp = MemoryStore.from_policy(pol, mp_c, name=f"{pid}/M'")
            meta = {"matched_pair": base.pair_id, "speaker": sp.speaker_id, "speaker_name": sp.name,
                    "persona": dict(bg_info[sp.speaker_id]["persona"]),
                    "co_present": [], "group": sorted(pol.attribute(a).group),
                    "evidence_positions": list(positions), "overlap_positions": [], "nontarget_positions": {},
                    "evidence": [{"position": pos, "source": pool[k].source, "source_kind": pool[k].source_kind,
                                  "ref": pool[k].ref, "unit": pool[k].unit, "M": pool[k].text,
                                  "M_prime": pool[k].edited,
                                  "review": review[a][pool[k].text].reason} for k, pos in placed],
                    "seed": seed}
            pair = Pair(pid, TRACK, a, base.template, base.policy_id, base.overlap, "test", m, mp, base.turns, meta)
            problems = pair_problems(pol, pair, behaviours)
            if problems:
                raise StoreError(f"T3 validation of {pid} fails: {problems[:3]}")
            pairs.append(pair)
    params = {"seed": seed, "n_speakers": len(speakers), "min_distinct_evidence": MIN_DISTINCT_EVIDENCE,
              "max_evidence_reuse": MAX_EVIDENCE_REUSE,
              "review_sha256": hashlib.sha256(json.dumps(
                  {a: sorted((r.text, r.m_prime) for r in v.values()) for a, v in sorted(review.items())},
                  sort_keys=True).encode()).hexdigest(),
              "rejections_sha256": hashlib.sha256(json.dumps(
                  {a: sorted(v.items()) for a, v in sorted(rejected.items())}, sort_keys=True).encode()).hexdigest()}
    return TransferBuild(seed, policies, tuple(pairs), dict(behaviours), evidence, reasons, bg_info, params)


def counts(build: TransferBuild) -> dict[str, Any]:
    """Counts for the T-steps table (measured)."""
    used = Counter((e["ref"], e["M"]) for p in build.pairs for e in p.meta["evidence"])
    by_src: dict[str, dict[str, int]] = {}
    for a, evs in build.evidence.items():
        by_src[a] = dict(sorted(Counter(e.source for e in evs).items()))
    used_kind = {a: Counter(k for k, _ in {(e["source_kind"], e["M"]) for p in build.pairs if p.attribute == a
                                           for e in p.meta["evidence"]}) for a in ATTRIBUTES}
    return {
        "pairs": len(build.pairs),
        "speakers": len({p.meta["speaker"] for p in build.pairs}),
        "pairs_per_attribute": dict(sorted(Counter(p.attribute for p in build.pairs).items())),
        "paired_query_turns": sum(len(p.turns) for p in build.pairs),
        "matched_pairedmem_pairs": len({p.meta["matched_pair"] for p in build.pairs}),
        "evidence_positions_per_pair": dict(sorted(Counter(len(p.meta["evidence_positions"])
                                                           for p in build.pairs).items())),
        "evidence_candidates_kept": {a: len(v) for a, v in build.evidence.items()},
        "evidence_kept_by_source": by_src,
        "evidence_kept_by_kind": {a: dict(sorted(Counter(e.source_kind for e in evs).items()))
                                  for a, evs in build.evidence.items()},
        "evidence_used_by_kind": {a: dict(sorted(c.items())) for a, c in used_kind.items()},
        "evidence_rejections": {a: {k: v for k, v in r.items() if k != "kept"}
                                for a, r in build.evidence_reasons.items()},
        "evidence_sentences_used": {a: len({e["M"] for p in build.pairs if p.attribute == a
                                            for e in p.meta["evidence"]})
                                    for a in ATTRIBUTES},
        "max_reuse_of_one_evidence_sentence": max(used.values()) if used else 0,
        "pregnancy_speakers": sorted(k for k, v in build.background.items() if v["persona"]["pregnancy_fits"]),
        "background_sentences_kept": sum(v["kept"] for v in build.background.values()),
        "background_by_slot": {g: sum(v["sentences_by_slot"][g] for v in build.background.values())
                               for g in (*SLOT_PRIORITY, "unassigned")},
        "background_dropped_for_conflicts": {a: sum(v["dropped"].get(f"conflicts_{a}", 0)
                                                    for v in build.background.values())
                                             for a in ATTRIBUTES},
        "background_slot_fallback_positions": sum(v["slot_fallback_positions"] for v in build.background.values()),
    }


# ---- writing (atomic) ----------------------------------------------------------------------------
def write_transfer(build: TransferBuild, data_dir: str | Path = "data") -> Path:
    """Freeze the transfer track under ``data_dir/transfer`` (JSON Lines + manifest with sha256,
    counts and the quality report). The policies are the PairedMem ones (``data_dir/policy``)."""
    target = Path(data_dir) / TRACK

    def fill(d: Path) -> None:
        rows = {
            "pairs.jsonl": write_jsonl(d / "pairs.jsonl", (pair_to_json(p) for p in build.pairs)),
            "evidence.jsonl": write_jsonl(d / "evidence.jsonl",
                                          (asdict(e) for a in ATTRIBUTES for e in build.evidence[a])),
            "background.jsonl": write_jsonl(d / "background.jsonl",
                                            ({"speaker": k, **v} for k, v in build.background.items())),
            "behaviours.jsonl": write_jsonl(d / "behaviours.jsonl", (asdict(b) for b in build.behaviours.values())),
        }
        manifest = {"format_version": FORMAT_VERSION, "track": TRACK, "generator": "dpmv_lib.bench.transfer",
                    "params": dict(build.params), "counts": counts(build),
                    "quality": quality_report(build),
                    "policies": sorted({p.policy_id for p in build.pairs}),
                    "corpora": {k: v for k, v in WHERE.items()},
                    "files": file_entries(d, sorted(rows), rows)}
        dump_json(d / "manifest.json", manifest)

    replace_dir_atomically(target, fill)
    return target


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dpmv_lib.bench.transfer",
                                 description="Build the transfer track (C.3).")
    ap.add_argument("--build", action="store_true")
    ap.add_argument("--report", action="store_true", help="print the quality report of the committed track")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data-dir", default="data")
    ap.add_argument("--corpora-dir", default=None)
    args = ap.parse_args(argv)
    from .datasets import load_benchmark
    from ..common.paths import resolve
    if args.report:
        print(json.dumps(quality_report(load_benchmark("transfer", resolve(args.data_dir))), indent=1))
        return 0
    if not args.build:
        ap.print_help()
        return 0
    t0 = time.perf_counter()
    bench = load_benchmark("pairedmem", resolve(args.data_dir))
    try:
        build = build_transfer(bench.pairs, bench.policies, args.corpora_dir, args.seed, behaviours=bench.behaviours)
    except CorpusError as exc:
        print(f"transfer track skipped: {exc}", file=sys.stderr)
        return 2
    out = write_transfer(build, resolve(args.data_dir))
    print(f"transfer: {len(build.pairs)} pairs -> {out} ({time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
