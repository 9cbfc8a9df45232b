"""Experiment plumbing shared by the notebooks: their parameters (:class:`ExperimentConfig`), wall
time per step (:class:`Timer`), the paper's reference tables
(:func:`reference_dir`, :func:`load_paper_csv`, :func:`paper_figure`) and Markdown rendering of result tables
(:func:`markdown_table`; claims tables: :func:`dpmv_lib.experiments.verdicts.claims_markdown`; writing a table:
:func:`dpmv_lib.experiments.tables.write_table`).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from ..core.errors import ParameterError

if TYPE_CHECKING:
    from ..evaluate.encoders import Encoder


def reference_dir() -> Path:
    """Directory of the paper's reference CSVs: ``../shared/reference`` beside the project
    (the environment variable DPMV_REFERENCE overrides it)."""
    import os

    from ..common.paths import project_root

    env = os.environ.get("DPMV_REFERENCE")
    return Path(env) if env else project_root().parent / "shared" / "reference"


def load_paper_csv(name: str) -> pd.DataFrame:
    """One of the paper's reference tables, e.g. ``paper_table4_safeguards.csv``."""
    p = reference_dir() / name
    if not p.exists():
        raise ParameterError(f"paper reference table not found: {p} (set DPMV_REFERENCE to its directory)")
    return pd.read_csv(p)


def paper_figure(name: str) -> float:
    """A single number of ``paper_other_figures.csv`` (e.g. ``score_channel_auc``)."""
    df = load_paper_csv("paper_other_figures.csv")
    hit = df.loc[df["figure"] == name, "value"]
    if hit.empty:
        raise ParameterError(f"paper_other_figures.csv has no figure {name!r}")
    return float(hit.iloc[0])


@dataclass(frozen=True)
class ExperimentConfig:
    """The parameters of notebooks 04 and 05: Table 4 at horizon T with caps B_a and granularity K
    (paper: T=16, B_a=2, K=3); leakage curves up to T_max; the learned auditor at
    ``learned_horizons``; notebook 05 uses the horizons, bootstrap, cache and worker fields."""

    profile: str = "default"
    seed: int = 0
    results_dir: str = "results"
    data_dir: str = "data"
    B_a: float = 2
    K: int = 3
    T: int = 16
    T_max: int = 32
    learned_horizons: tuple[int, ...] | None = None  # None: (4, 16, 32) for smoke, else (1, 2, 4, 8, 16, 24, 32)
    n_boot: int | None = None       # bootstrap replicates; None: 200 for smoke, else 1000
    audit_unit: str = "auto"
    workers: int | None = None      # processes for the conditioning; None: the usable cores
    progress: bool = True

    def __post_init__(self) -> None:
        if not 1 <= self.T <= self.T_max <= 32:
            raise ParameterError(f"need 1 <= T <= T_max <= 32, got T={self.T}, T_max={self.T_max}")
        if float(self.B_a) <= 0 or self.K < 1:
            raise ParameterError(f"need B_a > 0 and K >= 1, got B_a={self.B_a}, K={self.K}")
        smoke = self.profile == "smoke"
        wanted = self.learned_horizons if self.learned_horizons is not None else (
            (4, 16, 32) if smoke else (1, 2, 4, 8, 16, 24, 32))
        hs = tuple(sorted({int(h) for h in wanted if 1 <= int(h) <= self.T_max} | {self.T}))
        object.__setattr__(self, "learned_horizons", hs)
        if self.n_boot is None:
            object.__setattr__(self, "n_boot", 200 if smoke else 1000)

    @property
    def cache_dir(self) -> Path:
        from ..common.paths import resolve

        return resolve(self.results_dir) / "cache"


def run_encoder(spec: str, results_dir: str | Path = "results") -> "Encoder":
    """The encoder that every step of a run shares: one model load per process and each
    distinct text embedded once per encoder id, cached on disk under
    ``<results_dir>/cache/embeddings/<encoder id>/`` (:class:`..evaluate.encoders.CachedEncoder`),
    so notebooks 03-05, the judge and the auditors reuse each other's embeddings; an int8
    encoder's quantized graph is kept under ``<results_dir>/cache/models/encoders/``."""
    from ..common.paths import resolve

    cache = resolve(results_dir) / "cache"
    return _shared_encoder(spec, str(cache / "embeddings"), str(cache / "models" / "encoders"))


@functools.lru_cache(maxsize=8)
def _shared_encoder(spec: str, cache_dir: str, model_dir: str) -> "Encoder":
    from ..evaluate.encoders import get_encoder

    return get_encoder(spec, cache_dir=cache_dir, model_dir=model_dir)


# ---- notebook helpers: timing, markdown, the score-channel and horizon summaries -----------------------
class Timer:
    """Wall time per named step: ``with timer("audit"): ...``; ``timer.seconds`` maps step -> s."""

    def __init__(self) -> None:
        import time

        self._clock = time.perf_counter
        self._t0 = self._clock()
        self.seconds: dict[str, float] = {}

    def __call__(self, name: str):
        import contextlib

        @contextlib.contextmanager
        def _ctx():
            t = self._clock()
            try:
                yield
            finally:
                self.seconds[name] = self.seconds.get(name, 0.0) + self._clock() - t
        return _ctx()

    @property
    def total(self) -> float:
        return self._clock() - self._t0

    def table(self) -> pd.DataFrame:
        rows = [{"step": k, "seconds": round(v, 1)} for k, v in self.seconds.items()]
        rows.append({"step": "total (wall)", "seconds": round(self.total, 1)})
        return pd.DataFrame(rows)


def fmt_number(x: Any, nd: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if isinstance(x, (float, np.floating)) and math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        return str(int(x))
    if isinstance(x, (float, np.floating)):
        return f"{x:.{nd}f}"
    return str(x)


def fmt_delta(x: Any) -> str:
    if x is None or (isinstance(x, float) and (math.isnan(x))):
        return "-"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:+.3f}"


def markdown_table(df: pd.DataFrame, nd: int = 3) -> str:
    """A DataFrame as a Markdown table with numbers to ``nd`` decimals, inf/NaN spelled out and ``|``
    in a cell escaped."""
    cols = list(df.columns)
    lines = ["| " + " | ".join(map(str, cols)) + " |", "| " + " | ".join("---" for _ in cols) + " |"]
    for r in df.itertuples(index=False):
        lines.append("| " + " | ".join(fmt_number(v, nd).replace("|", "\\|") for v in r) + " |")
    return "\n".join(lines)
