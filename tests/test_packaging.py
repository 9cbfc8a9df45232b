"""The built wheel ships what pyproject.toml declares: the PEP 561 marker ``py.typed``
(so type checkers read dpmv_lib's annotations), the package data (``*.json``) and every module.

The wheel is built offline from a copy of pyproject.toml, README.md and dpmv_lib/ in a temporary
directory (``pip wheel --no-deps --no-build-isolation --no-index``), so the checkout gets no
``build/`` or egg-info of its own; about 2 s.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _build_wheel(tmp: Path) -> Path:
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / "dpmv_lib", src / "dpmv_lib", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    out = tmp / "wheel"
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                           "-q", "-w", str(out), str(src)], capture_output=True, text=True, timeout=180, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    wheels = list(out.glob("dpmv-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def test_wheel_ships_py_typed_package_data_and_every_module(tmp_path):
    assert (ROOT / "dpmv_lib" / "py.typed").is_file()
    with zipfile.ZipFile(_build_wheel(tmp_path)) as whl:
        shipped = {n for n in whl.namelist() if n.startswith("dpmv_lib/")}
    assert "dpmv_lib/py.typed" in shipped
    assert "dpmv_lib/bench/transfer_review.json" in shipped
    source = {p.relative_to(ROOT).as_posix() for p in (ROOT / "dpmv_lib").rglob("*")
              if p.is_file() and "__pycache__" not in p.parts
              and (p.suffix in (".py", ".json") or p.name == "py.typed")}
    assert source - shipped == set(), "in dpmv_lib/ but not in the wheel (a package without __init__.py?)"
