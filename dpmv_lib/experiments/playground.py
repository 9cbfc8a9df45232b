"""The MemView playground of notebook 07 (beyond the paper): one PairedMem pair, M and M' side by side.

For a pair, a method (DP-MemView online / preallocated, Eq. (7) or permute-and-flip), a cap B_a
and a granularity K, :func:`replay` runs the trusted :class:`~dpmv_lib.core.memview.MemView` on
both stores over the first T turns of the pair's trajectory (a typed query may replace the
query of one turn) and records, per slot-level operation, what the paper's interface does:

* the route G_t and the positions read R_{t,g} (C4), the affected attributes Gamma*(R) and the
  charge set Gamma (C2), the local eps_{t,g} of the budget rule;
* the prospective cap check L_a + eps <= B_a for every a in Gamma, the ledgers before and after
  (C5), and the decision: an admitted selection, or the fixed generic view at zero cost;
* the released view and mechanism (``MemView.release``, the very call a deployment makes);
* trusted-side diagnostics that never leave the interface: the exact utilities u(q, v; M_R) and
  the selector's probabilities (Eq. (7) or permute-and-flip) of every view of V_g under BOTH
  stores for the same public plan, hence the realised privacy loss log p_M(v) / p_M'(v) of the
  released view.

Only public pieces are used: ``MemView.plan`` (the public plan), ``MemView.release``,
``MemView.ledger``, ``MemView.selector`` (its ``probabilities``),
:func:`~dpmv_lib.core.memview.selector_log_probabilities`, the public scorer of the interface and
``MemoryStore.read``. The MemView is built exactly as the experiments build it
(:meth:`~dpmv_lib.generate.interfaces.MemViewInterface.memview`: capped policy, budget rule,
seed per (pair, EM seed)), so a replay releases the same views as the transcript table of the
same method, seed, B_a and K. Every release is checked against the plan and the ledger; a
mismatch raises. Responses come from any responder (:func:`responder`).

The figure and the ipywidgets front end live in :mod:`dpmv_lib.experiments.playground_widget`.
Notebook 07's steps (:func:`open_pair`, then ``*_step(run, pg)``) take the notebook's
:class:`~dpmv_lib.experiments.session.Session` and the opened :class:`Playground` and return a
:class:`~dpmv_lib.experiments.result.Result`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import pandas as pd

from ..bench.benchmark import Pair
from ..core.errors import ParameterError
from ..core.memview import MemView
from ..core.policy import Policy, Query
from ..core.releases import FAILSAFE_UTILITY, Release, selector_log_probabilities
from ..core.selection import DP_SELECTOR_TAGS
from ..core.store import MemoryStore, differing_positions
from ..generate.generation import generate_responses
from ..generate.interfaces import MemViewInterface, make_interface, render_guidance
from ..generate.responders import Prompt, Responder, make_responder
from .result import Result

if TYPE_CHECKING:
    from .session import Session

SIDES: tuple[str, str] = ("M", "M'")
#: the MemView methods the playground runs (RQ1 names, docs/architecture.md)
METHODS: tuple[str, ...] = ("DP-MemView (on)", "DP-MemView (pre)", "DP-MemView (on, P&F)", "DP-MemView (pre, P&F)")
DEFAULT_TURNS = 16


def other(side: str) -> str:
    """The other store of the pair."""
    return SIDES[1] if side == SIDES[0] else SIDES[0]


# ---- one slot-level operation, one turn, one replay ----------------------------------------------------
@dataclass(frozen=True)
class SlotStep:
    """One slot-level operation of one side, with its public plan, the cap check, the release and
    the trusted-side view distributions under both stores (same plan, same eps).

    ``utilities``/``probabilities``/``log_probabilities`` map a side to one value per view of
    ``views`` (V_g, policy order). An admitted selection carries the selector's distribution; a
    generic release (cap exceeded, no eps, empty read) probability 1 on the generic view under
    both stores, and no utilities (the scorer does not run, C5)."""

    side: str
    turn: int                      # 0-based index in the trajectory
    slot: str
    read_set: tuple[int, ...]
    affected: frozenset[str]       # Gamma*(R): every attribute whose group the read touches
    charge_set: frozenset[str]     # Gamma of the plan (charged only if admitted)
    epsilon: Fraction | None       # eps_{t,g} of the budget rule (None: no eps, generic view)
    caps: Mapping[str, Fraction]
    ledger_before: Mapping[str, Fraction]
    ledger_after: Mapping[str, Fraction]
    view: str
    mechanism: str                 # "em" | "pf" (admitted) or "generic"
    fallback: bool                 # generic view although something was read
    views: tuple[str, ...]
    utilities: Mapping[str, tuple[Fraction, ...]] = field(default_factory=dict)
    probabilities: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    log_probabilities: Mapping[str, tuple[float, ...]] = field(default_factory=dict)

    @property
    def admitted(self) -> bool:
        return self.mechanism in DP_SELECTOR_TAGS

    @property
    def charged(self) -> frozenset[str]:
        """The attributes this operation charged (Gamma if admitted, else none)."""
        return self.charge_set if self.admitted else frozenset()

    def cap_checks(self) -> list[tuple[str, Fraction, Fraction, Fraction, bool]]:
        """(a, L_a, eps, B_a, L_a + eps <= B_a) for every a in Gamma (empty without eps)."""
        if self.epsilon is None:
            return []
        return [(a, self.ledger_before[a], self.epsilon, self.caps[a],
                 self.ledger_before[a] + self.epsilon <= self.caps[a])
                for a in sorted(self.charge_set)]

    @property
    def blocked_by(self) -> tuple[str, ...]:
        """The attributes whose cap check failed (empty unless a generic fallback at the cap)."""
        return tuple(a for a, _, _, _, ok in self.cap_checks() if not ok)

    @property
    def decision(self) -> str:
        if self.admitted:
            return f"admitted ({self.mechanism})"
        if not self.read_set:
            return "generic (nothing read)"
        if self.epsilon is None:
            return "generic (no eps: not planned)"
        return "generic fallback (cap: " + ", ".join(self.blocked_by) + ")"

    def probability(self, side: str, view: str) -> float:
        return self.probabilities[side][self.views.index(view)]

    @property
    def loss(self) -> float:
        """log Pr[released view | own store] - log Pr[same view | other store], same plan (0 for
        a generic release: probability 1 under both)."""
        i = self.views.index(self.view)
        return self.log_probabilities[self.side][i] - self.log_probabilities[other(self.side)][i]


@dataclass(frozen=True)
class TurnStep:
    """One turn of one side: the query, its slot operations and the public release."""

    side: str
    turn: int
    query: Query
    custom: bool                   # a typed query replaced the trajectory's query
    slots: tuple[SlotStep, ...]
    release: Release = field(repr=False)
    conditioning: str = ""         # what the response model receives besides the query (C6)

    @property
    def ledger(self) -> dict[str, Fraction]:
        return dict(self.release.spent)

    @property
    def views(self) -> dict[str, str]:
        return self.release.views


@dataclass(frozen=True)
class Replay:
    """Both sides of one pair over ``turns`` turns (``steps[side]``: one TurnStep per turn)."""

    pair: Pair
    policy: Policy                 # the capped policy MemView ran with
    method: str
    B_a: Fraction
    K: int
    seed: int
    turns: int
    steps: Mapping[str, tuple[TurnStep, ...]]
    custom: Mapping[int, Query] = field(default_factory=dict)
    view_links: Mapping[str, Sequence[str]] = field(default_factory=dict)

    def step(self, side: str, turn: int) -> TurnStep:
        if side not in SIDES:
            raise ParameterError(f"side must be one of {SIDES}, got {side!r}")
        if not 0 <= int(turn) < self.turns:
            raise ParameterError(f"turn must be in 0..{self.turns - 1}, got {turn!r}")
        return self.steps[side][int(turn)]

    def slot_steps(self, side: str) -> list[SlotStep]:
        return [s for t in self.steps[side] for s in t.slots]

    @property
    def target(self) -> str:
        return self.pair.attribute

    @property
    def group(self) -> frozenset[int]:
        """I_a of the pair's target attribute."""
        return self.policy.attribute(self.target).group

    def linked(self, view: str) -> tuple[str, ...]:
        """The attributes a view is linked to by the public gold links (empty if none given)."""
        return tuple(self.view_links.get(view, ()))


# ---- the computation ----------------------------------------------------------------------------------
def _utilities(scorer: Any, query: Query, views: Sequence[Any], contents: Sequence[str]) -> tuple[Fraction, ...]:
    """Exact utilities of every view, fail-closed as MemView (any failure: all 1/2)."""
    try:
        us = tuple(Fraction(scorer(query, v, contents)) for v in views)
    except Exception:  # noqa: BLE001 - the interface fails closed the same way
        return (FAILSAFE_UTILITY,) * len(views)
    return us if all(0 <= u <= 1 for u in us) else (FAILSAFE_UTILITY,) * len(views)


def explain_release(mv: MemView, query: Query, history: Sequence[Release], stores: Mapping[str, MemoryStore],
                    scorer: Any, *, side: str, turn: int, custom: bool = False) -> TurnStep:
    """Release one turn through ``mv`` (``MemView.release``) and explain it.

    ``stores`` holds both stores (``"M"``, ``"M'"``); ``mv`` runs on ``stores[side]``; ``scorer``
    is the scorer ``mv`` uses (its public values). The plans come from ``MemView.plan`` before the
    release, the ledger from ``mv.ledger``; the release must match them (same slots and reads,
    admitted iff every cap check passes, ledger after = before + the admitted charges), else
    RuntimeError."""
    policy, hist = mv.policy, tuple(history)
    before = {a: Fraction(v) for a, v in mv.ledger.spent().items()}
    slots = policy.route(query, hist)
    plans = [mv.plan(query, g, hist) for g in slots]
    n_failed = len(mv.scorer_failures)
    rel = mv.release(query, hist)
    failed = {f.slot for f in mv.scorer_failures[n_failed:]}
    if [s.slot for s in rel.slots] != list(slots) or any(s.read_set != p.read_set for s, p in zip(rel.slots, plans)):
        raise RuntimeError(f"turn {turn}: the release does not follow the public plan")
    running, out = dict(before), []
    du = policy.sensitivity
    for plan, sr in zip(plans, rel.slots):
        ledger_before = dict(running)
        views = policy.slot(plan.slot).views
        ids = tuple(v.id for v in views)
        admitted = sr.mechanism in DP_SELECTOR_TAGS
        # C5 as the paper states it: no eps -> generic; else admitted iff L_a + eps <= B_a for all a in Gamma
        fits = plan.epsilon is not None and all(running[a] + plan.epsilon <= policy.caps[a] for a in plan.charged)
        if admitted != fits or (admitted and (sr.epsilon != plan.epsilon or sr.charged != plan.charged)):
            raise RuntimeError(f"turn {turn}, slot {plan.slot}: release {sr.mechanism} does not match the cap check")
        utils: dict[str, tuple[Fraction, ...]] = {}
        probs: dict[str, tuple[float, ...]] = {}
        logp: dict[str, tuple[float, ...]] = {}
        if admitted:
            assert plan.epsilon is not None  # admitted implies fits (checked above)
            for s in SIDES:
                us = ((FAILSAFE_UTILITY,) * len(views) if s == side and plan.slot in failed else
                      _utilities(scorer, query, views, stores[s].read(plan.read_set)))
                utils[s] = us
                probs[s] = tuple(float(p) for p in mv.selector.probabilities(us, plan.epsilon, du))
                logp[s] = tuple(selector_log_probabilities(mv.selector, us, plan.epsilon, du))
            for a in plan.charged:
                running[a] += plan.epsilon
        else:
            onehot = tuple(1.0 if v == sr.view else 0.0 for v in ids)
            probs = {s: onehot for s in SIDES}
            logp = {s: tuple(0.0 if p else -math.inf for p in onehot) for s in SIDES}
        out.append(SlotStep(side, turn, plan.slot, plan.read_set, plan.affected, plan.charged, plan.epsilon,
                            policy.caps, ledger_before, dict(running), sr.view, sr.mechanism, sr.fallback, ids,
                            utils, probs, logp))
    if running != {a: Fraction(v) for a, v in rel.spent.items()}:
        raise RuntimeError(f"turn {turn}: ledger {dict(rel.spent)} != before + admitted charges {running}")
    return TurnStep(side, turn, query, custom, tuple(out), rel, render_guidance(rel.guidance(policy)))


def check_method(method: str) -> str:
    if method not in METHODS:
        raise ParameterError(f"the playground runs {', '.join(METHODS)}; got {method!r}")
    return method


def replay(pair: Pair, policy: Policy, *, method: str = "DP-MemView (on)", B_a: Any = 2, K: int = 3,
           seed: int = 0, turns: int = DEFAULT_TURNS, custom: Mapping[int, Query] | None = None,
           view_links: Mapping[str, Sequence[str]] | None = None) -> Replay:
    """Run ``method`` on both stores of ``pair`` over its first ``turns`` turns and explain every
    release (:func:`explain_release`). ``custom`` maps a 0-based turn to a typed :class:`Query`
    that replaces the trajectory's query there (the later turns follow the trajectory, with the
    ledger the typed query left). ``seed`` is the EM seed (same MemView seed as the experiments).
    The preallocated rule plans C_a over the trajectory's first 16 queries, as in RQ1."""
    check_method(method)
    n = len(pair.queries)
    if isinstance(turns, bool) or not isinstance(turns, int) or not 1 <= turns <= n:
        raise ParameterError(f"turns must be an int in 1..{n}, got {turns!r}")
    custom = dict(custom or {})
    for t, q in custom.items():
        if not isinstance(q, Query) or not 0 <= t < turns:
            raise ParameterError(f"custom queries map a turn in 0..{turns - 1} to a Query, got {t!r}: {q!r}")
    iface = make_interface(method, B_a=B_a, K=K, seed=seed)
    assert isinstance(iface, MemViewInterface) and iface.B_a is not None
    stores = {s: pair.store(s) for s in SIDES}
    queries = [custom.get(t, q) for t, q in enumerate(pair.queries[:turns])]
    steps: dict[str, tuple[TurnStep, ...]] = {}
    pol = policy
    for side in SIDES:
        mv = iface.memview(pair, policy, side, seed)
        pol = mv.policy
        history: list[Release] = []
        out = []
        for t, q in enumerate(queries):
            st = explain_release(mv, q, history, stores, iface.scorer, side=side, turn=t, custom=t in custom)
            history.append(st.release)
            out.append(st)
        steps[side] = tuple(out)
    return Replay(pair, pol, method, Fraction(iface.B_a), int(K), int(seed), turns, steps, custom,
                  dict(view_links or {}))


# ---- tables ---------------------------------------------------------------------------------------------
def _fmt(x: Fraction | None) -> str:
    return "-" if x is None else str(x)


def _ids(xs) -> str:
    return ", ".join(str(x) for x in sorted(xs)) or "-"


def pair_table(rep: Replay) -> pd.DataFrame:
    """The positions where M and M' differ (they must lie in I_a) with both contents."""
    m, mp = rep.pair.store("M"), rep.pair.store("M'")
    slot_of = dict(rep.policy.layout)
    rows = []
    for i in sorted(differing_positions(m, mp)):
        groups = [a.name for a in rep.policy.attributes if i in a.group]
        rows.append({"position": i, "slot": slot_of[i], "in groups": ", ".join(groups),
                     "in I_a": i in rep.group, "M": m.contents[i], "M'": mp.contents[i]})
    return pd.DataFrame(rows)


def turn_table(rep: Replay, turn: int) -> pd.DataFrame:
    """M and M' side by side at one turn: route, reads, charges, cap checks, decision, view."""
    cols: dict[str, dict[str, str]] = {}
    for side in SIDES:
        st = rep.step(side, turn)
        col: dict[str, str] = {"query": st.query.text + (" (typed)" if st.custom else ""),
                               "intent": st.query.intent,
                               "route G_t": " > ".join(s.slot for s in st.slots) or "-"}
        for s in st.slots:
            p = f"[{s.slot}] "
            col[p + "positions read R"] = _ids(s.read_set)
            col[p + "read in I_a (target)"] = _ids(set(s.read_set) & rep.group)
            col[p + "affected Gamma*(R)"] = _ids(s.affected)
            col[p + "charge set Gamma"] = _ids(s.charge_set)
            col[p + "eps_{t,g}"] = _fmt(s.epsilon)
            for a, la, eps, cap, ok in s.cap_checks():
                col[p + f"check {a}"] = f"{la} + {eps} <= {cap}: {'yes' if ok else 'NO'}"
            col[p + "decision"] = s.decision
            col[p + "released view"] = s.view
            col[p + "charged"] = _ids(s.charged)
        col["ledger after (L_a / B_a)"] = ", ".join(f"{a} {v}/{rep.policy.caps[a]}"
                                                    for a, v in sorted(st.ledger.items()))
        cols[side] = col
    keys = list(dict.fromkeys(k for c in cols.values() for k in c))
    return pd.DataFrame({side: [cols[side].get(k, "") for k in keys] for side in SIDES}, index=keys)


def view_table(rep: Replay, turn: int) -> pd.DataFrame:
    """Every view of every slot at one turn: utilities and probabilities under M and M' (same
    plan), the log ratio and which view each side released."""
    rows = []
    for sm, smp in zip(rep.step("M", turn).slots, rep.step("M'", turn).slots):
        for i, v in enumerate(sm.views):
            pm, pmp = sm.probabilities["M"][i], sm.probabilities["M'"][i]
            lm, lmp = sm.log_probabilities["M"][i], sm.log_probabilities["M'"][i]
            rows.append({"slot": sm.slot, "view": v, "linked to": ", ".join(rep.linked(v)) or "-",
                         "u_M": float(sm.utilities["M"][i]) if sm.utilities else math.nan,
                         "u_M'": float(sm.utilities["M'"][i]) if sm.utilities else math.nan,
                         "p_M": pm, "p_M'": pmp,
                         "log p_M/p_M'": (lm - lmp) if math.isfinite(lm) and math.isfinite(lmp) else 0.0,
                         "released on M": "yes" if v == sm.view else "",
                         "released on M'": "yes" if v == smp.view else ""})
    return pd.DataFrame(rows)


def replay_table(rep: Replay) -> pd.DataFrame:
    """One row per (turn, slot): the public plan and decision (identical under M and M'), both
    released views and the ledgers after the slot."""
    rows = []
    for t in range(rep.turns):
        qm = rep.step("M", t)
        for sm, smp in zip(qm.slots, rep.step("M'", t).slots):
            row = {"turn": t + 1, "qtype": qm.query.qtype or ("typed" if qm.custom else ""), "intent": qm.query.intent,
                   "slot": sm.slot, "read": _ids(sm.read_set), "reads I_a": bool(set(sm.read_set) & rep.group),
                   "charge set": _ids(sm.charge_set), "eps": _fmt(sm.epsilon), "decision": sm.decision,
                   "view M": sm.view, "view M'": smp.view, "views differ": sm.view != smp.view}
            row.update({f"L[{a}]": str(v) for a, v in sorted(sm.ledger_after.items())})
            rows.append(row)
    return pd.DataFrame(rows)


def loss_table(rep: Replay) -> pd.DataFrame:
    """Per turn and side: the realised privacy loss of that side's transcript so far,
    sum_t log p_side(v_t) / p_other(v_t) over its released views (same public plans), beside the
    target's ledger L_a and cap B_a (Theorem 1: |loss| <= L_a <= B_a on every path)."""
    rows = []
    for side in SIDES:
        total = 0.0
        for st in rep.steps[side]:
            turn_loss = sum(s.loss for s in st.slots)
            total += turn_loss
            rows.append({"side": side, "turn": st.turn + 1, "loss": turn_loss, "cumulative loss": total,
                         "L_target": float(st.ledger[rep.target]), "B_a": float(rep.policy.caps[rep.target])})
    return pd.DataFrame(rows)


def invariants(rep: Replay, tol: float = 1e-12) -> pd.DataFrame:
    """What the paper says of a replay, checked on it (one row per claim, ``holds`` True/False):
    the stores differ only inside I_a; M and M' share every public plan, decision and ledger
    (C4, C5); each ledger is the sum of its admitted charges and never exceeds its cap; a slot
    falls back exactly when a cap check fails; every distribution sums to 1; the probabilities
    differ between M and M' only where the read touches I_a, and then by at most eps (C3);
    |realised loss| <= L_a <= B_a (Theorem 1)."""
    m_steps, p_steps = rep.slot_steps("M"), rep.slot_steps("M'")
    public = [(s.slot, s.read_set, s.affected, s.charge_set, s.epsilon, s.ledger_before, s.ledger_after, s.admitted,
               s.fallback) for s in m_steps]
    sums, bounded, ledger_ok, cap_ok, fb_ok = True, True, True, True, True
    for side in SIDES:
        run = {a: Fraction(0) for a in rep.policy.attribute_names}
        for s in rep.slot_steps(side):
            exceeds = s.epsilon is not None and any(run[a] + s.epsilon > rep.policy.caps[a] for a in s.charge_set)
            fb_ok &= (s.fallback and s.epsilon is not None) == (exceeds and bool(s.read_set))
            if s.admitted:
                assert s.epsilon is not None  # an admitted selection has an epsilon
                for a in s.charge_set:
                    run[a] += s.epsilon
            ledger_ok &= dict(s.ledger_after) == run
            cap_ok &= all(v <= rep.policy.caps[a] for a, v in s.ledger_after.items())
            for sd in SIDES:
                sums &= abs(math.fsum(s.probabilities[sd]) - 1) <= tol
            lm, lp = s.log_probabilities["M"], s.log_probabilities["M'"]
            if not set(s.read_set) & rep.group:
                bounded &= lm == lp
            elif s.admitted:
                assert s.epsilon is not None
                bounded &= rep.target in s.charge_set and all(abs(x - y) <= float(s.epsilon) + tol
                                                              for x, y in zip(lm, lp))
    lt = loss_table(rep)
    theorem = bool(((lt["cumulative loss"].abs() <= lt["L_target"] + tol) & (lt["L_target"] <= lt["B_a"] + tol)).all())
    rows = [("M and M' differ only inside I_a", differing_positions(rep.pair.m, rep.pair.m_prime) <= rep.group),
            ("same route, reads, charge sets, eps, decisions and ledgers on M and M' (C4, C5)",
             public == [(s.slot, s.read_set, s.affected, s.charge_set, s.epsilon, s.ledger_before, s.ledger_after,
                         s.admitted, s.fallback) for s in p_steps]),
            ("every ledger = the sum of its admitted charges", ledger_ok),
            ("L_a <= B_a after every slot", cap_ok),
            ("generic fallback exactly when L_a + eps > B_a for some a in Gamma", fb_ok),
            ("every view distribution sums to 1", sums),
            ("Pr differs only where R meets I_a, then by <= eps (C2, C3)", bounded),
            ("|realised loss| <= L_a <= B_a at every turn (Theorem 1)", theorem)]
    return pd.DataFrame([{"claim": c, "holds": bool(h)} for c, h in rows])


def summary_text(rep: Replay, turn: int) -> str:
    """One line: the setting and what happened at ``turn`` (0-based) on both sides."""
    sm, smp = rep.step("M", turn), rep.step("M'", turn)
    fb = sum(1 for s in rep.slot_steps("M") if s.fallback and s.turn <= turn)
    dec = "; ".join(s.decision for s in sm.slots) or "no slot"
    return (f"pair={rep.pair.pair_id} (target {rep.target}) {rep.method} B_a={rep.B_a} K={rep.K} "
            f"turn={turn + 1}/{rep.turns} intent={sm.query.intent}{' typed' if sm.custom else ''}: {dec}; "
            f"view M={','.join(sm.views.values()) or '-'} / M'={','.join(smp.views.values()) or '-'}; "
            f"L_{rep.target}={sm.ledger[rep.target]}/{rep.policy.caps[rep.target]}; fallbacks so far {fb}")


# ---- responses ----------------------------------------------------------------------------------------
def responder(spec: str | None, policies: Sequence[Policy], seed: int = 0,
              profile_spec: str = "surrogate") -> Responder:
    """The response model: ``spec`` (None: ``profile_spec``, the profile's) through
    :func:`~dpmv_lib.generate.responders.make_responder`: ``surrogate`` (seeded by ``seed``),
    ``openvino[:smollm2][@f32]`` or ``llamacpp`` (SmolLM2, when installed), any other spec."""
    spec = profile_spec if spec is None else spec
    if spec == "surrogate":
        return make_responder(spec, list(policies), salt=seed)
    return make_responder(spec)


class Responses:
    """Responses of one responder to replayed turns, cached by prompt (the prompt key is
    (pair id, turn, seed) as in the experiments, so the surrogate gives the same text for the same
    query and conditioning on both sides)."""

    def __init__(self, responder: Responder) -> None:
        self.responder = responder
        self._cache: dict[tuple, str] = {}

    def prompt(self, rep: Replay, side: str, turn: int) -> Prompt:
        st = rep.step(side, turn)
        return Prompt(st.query.text, st.conditioning, (rep.pair.pair_id, int(turn), int(rep.seed)))

    def get(self, rep: Replay, turns: Sequence[int] | None = None) -> pd.DataFrame:
        """One row per (turn, side): query, conditioning and response (``turns``: 0-based, default all)."""
        turns = range(rep.turns) if turns is None else list(turns)
        prompts = {(t, s): self.prompt(rep, s, t) for t in turns for s in SIDES}
        keys = {k: (p.query, p.conditioning, p.key) for k, p in prompts.items()}
        todo = list(dict.fromkeys(v for v in keys.values() if v not in self._cache))
        if todo:   # through the generation cache and the run's store (none for the surrogate)
            texts = generate_responses([Prompt(q, c, k) for q, c, k in todo], self.responder, progress=False)
            self._cache.update(zip(todo, texts))
        return pd.DataFrame([{"turn": t + 1, "side": s, "query": prompts[(t, s)].query,
                              "conditioning": prompts[(t, s)].conditioning, "response": self._cache[keys[(t, s)]]}
                             for (t, s) in prompts])


# ---- notebook 07 steps ----------------------------------------------------------------------------------
@dataclass
class Playground:
    """One opened pair: the benchmark, the replay of its first T turns and the response model.

    ``turn`` is 0-based; ``em_seed`` is the profile's first EM seed (the MemView of a pair is seeded
    by (pair id, EM seed), as in notebook 03)."""

    bench: Any
    view_links: Mapping[str, Sequence[str]]
    rep: Replay
    responses: Responses
    turn: int
    em_seed: int


def open_pair(run: "Session") -> Result:
    """Load the pair ``run.params["pair_id"]``, replay its first ``T`` turns under ``method``,
    ``B_a`` and ``K`` (a typed ``query``/``intent`` replaces the query of ``turn``) and show where
    M and M' differ. ``result["playground"]`` is the :class:`Playground` of the later steps."""
    from ..bench.datasets import load_benchmark, load_gold_rules
    from .rq1 import responder_specs

    with run.timer("replay"):
        p = run.params
        bench = load_benchmark("pairedmem", run.data_dir)
        links = load_gold_rules(run.data_dir)["view_links"]
        pairs = {x.pair_id: x for x in bench.pairs}
        if p["pair_id"] not in pairs:
            raise ParameterError(f"unknown pair {p['pair_id']!r}; e.g. {list(pairs)[:3]}")
        pair = pairs[p["pair_id"]]
        t = int(p["turn"]) - 1
        custom = {}
        if p.get("query") is not None or p.get("intent") is not None:
            base = pair.queries[t]
            custom = {t: Query(p["query"] if p.get("query") is not None else base.text, p.get("intent") or base.intent,
                               "typed")}
        em_seed = run.profile.em_seeds[0]
        rep = replay(pair, bench.policy(pair), method=p["method"], B_a=run.cfg.B_a, K=run.cfg.K, seed=em_seed,
                     turns=run.cfg.T, custom=custom, view_links=links)
        resp = Responses(responder(p.get("responder"), list(bench.policies.values()), run.cfg.seed,
                                   profile_spec=responder_specs(run.profile)[0]))
    pg = Playground(bench, links, rep, resp, t, em_seed)
    groups = pd.DataFrame([{"attribute": a.name, "I_a": _ids(a.group), "B_a": str(a.cap)}
                           for a in rep.policy.attributes])
    diff = differing_positions(pair.m, pair.m_prime)
    where = f"positions where M and M' differ (I_{pair.attribute} = {sorted(rep.group)})"
    return Result(f"Pair {pair.pair_id}: target {pair.attribute}, template {pair.template}, split {pair.split}",
                  tables={where: pair_table(rep),
                          "protected groups and caps of the policy": groups},
                  notes=[f"{rep.method}, $B_a$ = {rep.B_a}, $K$ = {rep.K}, {rep.turns} turns, EM seed {em_seed}, "
                         f"responder {resp.responder.name}."],
                  finding=f"M and M' differ at {len(diff)} position(s), "
                          f"{'all' if diff <= rep.group else 'NOT all'} inside $I_{{{pair.attribute}}}$.",
                  data={"playground": pg})


def turn_step(run: "Session", pg: Playground) -> Result:
    """The chosen turn on M and M': the public plan and cap checks, and every view's utility and
    probability under both stores (trusted side)."""
    rep, t = pg.rep, pg.turn
    with run.timer("turn"):
        tt, vt = turn_table(rep, t), view_table(rep, t)
    steps = rep.step("M", t).slots

    def plan(side: str) -> list[tuple]:
        return [(s.slot, s.read_set, s.charge_set, s.epsilon, s.ledger_before, s.ledger_after, s.admitted, s.fallback)
                for s in rep.step(side, t).slots]

    same_plan = plan("M") == plan("M'")
    parts = []
    for s in steps:
        touches = set(s.read_set) & rep.group
        ratio = max((abs(x - y) for x, y in zip(s.log_probabilities["M"], s.log_probabilities["M'"])
                     if math.isfinite(x) and math.isfinite(y)), default=0.0)
        eps = "no eps" if s.epsilon is None else f"eps = {s.epsilon}"
        parts.append(f"slot {s.slot} reads {'inside' if touches else 'outside'} $I_a$, {s.decision}, largest "
                     f"|log p_M/p_M'| = {ratio:.4f} ({eps})")
    return Result(f"Turn {t + 1}: M and M' side by side", precision=4,
                  tables={"the public plan, cap checks and releases": tt,
                          "utilities and probabilities (trusted side, never released)": vt},
                  finding=f"The public plan is {'identical' if same_plan else 'DIFFERENT'} on M and M'; "
                          + ("; ".join(parts) or "no slot is routed") + ".")


def response_step(run: "Session", pg: Playground) -> Result:
    """What the response model sees and says at the chosen turn on both sides (C6)."""
    with run.timer("responses"):
        df = pg.responses.get(pg.rep, [pg.turn])
    same_views = df["conditioning"].nunique() == 1
    same_text = df["response"].nunique() == 1
    return Result(f"Turn {pg.turn + 1}: what the response model sees and says ({pg.responses.responder.name})",
                  tables={"one row per side": df},
                  finding=f"The two sides released {'the same' if same_views else 'different'} views and the "
                          f"model gave {'the same' if same_text else 'different'} text.")


def replay_step(run: "Session", pg: Playground) -> Result:
    """The replay of the first T turns: ledgers filling, slots falling back; the first fallback
    turn in detail. Writes ``07_replay``."""
    rep = pg.rep
    with run.timer("replay table"):
        df = replay_table(rep)
        run.write_table("07_replay", df)
    steps = rep.slot_steps("M")
    fallbacks = [s for s in steps if s.fallback and s.epsilon is not None]
    keep = ["turn", "intent", "slot", "reads I_a", "eps", "decision", "view M", "view M'", "views differ",
            f"L[{rep.target}]"]
    tables = {f"{rep.pair.pair_id}: {rep.method}, B_a={rep.B_a}, K={rep.K}, {rep.turns} turns "
              f"(the target's ledger; every ledger: 07_replay)": df[keep]}
    if fallbacks:
        tables[f"turn {fallbacks[0].turn + 1}: the first generic fallback"] = turn_table(rep, fallbacks[0].turn)
    last = rep.step("M", rep.turns - 1).ledger
    first = f"the first at turn {fallbacks[0].turn + 1}" if fallbacks else "none (raise K or lower B_a to see one)"
    return Result("The replay: ledgers filling, slots falling back", tables=tables,
                  finding=f"{sum(s.admitted for s in steps)} admitted selections and {len(fallbacks)} generic "
                          f"fallbacks at the cap ({first}); M and M' released different views on "
                          f"{int(df['views differ'].sum())} of {len(df)} slot operations; final ledgers "
                          + ", ".join(f"{a} {v}" for a, v in sorted(last.items())) + ".")


def checks_step(run: "Session", pg: Playground) -> Result:
    """What the paper says of a replay, checked on it (:func:`invariants`). Writes ``07_checks``
    and ``07_loss``."""
    with run.timer("checks"):
        inv = invariants(pg.rep)
        run.write_table("07_checks", inv)
        run.write_table("07_loss", loss_table(pg.rep))
    failed = list(inv.loc[~inv["holds"], "claim"])
    return Result("What the paper says, checked on this replay", tables={"one row per claim": inv},
                  finding=(f"All {len(inv)} claims hold on this replay." if not failed else
                           f"{len(failed)} of {len(inv)} claims FAIL: " + "; ".join(failed) + "."))


def responses_step(run: "Session", pg: Playground) -> Result:
    """The responses over the whole replay, M beside M'; writes ``07_turn``, ``07_views``,
    ``07_responses`` and ``07_run.json`` (the setting)."""
    import json

    rep, t, p = pg.rep, pg.turn, run.params
    with run.timer("responses"):
        all_resp = pg.responses.get(rep)
        run.write_table("07_turn", turn_table(rep, t).reset_index(names="row"))
        run.write_table("07_views", view_table(rep, t))
        run.write_table("07_responses", all_resp)
        setting = {"profile": run.profile.name, "pair_id": p["pair_id"], "turn": p["turn"], "query": p.get("query"),
                   "intent": p.get("intent"), "method": p["method"], "B_a": str(run.cfg.B_a), "K": run.cfg.K,
                   "T": run.cfg.T, "em_seed": pg.em_seed, "responder": pg.responses.responder.name}
        (run.tables_dir / "07_run.json").write_text(json.dumps(setting, indent=1))
    side = all_resp[all_resp["side"] == "M"].drop(columns=["side"]).merge(
        all_resp[all_resp["side"] == "M'"][["turn", "response"]], on="turn", suffixes=(" M", " M'"))
    differ = side["response M"] != side["response M'"]
    tables = {"the turns where M and M' got different responses (every turn: 07_responses)": side[differ]}
    return Result("Responses over the replay", tables=tables if differ.any() else {},
                  finding=f"The responses differ between M and M' on {int(differ.sum())} of {len(side)} turns.")
