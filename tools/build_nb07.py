"""Build notebooks/07_memview_playground.ipynb (committed without outputs). Run: .venv/bin/python tools/build_nb07.py"""
from __future__ import annotations

import nbformat as nbf
from nbbuild import write_notebook

md, code = nbf.v4.new_markdown_cell, nbf.v4.new_code_cell

cells = [
    md("""# 07 — MemView playground (beyond the paper)

One PairedMem pair, its two adjacent stores $M \\sim_a M'$ side by side, through the trusted
interface turn by turn. For every slot-level operation the playground shows what DP-MemView does
(paper, "Slot-Level View Selection and Attribute Accounting" and Theorem 1):

* the **route** $G_t$ and the **positions read** $\\mathcal{R}_{t,g}$ (C4: public query and released history only);
* every **attribute charged**: $\\Gamma^\\star(\\mathcal{R}_{t,g})=\\{a : \\mathcal{R}_{t,g}\\cap I_a\\neq\\emptyset\\}$ (C2) and the local $\\varepsilon_{t,g}$;
* the **ledgers against their caps**: the prospective check $L_a+\\varepsilon_{t,g}\\le B_a$ for every charged $a$, and
  the **generic fallback** at zero cost when one fails (C5);
* the **probabilities** of every view of $\\mathcal{V}_g$ under $M$ and $M'$ for the same public plan
  (Eq. (7), or permute-and-flip), the **released view** of each side and the **response** of the configured
  model, which sees only the query and the released views' texts (C6).

The utilities and probabilities are trusted-side diagnostics: they never leave the interface (C3) and are
shown here only to explain it. A **16-turn replay** shows the ledgers filling and the slots falling back to
the generic view; every claim of the paper that can be checked on a replay is checked. Under papermill
(`INTERACTIVE = False`) the notebook renders a static walk-through of one pair; in JupyterLab with
`INTERACTIVE = True` a widget lets you pick a pair, a turn, type a query, and change $B_a$, $K$ and the
method. All logic lives in `dpmv_lib.experiments.playground` (figure and widget in
`dpmv_lib.experiments.playground_widget`); the MemView is built exactly as the experiments build it, so a
replay releases the same views as notebook 03's transcripts for the same pair, method, seed, $B_a$ and $K$."""),
    code("""profile = "default"
seed = 0
results_dir = "results"
data_dir = "data"
INTERACTIVE = False
pair_id = "pm-diabetes-000"  # the PairedMem pair (any of the 320 pair ids)
turn = 4                     # the turn shown in detail, 1..T
query = None                 # a typed query for that turn (None: the trajectory's query)
intent = None                # its public intent (None: the trajectory turn's); the router and scorer read only the intent
method = "DP-MemView (on)"   # or "DP-MemView (pre)", "DP-MemView (on, P&F)", "DP-MemView (pre, P&F)"
B_a = 2                      # the cap of every attribute (the paper's main setting)
K = 3                        # online granularity (eps is B_a / K)
T = 16                       # turns replayed (the paper's horizon)
responder = None             # None: the profile's response model (surrogate; SmolLM2 on OpenVINO in the llm profile),
                             # or a spec: "surrogate", "openvino:smollm2@f32", "llamacpp", ...""", metadata={"tags": ["parameters"]}),
    code("""import json

import matplotlib
if not INTERACTIVE:
    matplotlib.use("Agg")
import pandas as pd
from IPython.display import Image, Markdown, display

from dpmv_lib.experiments.prelude import *  # noqa: F403 (playground, playground_widget, load_benchmark, ...)

prof = get_profile(profile).for_seed(seed)
em_seed = prof.em_seeds[0]           # the MemView seed of this pair is derived from (pair id, EM seed), as in notebook 03
out = resolve(results_dir)
tables, figures = out / "tables", out / "figures"
figures.mkdir(parents=True, exist_ok=True)
bench = load_benchmark("pairedmem", data_dir)
links = load_gold_rules(data_dir)["view_links"]
pair = {p.pair_id: p for p in bench.pairs}[pair_id]
t = turn - 1                          # 0-based index into the trajectory
custom = {}
if query is not None or intent is not None:
    base = pair.queries[t]
    custom = {t: Query(query if query is not None else base.text, intent or base.intent, "typed")}
rep = playground.replay(pair, bench.policy(pair), method=method, B_a=B_a, K=K, seed=em_seed, turns=T, custom=custom,
                        view_links=links)
resp = playground.Responses(playground.responder(responder, list(bench.policies.values()), seed,
                                                 profile_spec=responder_specs(prof)[0]))
pd.set_option("display.width", 200, "display.max_columns", 40, "display.max_colwidth", 120)
print(f"profile {prof.name}; pair {pair.pair_id} (target {pair.attribute}, template {pair.template}, split {pair.split}); "
      f"{method}, B_a={B_a}, K={K}, EM seed {em_seed}; responder {resp.responder.name}")"""),
    md("""## 1. The pair

$M$ and $M'$ share the layout and every position outside $I_a$; inside $I_a$ the contents differ ($M$ carries
evidence for the target attribute, $M'$ is neutral). A position can lie in several groups: a read of it is
charged to all of them."""),
    code("""display(styled(playground.pair_table(rep),
               caption=f"positions where M and M' differ (I_{pair.attribute} = {sorted(rep.group)})"))
groups = pd.DataFrame([{"attribute": a.name, "I_a": ", ".join(map(str, sorted(a.group))), "B_a": str(a.cap)}
                       for a in rep.policy.attributes])
styled(groups, caption="protected groups and caps of the policy")"""),
    md("""## 2. One turn, M and M' side by side

The public plan (route, read set, charge set, $\\varepsilon_{t,g}$) and the cap checks are computed from the
query, the released history and the ledgers only, so they are identical under $M$ and $M'$ (C4, C5). Only the
view distribution depends on the memory: the second table gives the exact utilities $u(q,v;M_\\mathcal{R})$ and
the probabilities of every view under both stores; they differ only when the read touches $I_a$, and then by a
factor of at most $e^{\\varepsilon_{t,g}}$ (C3)."""),
    code("""display(styled(playground.turn_table(rep, t), caption=f"turn {turn}", index=True))
styled(playground.view_table(rep, t), precision=4,
       caption=f"turn {turn}: utilities and probabilities (trusted side, never released)")"""),
    md("""### The response model

It receives the query and the released views' texts, nothing else (C6). With the same released views the
surrogate gives the same text on both sides (its randomness is keyed by pair, turn and seed, never by the store)."""),
    code("""turn_resp = resp.get(rep, [t])
styled(turn_resp, caption=f"turn {turn}: what the response model sees and says ({resp.responder.name})")"""),
    md("""## 3. The replay of the first $T$ turns: ledgers filling, slots falling back

Each charged selection adds $\\varepsilon_{t,g}$ to every attribute of its charge set; once $L_a+\\varepsilon_{t,g}>B_a$
for any of them, the slot releases its fixed generic view at zero cost, on both sides alike. `views differ`
marks turns where $M$ and $M'$ released different views (allowed: the draws are random; their
distributions differ by at most a factor $e^{\\varepsilon_{t,g}}$, and only where the read touches $I_a$)."""),
    code("""replay_df = playground.replay_table(rep)
display(styled(replay_df, caption=f"{pair.pair_id}: {method}, B_a={B_a}, K={K}, {T} turns"))
fallbacks = [s for s in rep.slot_steps("M") if s.fallback and s.epsilon is not None]
print(f"{sum(s.admitted for s in rep.slot_steps('M'))} admitted selections, {len(fallbacks)} generic fallbacks at the cap; "
      f"final ledgers {', '.join(f'{a} {v}' for a, v in sorted(rep.step('M', T - 1).ledger.items()))}")"""),
    md("""The first fallback in detail (if the replay has one):"""),
    code("""if fallbacks:
    first = fallbacks[0].turn
    display(styled(playground.turn_table(rep, first), caption=f"turn {first + 1}: the first generic fallback",
                   index=True))
else:
    print("no fallback in this replay (raise K or lower B_a to see one)")"""),
    md("""### What the paper says, checked on this replay

Each row is computed from the replay (`playground.invariants`); `tests/test_playground.py` checks the same claims
independently."""),
    code("""inv = playground.invariants(rep)
display(styled(inv))
assert inv["holds"].all(), inv[~inv["holds"]]"""),
    md("""## 4. The walk-through figure (or the widget)

Top left: the view distributions of turn $t$ under $M$ and $M'$ (released views marked). Top right: the ledgers
over the turns against the cap, with every generic fallback. Bottom left: the outcome of every turn on each side.
Bottom right: the realised privacy loss of each side's transcript, $\\sum_t \\log \\Pr[v_t\\mid\\text{own store}]/\\Pr[v_t\\mid\\text{other store}]$,
inside $\\pm L_a \\subseteq \\pm B_a$ (Theorem 1). With `INTERACTIVE = True` (JupyterLab) the same figure is
redrawn for the pair, turn, typed query, $B_a$, $K$ and method chosen in the widget (one frame per change), with
the tables of sections 2-3 and both responses below it."""),
    code("""if INTERACTIVE:
    widget = playground_widget.make_playground(bench, resp.responder, pair_id=pair_id, turn=turn, query=query,
                                               intent=intent, method=method, B_a=B_a, K=K, seed=em_seed, turns=T,
                                               view_links=links)
    display(widget)
else:
    fig = playground_widget.walkthrough_figure(rep, t, dpi=110)
    (figures / "07_playground.png").write_bytes(playground_widget.figure_png(fig))
    display(Image(filename=str(figures / "07_playground.png"), width=1000))
print(playground.summary_text(rep, t))"""),
    md("""## 5. Files written

The replay, the detailed turn, its view distributions, the responses of the replay and the checks, under
`{results_dir}/tables/07_*` and `{results_dir}/figures/07_playground.png`."""),
    code("""all_resp = resp.get(rep)
for name, df in (("07_replay", replay_df), ("07_turn", playground.turn_table(rep, t).reset_index(names="row")),
                 ("07_views", playground.view_table(rep, t)), ("07_responses", all_resp), ("07_checks", inv),
                 ("07_loss", playground.loss_table(rep))):
    write_table(df, tables, name)
_ = (tables / "07_run.json").write_text(json.dumps({"profile": prof.name, "pair_id": pair_id, "turn": turn, "query": query,
                                                    "intent": intent, "method": method, "B_a": str(B_a), "K": K, "T": T,
                                                    "em_seed": em_seed, "responder": resp.responder.name}, indent=1))
styled(all_resp[all_resp["side"] == "M"].drop(columns=["side"]).merge(
    all_resp[all_resp["side"] == "M'"][["turn", "response"]], on="turn", suffixes=(" M", " M'")),
    caption="responses over the replay")"""),
]

write_notebook(cells, "07_memview_playground")
