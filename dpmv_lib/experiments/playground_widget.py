"""The MemView playground's figure and ipywidgets front end (notebook 07; computation in
:mod:`dpmv_lib.experiments.playground`).

:func:`walkthrough_figure` draws one replay at one turn in four panels (a matplotlib Figure on an
Agg canvas, no pyplot): the view distributions of the turn's slot under M and M' (released views
marked), the ledgers L_a over the turns against the caps with the fallbacks marked, the outcome of
every turn on both sides (admitted view linked to the target / other view / generic fallback at
the cap / generic without eps) and the realised privacy loss of each side's transcript against
L_a and B_a (Theorem 1).

:func:`make_playground` is the interactive version (JupyterLab, ``INTERACTIVE=True``), built like
notebook 05's budget explorer (:mod:`.budget_explorer`): controls for the pair, the turn, a typed
query and its public intent, B_a, K and the method; one fixed-size PNG image per change (one frame,
LRU-cached), a one-line summary label and an HTML panel with the side-by-side tables and both
responses. Controls carry CSS classes ``dpmv-<name>`` for the browser test.

:func:`walkthrough_step` is notebook 07's step: the widget when interactive, else the figure.
"""
from __future__ import annotations

import html
import io
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from ..core.errors import DPMVError, ParameterError
from ..core.policy import Query
from .budget_explorer import FrameCache
from .playground import (METHODS, SIDES, Replay, Responses, check_method, loss_table, replay, summary_text,
                         turn_table, view_table)
from .result import Result
from .styled import styled

if TYPE_CHECKING:
    from .playground import Playground
    from .session import Session

OUTCOMES = ("admitted: view linked to the target", "admitted: other view", "generic fallback (cap)",
            "generic (no eps / nothing read)")
OUTCOME_COLORS = ("#d62728", "#1f77b4", "#7f7f7f", "#d9d9d9")
SIDE_COLORS = {"M": "#1f77b4", "M'": "#ff7f0e"}


def outcome(rep: Replay, side: str, turn: int) -> int:
    """Index into :data:`OUTCOMES` for one turn of one side (worst slot first: a fallback wins)."""
    slots = rep.step(side, turn).slots
    if any(s.fallback and s.epsilon is not None for s in slots):
        return 2
    admitted = [s for s in slots if s.admitted]
    if not admitted:
        return 3
    return 0 if any(rep.target in rep.linked(s.view) for s in admitted) else 1


def _agg_figure(size: tuple[float, float], dpi: int):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=size, dpi=dpi)
    FigureCanvasAgg(fig)
    return fig


def walkthrough_figure(rep: Replay, turn: int, *, size: tuple[float, float] = (12, 7.5), dpi: int = 100):
    """The four-panel figure of ``rep`` at ``turn`` (0-based); returns the matplotlib Figure."""
    rep.step("M", turn)  # validates the turn
    fig = _agg_figure(size, dpi)
    ax = fig.subplots(2, 2, gridspec_kw={"height_ratios": [3, 2]})
    x = np.arange(1, rep.turns + 1)

    # (a) the view distributions of the turn's first slot under M and M'
    a = ax[0, 0]
    sm, smp = rep.step("M", turn).slots, rep.step("M'", turn).slots
    if sm:
        s, s2 = sm[0], smp[0]
        y = np.arange(len(s.views))
        for k, side in enumerate(SIDES):
            a.barh(y + (k - 0.5) * 0.4, s.probabilities[side], 0.4, color=SIDE_COLORS[side], label=f"Pr[v | {side}]")
        for k, (side, v) in enumerate(((SIDES[0], s.view), (SIDES[1], s2.view))):
            i = s.views.index(v)
            a.plot([s.probabilities[side][i] + 0.02], [i + (k - 0.5) * 0.4], marker="<", color="k", ms=7,
                   label="released" if k == 0 else None)
        a.set_yticks(y, [v + (" *" if rep.target in rep.linked(v) else "") for v in s.views], fontsize=8)
        a.invert_yaxis()
        top = max(max(s.probabilities[side]) for side in SIDES)
        a.set_xlim(0, min(1.15, top * 1.25 + 0.05))
        checks = "".join(f"; L[{a_}] {la} + {e} > {cp}" for a_, la, e, cp, ok in s.cap_checks() if not ok)
        title = f"turn {turn + 1}, slot {s.slot}: {s.decision}" + (f", eps={s.epsilon}" if s.admitted else checks)
        a.set_title(title, fontsize=10)
        a.legend(fontsize=8, loc="lower right")
    a.set_xlabel(f"probability (* = view linked to {rep.target})")

    # (b) ledgers over the turns against the caps; fallbacks marked
    b = ax[0, 1]
    ledger = {a_: [float(st.ledger[a_]) for st in rep.steps["M"]] for a_ in rep.policy.attribute_names}
    styles = iter(["--", "-.", ":", (0, (5, 1, 1, 1)), (0, (1, 2)), (0, (3, 3))])
    for a_, ys in ledger.items():  # the target thick underneath, the others dashed on top (they often coincide)
        tgt = a_ == rep.target
        b.step(x, ys, where="post", lw=4 if tgt else 1.5, alpha=0.55 if tgt else 1,
               ls="-" if tgt else next(styles, "-"),
               zorder=1 if tgt else 2, label=f"L[{a_}]" + (" (target)" if tgt else ""))
    caps = sorted({float(c) for c in rep.policy.caps.values()})
    for i, c in enumerate(caps):
        b.axhline(c, color="k", ls="--", lw=1, label="cap B_a" if i == 0 else None)
    fb = [(st.turn + 1, max(float(sl.ledger_before[a_]) for a_ in sl.charge_set) if sl.charge_set else 0.0)
          for st in rep.steps["M"] for sl in st.slots if sl.fallback and sl.epsilon is not None]
    if fb:
        b.plot([f[0] for f in fb], [f[1] for f in fb], "x", color="#d62728", ms=9, mew=2, label="generic fallback")
    b.axvline(turn + 1, color="k", ls=":", lw=1)
    b.set(xlim=(0.5, rep.turns + 0.5), ylim=(-0.05 * caps[-1], caps[-1] * 1.15), xlabel="turn t",
          ylabel="ledger L_a after the turn")
    b.set_title(f"ledgers (same under M and M'), {rep.method}, B_a={rep.B_a}, K={rep.K}", fontsize=10)
    b.legend(fontsize=7, loc="lower right", ncol=2)

    # (c) outcome of every turn on both sides
    c = ax[1, 0]
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch, Rectangle

    grid = np.array([[outcome(rep, side, t) for t in range(rep.turns)] for side in SIDES])
    c.imshow(grid, cmap=ListedColormap(OUTCOME_COLORS), vmin=-0.5, vmax=len(OUTCOMES) - 0.5, aspect="auto",
             extent=(0.5, rep.turns + 0.5, 1.5, -0.5))
    for t in range(rep.turns):
        if rep.step("M", t).views != rep.step("M'", t).views:
            c.text(t + 1, 0.5, "\u2260", ha="center", va="center", fontsize=10)
    c.add_patch(Rectangle((turn + 0.5, -0.5), 1, 2, fill=False, ec="k", lw=2))
    c.set_yticks([0, 1], list(SIDES))
    c.set_xticks(x[::max(1, rep.turns // 16)])
    c.set_xlabel("turn t (\u2260: the released views differ)")
    c.set_title("outcome per turn", fontsize=10)
    c.legend(handles=[Patch(color=col, label=lab) for col, lab in zip(OUTCOME_COLORS, OUTCOMES)], fontsize=7,
             loc="upper center", bbox_to_anchor=(0.5, -0.35), ncol=2, frameon=False)

    # (d) realised privacy loss vs the target ledger and cap (Theorem 1)
    d = ax[1, 1]
    lt = loss_table(rep)
    for side in SIDES:
        part = lt[lt["side"] == side]
        d.plot(part["turn"], part["cumulative loss"], marker=".", color=SIDE_COLORS[side],
               label=f"log P_{side}/P_other of {side}'s views")
    part = lt[lt["side"] == SIDES[0]]
    d.step(part["turn"], part["L_target"], where="post", color="k", lw=1.2, label=f"\u00b1 L[{rep.target}]")
    d.step(part["turn"], -part["L_target"], where="post", color="k", lw=1.2)
    cap = float(rep.policy.caps[rep.target])
    d.axhline(cap, color="k", ls="--", lw=1)
    d.axhline(-cap, color="k", ls="--", lw=1)
    d.axvline(turn + 1, color="k", ls=":", lw=1)
    d.set(xlim=(0.5, rep.turns + 0.5), ylim=(-cap * 1.15, cap * 1.15), xlabel="turn t", ylabel="realised loss")
    d.set_title("Theorem 1: |realised loss| <= L_a <= B_a", fontsize=10)
    d.legend(fontsize=7, loc="lower left")
    fig.suptitle(f"{rep.pair.pair_id}: target {rep.target} (I_a = {sorted(rep.group)}), "
                 f"query: {rep.step('M', turn).query.text[:80]}", fontsize=10)
    fig.tight_layout()
    return fig


def figure_png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.canvas.print_png(buf)
    return buf.getvalue()


def details_html(rep: Replay, turn: int, responses: Any = None) -> str:
    """The side-by-side tables of one turn (and the responses, a frame of :class:`Responses`)."""
    parts = [styled(turn_table(rep, turn), caption=f"turn {turn + 1}: M and M' side by side").to_html(),
             styled(view_table(rep, turn), precision=4, caption="views: utilities and probabilities under both "
                    "stores (trusted side; never released)").to_html()]
    if responses is not None:
        rows = "".join(f"<tr><td><b>{html.escape(r.side)}</b></td><td><pre style='white-space: pre-wrap; margin: 0'>"
                       f"{html.escape(r.conditioning or '(no conditioning)')}</pre></td>"
                       f"<td>{html.escape(r.response)}</td></tr>"
                       for r in responses.itertuples())
        parts.append("<table><caption style='text-align: left; font-weight: bold'>responses</caption><tr><th>side</th>"
                     f"<th>conditioning</th><th>response</th></tr>{rows}</table>")
    return "".join(parts)


# ---- the widget ------------------------------------------------------------------------------------
TRAJECTORY = "(trajectory)"


def make_playground(bench: Any, responder: Any = None, *, pair_id: str | None = None, turn: int = 1,
                    query: str | None = None, intent: str | None = None, method: str = "DP-MemView (on)",
                    B_a: Any = 2, K: int = 3, seed: int = 0, turns: int = 16,
                    view_links: Mapping[str, Sequence[str]] | None = None, b_as: Sequence[Any] = (1, 2, 4, 8),
                    ks: Sequence[int] = (1, 2, 3, 4, 6), dpi: int = 72, size: tuple[float, float] = (12, 7.5)):
    """ipywidgets controls over one fixed-size PNG image, a summary label and a details panel.
    ``turn`` is 1-based (1..turns); ``query``/``intent`` a typed query at that turn (None: the
    trajectory's). ``responder`` (a Responder or None: no responses). Returns the box with
    ``update``, ``image``, ``label``, ``details``, ``controls``, ``renders`` (frames drawn) and
    ``state`` (the current replay and turn)."""
    import ipywidgets as W

    check_method(method)
    pairs = {p.pair_id: p for p in bench.pairs}
    pair_id = pair_id if pair_id is not None else next(iter(pairs))
    if pair_id not in pairs:
        raise ParameterError(f"unknown pair {pair_id!r}; e.g. {list(pairs)[:3]}")
    if not 1 <= int(turn) <= turns:
        raise ParameterError(f"turn must be in 1..{turns}, got {turn!r}")
    b_as = sorted({Fraction(str(b)) for b in (*b_as, B_a)})
    ks = sorted({int(k) for k in (*ks, K)})
    intents = sorted({i for p in bench.policies.values() for i in p.intents})
    resp = Responses(responder) if responder is not None else None
    w_px, h_px = int(size[0] * dpi), int(size[1] * dpi)
    c_pair = W.Dropdown(options=list(pairs), value=pair_id, description="pair")
    c_turn = W.IntSlider(min=1, max=turns, value=int(turn), description="turn t", continuous_update=False)
    c_query = W.Text(value=query or "", placeholder="type a query (empty: the trajectory's)", description="query",
                     continuous_update=False, layout=W.Layout(width="520px"))
    c_intent = W.Dropdown(options=[TRAJECTORY, *intents], value=intent or TRAJECTORY, description="intent")
    c_b = W.SelectionSlider(options=[(str(b), b) for b in b_as], value=Fraction(str(B_a)), description="B_a",
                            continuous_update=False)
    c_k = W.SelectionSlider(options=ks, value=int(K), description="K", continuous_update=False)
    c_m = W.ToggleButtons(options=list(METHODS), value=method, description="method", style={"button_width": "auto"})
    label = W.HTML(layout=W.Layout(height="4.5em", width=f"{w_px}px", overflow="hidden"))
    image = W.Image(format="png", layout=W.Layout(width=f"{w_px}px", height=f"{h_px}px", object_fit="contain"))
    details = W.HTML(layout=W.Layout(height="420px", width=f"{w_px}px", overflow="auto"))
    frames, replays = FrameCache(64), FrameCache(64)
    shown: dict[str, Any] = {"key": None, "replay": None, "turn": None, "renders": 0}

    def current() -> tuple:
        t = int(c_turn.value) - 1
        p = pairs[c_pair.value]
        typed = c_query.value.strip() or None
        it = None if c_intent.value == TRAJECTORY else c_intent.value
        custom = None
        if typed is not None or it is not None:
            base = p.queries[t]
            custom = (typed or base.text, it or base.intent)
        return (c_pair.value, c_m.value, str(c_b.value), int(c_k.value), t, custom)

    def update(*_):
        key = current()
        if key == shown["key"]:
            return key
        pid, meth, b, k, t, custom = key
        try:
            cq = {t: Query(custom[0], custom[1], "typed")} if custom else {}
            rkey = (pid, meth, b, k, (t, custom) if custom else None)
            rep = replays.get(rkey, lambda: replay(pairs[pid], bench.policy(pairs[pid]), method=meth, B_a=Fraction(b),
                                                   K=k, seed=seed, turns=turns, custom=cq, view_links=view_links))
            text = summary_text(rep, t)
            frame = frames.get(key, lambda: _render(rep, t))
            out = resp.get(rep, [t]) if resp is not None else None
            body = details_html(rep, t, out)
        except DPMVError as exc:  # e.g. an intent the router does not know: say so, keep the last frame
            label.value = f'<span style="color: #d62728; font-family: monospace">{html.escape(str(exc))}</span>'
            return key
        label.value = ('<span style="font-family: monospace; white-space: normal; line-height: 1.4">'
                       f"{html.escape(text)}</span>")
        image.value = frame
        details.value = body
        shown.update(key=key, replay=rep, turn=t)
        return key

    def _render(rep: Replay, t: int) -> bytes:
        shown["renders"] += 1
        return figure_png(walkthrough_figure(rep, t, size=size, dpi=dpi))

    controls = {"pair": c_pair, "turn": c_turn, "query": c_query, "intent": c_intent, "b_a": c_b, "k": c_k,
                "method": c_m}
    for name, w in controls.items():
        w.observe(update, names="value")
        w.add_class(f"dpmv-{name}")  # stable hooks for the browser test
    box = W.VBox([W.HBox([c_pair, c_turn]), W.HBox([c_query, c_intent]), W.HBox([c_b, c_k]), c_m, label, image,
                  details])
    box.add_class("dpmv-playground")
    box.update, box.image, box.label = update, image, label
    box.details, box.controls = details, controls
    box.state = shown
    update()
    return box


def walkthrough_step(run: "Session", pg: "Playground") -> Result:
    """The walk-through figure of the chosen turn, written to ``07_playground.png`` and shown; in
    an interactive run the widget is displayed instead (same figure, redrawn per change)."""
    rep, t, p = pg.rep, pg.turn, run.params
    if run.interactive:
        from IPython.display import display

        display(make_playground(pg.bench, pg.responses.responder, pair_id=rep.pair.pair_id, turn=t + 1,
                                query=p.get("query"), intent=p.get("intent"), method=rep.method, B_a=rep.B_a,
                                K=rep.K, seed=pg.em_seed, turns=rep.turns, view_links=pg.view_links))
        return Result("The playground widget", notes=[summary_text(rep, t)])
    with run.timer("figure"):
        path = run.figure_path("07_playground")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(figure_png(walkthrough_figure(rep, t, dpi=110)))
    lt = loss_table(rep)
    worst = lt.loc[lt["cumulative loss"].abs().idxmax()]
    return Result(f"Turn {t + 1} and the whole replay in one figure", figures={"walk-through": path},
                  notes=[summary_text(rep, t)],
                  finding=f"The largest realised loss of a side's transcript is {abs(worst['cumulative loss']):.3f} "
                          f"(side {worst['side']}, turn {int(worst['turn'])}), inside its ledger "
                          f"L_{rep.target} = {worst['L_target']:g} and the cap B_a = {worst['B_a']:g}."
                          if abs(worst["cumulative loss"]) <= worst["L_target"] + 1e-12 else
                          f"The realised loss {abs(worst['cumulative loss']):.3f} EXCEEDS the ledger "
                          f"L_{rep.target} = {worst['L_target']:g} (side {worst['side']}, turn {int(worst['turn'])}).")
