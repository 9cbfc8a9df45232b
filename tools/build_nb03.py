"""Build notebooks/03_rq1_privacy_utility.ipynb (committed without outputs).

Run: .venv/bin/python tools/build_nb03.py"""
from __future__ import annotations

import nbformat as nbf
from nbbuild import write_notebook

md, code = nbf.v4.new_markdown_cell, nbf.v4.new_code_cell

cells = [
    md("""# 03 — RQ1: privacy-utility of the compared memory interfaces (Table 2)

**Paper step.** RQ1 asks whether DP-MemView keeps the *transcript* of a long interaction close to
indistinguishable between adjacent stores $M \\sim_a M'$ while still personalising from supported
memory, compared with a memory-independent control (**GenericOnly**), a raw-memory reference
(**RawReadSet**), adaptations of published defences (**TypedMask** ~ MemPrivacy, **TaskMin** ~
AirGapAgent) and a post-generation filter (**OutputFilter**). Table 2 of the paper reports, at
$T=16$, $B_a=2$, $K=3$:

* **privacy** - an *embedding auditor* (C.5): frozen sentence encoder, each response embedded, the
  first $t$ responses averaged and $L_2$-normalised, one logistic regression per attribute and
  prefix length fitted on PairedMem training pairs, sigmoid-calibrated on validation pairs, scored
  on held-out test pairs and applied unchanged to the transfer track; macro-AUC over the four
  attributes and TPR at 5% FPR;
* **utility** - a blinded judge with a rubric fixed from each pair's gold behaviours: $U$ (mean of
  relevance, correctness, actionability, personalisation, /4), tRec (target-required behaviours on
  $M$) and Unsup (unsupported target-specific behaviours on $M'$).

**What this run uses.** The response model, encoder and judge come from the profile: in the
`default` profile a seeded *surrogate* response model (an instrument, not an LLM; see
`dpmv_lib.generate.responders.surrogate`), all-MiniLM-L6-v2 from an offline package (one embedding per
response, exactly C.5; bf16 weights on CPUs with native bf16, checked against fp32 in
`benchmarks/results/encoder.md`), and an offline rubric judge based on sentence similarity and
documented rules (`dpmv_lib.evaluate.rubric_judge.RubricJudge`, checked on a labelled degradation set in
section 3b); `llm` uses SmolLM2-135M and
`paper` the paper's three served models. **None of these is the paper's Qwen/Llama/Gemma + Claude
setup unless the `paper` profile is run**, so our numbers are compared with each of the paper's
models and with their mean, clearly labelled.

**Beyond the paper.** For DP-MemView the released views are the only store-dependent input of the
response model, and given the public ledger path they are independent across turns. The *exact
optimal auditor* (`dpmv_lib.evaluate.oracle`) convolves the per-turn likelihood ratios of the views and gives
the best AUC / TPR that **any** auditor of the transcript can reach, and the maximum realised privacy
loss, which Theorem 1 bounds by $B_a$ on every pair.

All logic lives in `dpmv_lib` (`experiments`, `audit`, `oracle`, `judge`, `tables`, `plots`); this
notebook calls `run_rq1` and shows its results."""),
    code("""profile = "default"
seed = 0
results_dir = "results"
data_dir = "data"
INTERACTIVE = False
B_a = 2
K = 3
T = 16
# embedding unit of the auditor: "auto" = "response" (exactly C.5: one embedding per response);
# "sentence" = normalised mean of sentence embeddings (an opt-in approximation, not C.5)
AUDIT_UNIT = "auto"
# bootstrap replicates over pairs for the 95% CIs
N_BOOT = 1000""", metadata={"tags": ["parameters"]}),
    code("""import time

import pandas as pd
from IPython.display import Image, Markdown, display

from dpmv_lib.experiments.prelude import *  # noqa: F403 (run_rq1, verdicts, table2_markdown, write_table, ...)

pd.set_option("display.width", 200)
pd.set_option("display.max_columns", 40)
prof = get_profile(profile).for_seed(seed)  # --seed moves the EM seeds too
print(f"profile {prof.name}: {prof.description}")
print(f"response model(s): {prof.response_models or prof.responder}; encoder: {prof.encoder}; judge: {prof.judge}; "
      f"EM seeds: {prof.em_seeds}; pairs: {prof.pairs or 'all'} PairedMem, {prof.transfer_pairs or 'all'} transfer")"""),
    md("""## 1. Run the pipeline

`run_rq1` loads both frozen tracks (a stratified subset in the smoke profile), generates the
transcripts of the seven RQ1 interfaces for the first $T$ turns of every pair, both stores and the
profile's EM seeds (deterministic methods once), and then runs the auditor, the exact oracle and the
judge. Timings per stage are printed; every table and figure is also written under
`{results_dir}/tables` and `{results_dir}/figures`."""),
    code("""t0 = time.perf_counter()
cfg = RQ1Config(profile=profile, seed=seed, results_dir=results_dir, data_dir=data_dir, B_a=B_a, K=K, T=T,
                audit_unit=AUDIT_UNIT, n_boot=N_BOOT, progress=False)
res = run_rq1(cfg)
for n in res.notes:
    print("NOTE:", n)
styled(pd.Series(res.timings, name="seconds").rename_axis("stage"), precision=1, caption="time per stage")"""),
    md("""### An example turn

What each interface passes the response model at one target-relevant turn of one pair, under $M$
and $M'$ (first EM seed for the stochastic methods), and the response it produced."""),
    code("""tr = res.transcripts
pm = tr[(tr["track"] == "pairedmem") & (tr["qtype"] == "target")]
pid, turn = pm["pair_id"].iloc[0], int(pm["turn"].iloc[0])
ex = tr[(tr["pair_id"] == pid) & (tr["turn"] == turn) & (tr["seed"].isin([-1, min(prof.em_seeds)]))]
print(f"pair {pid}, turn {turn}: {ex['query'].iloc[0]!r}")
display(styled(ex.pivot_table(index="method", columns="side", values=["conditioning", "response"], aggfunc="first")
          .reindex(cfg.methods)))"""),
    md("""## 2. Chance by construction (the paper's dagger), checked

The paper marks GenericOnly and TypedMask with a dagger: their conditioning is identical under $M$
and $M'$, so any auditor is at chance. Here the claim is **checked from the transcripts**: for every
pair, seed and turn the conditioning text, released views and public release record are compared
between the two stores. Only methods with zero differing cells get 0.500 / 0.050 in Table 2; the
measured auditor values stay in the CSV (`auc_measured`, `tpr_measured`)."""),
    code("""display(styled(res.identical))"""),
    md("""## 3. Table 2 (ours)

AUC and TPR@5: auditor at prefix length $T$ (seed-averaged scores per pair and side, C.5 "Runs and
aggregation"), 95% bootstrap CIs over test pairs (stratified by attribute). tRec / U / Unsup: the
judge at $T$, seeds averaged within each pair before averaging over pairs. The embedding unit used
is printed below (`response` = exactly C.5).

Rows **DP-MemView (on, P&F)** and **(pre, P&F)** are beyond the paper: the same interfaces (same
$\varepsilon$, ledger, caps and generic fallback) with the permute-and-flip selector (McKenna &
Sheldon 2020) in place of Eq. (7) - also pure $\varepsilon$-DP with the same sensitivity, and never
lower expected utility. The paper has no such rows ("-" in the comparison below); the claims of
section 5 are evaluated on the paper's methods only."""),
    code("""print("embedding unit:", res.audit["embedding_unit"].iloc[0])
display(Markdown(table2_markdown(res.table2)))
pf_vs_em = res.table2[res.table2["method"].str.startswith("DP-MemView")][
    ["track", "response_model", "method", "auc", "tpr", "trec", "u", "unsup"]]
display(styled(pf_vs_em, precision=3))"""),
    md("""### 3b. Do the judge's scores mean something? Three checks

**(i) A degradation set that mirrors none of the judge's rules.** The judge used above is run on
`tests/data/judge_degradation.jsonl` (`dpmv_lib.experiments.judge_degradation`): the surrogate's answers to
PairedMem target queries, each with controlled variants: the answer of another item (off-topic),
the same user's answer to another query of the conversation, *this* query answered with another
user's memory (an attribute sharing no view of the slot), the advice replaced by naturally worded
advice that is wrong for the user's attribute, and a stock generic answer. (The first version of
this set negated, truncated, templated and "Since you mentioned"-prefixed answers: the judge has a
rule for each, so it measured the rules.) For each variant and the judge dimension(s) it should
lower: the share of items where the variant scores strictly lower than its original (ties count as
failures) and the mean gap on the 0-4 scale. The LLM judge (`llm:` profiles) is not evaluated here
(it needs a served model)."""),
    code("""judge_spec = cfg.judge or prof.judge
tables_dir = resolve(results_dir) / "tables"
if judge_spec == "rubric":
    judge = make_judge("rubric", run_encoder(cfg.encoder or prof.encoder, results_dir))
    deg = evaluate_judge(judge)
    print(deg.judge_id)
    write_table(deg.intended(), tables_dir, "03_judge_degradation")
    display(styled(deg.intended(), precision=3))
    display(styled(deg.summary.pivot(index="variant", columns="dimension", values="mean_gap"), precision=2))
else:
    judge = None
    print(f"judge {judge_spec!r}: the judge checks run for the rubric judge only")"""),
    md("""**(ii) Verbatim restatements of every view (issue 33).** Where two attributes link to the same
view (debt and job loss: `finance.strict_budget`, `food.strict_budget`, `health.low_cost_care`;
diabetes and pregnancy: `schedule.appointment_aware`), the judge's specificity check used to count
the *other* attribute's description of that view as a contrast, so whichever wording was closer
took the credit and the other attribute's item got ~0 however well a response showed it. The rule
now (`dpmv_lib.evaluate.rubric.contrast_set`): **contrasts never include another attribute's
description of the same view**; each item keeps its own attribute's gold description, so a
response is graded alike whichever attributes share its view (rather than merging the two
descriptions into one, which would rewrite the gold). Sentences are also compared without their
lead-in ("The key point:", "Since you mentioned X,"), and bullet / numbered lists split into items.
The table: every (view, attribute) of this run's PairedMem pairs, graded on responses that restate
the view's text word for word (alone, in a neutral reply, in a list): the share graded >= 2 (goal
>= 0.95 for every row) and the mean grade; `shared` marks views two attributes link to."""),
    code("""if judge is not None:
    pm = select_pairs(load_benchmark("pairedmem", data_dir), prof.pairs, seed)
    rest = restatement_report(pm, judge)
    write_table(rest.summary(), tables_dir, "03_judge_restatement")
    display(styled(rest.by_sharing(), precision=3))
    display(styled(rest.summary(), precision=3))
    print("every (view, attribute) >= 0.95:", bool((rest.summary()["share_ge2"] >= 0.95).all()))"""),
    md("""**(iii) Against independent labels (issue 27).** `data/judge_labels/`: 480 units (one response at
one turn x one rubric item), drawn from surrogate and SmolLM2 transcripts of every method, both
tracks and both sides, labelled by reading against a written guide by an annotator who neither ran
the judge nor read its rules; 120 of them labelled again, blind, by a second annotator (both
annotators were AI assistant sessions, not people: their agreement may overstate human agreement).
First the labels' own reliability (A vs B), then the judge against annotator A: accuracy, Cohen's
kappa (`sklearn.metrics.cohen_kappa_score`) and precision / recall of "behaviour shown" (grade >= 2)
for tRec items (target-required on M), Unsup items (unsupported on M') and generic items, and for
each holistic dimension of U (grade >= 2 as the positive class; `weighted_kappa`: quadratic weights
on the 0-4 grades). Each unit is judged with its pair's real rubric at that turn
(`dpmv_lib.evaluate.judge_agreement`). Goal: kappa >= 0.6 on tRec and Unsup items."""),
    code("""if judge is not None:
    ia = judge_agreement.inter_annotator(resolve(data_dir) / "judge_labels")
    write_table(ia, tables_dir, "03_judge_inter_annotator")
    display(styled(ia, precision=3, caption="annotator A vs annotator B (120 units)"))
    units = judge_agreement.load_units(resolve(data_dir) / "judge_labels")
    label_benches = {t: load_benchmark(t, data_dir) for t in sorted(set(units["track"]))}
    judged = judge_agreement.judge_units(units, label_benches, judge)
    agr = judge_agreement.agreement(judged)
    write_table(agr, tables_dir, "03_judge_agreement")
    display(styled(agr, precision=3, caption=f"judge {judge.id} vs annotator A"))"""),
    md("""**Fitting the item thresholds on the labels (issue 33).** The judge's similarity thresholds
(f, f+.1, f+.2, f+.3) and specificity margins (0, m, 2m, 3m) over a grid, fitted on half of the
labelled pairs (seeded) by the mean kappa of "shown" over tRec and Unsup items, and reported on the
other half (`judge_agreement.fit_item_thresholds`; MiniLM judge only: the hashing encoder of the
smoke profile keeps its own scale). `current` marks the values in use, `chosen` the fitted ones;
the values in use are the fitted ones (`rubric_judge.MARGINS`)."""),
    code("""if judge is not None and not judge.id.startswith("rubric-v4[hashing"):
    label_benches = {t: load_benchmark(t, data_dir) for t in sorted(set(units["track"]))}
    grid, chosen = judge_agreement.fit_item_thresholds(units, label_benches,
                                                       run_encoder(cfg.encoder or prof.encoder, results_dir),
                                                       current=(judge.thresholds[0], judge.margins[1]))
    write_table(grid, tables_dir, "03_judge_threshold_fit")
    display(styled(grid, precision=3))
    print("fitted:", chosen, "| in use: floor", judge.thresholds[0], "margin step", judge.margins[1])"""),
    md("""### 3c. What the response model wrote

A stratified sample of this run's responses (`dpmv_lib.experiments.samples.response_sample`): per track
and method 15 (pair, seed, turn) cells, both sides of each (30 responses), with the conditioning
each response got and the judge's grades of that turn (items: grade 0-4 and kind; the holistic
dimensions and U). Written to `tables/03_response_sample.csv` (under `results/llm/` for SmolLM2).
Below, two cells per method with $M$ and $M'$ side by side: what reached the model and what it wrote."""),
    code("""if judge is not None:
    benches = {t: (select_pairs(load_benchmark(t, data_dir), prof.pairs if t == "pairedmem" else prof.transfer_pairs, seed))
               for t in sorted(set(res.transcripts["track"]))}
    sample = samples.response_sample(res.transcripts, benches, judge, seed=seed)
    sample.to_csv(tables_dir / "03_response_sample.csv", index=False)
    print(f"{len(sample)} responses sampled; mean U of the sample by method:")
    display(styled(sample.groupby(["track", "method"])[["U", "personalisation"]].mean(), precision=3))
    with pd.option_context("display.max_colwidth", 400):
        display(samples.side_by_side(sample[sample["track"] == "pairedmem"], n=1,
                                     methods=("RawReadSet", "TypedMask", "DP-MemView (on)")))"""),
    md("""## 4. Beside the paper

The paper's numbers (`../shared/reference/paper_table2_rq1.csv`) for each of its three response
models and their mean; $\\Delta$ = ours - paper mean. Our response model is the profile's (the
surrogate by default), not one of the paper's, so the comparison is about *patterns* (which methods
separate, which personalise), not about matching values; absolute U and tRec also depend on the
judge, which is not the paper's Claude judge."""),
    code("""if not res.comparison.empty:
    display(Markdown(comparison_markdown(res.comparison)))
else:
    print("paper reference table not available")"""),
    md("""## 5. Which of the paper's RQ1 claims hold in this run

Each claim of the paper's RQ1 section is a statistic of the table above with a stated margin
(`dpmv_lib.experiments.rq1_claims.evaluate_claims`); a claim made "in every model-track combination"
has one case per combination and is decided by its weakest case. **How each verdict is reached**
(`dpmv_lib.experiments.verdicts`):

* the uncertainty is a *paired* bootstrap over pairs, stratified by attribute (1,000 replicates
  at least): each replicate resamples the pairs of every attribute once, and every method is
  evaluated on the same resample, so differences between methods are paired. EM seeds are averaged
  within a pair first, as the auditor does. AUCs are Mann-Whitney (= `sklearn.metrics.roc_auc_score`),
  utility scores are means over pairs of the judge's per-transcript grades;
* each claim gets a two-sided bootstrap p-value, and the bootstrapped claims of this table form one
  family corrected with **Holm's step-down method** (family-wise error 5%);
* **HOLDS** / **DOES NOT HOLD**: the Holm-adjusted p < 0.05, with the replicates on the claim's /
  the other side of the margin (the 95% CI then lies wholly on that side); **INCONCLUSIVE**: the CI
  straddles the margin, or only the uncorrected p decides (both p-values are shown);
* C1, C2 (dagger check) and X2, X3 (exact oracle) are exact; X1 is two-sided: a learned AUC whose
  CI lies wholly above its exact ceiling is an **ERROR** (no auditor can beat the ceiling), and its
  evidence gives the auditor's power (AUC - 0.5) / (ceiling - 0.5).

C11's margin is the paper's 0.02 and at most a quarter of the spread of U over the seven methods,
so "comparable" cannot hold merely because U hardly moves between any methods."""),
    code("""display(Markdown(verdicts.claims_markdown(res.claims)))
print("verdicts:", verdicts.verdict_counts(res.claims))
display(Image(res.paths["rq1_auc_intervals"]) if "rq1_auc_intervals" in res.paths else None)"""),
    md("""### Verdicts by seed

`--seed s` moves every random stream of a run: the EM seeds (to a disjoint block), the surrogate's
draws, the subset selection and the bootstraps (`Profile.for_seed`). The runs with seeds 1 and 2
(`make seeds`: notebooks 03-05 into `results/seeds/<s>/`) are set beside this one. A claim is
*stable* when no two runs turn HOLDS into DOES NOT HOLD or the reverse; INCONCLUSIVE in one run is
not a flip (notebook 05 shows the same for the Table 3 and Table 4 claims)."""),
    code("""runs = verdicts.seed_runs(results_dir, seed)
by_seed = verdicts.seed_stability(runs, ("rq1_claims",))
print(f"runs with seeds {sorted(runs)}: {int(by_seed['flip'].sum())} of {len(by_seed)} claims flip"
      + ("" if len(runs) > 1 else f" (no runs with other seeds under {results_dir}/seeds/; make seeds writes them)"))
styled(by_seed.drop(columns=["table"]))"""),
    md("""## 6. The exact optimal auditor (beyond the paper)

For each pair the distribution of the transcript log-likelihood ratio is computed exactly under $M$
and $M'$ from the EM probabilities of the released views (convolution over turns). Pooled over the
auditor's evaluation pairs this gives the **ceiling**: the best AUC any auditor of the transcript can
reach - for one transcript per pair, and for all EM seeds of a pair observed together (the
seed-averaged auditor of Table 2 sees all of them). The learned auditor is compared with the
single-transcript ceiling through `auc_indep` (M and M' transcripts from independent draws; the
generator couples M and M' of one pair and seed through common random numbers, which slightly
inflates same-pair comparisons of the seed-averaged AUC). Memory-text methods release no views:
their transcript ceiling is 1 when the conditioning differs, 0.5 when it is identical. The last
columns check Theorem 1 numerically: the maximum realised privacy loss over every benchmark pair.
The contract-violating variants of RQ2 (IncompleteCharge, CappedArgmax, NoCap, ScoreChannel) are
run through the same oracle (views only, no responses) to show that their realised loss is not
bounded by $B_a$ (claim X3 above)."""),
    code("""aT = res.audit[res.audit["horizon"] == T]
display(Markdown(oracle_markdown(res.oracle, aT, float(B_a))))
display(Image(res.paths["rq1_ceiling"]) if "rq1_ceiling" in res.paths else None)"""),
    md("""### 6b. Auditors with power (beyond the paper)

The C.5 auditor (Table 2's column) beside stronger honest learned auditors on the same splits
(`dpmv_lib.evaluate.auditors`, `dpmv_lib.experiments.auditor_power`): `c5-raw` (the same model without the
Platt step, which is fitted on ~16 validation pairs per attribute and can invert a ranking), `views`
(logistic regression on counts of the released public views, what the exact ceiling sees),
`views-links` (the same slots, with the public gold view -> attribute links) and `tfidf` (lexical:
TF-IDF + logistic regression; C by cross-validation on training pairs only). Power = (AUC - 0.5) /
(ceiling - 0.5) against the exact ceiling of the same statistic (all EM seeds observed). AUCs carry
95% bootstrap intervals over pairs; TPR@5%FPR pools the negatives of all attributes and
interpolates the ROC (`min_fpr` is the lowest FPR reachable). The best auditor is chosen on the
evaluation pairs themselves, so its power is optimistic by the choice among five."""),
    code("""power = auditor_power(res.transcripts, run_encoder(cfg.encoder or prof.encoder, results_dir), res.oracle,
                      horizon=T, view_links=load_gold_rules(data_dir)["view_links"], seed=seed, n_boot=N_BOOT)
ptab = power_table(power)
write_table(ptab, tables_dir, "03_auditor_power")
power.to_csv(tables_dir / "03_auditors.csv", index=False)
display(styled(ptab, precision=3))
import matplotlib.pyplot as plt
plt.close(power_figure(power, resolve(results_dir) / "figures" / "03_auditor_power.png"))
display(Image(filename=str(resolve(results_dir) / "figures" / "03_auditor_power.png")))"""),
    md("""## 7. Figures: privacy-utility and leakage vs horizon

Left: auditor AUC against tRec; right: against U (filled markers PairedMem, hollow transfer). Then
the learned auditor's macro-AUC as the transcript prefix grows (same transcripts, $t \\le T$)."""),
    code("""if "rq1_privacy_utility" in res.paths:
    display(Image(res.paths["rq1_privacy_utility"]))
    display(Image(res.paths["rq1_leakage_horizon"]))"""),
    md("""## 8. Every instrument beside the paper

Table 2 of this run beside the same table of every other run under `results/` (one column per response
model: the surrogate of the `default` profile, SmolLM2 of the `llm` profile, ...) and the paper. Each
column is read from that run's own tables; the provenance table says which run (profile, commit,
clean) it came from. Written to `tables/table2_instruments.csv|md`."""),
    code("""inst = instruments.write_side_by_side("table2", results_dir)
display(Markdown(inst.markdown))"""),
    md("""## 9. Files written

Tables (CSV + Markdown) and figures of this run; `rq1_run.json` records the configuration, profile,
encoder, judge, embedding unit and the time per stage."""),
    code("""print(f"notebook wall time so far: {time.perf_counter() - t0:.0f} s")
styled(pd.DataFrame(sorted(res.paths.items()), columns=["output", "path"]).astype(str))"""),
]

write_notebook(cells, "03_rq1_privacy_utility")
