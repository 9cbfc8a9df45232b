"""Trusted-side diagnostics of the mechanism for notebook 02 (each returns a pandas DataFrame).

* :func:`em_view_table` - Eq. (7) probabilities per view under M and M' for one query;
* :func:`ledger_trace` - per slot-level operation: read set, Gamma*(R), charge, eps, admitted or
  fallback, released view and the ledger after the turn (C2, C5);
* :func:`counterexample_table` / :func:`loss_vs_horizon` - the B.5 constructions: analytic loss
  vs the exactly enumerated loss vs B_a, for the violating variant and compliant MemView;
* :func:`theorem1_check` / :func:`theorem1_table` - exact verification of Theorem 1:
  P[t | M] <= e^{B_a} P[t | M'] (and back) for every enumerated augmented transcript t.

The ``*_step`` functions are notebook 02's steps: each takes the notebook's
:class:`~dpmv_lib.experiments.session.Session`, writes its tables and figure and returns a
:class:`~dpmv_lib.experiments.result.Result` whose finding is computed from the numbers.

Utilities and EM probabilities are internal to the trusted interface (C3); they are shown here
only as a diagnostic of the mechanism, never released to an application.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Sequence, cast

import pandas as pd

from ..checks import counterexamples as cx
from .plots import save_figure
from ..checks.accounting import reconstructed_bound
from ..core.exact import Strategy, fixed_strategy, transcript_distribution
from ..checks.examples import running_example
from ..core.ledger import BudgetRule, OnlineBudget, PreallocatedBudget, planned_charges
from ..core.memview import MemView
from ..core.releases import Release
from ..core.policy import Policy, Query
from ..core.store import MemoryStore
from ..checks.variants import VARIANTS
from .result import Result

if TYPE_CHECKING:
    from .session import Session

REL_TOL = 1e-9

DINNER = Query("Any ideas for an affordable dinner?", "affordable_dinner")
MEAL = Query("Plan my meals for the week.", "meal_plan")
BUDGET = Query("How is my budget looking this month?", "budget_check")
CHECKUP = Query("What should I ask at my checkup?", "checkup_prep")


def running_queries(horizon: int) -> tuple[Query, ...]:
    """A fixed plan on the running example: dinner, meals, budget, checkup, dinner, ..."""
    base = (DINNER, MEAL, BUDGET, CHECKUP)
    return tuple(base[t % len(base)] for t in range(horizon))


def running_adaptive_strategy(history: tuple[Release, ...]) -> Query:
    """Adaptive: ask for a meal plan after a blood-sugar-conscious food view, a budget check
    after a strict-budget finance view, else the affordable-dinner query again."""
    if history:
        views = set(history[-1].views.values())
        if "food.low_sugar" in views:
            return MEAL
        if "finance.strict_budget" in views:
            return BUDGET
    return DINNER


# ---- sizes per profile -------------------------------------------------------------------------
NOTEBOOK_SIZES: dict[str, dict[str, int]] = {
    # horizon: turns enumerated exactly on the running example; max_selections: largest N in the
    # B.5 loss-vs-N sweep; trace_turns: length of the ledger trace; random_seeds: random policies
    "smoke": {"horizon": 2, "max_selections": 4, "trace_turns": 6, "random_seeds": 4},
    "default": {"horizon": 3, "max_selections": 8, "trace_turns": 8, "random_seeds": 16},
}


def notebook_sizes(profile: str, **overrides: int | None) -> dict[str, int]:
    """Problem sizes for notebook 02 (smoke: seconds; every other profile: the default sizes).
    ``None`` overrides are ignored."""
    sizes = dict(NOTEBOOK_SIZES["smoke" if profile == "smoke" else "default"])
    for k, v in overrides.items():
        if k not in sizes:
            raise ValueError(f"unknown size {k!r}; valid: {sorted(sizes)}")
        if v is not None:
            sizes[k] = int(v)
    return sizes


def running_example_table() -> pd.DataFrame:
    """The running example's layout: slot, label, group membership and the contents of M and of
    the two adjacent stores (trusted side; Figure 2)."""
    policy, m, m_d, m_b = running_example()
    rows = []
    for p in policy.positions:
        row = {"position": p.id, "slot": p.slot, "label": p.label}
        for a in policy.attributes:
            row[f"in I_{a.name}"] = p.id in a.group
        row.update({"M": m.contents[p.id], m_d.name: m_d.contents[p.id], m_b.name: m_b.contents[p.id]})
        rows.append(row)
    return pd.DataFrame(rows)


# ---- Eq. (7) per view -------------------------------------------------------------------------
def em_view_table(policy: Policy, m: MemoryStore, m_prime: MemoryStore, query: Query,
                  budget: BudgetRule | None = None, scorer=None,
                  interface: type[MemView] = MemView) -> pd.DataFrame:
    """Pr[v | M] and Pr[v | M'] of Eq. (7) for every view of every active slot at the first turn
    (fresh ledgers), with the utilities and the per-view log ratio (|.| <= eps_{t,g})."""
    rows = []
    sides = {}
    for label, store in (("M", m), ("M'", m_prime)):
        iface = interface(policy, store, budget=budget, scorer=scorer, seed=0).fork()
        per_slot = {}
        for slot in policy.route(query, ()):
            prep = iface.prepare(query, slot, ())
            u = dict(zip((v.id for v in prep.views), map(float, prep.utilities))) if prep.admitted else {}
            per_slot[slot] = (prep, u, {sr.view: p for sr, p in iface.outcomes(prep)})
        sides[label] = per_slot
    for slot, (prep, u_m, p_m) in sides["M"].items():
        _, u_mp, p_mp = sides["M'"][slot]
        for view in policy.slot(slot).views:
            pm, pmp = p_m.get(view.id, 0.0), p_mp.get(view.id, 0.0)
            rows.append({
                "slot": slot, "view": view.id, "generic": view.generic,
                "read_set": list(prep.plan.read_set), "affected": sorted(prep.plan.affected),
                "charged": sorted(prep.plan.charged),
                "epsilon": float(prep.plan.epsilon) if prep.plan.epsilon is not None else float("nan"),
                "admitted": prep.admitted,
                "u_M": u_m.get(view.id, float("nan")), "u_M'": u_mp.get(view.id, float("nan")),
                "P_M": pm, "P_M'": pmp,
                "log_ratio": (math.log(pm / pmp) if pm > 0 and pmp > 0 else
                              (0.0 if pm == pmp else math.inf)),
            })
    return pd.DataFrame(rows)


# ---- ledger trace -------------------------------------------------------------------------------
def ledger_trace(policy: Policy, store: MemoryStore, queries: Sequence[Query] | Strategy, horizon: int | None = None,
                 budget: BudgetRule | None = None, seed: int = 0, interface: type[MemView] = MemView,
                 **kwargs) -> pd.DataFrame:
    """One row per slot-level operation of a seeded run: what was read, which attributes the read
    touches (Gamma*), which were charged at what eps, admitted / fallback, the released view, and
    every ledger L_a after the turn (with the reconstructed bound of each attribute so far)."""
    strategy = fixed_strategy(queries) if not callable(queries) else queries
    # (a Strategy without a horizon raises TypeError here, as before)
    horizon = len(cast("Sequence[Query]", queries)) if horizon is None else horizon
    iface = interface(policy, store, budget=budget, seed=seed, **kwargs)
    history: list[Release] = []
    rows = []
    for t in range(horizon):
        q = strategy(tuple(history))
        rel = iface.release(q, history)
        history.append(rel)
        for s in rel.slots:
            row = {"turn": t, "intent": q.intent, "slot": s.slot, "read_set": list(s.read_set),
                   "affected": sorted(s.affected), "charged": sorted(s.charged),
                   "epsilon": str(s.epsilon), "admitted": s.mechanism != "generic",
                   "fallback": s.fallback, "mechanism": s.mechanism, "view": s.view}
            for a in policy.attribute_names:
                row[f"L_{a}"] = str(rel.spent.get(a, Fraction(0)))
                row[f"recon_{a}"] = str(reconstructed_bound(history, a))
            rows.append(row)
    return pd.DataFrame(rows)


# ---- exact Theorem 1 ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Theorem1Result:
    """Exact comparison of the augmented-transcript distributions under M and M'."""

    n_transcripts: int
    total_m: float
    total_m_prime: float
    max_loss: float
    bound: float
    violations: int  # transcripts with P[t|M] > e^B P[t|M'] (1 + tol) or the reverse

    @property
    def holds(self) -> bool:
        return self.violations == 0


def theorem1_check(make: Callable[[MemoryStore], MemView], m: MemoryStore, m_prime: MemoryStore,
                   strategy: Strategy, horizon: int, bound: float | Fraction,
                   rel_tol: float = REL_TOL) -> Theorem1Result:
    """Enumerate every augmented transcript under M and M' and count the transcripts that break
    P[t | M] <= e^{B_a} P[t | M'] or P[t | M'] <= e^{B_a} P[t | M] (Theorem 1, Eq. 3)."""
    dm = transcript_distribution(make, m, strategy, horizon)
    dmp = transcript_distribution(make, m_prime, strategy, horizon)
    factor = math.exp(float(bound)) * (1 + rel_tol)
    violations, worst = 0, 0.0
    for t in set(dm) | set(dmp):
        a, b = dm.get(t, 0.0), dmp.get(t, 0.0)
        if a > factor * b or b > factor * a:
            violations += 1
        if a > 0 or b > 0:
            loss = math.inf if a == 0 or b == 0 else abs(math.log(a) - math.log(b))
            worst = max(worst, loss)
    return Theorem1Result(len(set(dm) | set(dmp)), sum(dm.values()), sum(dmp.values()), worst,
                          float(bound), violations)


def _running_interfaces(policy: Policy, queries: Sequence[Query]) -> dict[str, tuple[type[MemView], BudgetRule]]:
    on, pre = OnlineBudget(3), PreallocatedBudget(planned_charges(policy, queries))
    out: dict[str, tuple[type[MemView], BudgetRule]] = {"DP-MemView (on)": (MemView, on),
                                                         "DP-MemView (pre)": (MemView, pre)}
    for name, cls in VARIANTS.items():
        if cls is not MemView:
            out[name] = (cls, on)
    return out


def theorem1_table(horizon: int = 3, strategies: Iterable[str] = ("fixed", "adaptive")) -> pd.DataFrame:
    """The exact Theorem-1 check on the running example (Figure 2), per interface, attribute and
    query strategy: #transcripts, total probabilities, exact max loss, B_a, violations."""
    policy, m, m_d, m_b = running_example()
    queries = running_queries(horizon)
    strat = {"fixed": fixed_strategy(queries), "adaptive": running_adaptive_strategy}
    rows = []
    for name, (cls, budget) in _running_interfaces(policy, queries).items():
        for attribute, mp in (("diabetes", m_d), ("debt", m_b)):
            for kind in strategies:
                def make(store: MemoryStore, cls: type[MemView] = cls, budget: BudgetRule = budget) -> MemView:
                    return cls(policy, store, budget=budget, seed=0)

                r = theorem1_check(make, m, mp, strat[kind], horizon, policy.attribute(attribute).cap)
                rows.append({"interface": name, "violates": cls.violates or "-", "attribute": attribute,
                             "strategy": kind, "horizon": horizon, "transcripts": r.n_transcripts,
                             "sum_P_M": r.total_m, "sum_P_M'": r.total_m_prime, "max_loss": r.max_loss,
                             "B_a": r.bound, "violations": r.violations, "holds": r.holds})
    return pd.DataFrame(rows)


def random_theorem1_table(seeds: Iterable[int], horizon: int = 3) -> pd.DataFrame:
    """Theorem 1 on small random policies (:mod:`dpmv_lib.checks.instances`): per seed, table or adaptive
    router, fixed or adaptive query strategy and budget mode, the exact max loss vs B_a."""
    from ..checks.instances import random_case
    rows = []
    for seed in seeds:
        for adaptive_policy in (False, True):
            case = random_case(seed, horizon=horizon, adaptive=adaptive_policy)
            for kind in ("fixed", "adaptive"):
                for mode in ("online", "pre"):
                    r = theorem1_check(case.factory(budget=case.budget(mode)), case.m, case.m_prime,
                                       case.strategy(kind), horizon, case.bound)
                    rows.append({"seed": seed, "router": "adaptive" if adaptive_policy else "table",
                                 "strategy": kind, "budget": mode, "attribute": case.attribute,
                                 "overlap": any(case.policy.attribute(case.attribute).group & a.group
                                                for a in case.policy.attributes if a.name != case.attribute),
                                 "transcripts": r.n_transcripts, "max_loss": r.max_loss, "B_a": r.bound,
                                 "loss_over_B_a": r.max_loss / r.bound, "violations": r.violations,
                                 "holds": r.holds})
    return pd.DataFrame(rows)


# ---- B.5 counterexamples ------------------------------------------------------------------------
def counterexample_row(case: cx.Counterexample) -> dict:
    """Analytic vs exact loss of a B.5 construction for the variant and for compliant MemView."""
    bad = theorem1_check(case.factory(), case.m, case.m_prime, case.strategy, case.horizon, case.bound)
    good = theorem1_check(case.factory(MemView), case.m, case.m_prime, case.strategy, case.horizon, case.bound)
    return {"variant": case.variant.label, "violates": case.violates, "construction": case.name,
            "N": case.horizon, "eps0": float(case.budget.epsilon0), "B_a": float(case.bound),
            "analytic_loss": case.analytic_loss, "exact_loss": bad.max_loss,
            "exceeds_B_a": bad.max_loss > float(case.bound) * (1 + REL_TOL),
            "MemView_exact_loss": good.max_loss, "MemView_within_B_a": good.holds}


def counterexample_table(**kwargs) -> pd.DataFrame:
    """One row per B.5 construction (see :mod:`dpmv_lib.checks.counterexamples`)."""
    return pd.DataFrame([counterexample_row(c) for c in cx.all_cases(**kwargs)])


def loss_vs_horizon(horizons: Iterable[int], eps0: Fraction = Fraction(1, 2)) -> pd.DataFrame:
    """Exact max privacy loss after N selections for IncompleteCharge (C2) and NoCap (C5) and for
    compliant MemView on the same constructions, next to B_a and the analytic N eps_0 / 2."""
    rows = []
    for n in horizons:
        for case in (cx.incomplete_charge_case(n, eps0), cx.no_cap_case(n, eps0)):
            for cls in (case.variant, MemView):
                r = theorem1_check(case.factory(cls), case.m, case.m_prime, case.strategy, n, case.bound)
                rows.append({"construction": case.variant.label, "interface": cls.label, "N": n,
                             "exact_loss": r.max_loss, "B_a": float(case.bound),
                             "analytic_variant_loss": case.analytic_loss})
    return pd.DataFrame(rows)


def plot_loss_vs_horizon(df: pd.DataFrame, path: str | Path | None = None):
    """Exact privacy loss vs N (one panel per construction); the dashed line is B_a."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator
    constructions = list(dict.fromkeys(df["construction"]))
    fig, axes = plt.subplots(1, len(constructions), figsize=(5 * len(constructions), 3.6), squeeze=False)
    for ax, name in zip(axes[0], constructions):
        sub = df[df["construction"] == name]
        for iface, g in sub.groupby("interface", sort=False):
            ax.plot(g["N"], g["exact_loss"], marker="o", label=iface)
        ax.axhline(sub["B_a"].iloc[0], color="k", ls="--", lw=1, label="B_a")
        ax.set_title(f"{name} construction (B.5)")
        ax.set_ylim(bottom=0)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("selections N")
        ax.set_ylabel("exact max privacy loss")
        ax.legend(frameon=False)
    fig.tight_layout()
    return save_figure(fig, path, dpi=150)


# ---- notebook 02 steps --------------------------------------------------------------------------
def sizes(run: "Session") -> dict[str, int]:
    """The problem sizes of notebook 02 for the run's profile and its ``horizon`` /
    ``max_selections`` parameters (:func:`notebook_sizes`)."""
    return notebook_sizes(run.profile.name, horizon=run.params.get("horizon"),
                          max_selections=run.params.get("max_selections"))


def running_example_step(run: "Session") -> Result:
    """The running example (Figure 2): the layout, the protected groups and the adjacent stores."""
    with run.timer("running example"):
        policy = running_example()[0]
        layout = running_example_table()
        run.write_table("02_running_example", layout, layout.to_markdown(index=False))
        groups = pd.DataFrame([{"attribute": a.name, "I_a": ", ".join(map(str, sorted(a.group))), "B_a": str(a.cap)}
                               for a in policy.attributes])
    shared = sorted(set.intersection(*(set(a.group) for a in policy.attributes)))
    return Result("The running example: layout, groups and adjacent stores",
                  tables={"positions and the three stores": layout, "protected groups": groups},
                  finding=f"{len(policy.positions)} positions in {len(policy.slots)} slots; the groups share "
                          f"position(s) {', '.join(map(str, shared)) or 'none'}, so a read of them is charged to "
                          f"both attributes; sensitivity $\\Delta u = {policy.sensitivity}$.")


def em_step(run: "Session") -> Result:
    """Eq. (7) on the affordable-dinner query: every view's probability under M and under each
    adjacent store, and the largest |log ratio| per slot against eps (C3)."""
    with run.timer("Eq. 7 probabilities"):
        policy, m, m_d, m_b = running_example()
        em = pd.concat([em_view_table(policy, m, mp, DINNER, budget=OnlineBudget(3)).assign(pair=label)
                        for mp, label in ((m_d, "M vs M' (no diabetes)"), (m_b, "M vs M' (no debt)"))],
                       ignore_index=True)
        run.write_table("02_em_views", em, em.to_markdown(index=False))
        check = em.groupby(["pair", "slot"]).agg(max_abs_log_ratio=("log_ratio", lambda s: s.abs().max()),
                                                 epsilon=("epsilon", "first"))
        check["within_eps"] = check["max_abs_log_ratio"] <= check["epsilon"] + 1e-12
    finance = check.loc[("M vs M' (no diabetes)", "finance"), "max_abs_log_ratio"]
    cols = ["pair", "slot", "view", "charged", "epsilon", "u_M", "u_M'", "P_M", "P_M'", "log_ratio"]
    verdict = "within" if check["within_eps"].all() else "NOT within"
    shown = em.loc[em["pair"] == "M vs M' (no diabetes)", cols[1:]]
    return Result("Eq. (7): view probabilities under M and M'", precision=4,
                  tables={"M vs M' (no diabetes), every view (both pairs: 02_em_views)": shown,
                          "largest |log ratio| per slot": check},
                  finding=f"Every view's log probability ratio is {verdict} $\\varepsilon$ "
                          f"(largest {check['max_abs_log_ratio'].max():.4f} against "
                          f"{check['epsilon'].min():.4f}); finance, which reads nothing of $I_D$, has "
                          f"{'identical' if finance == 0 else 'different'} distributions under M and "
                          f"M' (no diabetes).")


def _ledger_shown(trace: pd.DataFrame) -> pd.DataFrame:
    """The columns of a ledger trace a reader follows: the operation, its charge and the ledgers
    (read and affected sets, the mechanism and the reconstructed bounds are in the written table)."""
    keep = ["turn", "intent", "slot", "charged", "epsilon", "admitted", "fallback", "view"]
    return trace[keep + [c for c in trace.columns if c.startswith("L_")]]


def _ledger_finding(trace: pd.DataFrame, attributes: Sequence[str]) -> str:
    last = trace.iloc[-1]
    ledgers = ", ".join(f"L_{a} = {last[f'L_{a}']}" for a in attributes)
    agree = all((trace[f"L_{a}"] == trace[f"recon_{a}"]).all() for a in attributes)
    return (f"{int(trace['admitted'].sum())} selections admitted and {int(trace['fallback'].sum())} generic "
            f"fallbacks; final ledgers {ledgers}; the reconstructed bound "
            f"{'equals' if agree else 'differs from'} the ledger on every row.")


def ledger_trace_step(run: "Session") -> Result:
    """The ledgers over a short transcript of the running example (C2, C5)."""
    with run.timer("ledger trace"):
        policy, m, _, _ = running_example()
        trace = ledger_trace(policy, m, running_queries(sizes(run)["trace_turns"]), budget=OnlineBudget(3),
                             seed=run.cfg.seed)
        run.write_table("02_ledger_trace", trace, trace.to_markdown(index=False))
    return Result("Ledgers over a short transcript",
                  tables={"one row per slot-level operation (all columns: 02_ledger_trace)": _ledger_shown(trace)},
                  finding=_ledger_finding(trace, policy.attribute_names))


def figure2_step(run: "Session") -> Result:
    """Figure 2's turn: with L_D = 3/2 already spent, food (charging D and B) falls back to its
    generic view and finance (charging B only) is admitted."""
    from ..core.ledger import InMemoryLedger

    with run.timer("Figure 2 turn"):
        policy, m, _, _ = running_example()
        turn = ledger_trace(policy, m, [DINNER], budget=OnlineBudget(3), seed=run.cfg.seed,
                            ledger=InMemoryLedger(policy.caps, spent={"diabetes": "3/2"}))
        run.write_table("02_figure2_turn", turn, turn.to_markdown(index=False))
    rows = {r.slot: r for r in turn.itertuples()}
    said = [f"{slot} {'is admitted' if r.admitted else 'falls back to ' + r.view}" for slot, r in rows.items()]
    return Result("The Figure 2 turn (L_D = 3/2 already spent)",
                  tables={"the two slot operations (all columns: 02_figure2_turn)": _ledger_shown(turn)},
                  finding=f"{'; '.join(said)}; afterwards L_diabetes = {turn.iloc[-1]['L_diabetes']} and "
                          f"L_debt = {turn.iloc[-1]['L_debt']}.")


def counterexamples_step(run: "Session") -> Result:
    """Appendix B.5: each contract-violating variant against compliant MemView on its construction."""
    with run.timer("B.5 constructions"):
        cex = counterexample_table()
        run.write_table("02_counterexamples", cex, cex.to_markdown(index=False))
    over = cex[cex["exceeds_B_a"]]
    return Result("Appendix B.5: each safeguard is necessary",
                  tables={"one row per construction": cex.drop(columns=["construction"])},
                  finding=f"{len(over)} of {len(cex)} violating variants exceed $B_a$ on their construction "
                          f"({', '.join(over['variant'])}); compliant MemView stays within $B_a$ on "
                          f"{int(cex['MemView_within_B_a'].sum())} of {len(cex)}.")


def loss_sweep_step(run: "Session") -> Result:
    """The exact loss after N selections on the C2 and C5 constructions, with the figure."""
    with run.timer("loss vs N"):
        sweep = loss_vs_horizon(range(1, sizes(run)["max_selections"] + 1))
        run.write_table("02_loss_vs_selections", sweep, sweep.to_markdown(index=False))
        path = run.figure_path("02_privacy_loss")
        plot_loss_vs_horizon(sweep, path)
        import matplotlib.pyplot as plt

        plt.close("all")
    top = sweep[sweep["N"] == sweep["N"].max()]
    var = top[top["interface"] == top["construction"]]
    mem = top[top["interface"] != top["construction"]]
    wide = sweep.pivot_table(index="N", columns=["construction", "interface"], values="exact_loss")
    wide.columns = [f"{c}: {i}" for c, i in wide.columns]
    return Result("Exact privacy loss against the number of selections", precision=4,
                  tables={"exact max loss": wide}, figures={"loss": path},
                  finding=f"At N = {int(top['N'].iloc[0])} the violating variants reach an exact loss of "
                          + ", ".join(f"{r.exact_loss:.2f} ({r.construction}, $B_a$ = {r.B_a:g})"
                                      for r in var.itertuples())
                          + f"; compliant MemView stops at {mem['exact_loss'].max():.2f} on the same constructions.")


def theorem1_step(run: "Session") -> Result:
    """Theorem 1 checked exactly on the running example, per interface, attribute and strategy."""
    with run.timer("Theorem 1 (running example)"):
        thm = theorem1_table(sizes(run)["horizon"])
        run.write_table("02_theorem1_running_example", thm, thm.to_markdown(index=False))
    ok = thm[thm["violates"] == "-"]
    bad = thm[thm["violates"] != "-"]
    broken = sorted(set(bad.loc[~bad["holds"], "interface"]))
    per = thm.groupby(["interface", "violates"], sort=False).agg(
        checks=("holds", "size"), transcripts=("transcripts", "sum"), max_loss=("max_loss", "max"),
        B_a=("B_a", "max"), violations=("violations", "sum"), all_hold=("holds", "all")).reset_index()
    return Result("Theorem 1 on the running example",
                  tables={"per interface over attributes and strategies (02_theorem1_running_example)": per},
                  finding=f"Compliant MemView {'holds' if ok['holds'].all() else 'FAILS'} on "
                          f"{int(ok['holds'].sum())} of {len(ok)} checks ({int(ok['transcripts'].sum())} "
                          f"transcripts, {int(ok['violations'].sum())} violating); variants with a violation at "
                          f"horizon {int(thm['horizon'].iloc[0])}: {', '.join(broken) or 'none'}.")


def random_theorem1_step(run: "Session") -> Result:
    """Theorem 1 on small random policies (:mod:`dpmv_lib.checks.instances`), summarised."""
    with run.timer("Theorem 1 (random policies)"):
        seed = run.cfg.seed
        rnd = random_theorem1_table(range(seed, seed + sizes(run)["random_seeds"]), horizon=3)
        run.write_table("02_theorem1_random", rnd, rnd.to_markdown(index=False))
        summary = rnd.groupby(["router", "strategy", "budget"]).agg(
            cases=("seed", "size"), transcripts=("transcripts", "sum"), worst_loss_over_B_a=("loss_over_B_a", "max"),
            violations=("violations", "sum"), all_hold=("holds", "all"))
    return Result("Theorem 1 on random policies", tables={"per router, strategy and budget": summary},
                  finding=f"Theorem 1 {'holds' if rnd['holds'].all() else 'FAILS'} on {int(rnd['holds'].sum())} of "
                          f"{len(rnd)} random cases ({int(rnd['transcripts'].sum())} transcripts); the worst loss "
                          f"is {rnd['loss_over_B_a'].max():.3f} of $B_a$.")
