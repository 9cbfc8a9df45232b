"""The generation requests a profile's notebooks make, and running them in chunks.

:func:`build_plan` replays the conditioning of notebooks 03, 04, 05 and 07 with the same library
calls and settings as the notebooks (their parameters cell, the profile's ``notebook_defaults``
and any override; conditioning only, nothing is generated) and keeps, per notebook, the distinct
requests (content addresses, :func:`dpmv_lib.generate.generation.request_addresses`) of the
profile's response model. Notebooks 01, 02 and 06 make no response-model requests. Against the
profile's committed store (:mod:`dpmv_lib.generate.store`) the plan says what is done and what
is left (:meth:`Plan.table`); :func:`generate_missing` generates the next missing requests, in
the plan's fixed order (notebook, then conditioning row), batch by batch into the store, until a
time limit. ``python -m dpmv_lib.run --profile llm --plan`` and ``--generate-only --minutes N``
call these.
"""
from __future__ import annotations

import ast
import gzip
import os
import pickle
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import pandas as pd

from ..core.errors import ParameterError

PLANNED_NOTEBOOKS = ("03", "04", "05", "07")


@dataclass
class NotebookRequests:
    """One notebook's distinct requests for one response model, in first-use order."""

    notebook: str
    model: str
    addresses: list[str] = field(default_factory=list)
    prompts: dict[str, Any] = field(default_factory=dict)      # address -> Prompt
    meta: dict[str, dict[str, Any]] = field(default_factory=dict)
    detail: str = ""

    def add(self, prompts: Sequence[Any], responder: Any) -> None:
        from ..generate.generation import request_addresses

        reps, _, addresses, meta = request_addresses(prompts, responder)
        for p, a in zip(reps, addresses):
            if a not in self.prompts:
                self.addresses.append(a)
                self.prompts[a] = p
                self.meta[a] = meta[a]


@dataclass
class Plan:
    """Per notebook and response model, the distinct requests; ``store`` is the profile's store."""

    profile: str
    store: Any
    parts: list[NotebookRequests]
    responders: dict[str, Any]          # model name -> Responder
    notes: list[str] = field(default_factory=list)

    def ordered(self) -> list[tuple[str, str]]:
        """(model, address) of every distinct request, in the fixed generation order."""
        seen: set[tuple[str, str]] = set()
        out = []
        for part in self.parts:
            for a in part.addresses:
                if (part.model, a) not in seen:
                    seen.add((part.model, a))
                    out.append((part.model, a))
        return out

    def table(self, rate: float | None = None) -> pd.DataFrame:
        """Per notebook and in total: distinct requests, in the store, left, and hours left at
        ``rate`` responses/s (total: each request counted once)."""
        have = self.store.load() if self.store is not None else {}
        rows = []
        for part in self.parts:
            n_in = sum(a in have for a in part.addresses)
            rows.append({"notebook": part.notebook, "model": part.model, "requests": len(part.addresses),
                         "in_store": n_in, "left": len(part.addresses) - n_in, "settings": part.detail})
        allr = self.ordered()
        n_in = sum(a in have for _, a in allr)
        rows.append({"notebook": "total (distinct)", "model": "", "requests": len(allr), "in_store": n_in,
                     "left": len(allr) - n_in, "settings": ""})
        df = pd.DataFrame(rows)
        if rate:
            df["hours_left"] = (df["left"] / rate / 3600).round(2)
        return df


def notebook_settings(notebook: Path, profile: Any, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The values of a notebook's parameters cell (literals only), under the profile's
    ``notebook_defaults`` and ``overrides`` (as :func:`dpmv_lib.run.run_notebooks` sets them)."""
    import nbformat

    nb = nbformat.read(str(notebook), as_version=4)
    values: dict[str, Any] = {}
    for cell in nb.cells:
        if cell.cell_type == "code" and "parameters" in cell.get("metadata", {}).get("tags", []):
            for node in ast.parse(cell.source).body:
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                    try:
                        values[node.targets[0].id] = ast.literal_eval(node.value)
                    except ValueError:
                        pass
            break
    for src in (profile.notebook_defaults, overrides or {}):
        values.update({k: v for k, v in src.items() if k in values})
    return values


def _conditioning_prompts(bench: Any, methods: Sequence[str], *, seeds: Sequence[int], turns: int, B_a: Any,
                          K: int, plan_horizon: int, workers: int | None, progress: bool) -> list[Any]:
    from ..generate.generation import InterfaceParams, conditioning_table, row_prompts

    return row_prompts(conditioning_table(bench, methods, seeds=tuple(seeds), turns=turns, workers=workers,
                                          progress=progress,
                                          params=InterfaceParams(B_a=B_a, K=K, plan_horizon=plan_horizon)))


def plan_key(profile: str, seed: int, overrides: Mapping[str, Any] | None, notebooks: Sequence[Path],
             responders: Mapping[str, Any]) -> str:
    """A hash of everything a plan depends on: the arguments, the responders' identities and
    system prompts, the source of every dpmv_lib module, the notebooks and the data manifests."""
    import hashlib
    import json

    from ..common.paths import project_root

    root = project_root()
    h = hashlib.sha256(json.dumps([profile, seed, dict(overrides or {}),
                                   {k: [r.identity(), r.system] for k, r in responders.items()}],
                                  sort_keys=True, default=str).encode())
    files = sorted((root / "dpmv_lib").rglob("*.py")) + sorted(Path(p) for p in notebooks) \
        + sorted((root / "data").glob("*/manifest.json"))
    for f in files:
        h.update(str(f.relative_to(root) if f.is_relative_to(root) else f).encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:20]


def build_plan(profile: str, notebooks: Sequence[Any], store_dir: str | Path, *, seed: int = 0,
               overrides: Mapping[str, Any] | None = None, responder_factory: Callable[[str], Any] | None = None,
               workers: int | None = None, progress: bool = True, cache_dir: str | Path | None = None,
               log: Callable[[str], None] = print) -> Plan:
    """The plan of ``profile`` over ``notebooks`` (the runner's notebook records: ``number``,
    ``name``, ``path``; those of :data:`PLANNED_NOTEBOOKS` are planned) against the store in
    ``store_dir``. ``responder_factory`` maps a responder spec to a Responder (default
    :func:`~dpmv_lib.generate.responders.make_responder`; tests pass a fake). With ``cache_dir``
    the requests are kept there (gzip pickle, keyed by :func:`plan_key`), so the next chunk
    skips the conditioning."""
    from ..bench.datasets import load_benchmark, load_gold_rules
    from ..generate.interfaces import SIDES
    from ..generate.responders import make_responder
    from ..generate.store import GenerationStore
    from . import playground, rq2, sensitivity
    from .profiles import get_profile
    from .rq1 import RQ1Config, load_tracks, responder_specs, select_pairs

    prof = get_profile(profile).for_seed(seed)
    store = GenerationStore(store_dir)
    specs = responder_specs(prof)
    make = responder_factory or (lambda spec: make_responder(spec))
    plan = Plan(prof.name, store, [], {})
    if "surrogate" in specs:
        plan.notes.append("the surrogate is not stored (it is faster than a lookup): nothing to generate")
        return plan
    responders = {s: make(s) for s in specs}
    plan.responders = {r.name: r for r in responders.values()}
    first = responders[specs[0]]
    cached = None
    if cache_dir is not None:
        key = plan_key(prof.name, seed, overrides, [nb.path for nb in notebooks], responders)
        cached = Path(cache_dir) / f"plan-{prof.name}-{key}.pkl.gz"
        if cached.is_file():
            try:
                with gzip.open(cached, "rb") as f:
                    plan.parts, plan.notes = pickle.load(f)
                log(f"[plan] requests read from {cached.name} (same code, data and settings)")
                return plan
            except (OSError, EOFError, pickle.UnpicklingError, ValueError) as exc:
                log(f"[plan] ignoring unreadable {cached.name}: {exc}")
    nbs = {nb.number: nb for nb in notebooks}
    for num in [n for n in PLANNED_NOTEBOOKS if n in nbs]:
        nb = nbs[num]
        v = notebook_settings(nb.path, prof, overrides)
        data_dir = str(v.get("data_dir", "data"))
        t0 = time.perf_counter()
        log(f"[plan] {nb.name}: conditioning ...")
        if num == "03":
            cfg = RQ1Config(profile=prof.name, seed=seed, B_a=v["B_a"], K=v["K"], T=v["T"])
            benches = load_tracks(data_dir, prof, seed, plan.notes)
            tracks = "+".join(f"{k} {len(b)}" for k, b in benches.items())
            for resp in responders.values():
                part = NotebookRequests(nb.name, resp.name, detail=(
                    f"tracks {tracks} pairs; {len(cfg.methods)} methods; EM seeds {list(prof.em_seeds)}; T={cfg.T}"))
                for bench in benches.values():
                    part.add(_conditioning_prompts(bench, cfg.methods, seeds=prof.em_seeds, turns=cfg.T, B_a=cfg.B_a,
                                                   K=cfg.K, plan_horizon=cfg.T, workers=workers, progress=progress),
                             resp)
                plan.parts.append(part)
        elif num == "04":
            bench = select_pairs(load_benchmark("pairedmem", data_dir), prof.pairs, seed)
            methods = rq2.HORIZON_METHODS + (rq2.SCORE_CHANNEL,)
            part = NotebookRequests(nb.name, first.name, detail=(
                f"{len(bench)} pairs; {len(methods)} methods; EM seeds {list(prof.em_seeds)}; T_max={v['T_max']}"))
            part.add(_conditioning_prompts(bench, methods, seeds=prof.em_seeds, turns=v["T_max"], B_a=v["B_a"],
                                           K=v["K"], plan_horizon=v["T"], workers=workers, progress=progress), first)
            plan.parts.append(part)
        elif num == "05":
            bench = select_pairs(load_benchmark("pairedmem", data_dir), prof.pairs, seed)
            settings = sensitivity.table3_settings(selectors=("em", "pf"))
            sels = settings["selector"]
            combos = sensitivity.unique_settings(settings)
            part = NotebookRequests(nb.name, first.name, detail=(
                f"{len(bench)} pairs; {len(combos)} (B_a, K) x (em, pf); EM seeds {list(prof.em_seeds)}; T={v['T']}"))
            for b, k in combos:
                here = list(dict.fromkeys(sels[(settings["b_a"] == b) & (settings["k"] == k)]))
                methods = tuple(sensitivity.SELECTOR_METHODS[x] for x in here)
                part.add(_conditioning_prompts(bench, methods, seeds=prof.em_seeds, turns=v["T"], B_a=b, K=k,
                                               plan_horizon=v["T"], workers=workers, progress=progress), first)
            plan.parts.append(part)
        elif num == "07":
            bench = load_benchmark("pairedmem", data_dir)
            pair = {p.pair_id: p for p in bench.pairs}[v["pair_id"]]
            if v.get("query") is not None or v.get("intent") is not None:
                plan.notes.append("notebook 07: a typed query is not planned")
            rep = playground.replay(pair, bench.policy(pair), method=v["method"], B_a=v["B_a"], K=v["K"],
                                    seed=prof.em_seeds[0], turns=v["T"],
                                    view_links=load_gold_rules(data_dir)["view_links"])
            resp = first if v.get("responder") is None else make(v["responder"])
            part = NotebookRequests(nb.name, resp.name, detail=f"pair {pair.pair_id}; {v['method']}; T={v['T']}")
            rs = playground.Responses(resp)
            part.add([rs.prompt(rep, s, t) for t in range(rep.turns) for s in SIDES], resp)
            plan.parts.append(part)
        log(f"[plan] {nb.name}: {len(plan.parts[-1].addresses)} distinct requests "
            f"({time.perf_counter() - t0:.0f} s)")
    if cached is not None:
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_name(cached.name + f".{os.getpid()}.tmp")
        with gzip.open(tmp, "wb") as f:
            pickle.dump((plan.parts, plan.notes), f)
        os.replace(tmp, cached)
    return plan


@dataclass
class ChunkResult:
    generated: int = 0
    from_cache: int = 0
    left: int = 0
    seconds: float = 0.0
    seconds_generating: float = 0.0     # inside the responder (model loading included on the first batch)
    stopped: str = ""

    @property
    def rate(self) -> float:
        """Responses per second of generation."""
        return self.generated / self.seconds_generating if self.seconds_generating > 0 else float("nan")


def generate_missing(plan: Plan, *, minutes: float, batch_size: int | None = None, sqlite: Any = "default",
                     max_batches: int | None = None, log: Callable[[str], None] = print) -> ChunkResult:
    """Generate the plan's missing requests in its fixed order for at most ``minutes`` (a batch
    is started only if the last batch's time still fits), each batch written to the store as one
    synced gzip member. Requests found in the local SQLite cache (``sqlite``: "default", a path
    or None) are copied into the store first, without generating. ``max_batches``: stop after
    that many batches (a measurement)."""
    from ..generate.cache import GenerationCache
    from ..generate.generation import default_batch_size
    from ..generate.store import make_entry

    if not isinstance(minutes, (int, float)) or isinstance(minutes, bool) or minutes <= 0:
        raise ParameterError(f"minutes must be a number > 0, got {minutes!r}")
    res = ChunkResult()
    t_start = time.monotonic()
    deadline = t_start + 60 * minutes
    have = plan.store.load()
    meta = {a: m for part in plan.parts for a, m in part.meta.items()}
    prompts = {a: p for part in plan.parts for a, p in part.prompts.items()}
    todo = [(m, a) for m, a in plan.ordered() if a not in have]
    if todo and sqlite is not None:
        path = None if sqlite == "default" else sqlite
        with GenerationCache(path, store=plan.store) as cache:
            got = cache.get_many([a for _, a in todo], {a: meta[a] for _, a in todo})
        res.from_cache = len(got)
        if got:
            log(f"[generate] {len(got)} requests copied from the local SQLite cache into the store")
        todo = [(m, a) for m, a in todo if a not in got]
    by_model: dict[str, list[str]] = {}
    for m, a in todo:
        by_model.setdefault(m, []).append(a)
    last = 0.0
    total = len(todo)
    batches = 0
    for model, addrs in by_model.items():
        resp = plan.responders[model]
        bs = batch_size or default_batch_size(resp)
        for s in range(0, len(addrs), bs):
            now = time.monotonic()
            if now + last > deadline:
                res.stopped = f"time limit ({minutes:g} min)"
                break
            if max_batches is not None and batches >= max_batches:
                res.stopped = f"{max_batches} batch(es)"
                break
            batches += 1
            chunk = addrs[s:s + bs]
            outs = resp.respond([prompts[a] for a in chunk])
            if len(outs) != len(chunk) or not all(isinstance(t, str) for t in outs):
                raise ParameterError(f"responder {model!r} returned {len(outs)} texts for {len(chunk)} prompts")
            plan.store.append(make_entry(a, t, meta[a]) for a, t in zip(chunk, outs))
            last = time.monotonic() - now
            res.seconds_generating += last
            res.generated += len(chunk)
            el = time.monotonic() - t_start
            log(f"[generate] {res.generated}/{total} ({res.generated / el:.2f}/s; {model}; "
                f"{(total - res.generated) / max(res.generated / el, 1e-9) / 3600:.2f} h left at this rate)")
        if res.stopped:
            break
    res.seconds = time.monotonic() - t_start
    res.left = total - res.generated
    if not res.stopped:
        res.stopped = "nothing left" if res.left == 0 else "done"
    return res


def plan_and_generate(profile: str, notebooks: Sequence[Any], store_dir: str | Path, *, seed: int = 0,
                      overrides: Mapping[str, Any] | None = None, generate: bool = False,
                      generate_minutes: float | None = None, rate: float | None = None, workers: int | None = None,
                      cache_dir: str | Path | None = None, responder_factory: Callable[[str], Any] | None = None,
                      echo: Callable[[str], None] = print) -> int:
    """``python -m dpmv_lib.run --plan`` (``generate=False``) and ``--generate-only --minutes N``:
    build the plan, optionally generate for ``generate_minutes``, print the plan's table with
    the hours left at ``rate`` (default: measured by this chunk, or on one batch of missing
    requests, kept in the store). Progress goes to stderr. Returns the exit code."""
    import sys

    from ..common.machine import cpu_info

    if generate and (generate_minutes is None or generate_minutes <= 0):
        raise ParameterError("--generate-only needs --minutes N (N > 0)")
    if rate is not None and rate <= 0:
        raise ParameterError(f"--rate must be > 0, got {rate}")

    def err(m: str) -> None:
        print(m, file=sys.stderr, flush=True)

    plan = build_plan(profile, notebooks, store_dir, seed=seed, overrides=overrides, workers=workers,
                      cache_dir=cache_dir, responder_factory=responder_factory, progress=sys.stderr.isatty(),
                      log=err)
    for n in plan.notes:
        echo(f"note: {n}")
    if not plan.parts:
        return 0
    how = "given with --rate"
    if generate:
        assert generate_minutes is not None
        res = generate_missing(plan, minutes=generate_minutes, log=err)
        echo(f"generate-only: {res.generated} generated in {res.seconds:.0f} s ({res.rate:.2f}/s), "
             f"{res.from_cache} copied from the SQLite cache, {res.left} left; stopped: {res.stopped}")
        if res.generated:
            rate, how = res.rate, "measured by this chunk"
    elif rate is None and any(a not in plan.store.load() for _, a in plan.ordered()):
        res = generate_missing(plan, minutes=60, max_batches=1, log=lambda m: None)
        rate, how = res.rate, f"measured on one batch of {res.generated} (kept in the store)"
    echo(f"profile {plan.profile}: generation store {plan.store.directory} "
         f"({len(plan.store.shards())} shards, {plan.store.size_bytes() / 2**20:.1f} MiB)")
    if plan.store.report.bad_lines or plan.store.report.torn:
        echo(f"store problems (regenerated when needed): {len(plan.store.report.bad_lines)} bad entries, "
             f"{len(plan.store.report.torn)} torn shards")
    echo(plan.table(rate).to_string(index=False))
    if rate:
        echo(f"rate: {rate:.2f} responses/s ({how}; machine: {cpu_info().get('model', '?')})")
    return 0
