"""The notebook prelude (dpmv_lib.experiments.prelude, issue 32): it only re-exports (every name keeps
its one home), exports exactly what it imports, everything it exports is used by a notebook, and
``from ... import *`` shadows no notebook parameter or variable. Notebooks 03-07 import dpmv_lib
through it alone."""
from __future__ import annotations

import ast
import importlib
import json
import types
from pathlib import Path

import pytest

from dpmv_lib.experiments import prelude

ROOT = Path(__file__).resolve().parents[1]
PRELUDE_SRC = ROOT / "dpmv_lib" / "experiments" / "prelude.py"
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
USES_PRELUDE = ("03_rq1_privacy_utility", "04_rq2_safeguards", "05_budget_sensitivity", "06_adaptive_adversary",
                "07_memview_playground")
STAR = "from dpmv_lib.experiments.prelude import *"


def _cells(path: Path) -> list[str]:
    nb = json.loads(path.read_text(encoding="utf-8"))
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


def _tree(source: str) -> ast.Module:
    return ast.parse("\n".join("" if ln.lstrip().startswith(("%", "!")) else ln for ln in source.splitlines()))


def _bound(tree: ast.AST) -> set[str]:
    """Names a cell binds: assignments (also loop, with and comprehension targets), defs, imports."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name != "*"}
    return out


def _loaded(tree: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def test_the_prelude_defines_nothing_and_exports_what_it_imports():
    tree = ast.parse(PRELUDE_SRC.read_text(encoding="utf-8"))
    imported: list[str] = []
    for i, node in enumerate(tree.body):
        if i == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue                                              # the docstring
        if isinstance(node, ast.ImportFrom):
            if node.module != "__future__":
                assert node.level >= 1, "the prelude imports from its own package, relatively"
                imported += [a.asname or a.name for a in node.names]
                assert all(a.asname is None for a in node.names), "no aliases: every name keeps its own"
            continue
        assert isinstance(node, ast.Assign) and [t.id for t in node.targets] == ["__all__"], (
            f"line {node.lineno}: the prelude may only import and set __all__")
    assert len(prelude.__all__) == len(set(prelude.__all__)), "a name listed twice in __all__"
    assert set(prelude.__all__) == set(imported)


def test_every_name_keeps_its_home():
    for name in prelude.__all__:
        obj = getattr(prelude, name)
        if isinstance(obj, types.ModuleType):
            assert obj.__name__.startswith("dpmv_lib.") and obj.__name__.rsplit(".", 1)[1] == name
        elif hasattr(obj, "__module__") and not isinstance(obj, tuple):
            home = importlib.import_module(obj.__module__)
            assert obj.__module__ != prelude.__name__ and getattr(home, name) is obj, name


def test_star_import_gives_exactly_all():
    ns: dict = {}
    exec(STAR, ns)
    assert set(ns) - {"__builtins__"} == set(prelude.__all__)


@pytest.mark.parametrize("name", USES_PRELUDE)
def test_notebook_imports_dpmv_lib_through_the_prelude_only(name):
    cells = _cells(ROOT / "notebooks" / f"{name}.ipynb")
    imports = [ln.strip() for src in cells for ln in src.splitlines()
               if "dpmv_lib" in ln and ln.lstrip().startswith(("from ", "import "))]
    assert imports and all(ln.startswith(STAR) for ln in imports), imports


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_no_notebook_name_is_shadowed_by_the_prelude(path):
    """A parameter or variable of a notebook that equals a prelude name would be overwritten by the
    star import (parameters come first) or hide the prelude's name from later cells."""
    if not any(STAR in src for src in _cells(path)):
        pytest.skip("does not use the prelude")
    bound = set().union(*(_bound(_tree(src)) for src in _cells(path)))
    clash = sorted(bound & set(prelude.__all__))
    assert not clash, f"{path.name} binds prelude names: {clash}"


def test_every_prelude_name_is_used_by_a_notebook():
    used: set[str] = set()
    for path in NOTEBOOKS:
        for src in _cells(path):
            used |= _loaded(_tree(src))
    assert not sorted(set(prelude.__all__) - used), "exported but used by no notebook"
