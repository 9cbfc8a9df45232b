"""The paper's experiments as notebook steps: ``import dpmv_lib.experiments as dx``.

Every notebook imports this one namespace (as OpenDP's ``import opendp.prelude as dp``) and calls
its steps qualified by module: ``dx.rq2.table4(session, ...)``. A submodule loads on first use
(PEP 562 ``__getattr__``), so importing the namespace is cheap, and each name keeps its one home.
The result fingerprint (:mod:`dpmv_lib.common.fingerprint`) resolves ``dx.<module>`` statically, so
a notebook's results go stale exactly when a module it uses changes.

Modules: the notebook run (``session``) and what each step returns (``result``); RQ1 (``rq1``,
Table 2), RQ2 (``rq2``, Table 4), budget sensitivity (``sensitivity``, Table 3), verdicts from
stated tests (``verdicts``), utility (``utility_decomposition``, ``utility_lift``,
``utility_frontier``), the adaptive adversary, the playground, tables, figures and profiles
(docs/architecture.md has the index)."""
from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType


def __getattr__(name: str) -> ModuleType:
    if name.startswith("_"):
        raise AttributeError(name)
    try:
        return importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as e:
        if e.name == f"{__name__}.{name}":
            raise AttributeError(f"dpmv_lib.experiments has no module {name!r}; see dir(dx)") from None
        raise


def __dir__() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(__path__))
