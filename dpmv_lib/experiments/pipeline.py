"""Pipeline pieces shared by notebooks 04 and 05: the PairedMem pairs and the response model of a
profile, and transcript tables cached on disk under a key of the benchmark, the responder, the
parameters and the source of the generating code (:func:`cached_transcripts`).
"""
from __future__ import annotations

import hashlib
import json
from fractions import Fraction
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import pandas as pd

from ..core.errors import ParameterError


def frame_hash(*parts: Any) -> str:
    """A short content hash of JSON-able parts (cache keys of derived tables)."""
    body = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(body.encode()).hexdigest()[:16]


# ---- pipeline pieces shared by notebooks 04 and 05 ------------------------------------------------------
CODE_MODULES: tuple[str, ...] = ("generate.interfaces", "core.memview", "checks.variants", "core.ledger",
                                 "core.selection", "core.sampling", "core.scorer", "core.policy", "generate.generation",
                                 "generate.filters", "generate.responders.surrogate", "generate.responders.base")


def code_fingerprint(modules: Sequence[str] = CODE_MODULES) -> str:
    """sha256 prefix of the source of the modules that determine a transcript (cache key part):
    a change to the mechanism, an interface or the surrogate invalidates cached transcripts."""
    import importlib
    import inspect

    h = hashlib.sha256()
    for name in modules:
        mod = importlib.import_module(f"dpmv_lib.{name}")
        h.update(name.encode())
        h.update(Path(inspect.getsourcefile(mod) or "").read_bytes())
    return h.hexdigest()[:16]


def benchmark_fingerprint(bench: Any) -> str:
    """sha256 prefix of the track's manifest checksums and the selected pair ids."""
    files = bench.manifest.get("files", {}) if isinstance(bench.manifest, Mapping) else {}
    return frame_hash(bench.track, sorted(p.pair_id for p in bench.pairs),
                      {k: v.get("sha256") if isinstance(v, Mapping) else v for k, v in sorted(files.items())})


def _slug(text: str) -> str:
    import re

    return re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_")


def cached_transcripts(bench: Any, responder: Any, methods: Sequence[str], *, seeds: Sequence[int], turns: int,
                       B_a: Any = 2, K: int = 3, plan_horizon: int | None = 16,
                       cache_dir: str | Path | None = None, workers: int | None = 1, progress: bool = False,
                       log: Callable[[str], None] = print) -> pd.DataFrame:
    """The transcript table (:func:`dpmv_lib.generate.generation.generate_transcripts`) of ``methods`` over
    the first ``turns`` turns, with one parquet per method in ``cache_dir`` keyed by the benchmark
    (checksums + pairs), the responder identity, B_a, K, the preallocation horizon, the seeds and
    the source of the generating code. A cached table with at least ``turns`` turns is reused
    (truncated); only the missing methods are generated (in one call, so identical prompts are
    generated once)."""
    from ..generate.generation import InterfaceParams, generate_transcripts, load_transcripts, save_transcripts
    from ..generate.interfaces import is_deterministic

    if not methods:
        raise ParameterError("no methods to generate")
    base = (benchmark_fingerprint(bench), responder.identity(), str(Fraction(str(B_a))), int(K), plan_horizon,
            code_fingerprint())
    found: dict[str, pd.DataFrame] = {}
    todo: list[str] = []
    keys: dict[str, str] = {}
    cdir = Path(cache_dir) if cache_dir is not None else None
    for m in methods:
        sd = (-1,) if is_deterministic(m) else tuple(int(s) for s in seeds)
        keys[m] = f"{_slug(m)}-{frame_hash(m, sd, *base)}"
        best = None
        if cdir is not None and cdir.is_dir():
            for f in cdir.glob(f"{keys[m]}-T*.parquet"):
                try:
                    t = int(f.stem.rsplit("-T", 1)[1])
                except ValueError:
                    continue
                if t >= turns and (best is None or t < best[0]):
                    best = (t, f)
        if best is not None:
            try:
                df = load_transcripts(best[1])
                found[m] = df[df["turn"] < turns].reset_index(drop=True)
                continue
            except Exception as exc:  # noqa: BLE001 - a corrupt cache file is regenerated, never used
                log(f"[cache] ignoring unreadable {best[1].name}: {exc}")
        todo.append(m)
    if todo:
        df = generate_transcripts(bench, responder, todo, seeds=tuple(seeds), turns=turns,
                                  params=InterfaceParams(B_a=B_a, K=K, plan_horizon=plan_horizon),
                                  workers=workers, progress=progress)
        for m in todo:
            part = df[df["method"] == m].reset_index(drop=True)
            found[m] = part
            if cdir is not None:
                save_transcripts(part, cdir / f"{keys[m]}-T{turns}.parquet")
    if todo and cdir is not None:
        log(f"[cache] generated {', '.join(todo)}; reused {', '.join(m for m in methods if m not in todo) or '-'}")
    elif cdir is not None:
        log(f"[cache] reused every method from {cdir}")
    return pd.concat([found[m] for m in methods], ignore_index=True)


def load_pairs(cfg: Any, profile: Any) -> Any:
    """The PairedMem pairs of the profile (the RQ1 stratified subset: same pairs as notebook 03)."""
    from ..bench.datasets import load_benchmark
    from .rq1 import select_pairs

    return select_pairs(load_benchmark("pairedmem", cfg.data_dir), profile.pairs, cfg.seed)


def make_surrogate_or_profile_responder(profile: Any, bench: Any, seed: int = 0) -> Any:
    """The profile's response model (the surrogate needs the public policies; its draws move with
    the run ``seed``)."""
    from .rq1 import responder_specs
    from ..generate.responders import make_responder

    spec = responder_specs(profile)[0]
    return make_responder(spec, list(bench.policies.values()), salt=seed) if spec == "surrogate" \
        else make_responder(spec)


def load(run: Any) -> Any:
    """Notebook step: the profile's PairedMem pairs (:func:`load_pairs`) and response model
    (:func:`make_surrogate_or_profile_responder`) of a :class:`~.session.Session`, as a
    :class:`~.result.Result` holding ``bench`` and ``responder``."""
    from .result import Result

    with run.timer("load"):
        bench = load_pairs(run.cfg, run.profile)
        responder = make_surrogate_or_profile_responder(run.profile, bench, run.cfg.seed)
    prof = run.profile
    return Result("PairedMem pairs and the response model", data={"bench": bench, "responder": responder},
                  finding=(f"Profile {prof.name}: {len(bench)} PairedMem pairs, response model {responder.name}, "
                           f"encoder {prof.encoder}, judge {prof.judge}, EM seeds {list(prof.em_seeds)}."))
