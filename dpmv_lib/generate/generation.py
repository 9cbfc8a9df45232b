"""Batch transcripts: pairs x sides x methods x seeds x turns -> one tidy table (docs/architecture.md).

Pipeline (each stage with a progress bar):

1. **Conditioning** - every interface runs over each pair's trajectory per (side, seed); view-based
   ones sequentially, since the ledger carries over (:mod:`.interfaces`). Optionally in several
   processes (``workers``), split by pair.
2. **Deduplication** - identical requests (same rendered query + conditioning, and the same prompt
   key if the backend is seeded) are generated once: e.g. GenericOnly and TypedMask under M and M',
   RawReadSet and OutputFilter, or, for greedy LLM decoding, equal prompts across pairs and seeds.
3. **Cache** - requests already in the content-addressed cache (:mod:`.cache`) are reused; the rest
   go to the responder in batches and are written back after every batch (a crash loses one batch).
4. **Post-processing** - OutputFilter's deletion filter on its rows.

Every row has the contract columns of docs/architecture.md plus ``request`` (the sha256 content
address of the generation; equal addresses = one generation). Usage::

    from dpmv_lib.bench.datasets import load_benchmark
    from dpmv_lib.generate.generation import generate_transcripts, save_transcripts
    from dpmv_lib.generate.responders import make_responder

    bench = load_benchmark("pairedmem")
    model = make_responder("surrogate", bench.policies.values())   # or "smollm2", "openai:<url>|<model>"
    df = generate_transcripts(bench, model, seeds=(0, 1, 2), turns=16, workers=2)
    save_transcripts(df, "results/transcripts/pairedmem-surrogate.parquet")
"""
from __future__ import annotations

import logging
import multiprocessing as mp
import os
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import pandas as pd
from tqdm.auto import tqdm

from ..bench.benchmark import Benchmark, Pair
from ..common.machine import usable_cores
from ..common.parallel import check_workers
from ..common.progress import ProgressLog
from .cache import GenerationCache, content_address
from .store import messages_sha256
from ..core.errors import GenerationError, ParameterError
from .interfaces import RQ1_METHODS, SIDES, Interface, make_interface, to_json
from .responders.base import Prompt, Responder

log = logging.getLogger(__name__)

CONTRACT_COLUMNS = ("track", "pair_id", "attribute", "split", "template", "overlap", "response_model",
                    "method", "side", "seed", "turn", "block", "qtype", "intent", "query", "conditioning",
                    "views", "released", "view_probs", "response")
TRANSCRIPT_COLUMNS = CONTRACT_COLUMNS + ("request",)
_INT_COLUMNS = ("seed", "turn", "block")


@dataclass(frozen=True)
class InterfaceParams:
    """Parameters shared by the MemView-based interfaces (Table 2 defaults: B_a=2, K=3, T=16;
    ``exact``: the exact rational EM sampler; the float one saves at most ~25% of the DP
    conditioning time in benchmarks/bench_generation.py)."""

    B_a: Any = 2
    K: int = 3
    plan_horizon: int | None = 16
    exact: bool = True


@dataclass
class GenerationStats:
    rows: int = 0
    requests: int = 0
    unique_requests: int = 0
    cache_hits: int = 0
    generated: int = 0
    seconds_conditioning: float = 0.0
    seconds_generation: float = 0.0
    seconds_total: float = 0.0


# ---- stage 1: conditioning ----------------------------------------------------------------------
def _pair_rows(pair: Pair, benchmark: Benchmark, ifaces: dict[str, Interface], seeds: Sequence[int],
               sides: Sequence[str], turns: int | None) -> list[tuple]:
    policy = benchmark.policy(pair)
    out = []
    meta = (pair.track, pair.pair_id, pair.attribute, pair.split, pair.template, bool(pair.overlap))
    for method, iface in ifaces.items():
        for seed in iface.seeds(seeds):
            for side in sides:
                for tc in iface.run(pair, policy, side, seed, turns):
                    t = pair.turns[tc.turn]
                    out.append(meta + (method, side, int(seed), t.index, t.block, t.query.qtype, t.query.intent,
                                       t.query.text, tc.conditioning, to_json(list(tc.views)),
                                       to_json(tc.released), to_json(tc.view_probs)))
    return out


ROW_FIELDS = ("track", "pair_id", "attribute", "split", "template", "overlap", "method", "side", "seed",
              "turn", "block", "qtype", "intent", "query", "conditioning", "views", "released", "view_probs")
_WORKER: dict[str, Any] = {}


def _worker_rows(pair_indices: list[int]) -> list[tuple]:
    w = _WORKER
    return [r for i in pair_indices for r in _pair_rows(w["benchmark"].pairs[i], w["benchmark"], w["ifaces"],
                                                        w["seeds"], w["sides"], w["turns"])]


def conditioning_table(benchmark: Benchmark, methods: Sequence[str] = RQ1_METHODS, *,
                       seeds: Sequence[int] = (0, 1, 2), sides: Sequence[str] = SIDES,
                       turns: int | None = None, params: InterfaceParams = InterfaceParams(),
                       workers: int | None = 1, progress: bool = True) -> list[tuple]:
    """Stage 1: rows (see ``ROW_FIELDS``) for every pair x method x seed x side x turn, over
    ``workers`` forked processes (None: the usable cores); the rows do not depend on the count."""
    _check_args(benchmark, methods, seeds, sides, workers)
    if workers is None:
        workers = usable_cores()
    ifaces = {m: make_interface(m, B_a=params.B_a, K=params.K, plan_horizon=params.plan_horizon,
                                exact=params.exact) for m in methods}
    n = len(benchmark.pairs)
    if workers > 1 and "fork" not in mp.get_all_start_methods():
        log.warning("workers=%d needs the 'fork' start method, unavailable here; running in one process", workers)
        workers = 1
    if workers <= 1 or n < 2:
        rows: list[tuple] = []
        for pair in tqdm(benchmark.pairs, desc="conditioning", unit="pair", disable=not progress):
            rows.extend(_pair_rows(pair, benchmark, ifaces, seeds, sides, turns))
        return rows
    _WORKER.update(benchmark=benchmark, ifaces=ifaces, seeds=tuple(seeds), sides=tuple(sides), turns=turns)
    chunks = [list(range(i, n, workers * 4)) for i in range(workers * 4)]
    chunks = [c for c in chunks if c]
    rows_by_chunk: list[list[tuple]] = [[] for _ in chunks]
    ctx = mp.get_context("fork")
    try:
        with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
            futs = {pool.submit(_worker_rows, c): k for k, c in enumerate(chunks)}
            with tqdm(total=n, desc="conditioning", unit="pair", disable=not progress) as bar:
                for f in as_completed(futs):
                    k = futs[f]
                    rows_by_chunk[k] = f.result()
                    bar.update(len(chunks[k]))
    finally:
        _WORKER.clear()
    # restore pair order: chunk k holds pairs k, k + C, k + 2C, ...
    per_pair: dict[str, list[tuple]] = {}
    for rows in rows_by_chunk:
        for r in rows:
            per_pair.setdefault(r[1], []).append(r)
    return [r for p in benchmark.pairs for r in per_pair.get(p.pair_id, [])]


def _check_args(benchmark, methods, seeds, sides, workers) -> None:
    if not isinstance(benchmark, Benchmark):
        raise ParameterError(f"benchmark must be a Benchmark, got {type(benchmark).__name__}")
    if not methods:
        raise ParameterError("no methods to generate")
    for s in sides:
        if s not in SIDES:
            raise ParameterError(f"unknown store side {s!r}; use {SIDES}")
    for s in seeds:
        if isinstance(s, bool) or not isinstance(s, int) or s < 0:
            raise ParameterError(f"EM seeds must be ints >= 0, got {s!r}")
    check_workers(workers)


# ---- stages 2-4 ------------------------------------------------------------------------------------
def _open_cache(cache: Any, responder: Responder) -> GenerationCache | None:
    if cache is None or cache is False:
        return None
    if isinstance(cache, GenerationCache):
        return cache
    if cache == "auto":
        return None if responder.backend == "surrogate" else GenerationCache()
    if cache is True or cache == "default":
        return GenerationCache()
    if isinstance(cache, (str, Path)):
        return GenerationCache(cache)
    raise ParameterError(f"cache must be None, 'auto', 'default', a path or a GenerationCache, got {cache!r}")


def row_prompts(rows: Sequence[tuple]) -> list[Prompt]:
    """What each conditioning row (:func:`conditioning_table`) sends to the response model: its
    query and conditioning, keyed by (pair id, turn, seed)."""
    ci = {f: i for i, f in enumerate(ROW_FIELDS)}
    return [Prompt(r[ci["query"]], r[ci["conditioning"]], (r[ci["pair_id"]], r[ci["turn"]], r[ci["seed"]]))
            for r in rows]


def _unique(prompts: Sequence[Prompt], seeded: bool) -> tuple[list[Prompt], list[int]]:
    """Stage 2: one representative per distinct request, and each prompt's representative index."""
    uniq: dict[tuple, int] = {}
    reps: list[Prompt] = []
    index = []
    for p in prompts:
        k = (p.query, p.conditioning, p.key if seeded else None)
        j = uniq.get(k)
        if j is None:
            j = uniq[k] = len(reps)
            reps.append(p)
        index.append(j)
    return reps, index


def request_addresses(prompts: Sequence[Prompt], responder: Responder
                      ) -> tuple[list[Prompt], list[int], list[str], dict[str, dict[str, Any]]]:
    """Stage 2: the distinct requests of ``prompts`` (representatives), each prompt's
    representative index, the representatives' content addresses, and per address the fields a
    store entry records (backend, model, revision, decoding, rendered messages' hash)."""
    reps, index = _unique(prompts, responder.seeded)
    identity = responder.identity()
    addresses: list[str] = []
    meta: dict[str, dict[str, Any]] = {}
    for p in reps:
        req = responder.request(p)
        a = content_address(identity, req)
        addresses.append(a)
        meta[a] = {"backend": identity["backend"], "model": identity["model"], "revision": identity["revision"],
                   "decoding": identity["decoding"], "messages_sha256": messages_sha256(req["messages"])}
    return reps, index, addresses, meta


def default_batch_size(responder: Responder) -> int:
    """Prompts per ``respond`` call (and per store flush): the backend's batch size, 4 x the
    concurrency of a server, 2048 for the surrogate."""
    if responder.backend == "openai":
        return max(1, 4 * getattr(responder, "concurrency", 8))
    if responder.backend == "surrogate":
        return 2048
    return getattr(responder, "batch_size", None) or 64


def _generate(prompts: Sequence[Prompt], responder: Responder, cache: Any, batch_size: int | None,
              progress: bool, stats: GenerationStats) -> tuple[list[str], list[str]]:
    """Stages 2-3: (text per prompt, content address per prompt)."""
    reps, index, addresses, meta = request_addresses(prompts, responder)
    stats.requests += len(prompts)
    stats.unique_requests += len(reps)
    texts: list[str | None] = [None] * len(reps)
    store = _open_cache(cache, responder)
    try:
        if store is not None:
            hit = store.get_many(addresses, meta)
            for j, a in enumerate(addresses):
                if a in hit:
                    texts[j] = hit[a]
            stats.cache_hits += len(hit)
        todo = [j for j, t in enumerate(texts) if t is None]
        bs = batch_size if batch_size is not None else default_batch_size(responder)
        plog = ProgressLog(f"generate ({responder.name})", len(todo)) if todo else None
        with tqdm(total=len(todo), desc=f"generate ({responder.name})", unit="resp", disable=not progress) as bar:
            for s in range(0, len(todo), bs):
                chunk = todo[s:s + bs]
                outs = responder.respond([reps[j] for j in chunk])
                if len(outs) != len(chunk):
                    raise GenerationError(f"responder {responder.name!r} returned {len(outs)} texts for "
                                          f"{len(chunk)} prompts")
                for j, t in zip(chunk, outs):
                    if not isinstance(t, str):
                        raise GenerationError(f"responder {responder.name!r} returned a {type(t).__name__}, not text")
                    texts[j] = t
                if store is not None:
                    store.put_many([(addresses[j], t) for j, t in zip(chunk, outs)], meta)
                stats.generated += len(chunk)
                bar.update(len(chunk))
                if plog is not None:
                    plog.update(len(chunk))
        if plog is not None:
            plog.close()
    finally:
        if store is not None and not isinstance(cache, GenerationCache):
            store.close()
    return [texts[j] for j in index], [addresses[j] for j in index]  # type: ignore[misc]


def generate_responses(prompts: Sequence[Prompt], responder: Responder, *, cache: Any = "auto",
                       batch_size: int | None = None, progress: bool = True,
                       stats: GenerationStats | None = None) -> list[str]:
    """Stages 2-3 for a list of prompts: deduplicate, reuse the cache, generate the rest (in
    batches of ``batch_size``; by default the backend's batch size, 4 x concurrency for servers)."""
    texts, _ = _generate(prompts, responder, cache, batch_size, progress,
                         stats if stats is not None else GenerationStats())
    return texts


def generate_transcripts(benchmark: Benchmark, responder: Responder, methods: Sequence[str] = RQ1_METHODS, *,
                         seeds: Sequence[int] = (0, 1, 2), sides: Sequence[str] = SIDES,
                         turns: int | None = None, params: InterfaceParams = InterfaceParams(),
                         cache: Any = "auto", batch_size: int | None = None, workers: int | None = 1,
                         progress: bool = True, stats: GenerationStats | None = None) -> pd.DataFrame:
    """The transcript table for ``benchmark`` under ``responder`` (schema: docs/architecture.md).

    ``seeds`` are the EM seeds of stochastic methods (deterministic ones use -1); ``turns`` limits
    each trajectory to its first turns; ``cache`` is "auto" (on disk for model backends, off for
    the surrogate, which is faster than a lookup), "default", a path, a GenerationCache or None;
    ``workers`` processes build the conditioning."""
    stats = stats if stats is not None else GenerationStats()
    t0 = time.perf_counter()
    rows = conditioning_table(benchmark, methods, seeds=seeds, sides=sides, turns=turns, params=params,
                              workers=workers, progress=progress)
    t1 = time.perf_counter()
    prompts = row_prompts(rows)
    texts, addresses = _generate(prompts, responder, cache, batch_size, progress, stats)
    t2 = time.perf_counter()
    post = {m: make_interface(m) for m in methods}
    df = pd.DataFrame.from_records(rows, columns=list(ROW_FIELDS))
    if any(type(i).postprocess is not Interface.postprocess for i in post.values()):
        texts = [post[m].postprocess(t) for m, t in zip(df["method"], texts)]
    df["response"] = texts
    df["response_model"] = responder.name
    df["request"] = addresses
    df = df[list(TRANSCRIPT_COLUMNS)]
    for c in _INT_COLUMNS:
        df[c] = df[c].astype("int64")
    df["overlap"] = df["overlap"].astype(bool)
    stats.rows += len(df)
    stats.seconds_conditioning += t1 - t0
    stats.seconds_generation += t2 - t1
    stats.seconds_total += time.perf_counter() - t0
    return df


def save_transcripts(df: pd.DataFrame, path: str | Path) -> Path:
    """Write a transcript table to parquet atomically (tmp file + rename)."""
    missing = [c for c in CONTRACT_COLUMNS if c not in df.columns]
    if missing:
        raise ParameterError(f"transcript table lacks contract columns {missing}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    df.to_parquet(tmp, index=False)
    os.replace(tmp, path)
    return path


def load_transcripts(path: str | Path) -> pd.DataFrame:
    """Read a transcript table and check it has the contract columns."""
    path = Path(path)
    if not path.exists():
        raise ParameterError(f"transcript file not found: {path}")
    df = pd.read_parquet(path)
    missing = [c for c in CONTRACT_COLUMNS if c not in df.columns]
    if missing:
        raise ParameterError(f"{path} is not a transcript table: missing columns {missing}")
    return df
