"""PairedMem: the controlled synthetic track (paper C.2, Table 6, steps S1-S4).

* S1 :func:`~dpmv_lib.bench.pairedmem_specs.design_specs` - 384 candidate pair specifications (96
  per attribute) from a seed; each fixes its split (train/validation/test,
  :func:`~dpmv_lib.bench.pairedmem_specs.candidate_splits`), the template (positions, slots, groups
  I_a), the per-position plan (topic phrase, change verb, the attribute reason on M and a
  length-matched a-neutral reason on M', background facts, co-present evidence of other attributes)
  and the memory style; 25% use templates whose groups overlap. Every part is drawn from the spec's
  split part of the phrase lists (:mod:`dpmv_lib.bench.phrasebank.compose`), so the splits share no
  evidence or background material.
* S2 :func:`~dpmv_lib.bench.pairedmem_realise.realise` - the offline compositional realiser turns a
  spec into the two stores M and M', deterministic per seed. It simulates the writer errors an LLM
  writer makes (a leaked target clause, a drifted background sentence, a dropped non-target clause,
  a missing evidence clause) at a small seeded rate ``defect_rate`` so that S3 is a real filter.
  Optional LLM wording: :func:`dpmv_lib.generate.writer.build_with_writer` rewrites through any
  responder backend (:func:`~dpmv_lib.generate.writer.make_writer`,
  :func:`~dpmv_lib.bench.pairedmem_realise.llm_rewrite`) and code-validates every rewritten position
  (:func:`~dpmv_lib.bench.pairedmem_realise.validated_rewrite`).
* S3 :func:`~dpmv_lib.bench.pairedmem_realise.validate_pair` - code validation (same scaffold, D
  subset of I_a, target evidence in M and absent from M', non-target evidence preserved, slot
  compatibility, no new evidence, unique stores; ``strict``: no counter-evidence in M', labels fit);
  :func:`~dpmv_lib.bench.pairedmem_realise.select` picks the benchmark by fixed attribute x template
  quotas (which fixes the overlap share) and 60/20/20 split quotas, and keeps the other passing
  candidates as reserves.
* S4 :func:`~dpmv_lib.bench.pairedmem_gold.build_trajectory` - one 32-query trajectory per pair (two
  disjoint 16-query blocks of 8 target-relevant, 4 same-domain neutral, 4 distractor queries;
  neutral queries read no position of I_a, so only the 8 target queries of a block charge the
  target) with composed query strings, and deterministic gold behaviours per turn from the policy
  (:func:`~dpmv_lib.bench.pairedmem_gold.gold_for_turn`).

:func:`build_pairedmem` runs S1-S4, :func:`write_pairedmem` freezes the track under ``data/`` (JSON
Lines + ``manifest.json`` with sha256 per file), ``python -m dpmv_lib.bench.pairedmem --build`` does
both (an LLM realiser: ``python -m dpmv_lib.generate.writer``).
:mod:`dpmv_lib.bench.benchmark_quality` audits the result (``data/README.md``).
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from .benchmark import Behaviour, Pair, pair_to_json
from .datafiles import dump_json, file_entries, replace_dir_atomically
from ..common.io import write_jsonl
from ..core.errors import ParameterError, StoreError
from .phrasebank import SLOTS, TEMPLATES, gold_rules_dict
from ..core.policy import Policy
from ..core.store import MemoryStore, differing_positions
from .pairedmem_specs import (DEFAULT_DEFECT_RATE, FORMAT_VERSION, PairSpec, TRACK, design_specs,
                              overlap_partners, template_policies)
from .pairedmem_realise import Candidate, realise, select, validate_candidates, validated_rewrite
from .pairedmem_gold import behaviour_catalogue, build_trajectory, trajectory_problems


# =============================================================================================
# the whole build
# =============================================================================================
@dataclass(frozen=True)
class PairedMemBuild:
    seed: int
    params: Mapping[str, Any]
    policies: Mapping[str, Policy]
    specs: tuple[PairSpec, ...]
    candidates: tuple[Candidate, ...]
    pairs: tuple[Pair, ...]
    reserves: tuple[Pair, ...]
    behaviours: Mapping[str, Behaviour]
    notes: Mapping[str, str] = field(default_factory=dict)

    def counts(self) -> dict[str, Any]:
        return counts(self)


def _to_pair(c: Candidate, policies: Mapping[str, Policy], seed: int) -> Pair:
    spec, r = c.spec, c.realisation
    pol = policies[spec.policy_id]
    m = MemoryStore.from_policy(pol, r.m, name=f"{spec.spec_id}/M")
    mp = MemoryStore.from_policy(pol, r.m_prime, name=f"{spec.spec_id}/M'")
    rng = random.Random(f"pairedmem:{seed}:s4:{spec.spec_id}")
    turns = build_trajectory(pol, spec.attribute, spec.co_present, rng,
                             nontarget_positions=spec.nontarget_positions())
    meta = {"spec_id": spec.spec_id, "co_present": list(spec.co_present), "style": spec.style,
            "group": list(spec.group), "evidence_positions": list(spec.evidence_positions),
            "overlap_positions": sorted(overlap_partners(spec.template, spec.attribute)),
            "nontarget_positions": {str(k): v for k, v in sorted(spec.nontarget_positions().items())},
            "differing_positions": sorted(differing_positions(m, mp)), "seed": seed}
    return Pair(spec.spec_id, TRACK, spec.attribute, spec.template, spec.policy_id, spec.overlap, spec.split,
                m, mp, turns, meta)


def build_pairedmem(seed: int = 0, n_candidates_per_attribute: int = 96, n_selected_per_attribute: int = 80,
                    defect_rate: float = DEFAULT_DEFECT_RATE, cap: str = "2",
                    progress: bool = False, realiser: str = "template",
                    writer: Callable[[list[str]], list[str]] | None = None) -> PairedMemBuild:
    """Run S1-S4 (C.2). Paper scale: 384 candidates, 320 selected; smaller numbers give a reduced
    build with the same rules (tests, smoke profile). ``realiser``: ``"template"`` (default, offline
    and deterministic) or the label of ``writer``, a generate callable that rewrites the template
    wording, validated per position by :func:`~dpmv_lib.bench.pairedmem_realise.validated_rewrite`
    (an LLM writer over a responder: :func:`dpmv_lib.generate.writer.build_with_writer`)."""
    if n_selected_per_attribute > n_candidates_per_attribute:
        raise ParameterError("cannot select more pairs than there are candidates per attribute")
    if writer is None and realiser != "template":
        raise ParameterError(f"realiser {realiser!r} needs its writer: use dpmv_lib.generate.writer.build_with_writer "
                             f"(or pass writer=); without one the realiser is 'template'")
    policies = template_policies(cap)
    specs = design_specs(seed, n_candidates_per_attribute, n_selected_per_attribute=n_selected_per_attribute)
    it: Iterable[PairSpec] = specs
    if progress:
        from tqdm.auto import tqdm
        it = tqdm(specs, desc="S2 realise", leave=False)
    realisations = [realise(s, seed, defect_rate) for s in it]
    rejected_total = 0
    if writer is not None:
        out = []
        for s, r in zip(specs, realisations):
            r2, rejected = validated_rewrite(s, r, writer)
            rejected_total += len(rejected)
            out.append(r2)
        realisations = out
    candidates = validate_candidates(specs, realisations, policies)
    selected, reserves, notes = select(candidates, n_selected_per_attribute, seed)
    behaviours = behaviour_catalogue()
    pairs = tuple(_to_pair(c, policies, seed) for c in selected)
    res = tuple(_to_pair(c, policies, seed) for c in reserves)
    for p in (*pairs, *res):
        problems = trajectory_problems(policies[p.policy_id], p, behaviours)
        if problems:
            raise StoreError(f"S4 trajectory of {p.pair_id} fails: {problems[:3]}")
    params = {"seed": seed, "n_candidates_per_attribute": n_candidates_per_attribute,
              "n_selected_per_attribute": n_selected_per_attribute, "defect_rate": defect_rate, "cap": cap,
              "realiser": realiser if writer is None or realiser != "template" else "custom writer"}
    if writer is not None:
        notes = {**notes, "llm_rewrite_rejected_positions": str(rejected_total)}
    return PairedMemBuild(seed, params, policies, tuple(specs), tuple(candidates), pairs, res, behaviours, notes)


def counts(build: PairedMemBuild) -> dict[str, Any]:
    """Table 5/6 counts of a build (measured, never typed in)."""
    cands = build.candidates
    passed = [c for c in cands if c.passed]
    pairs = build.pairs
    sizes = Counter(len(TEMPLATES[p.template][p.attribute]) for p in pairs)
    qtypes = Counter(t.query.qtype for p in pairs for t in p.turns)
    all_sentences = {s for p in (*pairs, *build.reserves) for st in (p.m, p.m_prime) for s in st.contents.values()}
    ev_sentences = {p.m.contents[i] for p in pairs for i in p.meta["evidence_positions"]}
    return {
        "candidate_specs": len(cands),
        "candidates_per_attribute": dict(sorted(Counter(c.spec.attribute for c in cands).items())),
        "passed_validation": len(passed),
        "failed_validation": len(cands) - len(passed),
        "injected_writer_errors": sum(1 for c in cands if c.realisation.defect),
        "failures_by_kind": dict(sorted(Counter(c.realisation.defect or "genuine" for c in cands
                                                if not c.passed).items())),
        "selected_pairs": len(pairs),
        "reserves": len(build.reserves),
        "positions_per_store": len(next(iter(build.policies.values())).positions),
        "slots": len(SLOTS),
        "templates": len(TEMPLATES),
        "overlap_share": round(sum(p.overlap for p in pairs) / max(1, len(pairs)), 4),
        "candidate_overlap_share": round(sum(c.spec.overlap for c in cands) / max(1, len(cands)), 4),
        "group_size_min": min(sizes) if sizes else 0,
        "group_size_max": max(sizes) if sizes else 0,
        "group_sizes": {str(k): v for k, v in sorted(sizes.items())},
        "pairs_per_attribute": dict(sorted(Counter(p.attribute for p in pairs).items())),
        "pairs_per_split": dict(sorted(Counter(p.split for p in pairs).items())),
        "pairs_with_co_present": sum(1 for p in pairs if p.meta["co_present"]),
        "queries_per_pair": len(pairs[0].turns) if pairs else 0,
        "paired_query_turns": sum(len(p.turns) for p in pairs),
        "queries_by_type": dict(sorted(qtypes.items())),
        "distinct_query_texts": len({t.query.text for p in pairs for t in p.turns}),
        "behaviours": len(build.behaviours),
        "behaviours_by_kind": dict(sorted(Counter(b.kind for b in build.behaviours.values()).items())),
        "distinct_memory_sentences": len(all_sentences),
        "distinct_evidence_sentences": len(ev_sentences),
        "distinct_stores_M": len({json.dumps(sorted(p.m.contents.items())) for p in pairs}),
    }


# =============================================================================================
# writing (atomic) and manifests
# =============================================================================================
def write_policies(policies: Mapping[str, Policy], data_dir: str | Path) -> Path:
    """data/policy/: one Policy JSON per template, the gold rules, and a checksum manifest."""
    target = Path(data_dir) / "policy"

    def fill(d: Path) -> None:
        names = []
        for pid in sorted(policies):
            dump_json(d / f"{pid}.json", policies[pid].to_dict())
            names.append(f"{pid}.json")
        dump_json(d / "gold_rules.json", gold_rules_dict())
        names.append("gold_rules.json")
        dump_json(d / "manifest.json", {"format_version": FORMAT_VERSION, "policies": sorted(policies),
                                         "files": file_entries(d, names, {})})

    replace_dir_atomically(target, fill)
    return target


def behaviour_rows(behaviours: Mapping[str, Behaviour]) -> list[dict[str, Any]]:
    return [asdict(b) for b in behaviours.values()]


def write_pairedmem(build: PairedMemBuild, data_dir: str | Path = "data") -> Path:
    """Freeze a build under ``data_dir``: policy/ and pairedmem/ (pairs, reserves, specs with their
    validation results, behaviours, manifest with counts and sha256 per file)."""
    data_dir = Path(data_dir)
    write_policies(build.policies, data_dir)
    target = data_dir / TRACK

    def fill(d: Path) -> None:
        rows = {
            "pairs.jsonl": write_jsonl(d / "pairs.jsonl", (pair_to_json(p) for p in build.pairs)),
            "reserves.jsonl": write_jsonl(d / "reserves.jsonl", (pair_to_json(p) for p in build.reserves)),
            "specs.jsonl": write_jsonl(d / "specs.jsonl", (
                {**c.spec.to_json(), "passed": c.passed, "problems": list(c.problems),
                 "injected_defect": c.realisation.defect,
                 "status": ("selected" if c.spec.spec_id in {p.pair_id for p in build.pairs} else
                            "reserve" if c.passed else "failed")} for c in build.candidates)),
            "behaviours.jsonl": write_jsonl(d / "behaviours.jsonl", behaviour_rows(build.behaviours)),
        }
        manifest = {"format_version": FORMAT_VERSION, "track": TRACK, "generator": "dpmv_lib.bench.pairedmem",
                    "params": dict(build.params), "counts": counts(build),
                    "selection_notes": dict(build.notes), "policies": sorted(build.policies),
                    "files": file_entries(d, sorted(rows), rows)}
        dump_json(d / "manifest.json", manifest)

    replace_dir_atomically(target, fill)
    return target


def main(argv: Sequence[str] | None = None,
         make_writer: Callable[[str, Mapping[str, Policy]], Callable[[list[str]], list[str]] | None] | None = None,
         prog: str = "python -m dpmv_lib.bench.pairedmem") -> int:
    """The build CLI. ``make_writer`` resolves a ``--realiser`` other than ``template``
    (:func:`dpmv_lib.generate.writer.main` passes it; bench itself builds only the template wording)."""
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
    ap.add_argument("--build", action="store_true", help="build and write the PairedMem track")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data-dir", default="data")
    ap.add_argument("--candidates", type=int, default=96, help="candidate specs per attribute")
    ap.add_argument("--selected", type=int, default=80, help="selected pairs per attribute")
    ap.add_argument("--defect-rate", type=float, default=DEFAULT_DEFECT_RATE)
    ap.add_argument("--realiser", default="template",
                    help="template (offline, deterministic) or responder:<responder spec> (LLM wording, validated)")
    args = ap.parse_args(argv)
    if not args.build:
        ap.print_help()
        return 0
    from ..common.paths import resolve
    t0 = time.perf_counter()
    writer = None
    if args.realiser != "template":
        if make_writer is None:
            ap.error(f"--realiser {args.realiser!r}: an LLM realiser runs through python -m dpmv_lib.generate.writer")
        writer = make_writer(args.realiser, template_policies())
    build = build_pairedmem(args.seed, args.candidates, args.selected, args.defect_rate, progress=True,
                            realiser=args.realiser, writer=writer)
    out = write_pairedmem(build, resolve(args.data_dir))
    c = build.counts()
    print(f"PairedMem: {c['candidate_specs']} candidates, {c['passed_validation']} passed, "
          f"{c['selected_pairs']} selected, {c['reserves']} reserves -> {out} "
          f"({time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
