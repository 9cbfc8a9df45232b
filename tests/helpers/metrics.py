"""Bootstrap metrics built from given values (a stand-in for the paired bootstrap in claim tests)."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from dpmv_lib.experiments.verdicts import Metrics


def metrics_from(values: Mapping[tuple, float], sd: float = 0.004, n_boot: int = 1000, seed: int = 0,
                 fixed: frozenset = frozenset()) -> Metrics:
    """Replicates ``value + sd * N(0, 1)`` per key (keys in ``fixed`` get no spread)."""
    rng = np.random.default_rng(seed)
    boot = {k: np.full(n_boot, float(v)) if k in fixed else float(v) + sd * rng.standard_normal(n_boot)
            for k, v in values.items()}
    return Metrics({k: float(v) for k, v in values.items()}, boot, n_boot)


def table_metrics(rows, columns: Mapping[str, str], track: str = "pairedmem", model: str = "m", **kw) -> Metrics:
    """Metrics from (method, {column: value}) rows: ``columns`` maps table columns to metric names."""
    return metrics_from({(track, model, method, metric): vals[col] for method, vals in rows
                         for col, metric in columns.items() if col in vals}, **kw)
