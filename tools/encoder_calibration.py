"""Write the calibration texts of the int8 auditor encoder (``minilm-ov@int8``).

NNCF's post-training quantization (``nncf.quantize``) sets each activation's int8 range from the
activations of a calibration set. The set comes from the **train split only** (no validation, test
or transfer pair, none of the judge labels), so quantizing never reads an evaluated response:
the surrogate's responses and the queries of a seeded draw of PairedMem train pairs, under the
paper's methods at the default interface parameters. Deterministic (seed 20264); rerunning it
rewrites ``dpmv_lib/evaluate/int8_calibration.jsonl`` byte for byte.

    .venv/bin/python tools/encoder_calibration.py [--data data]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dpmv_lib.bench.datasets import load_benchmark  # noqa: E402
from dpmv_lib.evaluate.encoders import INT8_CALIBRATION  # noqa: E402
from dpmv_lib.experiments.rq1 import PAPER_METHODS  # noqa: E402
from dpmv_lib.generate.generation import InterfaceParams, generate_transcripts  # noqa: E402
from dpmv_lib.generate.responders import make_responder  # noqa: E402

SEED = 20264
PAIRS = 24          # train pairs drawn
RESPONSES = 240     # distinct responses kept
QUERIES = 60        # distinct queries kept (the judge embeds queries too)


def calibration_texts(data: str) -> list[str]:
    """The calibration texts: a seeded draw of distinct train-split responses and queries."""
    rng = np.random.default_rng(SEED)
    bench = load_benchmark("pairedmem", data)
    train = sorted(p.pair_id for p in bench.pairs if p.split == "train")
    ids = sorted(rng.choice(train, size=PAIRS, replace=False).tolist())
    resp = make_responder("surrogate", list(bench.policies.values()))
    try:
        df = generate_transcripts(bench.subset(ids), resp, PAPER_METHODS, seeds=(0,), turns=16,
                                  params=InterfaceParams(B_a=2, K=3, plan_horizon=16), progress=False)
    finally:
        resp.close()
    responses = sorted(set(df["response"]))
    queries = sorted(set(df["query"]))
    picked = ([responses[i] for i in sorted(rng.choice(len(responses), RESPONSES, replace=False))]
              + [queries[i] for i in sorted(rng.choice(len(queries), QUERIES, replace=False))])
    return picked


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(ROOT / "data"))
    args = ap.parse_args()
    texts = calibration_texts(args.data)
    tmp = INT8_CALIBRATION.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(t, ensure_ascii=False) + "\n" for t in texts), encoding="utf-8")
    tmp.replace(INT8_CALIBRATION)
    print(f"wrote {len(texts)} texts to {INT8_CALIBRATION.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
