"""Shared by the notebook builders (tools/build_nb*.py): write a notebook with stable cell ids."""
from __future__ import annotations

import hashlib
from pathlib import Path

import nbformat as nbf

ROOT = Path(__file__).resolve().parent.parent


def write_notebook(cells: list, name: str) -> Path:
    """Write ``notebooks/<name>.ipynb`` (no outputs) with cell ids hashed from position, type and
    source, so a rebuild changes only the cells whose text changed."""
    nb = nbf.v4.new_notebook()
    nb.cells = cells
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    for i, c in enumerate(nb.cells):
        c.id = hashlib.sha256(f"{i}:{c.cell_type}:{c.source}".encode()).hexdigest()[:8]
    out = ROOT / "notebooks" / f"{name}.ipynb"
    nbf.write(nb, str(out))
    print(f"wrote {out}")
    return out
