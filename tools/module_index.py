"""Write the module index of docs/architecture.md: every module of dpmv_lib, by room, with the
first paragraph of its docstring (between the ``modules:begin`` and ``modules:end`` markers).

    python tools/module_index.py          # rewrite the block
    python tools/module_index.py --check  # exit 1 when a module is missing or listed but gone

tests/test_architecture.py checks that the block names exactly the modules of the package.
"""
from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "dpmv_lib"
DOC = ROOT / "docs" / "architecture.md"
BEGIN, END = "<!-- modules:begin -->", "<!-- modules:end -->"
ROOM_ORDER = ("core", "ledgers", "checks", "common", "bench", "generate", "evaluate", "experiments")


def modules() -> list[str]:
    """Dotted names of every module below dpmv_lib (packages by their ``__init__``)."""
    out = []
    for p in sorted(PKG.rglob("*.py")):
        parts = list(p.relative_to(ROOT).with_suffix("").parts)
        out.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return out


def _summary(name: str) -> str:
    rel = Path(*name.split("."))
    path = ROOT / rel.with_suffix(".py")
    if not path.exists():
        path = ROOT / rel / "__init__.py"
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    text = " ".join(doc.split("\n\n")[0].split())     # the first paragraph
    if len(text) > 220:
        text = text[:220].rsplit(" ", 1)[0] + " ..."
    return text.replace("|", "\\|") or "(no docstring)"


def _room(name: str) -> str:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 and (PKG / parts[1]).is_dir() else "top level"


def block() -> str:
    rooms: dict[str, list[str]] = {}
    for m in modules():
        rooms.setdefault(_room(m), []).append(m)
    order = [r for r in ("top level", *ROOM_ORDER) if r in rooms] + sorted(set(rooms) - {"top level", *ROOM_ORDER})
    lines = [BEGIN, "", "| module | what it holds |", "|---|---|"]
    for r in order:
        for m in rooms[r]:
            lines.append(f"| `{m}` | {_summary(m)} |")
    return "\n".join(lines + ["", END])


def listed(text: str) -> list[str]:
    """Module names in the index block of ``text``."""
    if BEGIN not in text or END not in text:
        return []
    body = text.split(BEGIN, 1)[1].split(END, 1)[0]
    return re.findall(r"^\| `(dpmv_lib[\w.]*)` \|", body, re.M)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args(argv)
    text = DOC.read_text(encoding="utf-8")
    if args.check:
        missing = sorted(set(modules()) - set(listed(text)))
        gone = sorted(set(listed(text)) - set(modules()))
        for m in missing:
            print(f"not in {DOC.name}: {m}")
        for m in gone:
            print(f"listed but gone: {m}")
        return 1 if missing or gone else 0
    if BEGIN in text:
        head, rest = text.split(BEGIN, 1)
        new = head + block() + rest.split(END, 1)[1]
    else:
        new = text.rstrip("\n") + "\n\n## Every module\n\n" + block() + "\n"
    DOC.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
