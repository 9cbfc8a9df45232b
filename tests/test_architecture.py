"""The import rules of docs/architecture.md, read from the source (every import, also the ones
inside functions): the rooms form layers with no backward arrow, and modules stay small."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "dpmv_lib"

# room -> rooms it may import (besides itself). Top-level modules are rooms of their own:
# ``__init__`` (the public API, re-exported from core) and ``run`` (the notebook runner).
ALLOWED: dict[str, set[str]] = {
    "core": set(),
    "common": set(),
    "ledgers": {"core"},
    "checks": {"core"},
    "bench": {"core", "common", "checks"},
    "generate": {"core", "common", "bench", "checks"},
    "evaluate": {"core", "common", "bench", "generate", "checks"},
    "experiments": {"core", "common", "bench", "generate", "evaluate", "checks", "ledgers"},
    "run": {"core", "common", "experiments"},
    "__init__": {"core"},
}
MAX_LINES = 600
# modules over MAX_LINES, to be split (each entry names its issue); empty when done
OVERSIZED_ALLOWED: dict[str, str] = {}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """dpmv_lib modules (or packages) imported anywhere in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    pkg = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == "dpmv_lib"}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg[:len(pkg) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "dpmv_lib":
                continue
            for a in node.names:      # ``from pkg import module`` imports the module
                out.add(f"{target}.{a.name}" if f"{target}.{a.name}" in modules else target)
    out.discard(name)
    return out


def _room(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "__init__"
    return parts[1]


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    return {m: _imports(m, p, mods) for m, p in mods.items()}


def test_every_module_is_in_a_room():
    rooms = {_room(m) for m in _modules()}
    assert rooms <= set(ALLOWED), f"modules outside the documented rooms: {sorted(rooms - set(ALLOWED))}"


def test_imports_follow_the_layers():
    bad = []
    for mod, deps in _graph().items():
        room = _room(mod)
        for d in deps:
            target = _room(d)
            if target != room and target not in ALLOWED[room]:
                bad.append(f"{mod} -> {d} ({room} may import only {sorted(ALLOWED[room]) or 'itself'})")
    assert not bad, "backward or forbidden imports:\n" + "\n".join(sorted(bad))


def test_nothing_imports_the_runner():
    users = sorted(m for m, deps in _graph().items() if "dpmv_lib.run" in deps)
    assert not users, f"the runner is the top of the house; imported by {users}"


def test_no_import_cycles():
    graph = _graph()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for d in sorted(graph.get(m, ())):
            if d not in graph:
                continue
            if state.get(d) == 1:
                cycle = stack[stack.index(d):] + [d]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if d not in state:
                visit(d)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)


def test_the_rule_checker_sees_a_backward_import(tmp_path):
    """The checker itself: a core module importing experiments is found (relative, lazy)."""
    fake = tmp_path / "dpmv_lib" / "core" / "x.py"
    fake.parent.mkdir(parents=True)
    fake.write_text("def f():\n    from ..experiments import rq2\n    return rq2\n")
    deps = _imports("dpmv_lib.core.x", fake, {"dpmv_lib.core.x": fake, "dpmv_lib.experiments.rq2": fake})
    assert deps == {"dpmv_lib.experiments.rq2"}
    assert "experiments" not in ALLOWED[_room("dpmv_lib.core.x")]


def test_modules_stay_small():
    big = {p.relative_to(PKG).as_posix(): n for p in PKG.rglob("*.py")
           if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    unexpected = {k: v for k, v in big.items() if k not in OVERSIZED_ALLOWED}
    assert not unexpected, f"modules over {MAX_LINES} lines (split them): {unexpected}"
    stale = sorted(set(OVERSIZED_ALLOWED) - set(big))
    assert not stale, f"no longer oversized, drop from OVERSIZED_ALLOWED: {stale}"
