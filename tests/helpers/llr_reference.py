"""A brute-force reference for :mod:`dpmv_lib.evaluate.llr`: the exact optimal auditor of a short
trajectory, by enumerating every view sequence (the tests compare the library's fast forms with it)."""
from __future__ import annotations

import itertools
import math
from typing import Mapping, Sequence


def brute_force(turns: Sequence[tuple[Mapping, Mapping]], fpr: float = 0.05) -> dict[str, float]:
    """Reference: enumerate every view sequence of a short trajectory and compute the auditor's
    AUC, its TPR at ``fpr`` (Neyman-Pearson) and the maximum privacy loss directly."""
    per = []
    for pm_t, pq_t in turns:
        for slot in sorted(pm_t):
            keys = sorted(set(pm_t[slot]) | set(pq_t[slot]))
            per.append([(pm_t[slot].get(k, 0.0), pq_t[slot].get(k, 0.0)) for k in keys])
    outcomes = []
    for combo in itertools.product(*per):
        a = math.prod(c[0] for c in combo)
        b = math.prod(c[1] for c in combo)
        if a > 0 or b > 0:
            outcomes.append((a, b))
    logs = [(math.inf if b == 0 else -math.inf if a == 0 else math.log(a) - math.log(b)) for a, b in outcomes]
    auc = 0.0
    for (a, _), lx in zip(outcomes, logs):
        for (_, b), ly in zip(outcomes, logs):
            tie = lx == ly or (math.isfinite(lx) and math.isfinite(ly) and abs(lx - ly) <= 1e-12)
            auc += a * b * (0.5 if tie else 1.0 if lx > ly else 0.0)
    lr = dict(zip(outcomes, logs)).__getitem__
    # Neyman-Pearson at fpr by greedy fill in LR order
    acc_q = acc_m = 0.0
    for o in sorted(outcomes, key=lr, reverse=True):
        if acc_q + o[1] <= fpr:
            acc_q += o[1]
            acc_m += o[0]
        else:
            acc_m += o[0] * (fpr - acc_q) / o[1]
            break
    loss = max(math.inf if (a == 0 or b == 0) else abs(math.log(a / b)) for a, b in outcomes)
    return {"auc": auc, "tpr": acc_m, "max_loss": loss, "n_outcomes": len(outcomes)}
