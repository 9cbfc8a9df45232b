"""Public loader of the frozen benchmark under ``data/`` (PairedMem and the transfer track).

    from dpmv_lib.bench.datasets import load_benchmark
    bench = load_benchmark("pairedmem")          # 320 pairs, typed (dpmv_lib.bench.benchmark.Pair)
    pair = bench.pairs[0]; policy = bench.policy(pair)

Every file is checked against its manifest's sha256 before anything is parsed; a missing or
changed file raises :class:`~dpmv_lib.core.errors.StoreError` saying how to rebuild.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from .benchmark import Behaviour, Benchmark, Pair, pair_from_json
from ..common.io import read_jsonl
from ..core.errors import ParameterError, PolicyError, StoreError
from ..common.paths import resolve
from ..core.policy import Policy

TRACKS: tuple[str, ...] = ("pairedmem", "transfer")
REBUILD = {
    "pairedmem": "run notebooks/01_data_construction.ipynb or `python -m dpmv_lib.bench.pairedmem --build`",
    "transfer": "run notebooks/01_data_construction.ipynb or `python -m dpmv_lib.bench.transfer --build` "
                "(needs the public corpora, see ../shared/corpora/README.md)",
    "policy": "run notebooks/01_data_construction.ipynb or `python -m dpmv_lib.bench.pairedmem --build`",
}


def _sha256(path: Path) -> str:
    from .datafiles import sha256_file
    return sha256_file(path)


def _read_manifest(directory: Path, what: str) -> dict[str, Any]:
    path = directory / "manifest.json"
    if not path.exists():
        raise StoreError(f"{what}: no manifest at {path}; to build it, {REBUILD[what]}")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise StoreError(f"{what}: manifest {path} is not valid JSON ({exc}); to rebuild, {REBUILD[what]}") from None


def verify_manifest(directory: str | Path, what: str) -> dict[str, Any]:
    """Check every file listed in ``directory/manifest.json`` exists and matches its sha256."""
    directory = Path(directory)
    manifest = _read_manifest(directory, what)
    files = manifest.get("files")
    if not isinstance(files, Mapping) or not files:
        raise StoreError(f"{what}: manifest {directory / 'manifest.json'} lists no files; to rebuild, {REBUILD[what]}")
    for name, entry in files.items():
        path = directory / name
        if not path.exists():
            raise StoreError(f"{what}: file {path} listed in the manifest is missing; to rebuild, {REBUILD[what]}")
        digest = _sha256(path)
        if digest != entry.get("sha256"):
            raise StoreError(f"{what}: checksum mismatch for {path} (manifest {str(entry.get('sha256'))[:12]}..., "
                             f"file {digest[:12]}...): the file was changed or half-written; to rebuild, "
                             f"{REBUILD[what]}")
    return manifest


def load_policies(data_dir: str | Path = "data") -> dict[str, Policy]:
    """policy_id -> Policy for every scaffold template under ``data_dir/policy`` (checksummed)."""
    d = resolve(data_dir) / "policy"
    manifest = verify_manifest(d, "policy")
    out = {}
    for pid in manifest.get("policies", []):
        try:
            out[pid] = Policy.load(d / f"{pid}.json")
        except PolicyError as exc:
            raise StoreError(f"policy {pid}: {exc}; to rebuild, {REBUILD['policy']}") from None
    if not out:
        raise StoreError(f"no policies listed in {d / 'manifest.json'}; to rebuild, {REBUILD['policy']}")
    return out


def load_gold_rules(data_dir: str | Path = "data") -> dict[str, Any]:
    """The public gold rules (view -> linked attributes, behaviour descriptions)."""
    d = resolve(data_dir) / "policy"
    verify_manifest(d, "policy")
    return json.loads((d / "gold_rules.json").read_text(encoding="utf-8"))


def load_behaviours(track_dir: Path) -> dict[str, Behaviour]:
    return {r["id"]: Behaviour(**r) for r in read_jsonl(track_dir / "behaviours.jsonl")}


def load_benchmark(track: str = "pairedmem", data_dir: str | Path = "data", *,
                   include_reserves: bool = False) -> Benchmark:
    """Load a frozen track as typed objects (after verifying every checksum).

    ``include_reserves`` appends the PairedMem reserve pairs (passing, unselected candidates)."""
    if track not in TRACKS:
        raise ParameterError(f"unknown track {track!r}; valid tracks: {', '.join(TRACKS)}")
    root = resolve(data_dir)
    policies = load_policies(root)
    d = root / track
    manifest = verify_manifest(d, track)
    missing = [p for p in manifest.get("policies", []) if p not in policies]
    if missing:
        raise StoreError(f"{track}: policies {missing} are missing under {root / 'policy'}; "
                         f"to rebuild, {REBUILD[track]}")
    behaviours = load_behaviours(d)
    rows = read_jsonl(d / "pairs.jsonl")
    if include_reserves and (d / "reserves.jsonl").exists():
        rows += read_jsonl(d / "reserves.jsonl")
    pairs: list[Pair] = []
    for r in rows:
        if r.get("policy_id") not in policies:
            raise StoreError(f"{track}: pair {r.get('pair_id')} names unknown policy {r.get('policy_id')!r}")
        pairs.append(pair_from_json(r, policies))
    return Benchmark(track, policies, tuple(pairs), behaviours, manifest)
