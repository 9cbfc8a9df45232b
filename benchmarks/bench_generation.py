"""Benchmark response generation.

    .venv/bin/python benchmarks/bench_generation.py [--parts surrogate smollm2 engines] [--workers 2]
        [--prompts 64] [--batch-sizes 32 64] [--max-new-tokens 64] [--int8] [--seed 0]
        [--engines SPEC ...] [--repeats 3] [--budget 30]

* ``surrogate``: every RQ1 transcript of the default profile (all PairedMem pairs, both stores,
  32 turns, the 7 RQ1 methods, EM seeds {0,1,2} for the stochastic ones) with the surrogate,
  end to end (``generate_transcripts``); target < 2 minutes on 2 cores. Also the conditioning
  stage alone with the float Gumbel-max sampler vs the exact rational sampler (the sampler choice
  of ``InterfaceParams.exact``).
* ``smollm2``: generated tokens/s of SmolLM2-135M-Instruct (dequantised float32 GGUF) on CPU at
  batch 32 and 64, on real prompts of the transcript table (a stratified sample over methods from
  the first 16 turns); target >= 150. Reported end to end (prefill + decode) and decode only
  (time of ``max_new_tokens`` minus time of 1 new token on the same batches). ``--int8`` also
  measures the optional dynamic-int8 model.

* ``engines``: every engine side by side on 64 such prompts (``--engines`` specs: transformers
  f32 and bf16, OpenVINO GenAI f32 and bf16), greedy,
  end-to-end generated tokens/s at batch 32 and 64 (median of up to ``--repeats`` runs within
  ``--budget`` s per engine and batch), whether each engine's texts are the same at both batch
  sizes and, for the first ``--solo`` prompts, alone (batch 1), how many of the 128 responses
  differ between bf16 and f32, and the CPU model and ISA flags (the llm profile's engine was
  chosen from this part).

Writes benchmarks/results/generation.json and generation.md (a part not run keeps its previous
numbers). Load averages are recorded before and after each part: other developers share the
machine's cores, so numbers are only comparable under similar load.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from machine_info import describe, loadavg, machine  # noqa: E402  (benchmarks/ is on sys.path when run as a script)

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")




def bench_surrogate(workers: int, seed: int) -> dict:
    from dpmv_lib.bench.datasets import load_benchmark
    from dpmv_lib.generate.generation import GenerationStats, InterfaceParams, conditioning_table, generate_transcripts
    from dpmv_lib.generate.interfaces import RQ1_METHODS
    from dpmv_lib.experiments.profiles import get_profile
    from dpmv_lib.generate.responders import SurrogateResponder

    prof = get_profile("default")
    bench = load_benchmark("pairedmem")
    if prof.pairs is not None:
        bench = bench.subset([p.pair_id for p in bench.pairs[: prof.pairs]])
    resp = SurrogateResponder.from_benchmark(bench)
    out: dict = {"pairs": len(bench), "methods": list(RQ1_METHODS), "em_seeds": list(prof.em_seeds),
                 "turns": 32, "workers": workers, "load_before": loadavg()}
    st = GenerationStats()
    t = time.perf_counter()
    df = generate_transcripts(bench, resp, RQ1_METHODS, seeds=prof.em_seeds, workers=workers, cache=None,
                              progress=True, stats=st)
    wall = time.perf_counter() - t
    out.update(wall_s=round(wall, 1), rows=len(df), requests=st.requests, unique_requests=st.unique_requests,
               stages_s={"conditioning": round(st.seconds_conditioning, 1),
                         "generation": round(st.seconds_generation, 1),
                         "table": round(st.seconds_total - st.seconds_conditioning - st.seconds_generation, 1)},
               target_s=120, meets_target=wall < 120, load_after_end_to_end=loadavg())
    samplers = {}
    for exact in (False, True):
        t = time.perf_counter()
        conditioning_table(bench, [m for m in RQ1_METHODS if m.startswith("DP-MemView")], seeds=prof.em_seeds,
                           params=InterfaceParams(exact=exact), workers=workers, progress=False)
        samplers["exact" if exact else "float"] = round(time.perf_counter() - t, 1)
    out["dp_conditioning_s_by_sampler"] = samplers
    out["load_after"] = loadavg()
    return out


def sample_prompts(n: int, seed: int):
    import numpy as np

    from dpmv_lib.bench.datasets import load_benchmark
    from dpmv_lib.generate.generation import _ROW_FIELDS, conditioning_table
    from dpmv_lib.generate.interfaces import RQ1_METHODS
    from dpmv_lib.generate.responders import Prompt

    bench = load_benchmark("pairedmem")
    rng = np.random.default_rng(seed)
    pick = rng.choice(len(bench.pairs), size=min(8, len(bench.pairs)), replace=False)
    sub = bench.subset([bench.pairs[i].pair_id for i in pick])
    rows = conditioning_table(sub, RQ1_METHODS, seeds=(0,), turns=16, progress=False)
    ci = {f: i for i, f in enumerate(_ROW_FIELDS)}
    by_method: dict[str, list] = {}
    for r in rows:
        by_method.setdefault(r[ci["method"]], []).append(r)
    prompts = []
    per = -(-n // len(by_method))
    for m in RQ1_METHODS:
        cand = by_method[m]
        for j in rng.choice(len(cand), size=min(per, len(cand)), replace=False):
            r = cand[j]
            prompts.append(Prompt(r[ci["query"]], r[ci["conditioning"]], (r[ci["pair_id"]], r[ci["turn"]], 0)))
    rng.shuffle(prompts)
    return prompts[:n]


def timed_throughput(one, full, prompts) -> tuple[list[str], dict]:
    """Time ``one`` (max_new_tokens=1: prefill + 1 token) and ``full`` on the same prompts:
    end-to-end and decode-only generated tokens/s, with the load average around the runs."""
    l0 = loadavg()
    t = time.perf_counter()
    one.respond(prompts)
    t_prefill = time.perf_counter() - t
    t = time.perf_counter()
    texts = full.respond(prompts)
    t_full = time.perf_counter() - t
    gen = full.generated_tokens
    return texts, {"generated_tokens": gen, "wall_s": round(t_full, 1), "prefill_plus_1_s": round(t_prefill, 1),
                   "tokens_per_s": round(gen / t_full, 1),
                   "decode_tokens_per_s": round((gen - len(prompts)) / max(1e-9, t_full - t_prefill), 1),
                   "empty_responses": sum(1 for x in texts if not x.strip()), "load": [l0, loadavg()]}


def bench_smollm2(n_prompts: int, batch_sizes: list[int], max_new: int, int8: bool, seed: int,
                  threads: int | None = None) -> dict:
    import torch

    from dpmv_lib.generate.responders import DecodingConfig, TransformersResponder

    prompts = sample_prompts(n_prompts, seed)
    out: dict = {"prompts": len(prompts), "max_new_tokens": max_new, "decoding": "greedy", "runs": [],
                 "load_before": loadavg()}
    t = time.perf_counter()
    base = TransformersResponder("smollm2", DecodingConfig(max_new_tokens=max_new), threads=threads)
    tok, _ = base.load()
    out["load_model_s"] = round(time.perf_counter() - t, 1)
    out["torch_threads"] = torch.get_num_threads()
    lens = [len(tok(base.render(p), add_special_tokens=False)["input_ids"]) for p in prompts]
    out["prompt_tokens"] = {"mean": round(sum(lens) / len(lens), 1), "max": max(lens), "min": min(lens)}
    for quant in ([None, "int8"] if int8 else [None]):
        for bs in batch_sizes:
            full = TransformersResponder("smollm2", DecodingConfig(max_new_tokens=max_new), batch_size=bs,
                                         quantize=quant, threads=out["torch_threads"])
            one = TransformersResponder("smollm2", DecodingConfig(max_new_tokens=1), batch_size=bs,
                                        quantize=quant, threads=out["torch_threads"])
            full.load()
            from dpmv_lib.generate.responders.transformers_backend import length_batches
            batches = length_batches(lens, bs, full.min_fill)
            _, timing = timed_throughput(one, full, prompts)
            run = {"model": "float32" if quant is None else quant, "batch_size": bs, **timing,
                   "batches": len(batches), "mean_batch": round(len(prompts) / len(batches), 1),
                   "padding_waste": round(1 - sum(lens) / sum(len(b) * lens[b[0]] for b in batches), 3)}
            out["runs"].append(run)
            print(json.dumps(run), flush=True)
    out["target_tokens_per_s"] = 150
    out["load_after"] = loadavg()
    return out


ENGINE_SPECS = ("smollm2@f32", "smollm2@bf16", "openvino:smollm2@f32", "openvino:smollm2@bf16")
REFERENCE = "smollm2@f32"   # the engine the others' speed is given relative to


def usable(spec: str) -> bool:
    """Whether ``spec``'s engine can run here: its package is installed and, for OpenVINO, the
    IR is exported (bf16 also needs a BF16-capable CPU)."""
    import importlib.util

    from dpmv_lib.core.errors import GenerationError
    from dpmv_lib.generate.responders.openvino_backend import openvino_capabilities
    from dpmv_lib.generate.responders.openvino_export import ir_dir, missing_files

    if spec.startswith("openvino"):
        if importlib.util.find_spec("openvino_genai") is None:
            return False
        model, _, precision = (spec[len("openvino:"):] or "smollm2").partition("@")
        try:
            ok = not missing_files(ir_dir(model or "smollm2"))
        except GenerationError:
            return False
        return ok and (precision != "bf16" or "BF16" in openvino_capabilities())
    return importlib.util.find_spec("torch") is not None


def bench_engines(n_prompts: int, batch_sizes: list[int], max_new: int, seed: int, specs: list[str],
                  repeats: int, budget_s: float, threads: int | None = None, solo: int = 16,
                  previous: dict | None = None) -> dict:
    """Every engine side by side on the same prompts (greedy, ``max_new`` tokens): end-to-end
    generated tokens/s at each batch size, the median of up to ``repeats`` timed runs (fewer once
    an engine has spent ``budget_s`` at that batch size; the model is loaded and warmed first),
    whether the texts are the same at every batch size and for the first ``solo`` prompts each
    generated alone (batch 1), and per engine family how many of the
    len(prompts) x len(batch_sizes) responses differ between bf16 and f32."""
    import statistics

    from dpmv_lib.generate.responders import DecodingConfig, make_responder

    prompts = sample_prompts(n_prompts, seed)
    out: dict = {"machine": machine(), "prompts": len(prompts), "max_new_tokens": max_new, "decoding": "greedy",
                 "batch_sizes": batch_sizes, "repeats": repeats, "budget_s": budget_s, "results": {},
                 "load_before": loadavg()}
    texts: dict = {}
    for spec in specs:
        if not usable(spec):
            out["results"][spec] = {"skipped": "engine not usable here (package or OpenVINO IR missing)"}
            print(f"{spec}: skipped (not usable here)", flush=True)
            continue
        res: dict = {"runs": []}
        for bs in batch_sizes:
            kw = {"batch_size": bs, "threads": threads}
            t = time.perf_counter()
            r = make_responder(spec, decoding=DecodingConfig(max_new_tokens=max_new), **kw)
            warm = make_responder(spec, decoding=DecodingConfig(max_new_tokens=2), **kw)
            warm.respond(prompts[:2])   # load + warm-up, not timed
            warm.close()
            load_s = time.perf_counter() - t
            rates, walls, spent, l0 = [], [], 0.0, loadavg()
            for _ in range(repeats):
                r.generated_tokens = 0
                t = time.perf_counter()
                got = r.respond(prompts)
                wall = time.perf_counter() - t
                spent += wall
                rates.append(r.generated_tokens / wall)
                walls.append(wall)
                texts.setdefault(spec, {}).setdefault(bs, got)
                if got != texts[spec][bs]:
                    res["repeat_changed_texts"] = True
                if spent >= budget_s:
                    break
            run = {"batch_size": bs, "tokens_per_s": round(statistics.median(rates), 1),
                   "all_tokens_per_s": [round(x, 1) for x in rates], "generated_tokens": r.generated_tokens,
                   "wall_s": round(statistics.median(walls), 1), "load_s": round(load_s, 1),
                   "empty_responses": sum(1 for x in texts[spec][bs] if not x.strip()), "load": [l0, loadavg()]}
            res["runs"].append(run)
            r.close()
            print(spec, json.dumps(run), flush=True)
        first = texts[spec][batch_sizes[0]]
        if solo:   # the first ``solo`` prompts each alone (batch 1) must give their batched texts too
            alone = make_responder(spec, decoding=DecodingConfig(max_new_tokens=max_new), batch_size=1,
                                   threads=threads)
            res["solo_prompts"] = solo
            res["solo_texts_differing"] = sum(alone.respond([p])[0] != first[i] for i, p in enumerate(prompts[:solo]))
            alone.close()
        res["batch_invariant"] = (all(texts[spec][bs] == first for bs in batch_sizes)
                                  and not res.get("solo_texts_differing"))
        res["texts_differing_across_batch_sizes"] = sum(
            any(texts[spec][bs][i] != first[i] for bs in batch_sizes) for i in range(len(prompts)))
        out["results"][spec] = res
    out["bf16_vs_f32_differences"] = {}
    for spec in specs:
        if spec.endswith("@bf16"):
            ref = spec[: -len("@bf16")] + "@f32"
            if spec in texts and ref in texts:
                n = sum(a != b for bs in batch_sizes for a, b in zip(texts[spec][bs], texts[ref][bs]))
                out["bf16_vs_f32_differences"][spec] = {"reference": ref, "differ": n,
                                                        "of": len(prompts) * len(batch_sizes)}
    if previous:   # --merge: engines not re-measured keep their recorded results (same ISA only)
        same = (previous.get("machine") or {}).get("cpu", {}).get("isa") == out["machine"]["cpu"]["isa"]
        if same and previous.get("batch_sizes") == batch_sizes and previous.get("max_new_tokens") == max_new:
            for spec, res in previous.get("results", {}).items():
                if spec not in out["results"]:
                    out["results"][spec] = {**res, "merged_from": previous.get("date")}
            for spec, d in previous.get("bf16_vs_f32_differences", {}).items():
                out["bf16_vs_f32_differences"].setdefault(spec, {**d, "merged_from": previous.get("date")})
    ref = out["results"].get(REFERENCE, {}).get("runs")
    if ref:
        base = {r["batch_size"]: r["tokens_per_s"] for r in ref}
        for res in out["results"].values():
            for run in res.get("runs", []):
                run["x_reference"] = round(run["tokens_per_s"] / base[run["batch_size"]], 2)
    out["load_after"] = loadavg()
    out["date"] = time.strftime("%Y-%m-%d %H:%M:%S")
    return out


def _previous(part: str) -> dict | None:
    path = OUT / "generation.json"
    return json.loads(path.read_text()).get(part) if path.exists() else None


def write(results: dict) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / "generation.json"
    old = json.loads(path.read_text()) if path.exists() else {}
    old.update(results)
    path.write_text(json.dumps(old, indent=1) + "\n")
    lines = ["# Generation benchmark", "",
             f"Machine: {describe(old['machine'])}, Python {old['machine']['python']}, "
             f"torch {old['machine']['packages'].get('torch')}, "
             f"transformers {old['machine']['packages'].get('transformers')}. "
             "The cores are shared with other developers' jobs; load averages (1/5/15 min) are listed.", ""]
    s = old.get("surrogate")
    if s:
        lines += ["## Surrogate: all RQ1 transcripts of the default profile", "",
                  f"{s['pairs']} pairs x 2 stores x {s['turns']} turns x {len(s['methods'])} methods "
                  f"(EM seeds {s['em_seeds']} for the stochastic ones) = **{s['rows']:,} rows** "
                  f"({s['unique_requests']:,} unique requests after deduplication), "
                  f"{s['workers']} worker processes.", "",
                  "| measure | value |", "|---|---|",
                  f"| end to end | **{s['wall_s']} s** "
                  f"(target < {s['target_s']} s: {'met' if s['meets_target'] else 'NOT met'}) |",
                  f"| stages (conditioning / surrogate / table) | {s['stages_s']['conditioning']} / "
                  f"{s['stages_s']['generation']} / {s['stages_s']['table']} s |",
                  f"| DP-MemView conditioning, float sampler | {s['dp_conditioning_s_by_sampler']['float']} s |",
                  f"| DP-MemView conditioning, exact sampler | {s['dp_conditioning_s_by_sampler']['exact']} s |",
                  f"| load average before / after | {s['load_before']} / {s['load_after']} |", ""]
    for label in sorted(k for k in old if k.startswith("smollm2")):
        m = old[label]
        lines += [f"## SmolLM2-135M-Instruct on CPU (transformers, greedy) [{label}]", "",
                  f"{m['prompts']} real prompts (stratified over the RQ1 methods, first 16 turns; prompt tokens "
                  f"mean {m['prompt_tokens']['mean']}, max {m['prompt_tokens']['max']}), max_new_tokens "
                  f"{m['max_new_tokens']}, torch threads {m['torch_threads']}, model load {m['load_model_s']} s.", "",
                  "| model | max batch | batches (mean size, padding waste) | generated tokens | wall s | "
                  "tokens/s (end to end) | decode-only tokens/s | prefill share of wall | load |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r in m["runs"]:
            shape = (f"{r['batches']} ({r['mean_batch']}, {r['padding_waste']})" if "batches" in r else "-")
            lines.append(f"| {r['model']} | {r['batch_size']} | {shape} | {r['generated_tokens']} | {r['wall_s']} | "
                         f"**{r['tokens_per_s']}** | {r['decode_tokens_per_s']} | "
                         f"{r['prefill_plus_1_s'] / max(r['wall_s'], 1e-9):.0%} | {r['load'][0]} -> {r['load'][1]} |")
        best = max(m["runs"], key=lambda r: r["tokens_per_s"])
        gen_per = best["generated_tokens"] / m["prompts"]
        lines += ["", f"Target: >= {m['target_tokens_per_s']} generated tokens/s at batch 32-64: "
                  f"{'met' if best['tokens_per_s'] >= m['target_tokens_per_s'] else 'NOT met'} "
                  f"(best {best['tokens_per_s']} tokens/s, {best['model']}, batch {best['batch_size']}).",
                  f"End-to-end throughput includes the prompt prefill, which is compute-bound on CPU: a prompt "
                  f"averages {m['prompt_tokens']['mean']} tokens and a response {gen_per:.0f} generated tokens, "
                  f"so the model processes about {(m['prompt_tokens']['mean'] + gen_per) / gen_per:.1f} tokens per "
                  "generated token; decode alone is the decode-only column.", ""]
    e = old.get("engines")
    if e:
        bss = e["batch_sizes"]
        lines += ["## Every engine side by side [engines]", "",
                  f"Machine: {describe(e['machine'])}. {e['prompts']} real prompts, "
                  f"max_new_tokens {e['max_new_tokens']}, "
                  f"greedy, generated tokens/s end to end (load and warm-up excluded), median of up to {e['repeats']} "
                  f"runs (fewer once a run set passes {e['budget_s']} s); measured {e.get('date')}.", "",
                  "| engine (spec) | " + " | ".join(f"batch {b}" for b in bss) + f" | x `{REFERENCE}` | "
                  "same texts at every batch (and alone) | load |", "|---|" + "---|" * (len(bss) + 3)]
        for spec, res in e["results"].items():
            if "runs" not in res:
                lines.append(f"| `{spec}` | " + " | ".join("-" for _ in bss) + f" | - | - | {res.get('skipped')} |")
                continue
            by = {r["batch_size"]: r for r in res["runs"]}
            invariant = ("yes" if res["batch_invariant"] else
                         f"NO ({res['texts_differing_across_batch_sizes']:d} differ across batch sizes, "
                         f"{res.get('solo_texts_differing', '-')} of {res.get('solo_prompts', '-')} alone)")
            lines.append(f"| `{spec}` | " + " | ".join(f"**{by[b]['tokens_per_s']}**" if b in by else "-" for b in bss)
                         + " | " + " / ".join(str(by[b].get("x_reference", "-")) for b in bss if b in by)
                         + f" | {invariant}"
                         f" | {res['runs'][0]['load'][0]} -> {res['runs'][-1]['load'][1]}"
                         + (f" (run {res['merged_from']})" if res.get("merged_from") else "") + " |")
        lines += ["", "Responses whose text differs between bf16 and the f32 reference of the same engine:", ""]
        for spec, d in e["bf16_vs_f32_differences"].items():
            lines.append(f"- `{spec}` vs `{d['reference']}`: **{d['differ']} of {d['of']}**")
        lines.append("")
    (OUT / "generation.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="generation benchmark")
    ap.add_argument("--parts", nargs="+", default=["surrogate", "smollm2"],
                    choices=["surrogate", "smollm2", "engines"])
    ap.add_argument("--engines", nargs="+", default=list(ENGINE_SPECS), help="responder specs of the engines part")
    ap.add_argument("--repeats", type=int, default=3, help="engines part: timed runs per engine and batch size")
    ap.add_argument("--merge", action="store_true", help="engines part: keep the recorded results of engines not run")
    ap.add_argument("--solo", type=int, default=16, help="engines part: prompts also generated alone (batch 1)")
    ap.add_argument("--budget", type=float, default=30.0, help="engines part: no further repeat after this many s")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[32, 64])
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--int8", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: free cores)")
    ap.add_argument("--label", default="smollm2", help="results key of the SmolLM2 part")
    args = ap.parse_args(argv)
    results: dict = {"machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    if "surrogate" in args.parts:
        results["surrogate"] = bench_surrogate(args.workers, args.seed)
        print(json.dumps(results["surrogate"], indent=1), flush=True)
        write(results)
    if "smollm2" in args.parts:
        results[args.label] = bench_smollm2(args.prompts, args.batch_sizes, args.max_new_tokens, args.int8,
                                            args.seed, args.threads)
        write(results)
    if "engines" in args.parts:
        results["engines"] = bench_engines(args.prompts, args.batch_sizes, args.max_new_tokens, args.seed,
                                           args.engines, args.repeats, args.budget, args.threads, args.solo,
                                           _previous("engines") if args.merge else None)
        write(results)
    print((OUT / "generation.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
