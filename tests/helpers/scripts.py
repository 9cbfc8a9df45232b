"""Import a project script (``benchmarks/*.py``, ``tools/*.py``) as a module for its tests."""
from __future__ import annotations

import importlib.util
import sys
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Iterator


def load_script(path: Path, name: str) -> ModuleType:
    """Execute the script at ``path`` as module ``name`` (registered in ``sys.modules``)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


@contextmanager
def script_module(path: Path, name: str) -> Iterator[ModuleType]:
    """:func:`load_script` with the script's folder on ``sys.path`` (for sibling imports such as
    ``machine_info``), both undone on exit."""
    sys.path.insert(0, str(path.parent))
    try:
        yield load_script(path, name)
    finally:
        sys.modules.pop(name, None)
        sys.path.remove(str(path.parent))
