"""tRec, Unsup and U per (track, method, attribute) with the judge of a checkout (default profile,
surrogate, the seven paper methods, EM seeds 0-2, T = 16): how a judge change moves the utility
numbers per attribute (issue 33). Run it in two checkouts and compare the CSVs, e.g.

    git worktree add /tmp/old c30ece7
    (cd /tmp/old && /path/to/.venv/bin/python -c "import sys; sys.path.insert(0, '.'); \
        sys.argv = ['x', '/tmp/old.csv']; exec(open('/path/to/tools/judge_versions.py').read())")
    .venv/bin/python tools/judge_versions.py /tmp/new.csv

benchmarks/results/judge_v3_v4_per_attribute.csv holds v3 (c30ece7) beside v4 (62569f4).
"""
import sys
import time

import pandas as pd

from dpmv_lib.experiments.profiles import get_profile
from dpmv_lib.experiments.rq1 import load_tracks, PAPER_METHODS
from dpmv_lib.generate.generation import InterfaceParams, generate_transcripts
from dpmv_lib.generate.responders import make_responder
from dpmv_lib.evaluate.encoders import get_encoder
from dpmv_lib.evaluate import judge as J
t0 = time.time()
prof = get_profile("default")
benches = load_tracks("data", prof, 0)
pols = [p for b in benches.values() for p in b.policies.values()]
resp = make_responder("surrogate", pols)
tr = pd.concat([generate_transcripts(b, resp, PAPER_METHODS, seeds=(0, 1, 2), turns=16,
                params=InterfaceParams(B_a=2, K=3, plan_horizon=16)) for b in benches.values()], ignore_index=True)
judge = J.make_judge("rubric", get_encoder("minilm", cache_dir="/tmp/embcache"))
ut = J.score_transcripts(tr, benches, judge, 16)
by = ut.groupby(["track", "method", "attribute", "pair_id", "side"])[["tRec", "Unsup", "U"]].mean().reset_index()
rows = []
for (t, m, a), g in by.groupby(["track", "method", "attribute"]):
    rows.append({"track": t, "method": m, "attribute": a, "tRec": g[g.side == "M"]["tRec"].mean(),
                 "Unsup": g[g.side == "M'"]["Unsup"].mean(), "U": g["U"].mean()})
pd.DataFrame(rows).to_csv(sys.argv[1], index=False)
print(judge.id, time.time() - t0)
