"""What produced a result set, and whether the checkout still would (``python -m dpmv_lib.run --status``).

A notebook's fingerprint, recorded by the runner in each entry of ``<results_dir>/manifest.json``:

- ``files``: sha256 prefixes of the notebook file and of the source of every dpmv_lib module it
  uses, found statically: the ``dpmv_lib`` imports of its code cells, closed over dpmv_lib's own
  imports (also those inside functions) with :mod:`ast`, plus the package ``__init__`` files that
  importing them runs and any package data file a module names (e.g. ``transfer_review.json``);
- ``data_sets``: per directory under ``data/``, a hash of its ``manifest.json`` (which lists its
  files' checksums), or of all its files when it has none;
- ``profile_settings``: the profile the notebook ran under.

:func:`compare` names what changed since; :func:`result_status` does it for every notebook of every
result set under ``results/`` (``current``, ``stale`` with the reasons, or ``unknown``: no
fingerprint recorded, or a run that did not finish). Dynamic imports are not seen; the closure
over-approximates (lazy imports count), so a result may be called stale needlessly, never current
wrongly by a static import."""
from __future__ import annotations

import ast
import functools
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

SCHEMA = 1
HASH_LEN = 16
PACKAGE = "dpmv_lib"
STATES = ("current", "stale", "unknown")
# profile settings that do not change what a notebook computes
NOT_RESULTS = ("description",)
_IMPORT_LINE = re.compile(r"^\s*(from\s+\S+\s+import\s+.+|import\s+.+)$")
_SKIP_DIRS = {"__pycache__", "cache", "notebooks"}


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:HASH_LEN]


def _canonical(value: Any) -> Any:
    """JSON-normal form (tuples as lists, sorted keys) so recorded and live values compare."""
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def digest_of(value: Any) -> str:
    """sha256 prefix of a JSON-serialisable value (key order does not matter)."""
    return _digest(json.dumps(_canonical(value), sort_keys=True).encode())


@dataclass(frozen=True)
class Fingerprint:
    """What produced one notebook's results: ``files`` (path -> hash), ``data_sets`` (name -> hash),
    ``profile_settings`` (the profile's ``to_dict()``)."""

    files: Mapping[str, str]
    data_sets: Mapping[str, str]
    profile_settings: Mapping[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "code": digest_of(self.files), "data": digest_of(self.data_sets),
                "profile": digest_of(self.profile_settings), "files": dict(sorted(self.files.items())),
                "data_sets": dict(sorted(self.data_sets.items())),
                "profile_settings": _canonical(self.profile_settings)}

    @classmethod
    def from_dict(cls, d: Any) -> "Fingerprint":
        """The recorded form back; ValueError when it is not one (a foreign or damaged manifest)."""
        if isinstance(d, Mapping) and "error" in d:
            raise ValueError(f"none taken ({d['error']})")
        if not isinstance(d, Mapping) or d.get("schema") != SCHEMA:
            raise ValueError(f"not a schema-{SCHEMA} fingerprint")
        files, data, prof = d.get("files"), d.get("data_sets"), d.get("profile_settings")
        if not (isinstance(files, Mapping) and isinstance(data, Mapping) and isinstance(prof, Mapping)):
            raise ValueError("fingerprint lacks files, data_sets or profile_settings")
        return cls(dict(files), dict(data), dict(prof))


# ---- the modules a notebook uses ------------------------------------------------------------
# An import as written: (level, module, names); ``import a.b`` is (0, None, ("a.b",)).
_Import = tuple[int, "str | None", tuple[str, ...]]


def _scan(tree: ast.AST) -> tuple[tuple[_Import, ...], tuple[str, ...]]:
    """Every import (also inside functions) and every short one-line string constant, in one walk."""
    imports: list[_Import] = []
    strings: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imports.append((0, None, tuple(a.name for a in node.names)))
        elif isinstance(node, ast.ImportFrom):
            imports.append((node.level, node.module, tuple(a.name for a in node.names)))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and 0 < len(node.value) < 200 and "\n" not in node.value:
            strings.append(node.value)
    return tuple(imports), tuple(strings)


@functools.lru_cache(maxsize=2048)
def _scan_file(path: str, mtime_ns: int, size: int) -> tuple[tuple[_Import, ...], tuple[str, ...]]:
    return _scan(ast.parse(Path(path).read_text(encoding="utf-8")))


def _scanned(path: Path) -> tuple[tuple[_Import, ...], tuple[str, ...]]:
    """:func:`_scan` of a module file, once per version of the file."""
    st = path.stat()
    return _scan_file(str(path), st.st_mtime_ns, st.st_size)


def _module_index(package_dir: Path) -> dict[str, Path]:
    """dotted name -> file for every module of the package (packages by their ``__init__``)."""
    out: dict[str, Path] = {}
    for p in sorted(package_dir.rglob("*.py")):
        if "__pycache__" in p.parts:
            continue
        parts = [package_dir.name, *p.relative_to(package_dir).with_suffix("").parts]
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def _resolve(imports: Iterable[_Import], name: str, is_package: bool, index: Mapping[str, Path]) -> set[str]:
    """The package modules these imports load (relative ones resolved against module ``name``)."""
    pkg = name.split(".") if is_package else name.split(".")[:-1]
    out: set[str] = set()
    for level, module, names in imports:
        if not level and module is None:                  # import a.b, c
            out |= {n for n in names if n.split(".")[0] == PACKAGE}
            continue
        if level:
            base = pkg[:len(pkg) - (level - 1)]
            target = ".".join(base + ([module] if module else []))
        else:
            target = module or ""
        if target.split(".")[0] != PACKAGE:
            continue
        for n in names:                                   # ``from pkg import module`` imports the module
            out.add(f"{target}.{n}" if f"{target}.{n}" in index else target)
    return {m for m in out if m in index}


def _notebook_code(path: Path) -> list[str]:
    nb = json.loads(path.read_text(encoding="utf-8"))
    cells = [c for c in nb.get("cells", []) if c.get("cell_type") == "code"]
    return ["".join(c["source"]) if isinstance(c.get("source"), list) else str(c.get("source", ""))
            for c in cells]


def _parse_cell(source: str) -> ast.AST:
    """A code cell as Python: IPython magics and shell lines dropped; when it still does not
    parse, only its import lines."""
    lines = ["" if ln.lstrip().startswith(("%", "!")) else ln for ln in source.splitlines()]
    try:
        return ast.parse("\n".join(lines))
    except SyntaxError:
        body: list[ast.stmt] = []
        for ln in lines:
            if _IMPORT_LINE.match(ln):
                try:
                    body += ast.parse(ln.strip()).body
                except SyntaxError:
                    continue
        return ast.Module(body=body, type_ignores=[])


def _namespace_uses(tree: ast.AST, index: Mapping[str, Path]) -> set[str]:
    """Submodules reached as attributes of an imported package: after ``import dpmv_lib.experiments
    as dx``, ``dx.rq1`` loads ``dpmv_lib.experiments.rq1`` (the package's lazy ``__getattr__``)."""
    aliases = {a.asname or a.name: a.name for node in ast.walk(tree) if isinstance(node, ast.Import)
               for a in node.names if a.name.split(".")[0] == PACKAGE}
    return {f"{aliases[n.value.id]}.{n.attr}" for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in aliases
            and f"{aliases[n.value.id]}.{n.attr}" in index}


def notebook_imports(notebook: Path, package_dir: Path) -> set[str]:
    """The package modules the notebook's code cells import (directly, or as ``dx.<module>``)."""
    index = _module_index(package_dir)
    out: set[str] = set()
    trees = [_parse_cell(src) for src in _notebook_code(notebook)]
    for tree in trees:
        out |= _resolve(_scan(tree)[0], "__notebook__", False, index)
    whole = ast.Module(body=[s for t in trees for s in getattr(t, "body", [])], type_ignores=[])
    return out | _namespace_uses(whole, index)


def module_closure(roots: Iterable[str], package_dir: Path) -> dict[str, Path]:
    """``roots`` closed over the package's own imports and the parent packages importing runs."""
    index = _module_index(package_dir)
    todo = [m for m in roots if m in index]
    seen: dict[str, Path] = {}
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        path = seen[name] = index[name]
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts)) if ".".join(parts[:i]) in index]
        todo += _resolve(_scanned(path)[0], name, path.name == "__init__.py", index)
    return seen


def _named_files(path: Path) -> list[Path]:
    """Non-Python files beside module ``path`` (or below its folder) that it names in a string
    constant (package data such as ``transfer_review.json``)."""
    out = []
    for s in _scanned(path)[1]:
        if s.startswith(("/", "\\", "~")) or ".." in s or ":" in s or s.endswith(".py"):
            continue
        cand = path.parent / s
        try:
            if cand.is_file():
                out.append(cand)
        except OSError:
            continue
    return out


def _key(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return path.resolve().as_posix()


def source_files(notebook: Path, package_dir: Path, root: Path) -> dict[str, str]:
    """path (relative to ``root`` when inside it) -> hash, for the notebook and the source it uses."""
    mods = module_closure(notebook_imports(notebook, package_dir), package_dir)
    files = {notebook, *mods.values()}
    for p in mods.values():
        files.update(_named_files(p))
    return {_key(p, root): _digest(p.read_bytes()) for p in files}


# ---- the data ----------------------------------------------------------------------------------
def data_sets(data_dir: Path) -> dict[str, str]:
    """Per directory under ``data_dir``: the hash of its manifest.json, else of all its files."""
    out: dict[str, str] = {}
    if not data_dir.is_dir():
        return out
    for d in sorted(p for p in data_dir.iterdir() if p.is_dir() and not p.name.startswith(".")):
        manifest = d / "manifest.json"
        if manifest.is_file():
            out[d.name] = _digest(manifest.read_bytes())
            continue
        h = hashlib.sha256()
        for f in sorted(p for p in d.rglob("*") if p.is_file() and not p.name.startswith(".")):
            h.update(f.relative_to(d).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
        out[d.name] = h.hexdigest()[:HASH_LEN]
    return out


def fingerprint(notebook: Path, *, package_dir: Path, root: Path, data_dir: Path,
                profile_settings: Mapping[str, Any]) -> Fingerprint:
    """The fingerprint of ``notebook`` as the checkout stands now."""
    return Fingerprint(source_files(notebook, package_dir, root), data_sets(data_dir),
                       _canonical(dict(profile_settings)))


# ---- comparison --------------------------------------------------------------------------------
def _names(items: Iterable[str], most: int = 4) -> str:
    items = sorted(items)
    more = f" (+{len(items) - most} more)" if len(items) > most else ""
    return ", ".join(items[:most]) + more


def _diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> tuple[set[str], set[str], set[str]]:
    both = old.keys() & new.keys()
    return ({k for k in both if old[k] != new[k]}, set(new) - set(old), set(old) - set(new))


def compare(recorded: Fingerprint, now: Fingerprint | None) -> tuple[str, ...]:
    """Why results with fingerprint ``recorded`` are stale against ``now`` (empty: current).
    ``now`` is None when the profile is no longer defined."""
    reasons: list[str] = []
    if now is None:
        return ("profile: no longer defined",)
    changed, added, removed = _diff(recorded.files, now.files)
    if changed:
        reasons.append(f"code changed: {_names(changed)}")
    if added:
        reasons.append(f"code now also uses: {_names(added)}")
    if removed:
        reasons.append(f"code no longer uses: {_names(removed)}")
    changed, added, removed = _diff(recorded.data_sets, now.data_sets)
    if changed | added | removed:
        what = [f"{n} changed" for n in sorted(changed)] + [f"{n} added" for n in sorted(added)] + \
               [f"{n} removed" for n in sorted(removed)]
        reasons.append("data: " + ", ".join(what))
    why = _profile_change(recorded.profile_settings, now.profile_settings)
    return tuple(reasons) + ((why,) if why else ())


def _profile_change(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    """The reason naming the changed profile settings ("" when none that matter changed)."""
    changed, added, removed = _diff(_canonical(old), _canonical(new))
    keys = (changed | added | removed) - set(NOT_RESULTS)
    return f"profile settings changed: {_names(keys)}" if keys else ""


# ---- result sets -------------------------------------------------------------------------------
@dataclass(frozen=True)
class NotebookStatus:
    """One notebook of one result set: ``state`` in :data:`STATES`, with the reasons."""

    manifest: str
    profile: str
    notebook: str
    state: str
    reasons: tuple[str, ...]


def find_result_sets(results_root: Path) -> list[Path]:
    """Every runner manifest under ``results_root`` (itself, results/<profile>/, results/seeds/N/, ...),
    shallowest first."""
    out = []
    for p in sorted(results_root.rglob("manifest.json"), key=lambda q: (len(q.parts), q)):
        if _SKIP_DIRS & set(p.relative_to(results_root).parts[:-1]):
            continue
        try:
            m = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(m, dict) and isinstance(m.get("notebooks"), list) and "profile" in m:
            out.append(p)
    return out


def result_status(manifest_path: Path, *, root: Path, package_dir: Path,
                  profiles: Mapping[str, Mapping[str, Any]],
                  cache: dict[tuple[str, str], Any] | None = None) -> list[NotebookStatus]:
    """The state of each notebook entry of the result set ``manifest_path`` against the checkout.
    ``profiles``: name -> current settings; ``cache`` (optional) shares the live hashes between
    result sets. Unreadable manifests raise ValueError."""
    try:
        m = json.loads(manifest_path.read_text(encoding="utf-8"))
        entries, profile = list(m["notebooks"]), str(m["profile"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"unreadable run manifest {manifest_path}: {exc}") from None
    cache = cache if cache is not None else {}
    shown = _key(manifest_path, root)
    rows = []
    for e in entries:
        name = str(e.get("name", "?"))

        def row(state: str, *why: str) -> NotebookStatus:
            return NotebookStatus(shown, profile, name, state, tuple(why))  # noqa: B023 - called within the iteration

        if e.get("status") != "ok":
            rows.append(row("unknown", f"last run {e.get('status', 'unrecorded')}"))
            continue
        if "fingerprint" not in e:
            commit = (e.get("git_commit") or (m.get("git") or {}).get("commit") or "")[:7]
            why = ["no fingerprint recorded" + (f" (run at {commit})" if commit else "")]
            if isinstance(m.get("profile_settings"), Mapping) and profile in profiles:
                why.append(_profile_change(m["profile_settings"], profiles[profile]))  # known even so
            rows.append(row("unknown", *filter(None, why)))
            continue
        try:
            recorded = Fingerprint.from_dict(e["fingerprint"])
        except ValueError as exc:
            rows.append(row("unknown", f"unreadable fingerprint: {exc}"))
            continue
        nb = Path(str(e.get("input", "")))
        nb = nb if nb.is_absolute() else root / nb
        if not nb.is_file():
            rows.append(row("stale", f"notebook {_key(nb, root)} no longer exists"))
            continue
        params = e.get("parameters") or {}
        data_dir = Path(str(params.get("data_dir", "data")))
        data_dir = data_dir if data_dir.is_absolute() else root / data_dir
        if profile not in profiles:
            now = None
        else:
            key = ("files", str(nb))
            if key not in cache:
                cache[key] = source_files(nb, package_dir, root)
            if ("data", str(data_dir)) not in cache:
                cache[("data", str(data_dir))] = data_sets(data_dir)
            now = Fingerprint(cache[key], cache[("data", str(data_dir))], profiles[profile])
        changes = compare(recorded, now)
        rows.append(row("stale", *changes) if changes else row("current"))
    return rows


def format_status(sets: Mapping[str, list[NotebookStatus]], notebooks: Iterable[str] = ()) -> str:
    """The status list: one block per result set, one line per notebook (and one naming the
    ``notebooks`` it has no entry for), then the counts."""
    lines: list[str] = []
    counts = dict.fromkeys(STATES, 0)
    for shown, rows in sets.items():
        prof = rows[0].profile if rows else "?"
        lines.append(f"{shown} (profile {prof})")
        width = max((len(r.notebook) for r in rows), default=0)
        for r in rows:
            counts[r.state] += 1
            why = "; ".join(r.reasons)
            lines.append(f"  {r.notebook:<{width}}  {r.state:<7}" + (f"  {why}" if why else ""))
        absent = [n for n in notebooks if n not in {r.notebook for r in rows}]
        if absent:
            lines.append(f"  not in this result set: {', '.join(absent)}")
    lines.append(", ".join(f"{n} {s}" for s, n in counts.items()) if sets else "no result sets found")
    return "\n".join(lines)
