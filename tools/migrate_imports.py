"""Rewrite imports from the flat dpmv_lib layout (before issue 15) to the layered subpackages,
and from the layout before issue 32 (durable ledgers and checks out of core, renamed helpers).

    python tools/migrate_imports.py FILE_OR_DIR ...

Inside ``dpmv_lib/`` relative imports are resolved against the file's *old* place (``--old``
maps a moved file to where it was, default: the file's own place under the flat layout guess)
and respelled relative to its new place; everywhere else (tests, tools, notebooks, benchmarks,
docs) dotted names ``dpmv_lib.<old>`` and ``from dpmv_lib import <old module>`` are rewritten.
Idempotent: names already in the new layout are left alone. Used for the move itself and for
merging branches that still use the flat names (see docs/architecture.md).
"""
from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# old module (flat, relative to dpmv_lib) -> new dotted name (relative to dpmv_lib)
ROOMS: dict[str, tuple[str, ...]] = {
    "core": ("errors", "_exact", "policy", "policy_format", "store", "scorer", "mechanism", "selection", "ledger",
             "memview", "variants", "accounting", "exact", "examples", "counterexamples", "instances", "contract",
             "durable", "durable_pg", "_chain", "group_commit"),
    "common": ("paths", "machine"),
    "bench": ("benchmark", "datafiles", "datasets", "lexicon", "phrases", "pairedmem", "transfer",
              "benchmark_quality", "phrasebank"),
    "generate": ("interfaces", "filters", "cache", "generation", "responders"),
    "evaluate": ("encoders", "audit", "oracle", "judge"),
    "experiments": ("rq2", "sensitivity", "diagnostics", "adversary", "judge_degradation", "tables", "plots",
                    "profiles", "data_report", "budget_explorer", "styled"),
}
MOVES: dict[str, str] = {m: f"{room}.{m}" for room, mods in ROOMS.items() for m in mods}
MOVES["experiments"] = "experiments.rq1"
# issue 32: the durable ledgers and the checks left core (dpmv_lib.core.<old> -> dpmv_lib.<new>)
CORE_MOVES: dict[str, str] = {
    "durable": "ledgers.sqlite", "durable_pg": "ledgers.postgres", "chain_ledger": "ledgers.chain",
    "chain_verify": "ledgers.chain_verify", "ledger_records": "ledgers.records",
    "group_commit": "ledgers.group_commit", "_chain": "ledgers.hashchain", "_proc": "ledgers._proc",
    "witness": "ledgers.witness", "_exact": "core.rationals", "_memo": "core.memo", **{m: f"checks.{m}" for m in (
        "contract", "contract_walk", "contract_report", "counterexamples", "instances", "variants",
        "examples", "accounting")}}
MOVES.update({m: new for m, new in CORE_MOVES.items() if m in MOVES})
# modules split in issue 15: a name imported from one of them is sent to the module defining it now
SPLITS: dict[str, tuple[str, ...]] = {
    "experiments.rq2": ("experiments.common", "experiments.pipeline", "experiments.rq2_score",
                        "experiments.rq2_support", "experiments.rq2_horizon"),
    "evaluate.judge": ("evaluate.rubric", "evaluate.rubric_judge", "evaluate.llm_judge"),
    "core.contract": ("checks.contract", "checks.contract_report", "checks.contract_walk"),
    "bench.pairedmem": ("bench.pairedmem_specs", "bench.pairedmem_realise", "bench.pairedmem_gold",
                        "generate.writer"),
    "bench.transfer": ("bench.transfer_corpora", "bench.transfer_evidence", "bench.transfer_support",
                       "bench.transfer_quality"),
    "core.durable": ("ledgers.sqlite", "ledgers.records", "ledgers.chain_verify", "ledgers.chain"),
    "experiments.sensitivity": ("experiments.sensitivity_widget",),
    # the core families cut by concept: the policy and its file form, the selectors and exact sampling
    "core.policy": ("core.policy_json", "core.rationals"),
    "core.policy_parts": ("core.policy",),
    "core.policy_format": ("core.policy_json", "core.rationals", "core.errors"),
    "core.mechanism": ("core.selection", "core.sampling"),
}
RENAMED: dict[tuple[str, str], str] = {("experiments.rq2", "RQ2Config"): "ExperimentConfig"}


def new_module(old: str) -> str:
    """dpmv_lib-relative dotted old module -> new one ('' is the package itself)."""
    if not old:
        return old
    head, _, rest = old.partition(".")
    if head in ROOMS and rest:      # already the new layout (the flat module experiments had no submodules)
        return old
    if head in MOVES:
        return MOVES[head] + ("." + rest if rest else "")
    return old


def _dotted_sub(text: str) -> str:
    names = sorted(MOVES, key=len, reverse=True)
    pat = re.compile(r"\bdpmv_lib\.(" + "|".join(map(re.escape, names)) + r")\b")

    def rep(m: re.Match) -> str:
        old = m.group(1)
        # already new-style: dpmv_lib.experiments.rq1 / dpmv_lib.experiments.<module> stays
        return "dpmv_lib." + MOVES[old]
    out = []
    for line in text.split("\n"):
        out.append(_fix_line(pat.sub(lambda m: rep(m) if not _is_new(line, m) else m.group(0), line)))  # noqa: B023 - called within the iteration
    return "\n".join(out)


def _is_new(line: str, m: re.Match) -> bool:
    """``dpmv_lib.experiments`` is the new package when followed by ``.<its module>`` or when a
    ``from ... import`` takes its modules (the flat module experiments had no submodules)."""
    if m.group(1) != "experiments":
        return False
    after = line[m.end():]
    mm = re.match(r"\.(\w+)", after) or re.match(r" import \(?\s*(\w+)", after)
    return bool(mm) and (ROOT / "dpmv_lib" / "experiments" / f"{mm.group(1)}.py").exists()


def _fix_line(line: str) -> str:
    """``from dpmv_lib import a as A, b`` with moved modules -> one import per room."""
    m = re.match(r"^(\s*)from dpmv_lib import ([\w ,]+?)(\s*(?:#.*)?)$", line)
    if not m:
        return line
    indent, names, tail = m.groups()
    parts = [p.strip() for p in names.split(",") if p.strip()]
    mods = [p for p in parts if p.split(" as ")[0].strip() in MOVES]
    if not mods:
        return line
    if len(mods) != len(parts):
        raise SystemExit(f"mixed module/attribute import, fix by hand: {line!r}")
    groups: dict[str, list[str]] = {}
    for p in parts:
        name, _, alias = p.partition(" as ")
        full = MOVES[name.strip()]
        pkg, _, leaf = full.rpartition(".")
        groups.setdefault(pkg, []).append(leaf + (f" as {alias.strip()}" if alias else
                                                  (f" as {name.strip()}" if leaf != name.strip() else "")))
    return "\n".join(f"{indent}from dpmv_lib.{pkg} import {', '.join(v)}" for pkg, v in groups.items()) + tail


def _paths_sub(text: str) -> str:
    names = sorted(MOVES, key=len, reverse=True)
    pat = re.compile(r"\bdpmv_lib/(" + "|".join(map(re.escape, names)) + r")(\.py|\.json|/|\b)")

    def rep(m: re.Match) -> str:
        if m.group(1) in ROOMS and m.group(2) != ".py":   # dpmv_lib/experiments/... is the new package
            return m.group(0)
        return "dpmv_lib/" + MOVES[m.group(1)].replace(".", "/") + m.group(2)
    text = pat.sub(rep, text)
    return text.replace("dpmv_lib/transfer_review.json", "dpmv_lib/bench/transfer_review.json")


def _definers() -> dict[str, dict[str, str]]:
    """split module -> {name: module defining it now} (top-level definitions only)."""
    out: dict[str, dict[str, str]] = {}
    for mod, parts in SPLITS.items():
        names: dict[str, str] = {}
        for m in (mod, *parts):
            f = ROOT / "dpmv_lib" / (m.replace(".", "/") + ".py")
            if not f.exists():
                continue
            tree = ast.parse(f.read_text(encoding="utf-8"))
            for n in tree.body:
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    found = [n.name]
                elif isinstance(n, ast.Assign):
                    found = [x.id for t in n.targets for x in ast.walk(t) if isinstance(x, ast.Name)]
                elif isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name):
                    found = [n.target.id]
                else:
                    found = []
                for x in found:
                    names.setdefault(x, m)
        out[mod] = names
    return out


def regroup_split_imports(src: str, file_pkg: list[str] | None) -> str:
    """``from <split module> import a, b`` -> one import per module that defines the names now.
    ``file_pkg``: the file's package (dpmv_lib-relative parts) for relative imports, None outside."""
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return src
    definers = _definers()
    lines = src.split("\n")
    edits = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            if file_pkg is None:
                continue
            base = file_pkg[:len(file_pkg) - (node.level - 1)]
            target = ".".join(base + ([node.module] if node.module else []))
        elif (node.module or "").startswith("dpmv_lib."):
            target = node.module[len("dpmv_lib."):]
        else:
            continue
        if target not in SPLITS:
            continue
        groups: dict[str, list[str]] = {}
        for a in node.names:
            new = RENAMED.get((target, a.name))
            name = new or a.name
            alias = a.asname or (a.name if new else None)
            groups.setdefault(definers[target].get(name, target), []).append(name + (f" as {alias}" if alias else ""))
        if list(groups) == [target]:
            continue
        indent = " " * node.col_offset
        stmts = [f"{indent}from {_spell(m, file_pkg) if node.level else 'dpmv_lib.' + m} import {', '.join(v)}"
                 for m, v in groups.items()]
        edits.append((node.lineno, node.end_lineno, "\n".join(stmts)))
    for lo, hi, text in sorted(edits, reverse=True):
        lines[lo - 1:hi] = text.split("\n")
    return "\n".join(lines)


def _split_names_sub(text: str) -> str:
    """``dpmv_lib.<split module>.<name>`` (docs, mock targets) -> the module defining it now."""
    definers = _definers()
    pat = re.compile(r"\bdpmv_lib\.(" + "|".join(map(re.escape, SPLITS)) + r")\.(\w+)\b")

    def rep(m: re.Match) -> str:
        name = RENAMED.get((m.group(1), m.group(2)), m.group(2))
        return f"dpmv_lib.{definers[m.group(1)].get(name, m.group(1))}.{name}"
    return pat.sub(rep, text)


# issue 32: names renamed or given one home ("module.old" -> ("module", "new")); an import of the
# old name keeps it as an alias, so the code using it runs unchanged
NAME_MOVES: dict[str, tuple[str, str]] = {
    "experiments.rq2.rq2_claims": ("experiments.rq2", "claims"),
    "evaluate.judge.judge_transcripts": ("evaluate.judge", "score_transcripts"),
    "bench.pairedmem.pairedmem_counts": ("bench.pairedmem", "counts"),
    "bench.transfer.transfer_counts": ("bench.transfer", "counts"),
    "experiments.playground.playground_responder": ("experiments.playground", "responder"),
    "evaluate.oracle.oracle_per_pair": ("evaluate.oracle", "pair_results"),
    "evaluate.oracle.oracle_summary": ("evaluate.oracle", "summary"),
    "core.exact.exact_privacy_loss": ("core.exact", "privacy_loss_of"),
    "bench.benchmark.write_jsonl": ("common.io", "write_jsonl"),
    "bench.benchmark.read_jsonl": ("common.io", "read_jsonl"),
    "bench.datafiles.dump_jsonl": ("common.io", "write_jsonl"),
    "experiments.judge_degradation.load_jsonl": ("common.io", "read_jsonl"),
}
# issue 32: one helper replaced these with another signature; the tool names them, a person fixes the call
BY_HAND: dict[str, str] = {
    "experiments.data_report.write_table": "experiments.tables.write_table(df, directory, name, markdown=None)",
    "experiments.diagnostics.save_table": "experiments.tables.write_table(df, directory, name, markdown=None)",
    "experiments.judge_degradation.write_jsonl": "common.io.write_jsonl(path, rows) (arguments swapped)",
}


def _name_moves_sub(text: str) -> str:
    """``from dpmv_lib.<module> import <old>`` and ``dpmv_lib.<module>.<old>`` -> the name's home now."""
    def imp(m: re.Match) -> str:
        indent, mod, names, tail = m.groups()
        keep, moved = [], []
        for part in (p.strip() for p in names.split(",") if p.strip()):
            name, _, alias = (x.strip() for x in part.partition(" as "))
            if f"{mod}.{name}" in BY_HAND:
                raise SystemExit(f"dpmv_lib.{mod}.{name} is gone; call {BY_HAND[f'{mod}.{name}']} (by hand)")
            if f"{mod}.{name}" in NAME_MOVES:
                home, new = NAME_MOVES[f"{mod}.{name}"]
                moved.append(f"{indent}from dpmv_lib.{home} import {new} as {alias or name}")
            else:
                keep.append(part)
        lines = ([f"{indent}from dpmv_lib.{mod} import {', '.join(keep)}"] if keep else []) + moved
        return "\n".join(lines) + tail
    text = re.sub(r"^([ \t]*)from dpmv_lib\.([\w.]+) import ([\w ,]+?)([ \t]*(?:#.*)?)$", imp, text, flags=re.M)
    pat = "|".join(map(re.escape, sorted(NAME_MOVES, key=len, reverse=True)))
    return re.sub(rf"\bdpmv_lib\.({pat})\b", lambda m: "dpmv_lib.{}.{}".format(*NAME_MOVES[m.group(1)]), text)


def _core_moves_sub(text: str) -> str:
    """``dpmv_lib.core.<moved>`` and ``dpmv_lib/core/<moved>.py`` -> the room it has since issue 32."""
    names = "|".join(sorted(CORE_MOVES, key=len, reverse=True))
    text = re.sub(rf"\bdpmv_lib\.core\.({names})\b", lambda m: "dpmv_lib." + CORE_MOVES[m.group(1)], text)
    text = re.sub(rf"\bdpmv_lib/core/({names})\.py\b",
                  lambda m: "dpmv_lib/" + CORE_MOVES[m.group(1)].replace(".", "/") + ".py", text)

    def imp(m: re.Match) -> str:
        pkg, _, leaf = CORE_MOVES[m.group(2)].rpartition(".")
        alias = m.group(3) or (f" as {m.group(2)}" if leaf != m.group(2) else "")
        return f"{m.group(1)}from dpmv_lib.{pkg} import {leaf}{alias}"
    return re.sub(rf"^(\s*)from dpmv_lib\.core import ({names})( as \w+)?$", imp, text, flags=re.M)


def rewrite_text(text: str) -> str:
    return _name_moves_sub(_core_moves_sub(_split_names_sub(_paths_sub(_dotted_sub(text)))))


def split_attribute_uses(text: str) -> str:
    """``rq2.Timer`` where ``rq2`` is bound by ``from dpmv_lib.experiments import rq2`` ->
    ``common.Timer``, with ``from dpmv_lib.experiments import common`` added after the binding."""
    definers = _definers()
    for m in list(re.finditer(r"^([ \t]*)from dpmv_lib\.(\w+) import ([\w ,]+)$", text, re.M)):
        for part in m.group(3).split(","):
            name, _, alias = (x.strip() for x in part.strip().partition(" as "))
            mod = f"{m.group(2)}.{name}"
            if mod not in SPLITS:
                continue
            alias = alias or name
            used: set[str] = set()

            def rep(mm: re.Match, mod: str = mod, alias: str = alias, used: set = used) -> str:
                n = RENAMED.get((mod, mm.group(1)), mm.group(1))
                d = definers[mod].get(n, mod)
                if d == mod:
                    return f"{alias}.{n}"
                used.add(d)
                return f"{d.rsplit('.', 1)[1]}.{n}"
            text = re.sub(rf"(?<![\w.]){re.escape(alias)}\.(\w+)", rep, text)
            add = [f"{m.group(1)}from dpmv_lib.{d.rsplit('.', 1)[0]} import {d.rsplit('.', 1)[1]}"
                   for d in sorted(used)]
            add = [x for x in add if x.strip() not in text]
            line = m.group(0)
            if not re.search(rf"(?<![\w.]){re.escape(alias)}\.", text):     # every use moved: drop the binding
                rest = [p for p in m.group(3).split(",") if p.strip() and p.strip() != part.strip()]
                names = ", ".join(x.strip() for x in rest)
                line_new = f"{m.group(1)}from dpmv_lib.{m.group(2)} import {names}" if rest else None
            else:
                line_new = line
            repl = "\n".join(([line_new] if line_new else []) + add)
            text = text.replace(line + "\n", repl + "\n" if repl else "", 1) if line + "\n" in text else \
                text.replace(line, repl, 1)
    return text


def rewrite_notebook(path: Path) -> bool:
    raw = path.read_text(encoding="utf-8")
    nb = json.loads(raw)
    sep = "\n#\x00cell\x00\n"
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    joined = split_attribute_uses(sep.join(regroup_split_imports(rewrite_text("".join(c["source"])), None)
                                           for c in code))
    done = dict(zip(map(id, code), joined.split(sep)))
    for cell in nb["cells"]:
        src = "".join(cell["source"])
        new = done.get(id(cell), rewrite_text(src) if cell["cell_type"] != "code" else src)
        if new != src:
            lines = new.split("\n")
            cell["source"] = [ln + "\n" for ln in lines[:-1]] + ([lines[-1]] if lines[-1] else [])
    out = json.dumps(nb, indent=1, ensure_ascii=False) + "\n"
    if out != raw:
        path.write_text(out, encoding="utf-8")
        return True
    return False


# ---- relative imports inside the package --------------------------------------------------------
def _pkg_of(rel_module: str, is_pkg: bool) -> list[str]:
    parts = rel_module.split(".") if rel_module else []
    return parts if is_pkg else parts[:-1]


def _spell(target: str, from_pkg: list[str]) -> str:
    """Relative spelling of dpmv_lib-relative ``target`` from package ``from_pkg``."""
    t = target.split(".") if target else []
    k = 0
    while k < len(from_pkg) and k < len(t) and from_pkg[k] == t[k]:
        k += 1
    return "." * (len(from_pkg) - k + 1) + ".".join(t[k:])


def rewrite_package_file(path: Path, old_rel: str) -> bool:
    """``old_rel``: the file's old dotted module relative to dpmv_lib (e.g. 'responders.base')."""
    src = path.read_text(encoding="utf-8")
    tree = ast.parse(src)
    is_pkg = path.name == "__init__.py"
    new_rel = ".".join(path.relative_to(ROOT / "dpmv_lib").with_suffix("").parts)
    if is_pkg:
        new_rel = new_rel.rsplit(".__init__", 1)[0] if new_rel != "__init__" else ""
    old_pkg = _pkg_of(old_rel, is_pkg)
    new_pkg = _pkg_of(new_rel, is_pkg)
    lines = src.split("\n")
    edits = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or node.level == 0:
            continue
        base = old_pkg[:len(old_pkg) - (node.level - 1)]
        target = ".".join(base + (node.module.split(".") if node.module else []))
        indent = " " * node.col_offset
        if node.module is None or target == "":
            # from . import a, b  (names may be modules)
            groups: dict[str, list[str]] = {}
            for a in node.names:
                full = f"{target}.{a.name}" if target else a.name
                if full.split(".")[0] in MOVES or (target == "" and a.name in MOVES):
                    nm = new_module(full)
                    pkg, _, leaf = nm.rpartition(".")
                    alias = a.asname or (a.name if leaf != a.name else None)
                    groups.setdefault(pkg, []).append(leaf + (f" as {alias}" if alias else ""))
                else:
                    groups.setdefault(new_module(target), []).append(a.name + (f" as {a.asname}" if a.asname else ""))
            stmt = "\n".join(f"{indent}from {_spell(p, new_pkg)} import {', '.join(v)}" for p, v in groups.items())
            edits.append((node.lineno, node.end_lineno, stmt, None))
        else:
            nt = new_module(target)
            head = f"from {_spell(nt, new_pkg)} import"
            edits.append((node.lineno, node.end_lineno, head, node.col_offset))
    for lo, hi, text, col in sorted(edits, reverse=True):
        if col is None:
            lines[lo - 1:hi] = text.split("\n")
        else:
            line = lines[lo - 1]
            m = re.match(r"from\s+\.+[\w.]*\s+import", line[col:])
            lines[lo - 1] = line[:col] + text + line[col + m.end():]
            shift = len(text) - m.end()     # keep continuation lines aligned under the "("
            for k in range(lo, hi):
                indent = len(lines[k]) - len(lines[k].lstrip())
                lines[k] = " " * shift + lines[k] if shift > 0 else lines[k][min(-shift, indent):]
    out = regroup_split_imports(rewrite_text("\n".join(lines)), new_pkg)
    if out != src:
        path.write_text(out, encoding="utf-8")
        return True
    return False


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--old", action="append", default=[], metavar="NEW=OLD",
                    help="old dotted module of a moved package file, e.g. "
                         "dpmv_lib/generate/responders/base.py=responders.base")
    args = ap.parse_args(argv)
    olds = dict(o.split("=", 1) for o in args.old)
    files: list[Path] = []
    for p in map(Path, args.paths):
        files += sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p]
    changed = 0
    for f in files:
        f = f.resolve()
        if f.suffix not in {".py", ".ipynb", ".md", ".toml", ".txt", ".cfg", ".sh"} and f.name != "Makefile":
            continue
        rel = f.relative_to(ROOT).as_posix()
        if f.suffix == ".ipynb":
            changed += rewrite_notebook(f)
        elif rel.startswith("dpmv_lib/") and f.suffix == ".py":
            if rel in olds:
                old = olds[rel]
            else:
                # a file not listed is taken to be where it was (flat layout)
                old = ".".join(Path(rel).relative_to("dpmv_lib").with_suffix("").parts)
                if f.name == "__init__.py":
                    old = old.rsplit(".__init__", 1)[0] if old != "__init__" else ""
            changed += rewrite_package_file(f, old)
        else:
            src = f.read_text(encoding="utf-8")
            out = rewrite_text(src)
            if f.suffix == ".py":
                out = split_attribute_uses(regroup_split_imports(out, None))
            if out != src:
                f.write_text(out, encoding="utf-8")
                changed += 1
    print(f"rewrote {changed} file(s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
