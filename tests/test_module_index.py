"""docs/architecture.md lists every module of dpmv_lib, and nothing that is gone
(regenerate the block with ``python tools/module_index.py``)."""
from __future__ import annotations

from pathlib import Path

from helpers.scripts import load_script

ROOT = Path(__file__).resolve().parents[1]


def _tool():
    return load_script(ROOT / "tools" / "module_index.py", "module_index")


def test_architecture_doc_lists_every_module():
    tool = _tool()
    listed = tool.listed(tool.DOC.read_text(encoding="utf-8"))
    assert len(listed) == len(set(listed)), "a module is listed twice"
    missing = sorted(set(tool.modules()) - set(listed))
    gone = sorted(set(listed) - set(tool.modules()))
    assert not missing and not gone, (f"run `python tools/module_index.py`; missing: {missing}; "
                                      f"listed but gone: {gone}")


def test_the_index_check_sees_a_missing_module():
    tool = _tool()
    block = tool.block()
    assert "`dpmv_lib.core.memview`" in block and "`dpmv_lib.ledgers.sqlite`" in block
    text = block.replace("| `dpmv_lib.core.memview` |", "| `dpmv_lib.core.gone` |")
    assert "dpmv_lib.core.memview" not in tool.listed(text)
    assert "dpmv_lib.core.gone" in tool.listed(text)
