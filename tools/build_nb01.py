"""Build notebooks/01_data_construction.ipynb (committed without outputs). Run: .venv/bin/python tools/build_nb01.py"""
from __future__ import annotations

import nbformat as nbf
from nbbuild import write_notebook

md, code = nbf.v4.new_markdown_cell, nbf.v4.new_code_cell

cells = [
    md("""# 01 — Evaluation data: PairedMem and the public-corpus transfer track

This notebook builds and freezes the two paired evaluation tracks of the paper (**Evaluation data**,
Appendix **C.1-C.3**, Tables 5-7) under `data/`, and shows what they contain.

* **PairedMem** (C.2): adjacent store pairs $M \\sim_a M'$ on one fixed public policy (six slots, 28
  positions, four protected attributes: type-2 diabetes, pregnancy, severe unsecured debt, recent
  involuntary job loss). Steps **S1** pair design (384 candidate specifications), **S2** text
  realisation, **S3** code validation and quota selection (320 pairs + reserves), **S4** one
  32-query trajectory per pair with deterministic gold behaviours.
* **Transfer** (C.3): 67 pairs = 20 LoCoMo speaker histories x (diabetes, debt, job loss) + 7 speakers
  whose persona fits x pregnancy. Each copies the scaffold, queries and gold of a matching PairedMem
  pair; the memory text comes from public corpora: evidence sentences that pass the T3 rules and a
  reviewed allow-list, each with a reviewed a-neutral $M'$ replacement (steps **T1-T4**).

Where the paper used LLMs (Mistral-7B as writer, Claude as checker) this reproduction uses, by
default, a seeded compositional realiser (position topic phrases x change verbs x attribute or
neutral reasons x fields, `dpmv_lib.bench.phrasebank.compose`) and code validation; the realiser simulates
writer errors at a small seeded rate so that S3 is a real filter. An LLM writer can replace the
wording (`dpmv_lib.generate.writer.build_with_writer("responder:<spec>")`, any responder spec: a local model or an
OpenAI-compatible server); every rewritten sentence is then code-validated (target cue kept on $M$,
absent from $M'$, label kept) before S3. All logic lives in `dpmv_lib` (`bench`: `pairedmem*`, `transfer*`,
`lexicon`, `phrasebank`, `benchmark_quality`; `experiments.data_report`); this notebook only calls it.
Rebuilding with the same seed reproduces every file byte for byte."""),
    code("""profile = "default"
seed = 0
results_dir = "results"
data_dir = "data"
corpora_dir = None
INTERACTIVE = False""", metadata={"tags": ["parameters"]}),
    code("""import matplotlib
if not INTERACTIVE:
    matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import HTML, Markdown, display

from dpmv_lib.experiments import data_report as dr
from dpmv_lib.bench import pairedmem_specs as PS
from dpmv_lib.bench import transfer_quality as TQ
from dpmv_lib.bench.datasets import load_benchmark
from dpmv_lib.common.paths import project_root, resolve
from dpmv_lib.experiments.profiles import get_profile
from dpmv_lib.experiments.tables import write_table

prof = get_profile(profile)
out, data = resolve(results_dir), resolve(data_dir)
tables, figures = out / "tables", out / "figures"
# The committed benchmark is always built in full; a throwaway data_dir (tests, smoke runs) may
# build a reduced transfer track from the profile's pair count.
is_committed = data.resolve() == (project_root() / "data").resolve()
transfer_speakers = None if (is_committed or prof.transfer_pairs is None) else max(1, prof.transfer_pairs // 4)
pd.set_option("display.width", 200, "display.max_columns", 30, "display.max_colwidth", 90)
print(f"profile={prof.name} seed={seed} data -> {data} results -> {out} transfer speakers={transfer_speakers or 20}")"""),
    md("""## 1. The fixed public policy

Every template is a full public policy: the same 28 positions in six slots, the same per-slot view
vocabularies (a fixed generic view plus response-conditioning views such as *blood-sugar-conscious*,
*pregnancy-safe*, *strict-budget*, *debt-payoff-first*, *income-gap-bridging*), the same router (one
public intent -> one slot) and read policy. Templates differ only in the protected groups $I_a$
(4-6 positions over at most four slots); `t7` and `t8` make groups overlap (one position evidences
two attributes). Views say how to answer, never a user fact, and are shared by all stores (C1).
The scorer $u = 0.4\\,r + 0.4\\,c + 0.2\\,s$ reads the public intent ($r$) and the view's cues in the read
memory ($c$, $s$), so its sensitivity is $\\Delta u = 0.6$ (C.5)."""),
    code("""p0 = next(iter(PS.template_policies().values()))
display(dr.template_groups(p0))
display(dr.slot_table(p0))
print("sensitivity Delta u =", p0.sensitivity, "| caps B_a =", {a: str(c) for a, c in p0.caps.items()})"""),
    md("""## 2. Build both tracks (S1-S4, T1-T4) and freeze them

`build_all` runs S1-S4, validates, selects and writes `data/policy/` and `data/pairedmem/`, then
runs T1-T4 from the public corpora and writes `data/transfer/`. Each directory gets a `manifest.json`
with counts and the sha256 of every file; files are written to a temporary directory and swapped in,
so nothing is left half-written. If the corpora are missing, only the transfer track is skipped and
the message says which files are needed and where to get them."""),
    code("""db = dr.build_all(data, seed=seed, corpora_dir=corpora_dir, transfer_speakers=transfer_speakers)
if db.transfer_error:
    display(Markdown(f"**Transfer track skipped.** {db.transfer_error}"))
display(dr.build_seconds(db))
bench = load_benchmark("pairedmem", data)        # reload through the checksummed loader
print(f"loaded {len(bench)} PairedMem pairs; manifest files: {list(bench.manifest['files'])}")"""),
    md("""## 3. S1-S3: specifications, validation, selection

S1 draws 96 specifications per attribute over the templates (25% on the overlap templates); each
fixes its split (train / validation / test), the target evidence items, the non-target clauses
(background sentences and, for some specs, the evidence of a *co-present* attribute that sits in
both stores), the length-matched a-neutral reasons of $M'$ and the memory style (first person or
third-person memory notes), all drawn from that split's part of the phrase lists. S2 realises the text; S3 checks every candidate:
same scaffold, $D=\\{i: m_i \\ne m'_i\\} \\subseteq I_a$, target evidence present in $M$ and absent from
$M'$ (lexicon and scorer cues), no new evidence, non-target evidence preserved at overlapping
positions, slot compatibility, no duplicate stores. The failing candidates and why:"""),
    code("""fails = dr.failed_candidates(db.pairedmem.candidates)
display(fails if len(fails) else Markdown("*no candidate failed*"))
display(dr.selection_crosstab(db.pairedmem.pairs))"""),
    md("""## 4. Table 6: PairedMem construction counts beside the paper

Every number in the *ours* column is counted from the build above; *paper* is read from
`../shared/reference/paper_other_figures.csv` (blank where the paper gives no number). The pass
count is whatever S3 measured: it is not forced to the paper's 381."""),
    code("""ref = dr.paper_figures()
t6 = dr.table6(db, ref)
display(t6)
written = list(write_table(t6, tables, "table6_pairedmem_construction", t6.astype(str).to_markdown(index=False)))"""),
    md("""## 5. An example pair, side by side

Highlighted rows are the positions where $M$ and $M'$ differ: exactly the protected group $I_a$.
In an overlap pair the shared position keeps the other attribute's evidence in both stores."""),
    code("""ex = next(p for p in bench.pairs if p.overlap)
print(ex.pair_id, "| attribute:", ex.attribute, "| template:", ex.template, "| co-present:", ex.meta["co_present"],
      "| split:", ex.split)
display(HTML(dr.highlight_html(dr.pair_side_by_side(ex))))"""),
    md("""## 6. S4: the query trajectory and its deterministic gold

Two disjoint 16-query blocks, each with 8 target-relevant, 4 same-domain neutral (same slots as
$I_a$, read sets that avoid $I_a$) and 4 distractor queries (other slots). A query is composed from
its slot and public intent only (base phrasing x opener x closing request) and never names a
protected attribute or a direct synonym (the lexicon check below runs on every query). Gold per turn
comes from the policy: on a target-relevant turn the behaviours of the attribute's views that serve
the intent are *target-required* on $M$ (tRec) and *unsupported* on $M'$ (Unsup), except where a
co-present attribute links to the same view **and** the turn reads that attribute's evidence (then
$M'$ supports the view and the entry is dropped); every turn has the intent's generic behaviour. Behaviour descriptions are written independently of any response generator."""),
    code("""display(dr.trajectory_table(ex, bench.behaviours).head(16))
checks = dr.trajectory_checks(bench.pairs, bench.policy, bench.behaviours)
print(f"queries checked: {checks['queries']}; naming an attribute: {checks['naming_attribute']}; "
      f"trajectory problems: {checks['trajectory_problems']}")"""),
    md("""## 7. Benchmark quality: charge structure, split leakage, templating, artefacts

The checks of issue 10, computed by `dpmv_lib.bench.benchmark_quality` on the pairs just built (and
asserted by `tests/test_benchmark_quality.py` on the committed data):

1. **Charge structure** (Table 4). Same-domain neutral queries read no position of $I_a$, so only the
   8 target-relevant queries of a 16-turn block touch $I_a$. Running the real NoCap and
   IncompleteCharge variants (online, $\varepsilon = B_a/K = 2/3$) over the first 16 turns of every
   pair gives the reconstructed bound of `dpmv_lib.checks.accounting.reconstructed_bound`; the preallocated
   plan has $C_a = 8$ ($\varepsilon = B_a / C_a = 1/4$).
2. **Split leakage.** Train, validation and test draw on disjoint parts of every phrase list (split fixed
   at S1), so no validation or test evidence *core* (sentence modulo opening frame and pronouns,
   `benchmark_quality.sentence_core`) occurs in train.
3. **Templating volume**: composed queries and memory sentences; no 5-gram in more than 1% of sentences.
4. **Artefacts**: length-only classifier at chance ($M'$ reasons are length-matched a-neutral draws),
   no counter-evidence in $M'$, no number transform between sides, every sentence fits its position
   label, and gold entries are removed only where the turn reads the co-present attribute's evidence.

*paper* is Table 4's DP-bound column (`../shared/reference/paper_table4_safeguards.csv`)."""),
    code("""qt = dr.quality_table(bench.pairs, bench.policy)
display(qt)
written += write_table(qt.astype(str), tables, "01_benchmark_quality", qt.astype(str).to_markdown(index=False))
from dpmv_lib.bench import benchmark_quality as bq
print("top 5-grams:", bq.ngram_shares(bench.pairs, k=5))"""),
    md("""## 8. Table 5: the two tracks, and the structure figure"""),
    code("""t5 = dr.table5(db, ref)
display(t5)
written += write_table(t5, tables, "table5_tracks", t5.astype(str).to_markdown(index=False))
fig = dr.structure_figure(bench.pairs, figures / "01_pairedmem_structure.png")
plt.show() if INTERACTIVE else None
written.append(figures / "01_pairedmem_structure.png")"""),
    md("""## 9. Transfer track (C.3): evidence rules, reviewed replacements, background, quality

T3 evidence rules (`dpmv_lib.bench.transfer_evidence.evidence_problems`): the sentence states the speaker's own
current state (first person; no resolved past state, post-birth pregnancy, hypothetical, question,
negation, other person; diabetes must be type-2 compatible: no type 1, gestational, DKA, insipidus,
pump), carries no other attribute's signal and hits a scorer cue; its source record must not say the
state has ended (`ended_in_record`: a new job, back to work, gave birth, debt paid off, remission).
Evidence comes from real patient questions (iCliniq-style, MeQSum, LiveQA), real posts (Dreaddit,
SDCNL, CAMS, SAD/LiveJournal), dialogues (ACI-Bench, MTS-Dialog), crowd-written (EmpatheticDialogues, SAD/mTurk) and machine-generated
text (GenMedGPT-5k); every sentence records its source kind and the pool puts real text first. Every
candidate that passes the rules is reviewed in `dpmv_lib/bench/transfer_review.json`: accepted with a
hand-written a-neutral $M'$ replacement (checked in code for any attribute signal, residual-signal word
or counter-evidence) or rejected with its reason. Evidence is placed at every $I_a$ position that the
pair's target-relevant turns read, so each target-required behaviour is supported on $M$; no sentence
fills more than 4 slots. Background sentences are the speaker's own first-person LoCoMo sentences,
minus those that contradict the evidence (conflict lexicon); pregnancy pairs only for speakers whose
LoCoMo annotations fit (`transfer.pregnancy_persona_fits`), hence 67 pairs instead of the paper's 80.
The quality table below is computed from the stores (`transfer.quality_report`); v1 = the audited
first build, v2 = the build before issue 28. Then: distinct evidence sentences by source kind, and the
word edit distance between each evidence sentence and its $M'$."""),
    code("""if db.transfer is not None:
    tqr = TQ.quality_report(db.transfer)
    tq = dr.transfer_quality_table(tqr)
    display(tq)
    written += write_table(tq.astype(str), tables, "01_transfer_quality", tq.astype(str).to_markdown(index=False))
    display(dr.evidence_kind_table(tqr))
    display(dr.edit_distance_table(tqr))"""),
    code("""t7 = dr.table7(db)
display(t7)
written += write_table(t7.astype(str), tables, "table7_transfer_evidence", t7.astype(str).to_markdown(index=False))
if db.transfer is not None:
    tc = db.transfer.counts()
    print("matched PairedMem pairs:", tc["matched_pairedmem_pairs"], "| max reuse of one evidence sentence:",
          tc["max_reuse_of_one_evidence_sentence"], "| background slot fallbacks:",
          tc["background_slot_fallback_positions"])
    bg = dr.background_table(db)
    display(bg)
    written += write_table(bg, tables, "table7_transfer_background", bg.astype(str).to_markdown(index=False))
    display(dr.evidence_examples(db.transfer, per_attribute=3))
    tp = db.transfer.pairs[0]
    print(tp.pair_id, "copies", tp.meta["matched_pair"])
    display(HTML(dr.highlight_html(dr.pair_side_by_side(tp))))"""),
    md("""## 10. What was written

The frozen files and their checksums (the loader `dpmv_lib.bench.datasets.load_benchmark` verifies them
before use), plus the tables and the figure of this notebook."""),
    code("""for manifest in dr.manifest_tables(data, ("pairedmem", "transfer")):
    display(manifest)
print("written:", *[str(p) for p in written], sep="\\n  ")
print(f"build time (s): {db.seconds}")"""),
]

write_notebook(cells, "01_data_construction")
