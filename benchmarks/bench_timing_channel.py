"""Timing channel of the exact samplers: does one release's running time tell M from M'?

    PYTHONPATH=. .venv/bin/python benchmarks/bench_timing_channel.py [--n 10000] [--eps 4 10] [--seed 0]

Adjacent stores: the paper's running example (``dpmv_lib.checks.examples.running_example``), M
against each neighbour (M' without the diabetes evidence, M' without the debt evidence).

Part 1, the selection. For every (query, slot) whose utilities
differ between M and M' - computed by MemView's own path (``MemView.prepare``: lexicon scorer,
exact Fractions) - and for eps in ``--eps`` (Du = the policy's 3/5), every exact sampler makes
``--n`` selections per side:

* EM "rejection": ``sample_em_exact`` (uniform proposals + exact Bernoulli(exp(-x)), CKS 2020);
* EM "fixed": ``sample_em_fixed`` (the default: work fixed by |V_g|, eps and Du);
* PF "sequential" / "fixed": ``sample_pf_exact`` / ``sample_pf_fixed`` for the permute-and-flip
  selector.

``--hostile`` (default "add") adds the utility vectors a custom scorer may return (:func:`hostile_pairs`:
floats, large denominators, 1/10^300 against 0, a subnormal float, and an A/A control); "only" runs
just those.

Each selection is the call a release makes (``selector.sample_exact(list(u), eps, Du, source)``)
with the deployment's OS randomness (``SystemRandomSource``), timed alone with
``time.perf_counter_ns`` on a fresh copy of the utilities (made untimed, so that where two fixed
sets of objects happen to lie in memory does not pose as a difference between M and M'); M and M'
calls alternate in a random order (after a warm-up), so drift of the machine hits both sides
alike; the garbage collector stays on, as in deployment. Two A/A controls (M against an equal copy
of M) show what the method finds with no difference at all.

Part 2, the whole release (context; ``--release-n``, 0 skips it): ``MemView.release`` end to end
(routing, plan, ledger, lexicon scorer, selection) for each query whose slots differ, with the
policy's caps raised so that OnlineBudget(3) gives eps = 4 or 10, a fresh in-memory ledger per
release (outside the timed call), Eq. (7) with either exact sampler.

The attacker sees one time and guesses the side. Classifiers, fitted on a random half of the 2n
times (half of each side) and scored on the other half: the best threshold on the time in either
direction (the audit's one-shot classifier) and a k-nearest-neighbour vote on log time (k = 101,
catches multi-modal differences a threshold misses). Because the released view is public and may
itself tell M from M' (that is the eps-DP loss), the table also gives the accuracy of the
majority side per released view ("view only") and of a best threshold per released view ("view +
time"): the time leaks beyond the view by their difference. Accuracy with a 95% Wilson interval;
0.5 is chance. Mean and p99 time per call are over both sides.

Writes benchmarks/results/timing_channel.json and timing_channel.md (with the CPU model and
ISA flags: timings are not comparable across machines). Never a timed test: the tests check the
samplers' laws and that the fixed-work samplers' randomness requests and arithmetic do not depend
on the utilities (tests/test_exact_sampler.py).
"""
from __future__ import annotations

import argparse
import gc
import json
import math
import random
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path
from typing import Any, Callable

import numpy as np

from machine_info import describe, loadavg, machine  # noqa: E402  (benchmarks/ is on sys.path as a script)

from dpmv_lib.checks.examples import RUNNING_EXAMPLE_POLICY, running_example  # noqa: E402
from dpmv_lib.core.ledger import InMemoryLedger, OnlineBudget  # noqa: E402
from dpmv_lib.core.sampling import SystemRandomSource  # noqa: E402
from dpmv_lib.core.memview import MemView  # noqa: E402
from dpmv_lib.core.policy import Policy, Query  # noqa: E402
from dpmv_lib.core.selection import exponential_mechanism, permute_and_flip  # noqa: E402
from dpmv_lib.core.store import MemoryStore  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results"
QUERY_TEXT = {"affordable_dinner": "Any ideas for an affordable dinner?", "meal_plan": "Plan my meals for the week.",
              "budget_check": "How is my budget looking?", "checkup_prep": "Help me prepare for my checkup.",
              "weekend_plan": "What should I do this weekend?"}
SAMPLERS = (("em", "rejection"), ("em", "fixed"), ("pf", "sequential"), ("pf", "fixed"))
DEFAULT = {"em": "fixed", "pf": "fixed"}
TARGET = 0.55
KNN_K = 101
K_RELEASE = 3   # OnlineBudget(K) of the end-to-end part: caps = eps * K


def adjacent_pairs() -> tuple[list[dict], Fraction]:
    """(query, slot, neighbour) of the running example whose utilities differ between M and M',
    and the policy's sensitivity bound Du."""
    policy, m, *neighbours = running_example()
    out = []
    for intent in RUNNING_EXAMPLE_POLICY["routes"]:
        q = Query(QUERY_TEXT.get(intent, intent), intent)
        for slot in policy.route(q, ()):
            um = MemView(policy, m, seed=0).prepare(q, slot, ()).utilities
            for mp in neighbours:
                ump = MemView(policy, mp, seed=0).prepare(q, slot, ()).utilities
                if um and ump and tuple(um) != tuple(ump):
                    out.append({"pair": f"{intent}/{slot}, M vs {mp.name}", "intent": intent, "slot": slot,
                                "neighbour": mp.name, "control": False, "u_M": [str(u) for u in um],
                                "u_Mprime": [str(u) for u in ump], "_u": (list(um), list(ump))})
    for p in [out[0], next(p for p in out if len(p["u_M"]) != len(out[0]["u_M"]))]:   # A/A controls
        um = p["_u"][0]
        copy = [Fraction(u.numerator, u.denominator) for u in um]    # equal values, other objects
        out.append({**p, "pair": f"{p['intent']}/{p['slot']}, control: M vs M", "neighbour": None, "control": True,
                    "u_Mprime": p["u_M"], "_u": (list(um), copy)})
    return out, policy.sensitivity


def _pair(name: str, um: list, ump: list, control: bool = False) -> dict:
    return {"pair": name, "intent": "custom", "slot": "custom", "neighbour": None if control else "custom",
            "control": control, "u_M": [repr(u) if isinstance(u, float) else str(u) for u in um],
            "u_Mprime": [repr(u) if isinstance(u, float) else str(u) for u in ump], "_u": (list(um), list(ump))}


def hostile_pairs() -> list[dict]:
    """Adjacent utility vectors a custom scorer may return (MemView accepts any finite number in
    [0, 1], floats through their binary value): floats with 2^-55 steps, a running-example pair
    as floats and with large denominators, 1/10^300 against 0, the smallest subnormal float;
    and an A/A control of floats."""
    big = Fraction(1, 3 ** 190)   # a utility moved by < 10^-90: a denominator of ~300 bits
    run_m, run_mp = [Fraction(1, 2), Fraction(1), Fraction(4, 5), Fraction(0)], \
        [Fraction(1, 2), Fraction(2, 5), Fraction(4, 5), Fraction(0)]
    return [
        _pair("custom: [1/2]*4 vs [1/2, 1/2, 1/2, 0.1] (floats)", [0.5] * 4, [0.5, 0.5, 0.5, 0.1]),
        _pair("custom: running pair as floats", [float(u) for u in run_m], [float(u) for u in run_mp]),
        _pair("custom: running pair + 1/3^190 (large denominators)", [min(Fraction(1), u + big) for u in run_m],
              [min(Fraction(1), u + big) for u in run_mp]),
        _pair("custom: [1/10^300, 1/2] vs [0, 1/2]", [Fraction(1, 10 ** 300), Fraction(1, 2)],
              [Fraction(0), Fraction(1, 2)]),
        _pair("custom: [5e-324, 0.5] vs [0.0, 0.5] (subnormal float)", [5e-324, 0.5], [0.0, 0.5]),
        _pair("custom, control: [1/2, 1/2, 1/2, 0.1] vs itself", [0.5, 0.5, 0.5, 0.1], [0.5, 0.5, 0.5, 0.1],
              control=True),
    ]


def fresh_value(u: Any) -> Any:
    """An equal utility in a new object (Fraction or float), made untimed before each call."""
    if isinstance(u, Fraction):
        return Fraction(u.numerator, u.denominator)
    return float.fromhex(float(u).hex())


def time_interleaved(call: Callable[[int], Any], n: int, rng: random.Random,
                     before: Callable[[int], None] | None = None, warmup: int = 500
                     ) -> tuple[tuple[np.ndarray, np.ndarray], tuple[list, list]]:
    """n timed ``call(side)`` per side (ns) and their outputs, the two sides interleaved in random
    order; ``before(side)`` runs untimed before each call."""
    clock = time.perf_counter_ns
    for i in range(warmup):
        if before:
            before(i % 2)
        call(i % 2)
    times = (np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64))
    outs: tuple[list, list] = ([], [])
    for i in range(n):
        for side in ((0, 1) if rng.random() < 0.5 else (1, 0)):
            if before:
                before(side)
            t0 = clock()
            out = call(side)
            times[side][i] = clock() - t0
            outs[side].append(out)
    return times, outs


def wilson(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def best_threshold(t: np.ndarray, y: np.ndarray) -> tuple[float, int]:
    """(threshold, direction) maximising training accuracy of 'predict ``direction`` if t > thr,
    else 1 - direction' (thr = -inf: a constant prediction)."""
    order = np.argsort(t, kind="stable")
    ts, ys = t[order], y[order]
    n = len(ts)
    ones_below = np.concatenate([[0], np.cumsum(ys)])       # labels 1 among the first j
    zeros_below = np.arange(n + 1) - ones_below
    total_ones = ones_below[-1]
    acc_up = zeros_below + (total_ones - ones_below)          # predict 1 above the cut
    acc_down = ones_below + ((n - total_ones) - zeros_below)  # predict 0 above the cut
    valid = np.concatenate([[True], ts[1:] != ts[:-1], [True]])  # cuts between distinct values
    acc_up, acc_down = np.where(valid, acc_up, -1), np.where(valid, acc_down, -1)
    j_up, j_down = int(np.argmax(acc_up)), int(np.argmax(acc_down))
    j, direction = (j_up, 1) if acc_up[j_up] >= acc_down[j_down] else (j_down, 0)
    thr = -np.inf if j == 0 else float(ts[j - 1])
    return thr, direction


def _predict(thr: float, direction: int, t: np.ndarray) -> np.ndarray:
    return np.where(t > thr, direction, 1 - direction)


def classify(times: tuple[np.ndarray, np.ndarray], outs: tuple[list, list], seed: int) -> dict:
    """Train on a random half of each side, test on the rest: threshold and k-NN on the time, and
    majority / threshold per released view."""
    from sklearn.neighbors import KNeighborsClassifier

    rng = np.random.default_rng(seed)
    tr, te = ([], [], []), ([], [], [])   # (time, label, view)
    for label, (t, o) in enumerate(zip(times, outs)):
        perm = rng.permutation(len(t))
        half = len(t) // 2
        for part, idx in ((tr, perm[:half]), (te, perm[half:])):
            part[0].append(t[idx])
            part[1].append(np.full(len(idx), label))
            part[2].append(np.array([repr(o[i]) for i in idx], dtype=object))
    tr_x, tr_y, tr_v = (np.concatenate(a) for a in tr)
    te_x, te_y, te_v = (np.concatenate(a) for a in te)
    tr_x, te_x = tr_x.astype(float), te_x.astype(float)
    n = len(te_y)
    thr, direction = best_threshold(tr_x, tr_y)
    k_thr = int((_predict(thr, direction, te_x) == te_y).sum())
    knn = KNeighborsClassifier(n_neighbors=KNN_K).fit(np.log(tr_x)[:, None], tr_y)
    k_knn = int((knn.predict(np.log(te_x)[:, None]) == te_y).sum())
    pred_view, pred_view_time = np.zeros(n, dtype=int), np.zeros(n, dtype=int)
    for v in set(te_v) | set(tr_v):
        sel_tr, sel_te = tr_v == v, te_v == v
        ys = tr_y[sel_tr]
        majority = int(ys.mean() > 0.5) if len(ys) else 0
        pred_view[sel_te] = majority
        if len(ys) >= 50:
            vt, vd = best_threshold(tr_x[sel_tr], ys)
            pred_view_time[sel_te] = _predict(vt, vd, te_x[sel_te])
        else:
            pred_view_time[sel_te] = majority
    k_view, k_view_time = int((pred_view == te_y).sum()), int((pred_view_time == te_y).sum())
    return {"n_test": n, "threshold_ns": thr, "threshold_direction": direction,
            "acc_threshold": k_thr / n, "ci_threshold": wilson(k_thr, n),
            "acc_knn": k_knn / n, "ci_knn": wilson(k_knn, n),
            "acc_view": k_view / n, "acc_view_time": k_view_time / n, "ci_view_time": wilson(k_view_time, n)}


def stats_row(times: tuple[np.ndarray, np.ndarray]) -> dict:
    both = np.concatenate(times) / 1e3
    return {"mean_us": float(both.mean()), "median_us": float(np.median(both)),
            "p99_us": float(np.percentile(both, 99)),
            "mean_us_M": float(times[0].mean() / 1e3), "mean_us_Mprime": float(times[1].mean() / 1e3),
            "median_us_M": float(np.median(times[0]) / 1e3), "median_us_Mprime": float(np.median(times[1]) / 1e3)}


def release_setup(eps: Fraction) -> tuple[Policy, list[MemoryStore]]:
    """The running example's policy with caps eps * K_RELEASE (OnlineBudget(K_RELEASE) gives eps)."""
    _, m, *neighbours = running_example()
    spec = json.loads(json.dumps(RUNNING_EXAMPLE_POLICY))
    for a in spec["attributes"]:
        a["cap"] = str(eps * K_RELEASE)
    policy = Policy.from_dict(spec)
    texts = [{i: st.read((i,))[0] for i in range(1, 7)} for st in (m, *neighbours)]
    stores = [MemoryStore.from_policy(policy, t, name=st.name) for t, st in zip(texts, (m, *neighbours))]
    return policy, stores


def git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "dpmv_lib", "benchmarks/*.py"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() + (" + uncommitted changes" if dirty else "") if out.returncode == 0 else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=10_000, help="timed selections per side")
    ap.add_argument("--release-n", type=int, default=10_000, help="timed releases per side in part 2 (0: skip)")
    ap.add_argument("--eps", type=Fraction, nargs="+", default=[Fraction(4), Fraction(10)])
    ap.add_argument("--seed", type=int, default=0, help="interleaving order and train/test split")
    ap.add_argument("--samplers", nargs="+", default=[f"{a}/{b}" for a, b in SAMPLERS],
                    help="selector/sampler pairs to measure (default: all four)")
    ap.add_argument("--hostile", choices=["", "add", "only"], default="add",
                    help="custom-scorer utility pairs (floats, large denominators, 1/10^300, a subnormal): added "
                         "to the running example's pairs (default), only these, or none ('')")
    ap.add_argument("--note", default="", help="a note on the machine's conditions, written into the table")
    ap.add_argument("--out", default="timing_channel")
    args = ap.parse_args()
    samplers = [tuple(s.split("/")) for s in args.samplers]
    if not set(samplers) <= set(SAMPLERS):
        ap.error(f"--samplers: choose among {[f'{a}/{b}' for a, b in SAMPLERS]}")
    pairs, du = adjacent_pairs()
    if args.hostile:
        pairs = (pairs if args.hostile == "add" else []) + hostile_pairs()
    selectors = {("em", s): exponential_mechanism(s) for s in ("rejection", "fixed")}
    selectors |= {("pf", s): permute_and_flip(s) for s in ("sequential", "fixed")}
    info = machine()
    rng = random.Random(args.seed)
    src = SystemRandomSource()
    rows, release_rows = [], []
    t_start = time.time()
    total = len(args.eps) * len(pairs) * len(samplers)
    done = 0
    for eps in args.eps:
        for p in pairs:
            for sel, name in samplers:
                sample, u_sides = selectors[(sel, name)].sample_exact, p["_u"]
                held: list = [None]

                def fresh_copy(side: int) -> None:   # new Fraction objects per call: no fixed object layout
                    held[0] = tuple(fresh_value(u) for u in u_sides[side])  # noqa: B023 - called within the iteration

                times, outs = time_interleaved(lambda side: sample(list(held[0]), eps, du, src), args.n, rng,  # noqa: B023 - called within the iteration
                                               before=fresh_copy)
                rows.append({"selector": sel, "sampler": name, "default": DEFAULT[sel] == name, "eps": str(eps),
                             "pair": p["pair"], "control": p["control"], **stats_row(times),
                             **classify(times, outs, args.seed + done)})
                done += 1
                r = rows[-1]
                print(f"[{done}/{total}] eps {eps} {sel}/{name:10s} {p['pair']:55s} thr {r['acc_threshold']:.3f} "
                      f"knn {r['acc_knn']:.3f} view {r['acc_view']:.3f} view+time {r['acc_view_time']:.3f} "
                      f"mean {r['mean_us']:.1f} us p99 {r['p99_us']:.1f} us", flush=True)
                gc.collect()
    intents = sorted({(p["intent"], p["neighbour"]) for p in pairs if not p["control"] and p["intent"] != "custom"})
    intents += [(intents[0][0], None)] if intents else []   # A/A control: two MemViews over equal copies of M
    for eps in args.eps if args.release_n and intents else []:
        policy, (m, *neighbours) = release_setup(eps)
        by_name = {st.name: st for st in neighbours}
        by_name[None] = m.replace({}, name="M (copy)")
        for intent, neighbour in intents:
            q = Query(QUERY_TEXT.get(intent, intent), intent)
            for name in ("rejection", "fixed"):
                mvs = [MemView(policy, st, budget=OnlineBudget(K_RELEASE), selector=exponential_mechanism(name))
                       for st in (m, by_name[neighbour])]

                def fresh(side: int) -> None:
                    mvs[side].ledger = InMemoryLedger.for_policy(policy)  # noqa: B023 - called within the iteration

                times, outs = time_interleaved(lambda side: tuple(sorted(mvs[side].release(q).views.items())),  # noqa: B023 - called within the iteration
                                               args.release_n, rng, before=fresh)
                release_rows.append({"selector": "em", "sampler": name, "default": name == "fixed", "eps": str(eps),
                                     "pair": f"{intent}, " + (f"M vs {neighbour}" if neighbour else "control: M vs M"),
                                     "control": neighbour is None, **stats_row(times),
                                     **classify(times, outs, args.seed + 1000 + len(release_rows))})
                r = release_rows[-1]
                print(f"[release] eps {eps} em/{name:10s} {r['pair']:40s} thr {r['acc_threshold']:.3f} "
                      f"knn {r['acc_knn']:.3f} view {r['acc_view']:.3f} view+time {r['acc_view_time']:.3f} "
                      f"mean {r['mean_us']:.1f} us", flush=True)
                gc.collect()
    summary = []
    for eps in args.eps:
        for sel, name in samplers:
            mine = [r for r in rows if r["eps"] == str(eps) and (r["selector"], r["sampler"]) == (sel, name)]
            rs = [r for r in mine if not r["control"]]
            worst = max(rs, key=lambda r: max(r["acc_threshold"], r["acc_knn"]))
            summary.append({"selector": sel, "sampler": name, "default": DEFAULT[sel] == name, "eps": str(eps),
                            "max_acc_threshold": max(r["acc_threshold"] for r in rs),
                            "max_acc_knn": max(r["acc_knn"] for r in rs),
                            "max_gain_view_time": max(r["acc_view_time"] - r["acc_view"] for r in rs),
                            "worst_pair": worst["pair"],
                            "worst_acc": max(worst["acc_threshold"], worst["acc_knn"]),
                            "worst_ci": (worst["ci_threshold"] if worst["acc_threshold"] >= worst["acc_knn"]
                                         else worst["ci_knn"]),
                            "mean_us": float(np.mean([r["mean_us"] for r in rs])),
                            "median_us": float(np.mean([r["median_us"] for r in rs])),
                            "p99_us": float(np.max([r["p99_us"] for r in rs])),
                            "control_max_acc": max(max(r["acc_threshold"], r["acc_knn"]) for r in mine
                                                   if r["control"])})
    met = all(max(s["max_acc_threshold"], s["max_acc_knn"]) <= TARGET for s in summary if s["default"])
    result = {"what": "one-shot classifier on the running time of one exact selection, M vs M'",
              "command": "PYTHONPATH=. .venv/bin/python benchmarks/bench_timing_channel.py " + " ".join(sys.argv[1:]),
              "commit": git_commit(), "n_per_side": args.n, "release_n_per_side": args.release_n,
              "eps": [str(e) for e in args.eps], "sensitivity": str(du), "seed": args.seed, "knn_k": KNN_K,
              "target_max_accuracy": TARGET, "note": args.note, "target_met_by_defaults": met, "machine": info,
              "loadavg_at_end": loadavg(), "wall_s": round(time.time() - t_start, 1),
              "pairs": [{k: v for k, v in p.items() if not k.startswith("_")} for p in pairs],
              "summary": summary, "rows": rows, "release_rows": release_rows}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{args.out}.json").write_text(json.dumps(result, indent=1) + "\n")
    (OUT / f"{args.out}.md").write_text(markdown(result))
    print(f"target (accuracy <= {TARGET} for the default samplers at every eps and pair): "
          f"{'met' if met else 'NOT met'}")
    print(f"wrote {OUT / (args.out + '.md')}")


def _ci(ci) -> str:
    return f"[{ci[0]:.3f}, {ci[1]:.3f}]"


def _row_lines(rows: list[dict]) -> list[str]:
    lines = ["| selector | exact sampler | eps | pair | threshold acc. [95% CI] | k-NN acc. [95% CI] | view only "
             "| view + time | median us (M / M') | mean us | p99 us |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['selector']} | {r['sampler']} | {r['eps']} | {r['pair']} | {r['acc_threshold']:.3f} "
                     f"{_ci(r['ci_threshold'])} | {r['acc_knn']:.3f} {_ci(r['ci_knn'])} | {r['acc_view']:.3f} | "
                     f"{r['acc_view_time']:.3f} | {r['median_us_M']:.1f} / {r['median_us_Mprime']:.1f} | "
                     f"{r['mean_us']:.1f} | {r['p99_us']:.1f} |")
    return lines


def markdown(res: dict) -> str:
    n_test = res["rows"][0]["n_test"] if res["rows"] else 0
    lines = ["# Timing channel of the exact samplers", "",
             f"Machine: {describe(res['machine'])}; load average before/after: "
             f"{res['machine']['loadavg_at_start']} / {res['loadavg_at_end']}."
             + (f" Note: {res['note']}" if res.get("note") else ""),
             f"Code: {res['commit']}. Command: `{res['command']}` ({res['wall_s']} s).", "",
             f"Adjacent stores: the running example, M against each neighbour, for every (query, slot) whose utilities "
             f"differ, and the 'custom' utility vectors a scorer other than the lexicon one may return (floats, large "
             f"denominators, 1/10^300, a subnormal float) ({len(res['pairs'])} pairs); Du = {res['sensitivity']}. "
             f"{res['n_per_side']} selections per side "
             f"and sampler, each the call a release makes with OS randomness on a fresh copy of the utilities, timed "
             f"alone, M and M' interleaved in random order. Classifiers fitted on a random half of each side and "
             f"scored on the other half "
             f"({n_test} test times): best threshold on the time (the audit's one-shot classifier) and "
             f"{res['knn_k']}-NN on log time; 'view only' predicts the majority side of each released view, "
             f"'view + time' fits a threshold per released view (the time's leak beyond the public view is their "
             f"difference); 'control: M vs M' times two equal copies of M's utilities (or stores) - the accuracy the "
             f"method finds with no difference at all (object layout, drift); 95% Wilson intervals; chance is 0.5. "
             f"Target for the default samplers: time-only "
             f"accuracy <= {res['target_max_accuracy']} at every eps and pair: "
             f"**{'met' if res['target_met_by_defaults'] else 'not met'}**.", "",
             "## Worst pair per sampler", "",
             "| selector | exact sampler | default | eps | max threshold acc. | max k-NN acc. | worst pair "
             "| its acc. [95% CI] | max gain of time over view | A/A control (max acc.) | median us | mean us "
             "| max p99 us |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in res["summary"]:
        lines.append(f"| {s['selector']} | {s['sampler']} | {'yes' if s['default'] else 'no'} | {s['eps']} | "
                     f"{s['max_acc_threshold']:.3f} | {s['max_acc_knn']:.3f} | {s['worst_pair']} | "
                     f"{s['worst_acc']:.3f} {_ci(s['worst_ci'])} | {s['max_gain_view_time']:+.3f} | "
                     f"{s['control_max_acc']:.3f} | "
                     f"{s['median_us']:.1f} | {s['mean_us']:.1f} | {s['p99_us']:.1f} |")
    lines += ["", "## Every pair (selection only)", ""] + _row_lines(res["rows"])
    if res["release_rows"]:
        lines += ["", "## Whole release (context, not the sampler's target)", "",
                  f"`MemView.release` end to end (routing, plan, in-memory ledger, lexicon scorer, selection), "
                  f"{res['release_n_per_side']} releases per side, the running example's caps raised to eps * "
                  f"{K_RELEASE} so that OnlineBudget({K_RELEASE}) gives the eps shown; a fresh ledger before each "
                  f"(untimed) release; the view is the tuple of released views. The lexicon scorer reads the "
                  f"memory text, so its time depends on M itself, whatever the sampler.", "",
                  "| exact sampler | eps | max threshold acc. | max k-NN acc. | A/A control (max acc.) | median us "
                  "| mean us |", "|---|---|---|---|---|---|---|"]
        for eps in res["eps"]:
            for name in ("rejection", "fixed"):
                rs = [r for r in res["release_rows"] if r["eps"] == eps and r["sampler"] == name]
                real, ctrl = [r for r in rs if not r["control"]], [r for r in rs if r["control"]]
                if not real:
                    continue
                ctrl_acc = max((max(r["acc_threshold"], r["acc_knn"]) for r in ctrl), default=float("nan"))
                lines.append(f"| {name} | {eps} | {max(r['acc_threshold'] for r in real):.3f} | "
                             f"{max(r['acc_knn'] for r in real):.3f} | {ctrl_acc:.3f} | "
                             f"{np.mean([r['median_us'] for r in real]):.1f} | "
                             f"{np.mean([r['mean_us'] for r in real]):.1f} |")
        lines += [""] + _row_lines(res["release_rows"])
    lines += ["", "Utilities per pair (M | M'):", ""]
    for p in res["pairs"]:
        lines.append(f"- {p['pair']}: {', '.join(p['u_M'])} | {', '.join(p['u_Mprime'])}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
