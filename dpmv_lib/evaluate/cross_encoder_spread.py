"""How far the held-out kappa of the cross-encoded U dimensions moves with the split (paper C.5
"Utility judging").

:func:`~.u_validity.validate_u` measures every dimension on the held-out half of the split of
:data:`~.u_validity.SPLIT_SEED` and, for the feature-model dimensions, over the splits of seeds
0-9 as well, each with the model refitted on that split's fitting half
(:func:`~.u_validity.split_spread`). A cross-encoded dimension (:class:`~.holistic.CrossEncoded`)
needs a fine-tuning per split (about 4.5 minutes on 2 cores), so its spread is computed here, once
per (dimension, split), and committed as one small JSON shard each under
``data/judge_labels/cross_encoder_spread/`` (:data:`SPREAD_DIR`): a rerun skips every shard that is
current, so the work resumes from the committed state on any machine.

A shard is the judge's own scorer refitted on one split's fitting half: a
:class:`~.cross_encoder.CrossEncoder` fine-tuned as the committed one was
(:func:`~.u_validity.fit_cross_encoder_on`, the committed model's config), blended with the feature
model fitted on the same half (:func:`~.u_validity.fit_on`, :func:`~.holistic.blend_scores` with the
committed feature weight), cuts fitted on that half and the binary kappa measured on the other
(:func:`~.u_validity.heldout_table`, ``sklearn.metrics.cohen_kappa_score``). A shard is current
while the labels, the encoder, the feature weight, the fine-tuning config and, for a blend, the
digest of the feature model's boundaries it names are the committed model's
(:func:`~.u_validity.cross_spread_current`).

Command line::

    python -m dpmv_lib.evaluate.cross_encoder_spread            # every missing shard, seeds 0-9
    python -m dpmv_lib.evaluate.cross_encoder_spread --seeds 1 2 --dimensions relevance
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

from ..common.io import write_atomic
from ..core.errors import ParameterError
from .holistic import blend_scores
from .rubric import DIMENSIONS
from .u_validity import (CROSS_SPREAD_FORMAT, SPREAD_DIR, SPREAD_SEEDS, cross_spread_current, cross_spread_scorer,
                         cross_spread_table, distinct_rows, fit_cross_encoder_on, fit_on, heldout_table,
                         read_cross_spread, split_halves)


def shard_path(spread_dir: str | Path, dimension: str, seed: int) -> Path:
    """``{spread_dir}/{dimension}-split{seed}.json``."""
    return Path(spread_dir) / f"{dimension}-split{int(seed)}.json"


def split_kappas(inputs: tuple, mask: np.ndarray, dimension: str, feature_weight: float, config: Any = None, *,
                 base: Any = None, log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """The held-out binary kappa of ``dimension`` scored as the judge scores it, every part refitted
    on the fitting half ``mask``: a cross-encoder fine-tuned there, blended with ``feature_weight``
    x the feature model fitted there (``inputs``: :func:`~.u_validity.holistic_inputs`). Returns
    ``kappa_fitted`` and ``positives_held_out`` per response model ("all" pooled) and ``cut_2``."""
    units, F, V, anchors = inputs
    units = units.reset_index(drop=True)
    mask = np.asarray(mask, bool)
    ce = fit_cross_encoder_on(units, mask, dimension, config, base=base, log=log)
    feature_model = fit_on(units, F, V, mask, anchors, {})
    features = feature_model.score(feature_model.with_content(F, V))
    pairs = units[["query", "response"]].astype(str)
    rows = distinct_rows(units, np.ones(len(units), bool))
    cross = pd.Series(ce.predict(pairs.loc[rows, "query"].tolist(), pairs.loc[rows, "response"].tolist()),
                      index=pd.MultiIndex.from_frame(pairs.loc[rows]))
    cross_all = cross.reindex(pd.MultiIndex.from_frame(pairs)).to_numpy(float)
    judged = units.copy()
    for j, d in enumerate(DIMENSIONS):
        judged[f"judge_{d}"] = features[:, j]
    j = DIMENSIONS.index(dimension)
    judged[f"judge_{dimension}"] = blend_scores(cross_all, features[:, j], feature_weight)
    empty = units["response"].map(lambda a: not str(a).strip()).to_numpy()
    judged.loc[empty, [f"judge_{d}" for d in DIMENSIONS]] = 0.0      # an empty response scores 0 everywhere
    table, _ = heldout_table(judged, mask)
    t = table[table["dimension"] == dimension].set_index("response_model")
    return {"kappa_fitted": {m: float(t.loc[m, "kappa_fitted"]) for m in t.index},
            "positives_held_out": {m: int(t.loc[m, "positives_held_out"]) for m in t.index},
            "cut_2": float(t.loc["all", "cut_2"])}


def compute(label_dir: str | Path, data_dir: str | Path = "data", seeds: Sequence[int] = SPREAD_SEEDS,
            dimensions: Sequence[str] | None = None, spread_dir: str | Path | None = None, *,
            encoder: Any = None, base: Any = None, log: Callable[[str], None] | None = None) -> pd.DataFrame:
    """Write every missing or stale shard of ``dimensions`` (default: every cross-encoded one) and
    ``seeds`` under ``spread_dir`` (default ``{label_dir}/cross_encoder_spread``), each as soon as it
    is done; return :func:`~.u_validity.cross_spread_table` of all current shards. ``encoder``: the feature model's
    (default the committed model's); ``base``: the cross-encoder's base model (default the offline
    MiniLM, as the committed one)."""
    import torch

    from ..common.machine import cpu_info
    from .cross_encoder import CrossEncoderConfig
    from .holistic import committed_encoder_spec, load
    from .u_validity import holistic_inputs

    model = load(label_dir)
    if model is None or not model.cross_encoded:
        raise ParameterError(f"no committed holistic model with cross-encoded dimensions in {label_dir}")
    dims = list(model.cross_encoded) if dimensions is None else list(dimensions)
    want = {d: cross_spread_scorer(model, d) for d in dims}
    out = Path(spread_dir) if spread_dir is not None else Path(label_dir) / SPREAD_DIR
    current = {(s["dimension"], int(s["split_seed"])) for s in (read_cross_spread(out) if out.is_dir() else [])
               if cross_spread_current(s, model)}
    todo = [(s, d) for s in seeds for d in dims if (d, int(s)) not in current]
    if todo:
        if encoder is None:
            from .encoders import get_encoder
            encoder = get_encoder(committed_encoder_spec(label_dir))
        if str(getattr(encoder, "id", "")) != want[dims[0]]["encoder"]:
            raise ParameterError(f"encoder {getattr(encoder, 'id', encoder)!r} is not the one the committed model was "
                                 f"fitted with ({want[dims[0]]['encoder']!r})")
        inputs = holistic_inputs(encoder, label_dir, data_dir)
    for i, (seed, d) in enumerate(todo):
        t0 = time.monotonic()
        if log is not None:
            log(f"[{i + 1}/{len(todo)}] {d}, split seed {seed}")
        res = split_kappas(inputs, split_halves(inputs[0], int(seed)), d, want[d]["feature_weight"],
                           CrossEncoderConfig(**want[d]["config"]), base=base, log=log)
        shard = {"format": CROSS_SPREAD_FORMAT, "dimension": d, "split_seed": int(seed), **want[d], **res,
                 "seconds": round(time.monotonic() - t0, 1), "torch": torch.__version__,
                 "cpu": str(cpu_info().get("model", ""))}
        out.mkdir(parents=True, exist_ok=True)
        write_atomic(shard_path(out, d, seed), json.dumps(shard, indent=1, sort_keys=True) + "\n")
        if log is not None:
            log(f"    kappa {res['kappa_fitted']} ({shard['seconds']:.0f} s)")
    return cross_spread_table(read_cross_spread(out), model, seeds)


def main(argv: Sequence[str] | None = None) -> int:
    """Compute the missing shards (module docstring) and print the spread table."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m dpmv_lib.evaluate.cross_encoder_spread", description=main.__doc__)
    ap.add_argument("--data", default="data")
    ap.add_argument("--seeds", type=int, nargs="+", default=list(SPREAD_SEEDS))
    ap.add_argument("--dimensions", nargs="+", default=None, help="default: every cross-encoded dimension")
    args = ap.parse_args(argv)

    def log(msg: str) -> None:
        print(time.strftime("%H:%M:%S"), msg, flush=True)

    try:
        table = compute(Path(args.data) / "judge_labels", args.data, args.seeds, args.dimensions, log=log)
    except ParameterError as exc:
        raise SystemExit(str(exc)) from None
    print(table.to_markdown(index=False, floatfmt=".3f"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
