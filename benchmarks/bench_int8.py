"""The int8 auditor encoder (``minilm-ov@int8``) beside OpenVINO bf16: how far and how fast each
quantization variant is, and U's held-out kappas with each encoder's own refitted holistic model.

    .venv/bin/python benchmarks/bench_int8.py [--n 800] [--repeats 3]

* **Variants**: every matrix product in int8 (the shipped ``minilm-ov@int8``), the feed-forward
  output products kept in float, and every feed-forward product kept in float
  (``OpenVINOEncoder(int8_float=...)``, NNCF ``IgnoredScope`` patterns). Texts: the first ``n``
  distinct responses of the labelled units (``u_validity.label_pool``), sorted. Speed: median of
  ``repeats`` interleaved timed passes after a warm-up; distance: 1 - cosine to the bf16 vectors.
* **U's held-out kappas** (the issue's "every judge kappa within 0.02"): for bf16 and int8, the
  holistic model refitted on that encoder's features (``u_validity.fit_holistic_model``) and
  ``u_validity.validate_u`` on U's split; pooled binary kappa per dimension.

Writes benchmarks/results/int8.json and int8.md.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np

from machine_info import describe, loadavg, machine  # noqa: E402  (also puts this checkout on sys.path)

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results"
FFN_OUT = r".*layer\.\d+\.output\.dense.*"                    # not the attention's output.dense
FFN_ALL = r".*layer\.\d+\.(intermediate|output)\.dense.*"
VARIANTS = {"bf16": None, "int8": (), "int8, feed-forward outputs in float": (FFN_OUT,),
            "int8, every feed-forward product in float": (FFN_ALL,)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=800)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from dpmv_lib.evaluate import u_validity as UV
    from dpmv_lib.evaluate.encoders import OpenVINOEncoder, minilm_path
    from dpmv_lib.evaluate.rubric import DIMENSIONS
    from dpmv_lib.evaluate.rubric_judge import RubricJudge

    m = machine()
    labels = ROOT / "data" / "judge_labels"
    texts = sorted(set(UV.label_pool(labels)["response"]))[: args.n]
    enc = {name: OpenVINOEncoder(minilm_path(), name="all-MiniLM-L6-v2",
                                 precision="bf16" if kept is None else "int8", int8_float=kept or ())
           for name, kept in VARIANTS.items()}
    for e in enc.values():
        e.encode(texts[:64])                                  # warm-up
    walls: dict[str, list[float]] = {name: [] for name in enc}
    emb = {}
    for _ in range(args.repeats):
        for name, e in enc.items():
            t = time.perf_counter()
            emb[name] = e.encode(texts)
            walls[name].append(time.perf_counter() - t)
    rows = []
    for name in enc:
        d = 1.0 - np.sum(emb[name].astype(np.float64) * emb["bf16"], axis=1)
        rows.append({"variant": name, "encoder_id": enc[name].id,
                     "responses_per_s": round(len(texts) / statistics.median(walls[name]), 1),
                     "vs_bf16_speed": round(statistics.median(walls["bf16"]) / statistics.median(walls[name]), 2),
                     "one_minus_cos_mean": float(d.mean()), "one_minus_cos_p99": float(np.quantile(d, 0.99)),
                     "one_minus_cos_max": float(d.max())})
    label_units = len(UV.label_pool(labels))
    kappas = {}
    for name in ("bf16", "int8"):
        model = UV.fit_holistic_model(enc[name], labels, ROOT / "data")
        v = UV.validate_u(RubricJudge(enc[name], holistic=model), labels, ROOT / "data", spread_seeds=())
        pooled = v.table[v.table["response_model"] == "all"].set_index("dimension")["kappa_fitted"]
        kappas[name] = {d: round(float(pooled[d]), 4) for d in DIMENSIONS}
    res = {"machine": m, "n_texts": len(texts), "repeats": args.repeats, "loadavg_after": loadavg(),
           "variants": rows, "label_units": label_units, "u_heldout_kappa": kappas}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "int8.json").write_text(json.dumps(res, indent=1) + "\n")
    lines = ["# The int8 auditor encoder beside OpenVINO bf16", "",
             f"Machine: {describe(m)}; load average at start {m['loadavg_at_start']}, "
             f"after {res['loadavg_after']}.", "",
             f"{len(texts)} distinct labelled responses, batch 64, median of {args.repeats} interleaved passes after a "
             "warm-up; distance = 1 - cosine to the bf16 embedding of the same response.", "",
             "| variant | encoder id | responses/s | speed vs bf16 | 1 - cos mean | 1 - cos p99 | 1 - cos max |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    lines += [f"| {r['variant']} | `{r['encoder_id']}` | {r['responses_per_s']} | {r['vs_bf16_speed']}x | "
              f"{r['one_minus_cos_mean']:.2e} | {r['one_minus_cos_p99']:.2e} | {r['one_minus_cos_max']:.2e} |"
              for r in rows]
    lines += ["", f"U's held-out kappa (binary, U's split, pooled, {label_units} labelled units), each encoder with "
              "its own refitted holistic model:",
              "", "| encoder | " + " | ".join(DIMENSIONS) + " |", "| --- |" + " ---: |" * len(DIMENSIONS)]
    lines += [f"| {name} | " + " | ".join(f"{k[d]:.3f}" for d in DIMENSIONS) + " |" for name, k in kappas.items()]
    lines.append("| int8 - bf16 | " + " | ".join(f"{kappas['int8'][d] - kappas['bf16'][d]:+.3f}" for d in DIMENSIONS)
                 + " |")
    (OUT / "int8.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
