"""Project paths: notebooks may run from notebooks/ (JupyterLab) or the repo root (papermill);
relative paths in parameters are resolved against the project root either way."""
from __future__ import annotations

import os
from pathlib import Path


# the directory of the current run's generation store (set by the notebook runner for its kernels)
GENERATION_STORE_ENV = "DPMV_GENERATION_STORE"


def project_root(start: str | Path | None = None) -> Path:
    """The nearest directory at or above ``start`` (default: cwd) holding pyproject.toml and
    dpmv_lib/; falls back to the checkout that holds this package."""
    here = Path(start or os.getcwd()).resolve()
    for d in (here, *here.parents):
        if (d / "pyproject.toml").exists() and (d / "dpmv_lib").is_dir():
            return d
    return Path(__file__).resolve().parents[2]


def resolve(path: str | Path, root: str | Path | None = None) -> Path:
    """An absolute path: ``path`` itself if absolute, else relative to the project root."""
    p = Path(path).expanduser()
    return p if p.is_absolute() else (Path(root) if root else project_root()) / p


def default_corpora_dir() -> Path:
    """``../shared/corpora`` next to the project root (override with DPMV_CORPORA)."""
    env = os.environ.get("DPMV_CORPORA")
    return Path(env) if env else project_root().parent / "shared" / "corpora"
