"""Synthetic transcript tables with the documented schema (docs/architecture.md) for the RQ1 tests.

Methods:
* ``Same``    - identical conditioning and responses under M and M' (chance by construction);
* ``Leaky``   - the M response names an attribute-specific cue at every turn (perfectly separable);
* ``Views``   - a view-releasing method: per turn one slot with an EM-like distribution that
  differs slightly between M and M' on "target" turns; the response follows the released view.
"""
from __future__ import annotations

import json
import zlib

import numpy as np
import pandas as pd

ATTRS = ("diabetes", "pregnancy", "debt", "job_loss")
CUE = {"diabetes": "keep blood sugar steady", "pregnancy": "choose pregnancy-safe foods",
       "debt": "pay the smallest balance first", "job_loss": "bridge the income gap"}
TOPICS = ["dinner", "lunch", "workout", "budget", "weekend", "commute", "sleep", "groceries"]


def split_of(i: int) -> str:
    return ("train", "train", "train", "validation", "test", "test")[i % 6]


def make_transcripts(n_per_attr: int = 6, turns: int = 4, seeds=(0, 1, 2), methods=("Same", "Leaky", "Views"),
                     track: str = "pairedmem", model: str = "surrogate", rng_seed: int = 0,
                     view_eps: float = 0.5) -> pd.DataFrame:
    rng = np.random.default_rng(rng_seed)
    rows = []
    for a in ATTRS:
        for i in range(n_per_attr):
            pid = f"{track[:2]}-{a}-{i:03d}"
            for method in methods:
                mseeds = (-1,) if method in ("Same", "Leaky") else seeds
                for seed in mseeds:
                    # one coupled draw per (pair, seed, turn) so the views are seed-specific
                    for side in ("M", "M'"):
                        for t in range(turns):
                            topic = TOPICS[(i + t) % len(TOPICS)]
                            query = f"Any ideas for my {topic} this week?"
                            base = f"Here is a plan for your {topic} (pair {i}, turn {t})."
                            views, probs, released = "[]", "{}", "{}"
                            if method == "Same":
                                cond = f"Generic guidance for {topic}."
                                resp = base
                            elif method == "Leaky":
                                cond = f"Memory: item {i}" + (f" {CUE[a]}" if side == "M" else "")
                                resp = base + (f" Also {CUE[a]}." if side == "M" else " Also keep it simple.")
                            else:
                                target = t % 2 == 0
                                u = np.array([0.5, 0.9 if (side == "M" and target) else 0.3, 0.4])
                                p = np.exp(view_eps * u / (2 * 0.6))
                                p /= p.sum()
                                ids = ["food.generic", "food.special", "food.quick"]
                                r = np.random.default_rng(zlib.crc32(f"{pid}|{seed}|{t}".encode()))
                                v = ids[int(r.choice(3, p=p))]
                                probs = json.dumps({"food": dict(zip(ids, map(float, p)))})
                                views = json.dumps([v])
                                released = json.dumps({"slots": [{"slot": "food", "view": v, "epsilon": "1/2",
                                                                  "charged": [a] if target else []}],
                                                       "ledger": {a: str(t // 2)}})
                                cond = f"View: {v}"
                                resp = base + (" Special idea." if v == "food.special" else " Quick idea.")
                            rows.append(dict(track=track, pair_id=pid, attribute=a, split=split_of(i),
                                             template="t0", overlap=False, response_model=model, method=method,
                                             side=side, seed=seed, turn=t, block=0, qtype="target",
                                             intent=topic, query=query, conditioning=cond, views=views,
                                             released=released, view_probs=probs, response=resp))
    del rng
    return pd.DataFrame(rows)
