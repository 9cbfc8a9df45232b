"""Read without running: the executed notebooks of a committed result set are committed
beside its tables, one per notebook of its manifest, executed by that run, small (no widget state,
no progress-bar spam) and free of errors."""
from __future__ import annotations

import base64
import json
import re
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAX_BYTES = 3 * 2**20          # "a few MB" per executed copy
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def _tracked(path: Path) -> bool:
    r = subprocess.run(["git", "ls-files", "--error-unmatch", str(path.relative_to(ROOT))], cwd=ROOT,
                       capture_output=True, text=True)
    return r.returncode == 0


def _check_result_set(results: Path) -> None:
    m = json.loads((results / "manifest.json").read_text())
    assert m["notebooks"], results
    for entry in m["notebooks"]:
        path = ROOT / entry["output"]
        assert path.is_file() and _tracked(path), f"{path} is not committed"
        assert path.stat().st_size <= MAX_BYTES, f"{path}: {path.stat().st_size} bytes"
        nb = json.loads(path.read_text(encoding="utf-8"))
        assert "widgets" not in nb["metadata"], f"{path}: widget state"
        params = nb["metadata"]["papermill"]["parameters"]
        assert params["profile"] == m["profile"] and params["seed"] == m["seeds"]["seed"], path
        for i, cell in enumerate(nb["cells"]):
            if cell["cell_type"] != "code":
                continue
            assert cell["execution_count"] is not None, f"{path}: cell {i} not executed"
            for out in cell.get("outputs", []):
                assert out["output_type"] != "error", f"{path}: cell {i} raised"
                assert WIDGET_VIEW not in out.get("data", {}), f"{path}: cell {i} widget view"
                text = "".join(out.get("text", ""))
                assert "\r" not in text and "it/s]" not in text, f"{path}: cell {i} progress bar"


def test_default_executed_notebooks_are_committed_and_readable():
    _check_result_set(ROOT / "results")


def test_llm_executed_notebooks_are_committed_and_readable():
    _check_result_set(ROOT / "results" / "llm")


def test_readme_links_the_executed_notebooks_first():
    readme = (ROOT / "README.md").read_text()
    first = readme.index("results/notebooks/")
    assert first < readme.index("## Profiles"), "the executed notebooks are not the first thing to read"


# --- Rendered as a reader sees them --------------------------------------------------------------
# Every executed notebook of a committed result set is rendered to HTML (nbconvert's HTMLExporter)
# and read cell by cell for what breaks the page: a Markdown table that does not parse, a control
# character, an image file named but not shown, "nan" in a table, a leftover progress bar. The
# checks below use the standard library only, so a hand-made notebook can exercise each of them.

CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
PNG_NAME = re.compile(r"[\w.\-/]*\w\.png\b(?!\s*\()")   # a file name, not a call such as view.png()
TABLE_DELIMITER = re.compile(r"^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")
UNESCAPED_PIPE = re.compile(r"(?<!\\)\|")
NAN_TEXT = re.compile(r"(?<![\w.])(nan|NaN)(?![\w.])")    # "nan" as a cell or a word in one
PROGRESS = (re.compile("[\u2588\u2589\u258a\u258b\u258c\u258d\u258e\u258f]"), re.compile(r"%\|"),
            re.compile(r"(?<![\d.])0%"))
CELL_START = '<div class="jp-Cell '


def _text(value: Any) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def _row_cells(line: str) -> list[str]:
    s = line.strip()
    s = s[1:] if s.startswith("|") else s
    s = s[:-1] if s.endswith("|") and not s.endswith("\\|") else s
    return [c.strip() for c in UNESCAPED_PIPE.split(s)]


def markdown_tables(text: str) -> list[list[list[str]]]:
    """The pipe tables of Markdown ``text`` (outside code fences): rows of cells, the header first
    and then the delimiter row, split on unescaped ``|``."""
    lines, tables, fenced, i = text.splitlines(), [], False, 0
    while i < len(lines):
        if lines[i].lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        elif (not fenced and "|" in lines[i] and i + 1 < len(lines)
              and TABLE_DELIMITER.match(lines[i + 1]) and "-" in lines[i + 1]):
            rows = [lines[i], lines[i + 1]]
            i += 2
            while i < len(lines) and lines[i].strip() and "|" in lines[i]:
                rows.append(lines[i])
                i += 1
            tables.append([_row_cells(r) for r in rows])
            continue
        i += 1
    return tables


def markdown_table_problems(text: str) -> list[str]:
    """Rows of the Markdown tables in ``text`` whose cell count differs from the header's (an
    unescaped ``|`` in a cell), and cells that show "nan"."""
    problems = []
    for t, rows in enumerate(markdown_tables(text), 1):
        width = len(rows[0])
        if len(rows[1]) != width:
            problems.append(f"markdown table {t} has {width} header cells and {len(rows[1])} delimiter cells: "
                            f"{' | '.join(rows[0])[:80]!r}")
            continue
        for r, cells in enumerate(rows[2:], 1):
            if len(cells) != width:
                problems.append(f"markdown table {t} row {r} has {len(cells)} cells, its header {width}: "
                                f"{' | '.join(cells)[:80]!r}")
        if any(NAN_TEXT.search(c) for cells in rows[2:] for c in cells):
            problems.append(f"markdown table {t} shows nan")
    return problems


class _TableCells(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.cells: list[str] = []
        self._depth = 0

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        if tag in ("td", "th"):
            self._depth += 1
            self.cells.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._depth:
            self._depth -= 1

    def handle_data(self, data: str) -> None:
        if self._depth:
            self.cells[-1] += data


def html_nan_cells(html: str) -> int:
    """How many cells of the HTML tables in ``html`` show "nan" or "NaN" (alone or as a word)."""
    p = _TableCells()
    p.feed(html)
    return sum(bool(NAN_TEXT.search(c)) for c in p.cells)


def control_characters(text: str) -> list[str]:
    """The control characters in ``text`` other than newline and tab, as escapes."""
    return sorted({repr(c) for c in CONTROL.findall(text)})


def progress_bars(text: str) -> bool:
    """True if ``text`` (a stream output) holds a tqdm-style progress bar."""
    return any(p.search(text) for p in PROGRESS)


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return ["".join(value)] if all(isinstance(v, str) for v in value) else [
            s for v in value for s in _strings(v)]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    return []


def _progress_texts(out: dict) -> list[str]:
    """Where a progress bar is left: stream text, and a plain-text-only display (a tqdm fallback)."""
    if out.get("output_type") == "stream":
        return [_text(out.get("text", ""))]
    data = out.get("data", {})
    rich = [k for k in data if k.startswith("text/") and k != "text/plain"]
    return [_text(data["text/plain"])] if "text/plain" in data and not rich else []


def _output_texts(out: dict) -> list[str]:
    """Texts of an output a reader sees: stream text and every text/* representation."""
    if out.get("output_type") == "stream":
        return [_text(out.get("text", ""))]
    return [_text(v) for k, v in out.get("data", {}).items() if k.startswith("text/")]


def shown_images(nb: dict, figure_dirs: list[Path]) -> set[str]:
    """Names of the PNG files the notebook shows: a file of ``figure_dirs`` whose bytes an image
    output embeds, or a name in an image output's metadata."""
    embedded, named = set(), set()
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            if "image/png" in out.get("data", {}):
                embedded.add(_text(out["data"]["image/png"]).replace("\n", ""))
                named |= {Path(m).name for s in _strings(out.get("metadata", {})) for m in PNG_NAME.findall(s)}
    files = {f for d in figure_dirs if d.is_dir() for f in d.glob("*.png")}
    return named | {f.name for f in files if base64.b64encode(f.read_bytes()).decode() in embedded}


def notebook_problems(nb: dict, figure_dirs: list[Path]) -> list[str]:
    """Everything a reader of the rendered notebook ``nb`` would trip on, one line per problem,
    naming the cell (index and id). ``figure_dirs`` hold the PNG files its text may name."""
    from nbconvert import HTMLExporter
    import nbformat

    node = nbformat.reads(json.dumps(nb), as_version=4)
    html, _ = HTMLExporter().from_notebook_node(node)
    parts = html.split(CELL_START)[1:]
    if len(parts) != len(nb["cells"]):
        return [f"the HTML has {len(parts)} cells, the notebook {len(nb['cells'])}"]
    shown = shown_images(nb, figure_dirs)
    problems = []
    for i, (cell, part) in enumerate(zip(nb["cells"], parts)):
        where = f"cell {i} ({cell.get('id', '-')}, {cell['cell_type']})"
        source = _text(cell.get("source", ""))
        texts = [source]
        found = markdown_table_problems(source) if cell["cell_type"] == "markdown" else []
        for out in cell.get("outputs", []):
            if "text/markdown" in out.get("data", {}):
                md = _text(out["data"]["text/markdown"])
                in_table = markdown_table_problems(md)
                found += in_table
                nan = NAN_TEXT.search(md)
                if nan and not any("nan" in p for p in in_table):
                    found.append(f"shows nan: {md[max(0, nan.start() - 60):nan.end()]!r}")
            texts += _output_texts(out)
            if any(progress_bars(t) for t in _progress_texts(out)):
                found.append("progress bar left in the output")
            found += [f"control character {c} in an output" for c in
                      control_characters("\n".join(s for s in _strings(out) if len(s) < 100_000))]
        found += [f"control character {c} in the source" for c in control_characters(source)]
        nans = html_nan_cells(part)
        if nans:
            found.append(f"{nans} table cell(s) show nan")
        named = {Path(m).name for t in texts for m in PNG_NAME.findall(t)}
        found += [f"names {n} but the notebook does not show it" for n in sorted(named - shown)]
        problems += [f"{where}: {p}" for p in found]
    return problems


def _result_sets() -> list[Any]:
    sets = []
    for rel in ("results", "results/llm"):
        if (ROOT / rel / "manifest.json").is_file():
            sets.append(pytest.param(rel, id=rel.replace("/", "-")))
    return sets


def result_set_problems(results: Path) -> list[str]:
    """:func:`notebook_problems` of every executed notebook of the result set under ``results``."""
    m = json.loads((results / "manifest.json").read_text())
    problems = []
    for entry in m["notebooks"]:
        path = ROOT / entry["output"]
        if not path.is_file():
            problems.append(f"{entry['output']} is missing")
            continue
        nb = json.loads(path.read_text(encoding="utf-8"))
        problems += [f"{entry['output']} {p}" for p in notebook_problems(nb, [results / "figures"])]
    return problems


@pytest.mark.parametrize("rel", _result_sets())
def test_executed_notebooks_render_cleanly(rel: str):
    problems = result_set_problems(ROOT / rel)
    assert not problems, "\n".join(problems)


# --- each check fails on a small bad notebook and passes on a good one ---

PNG_BYTES = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGA"
                             "hKmMIQAAAABJRU5ErkJggg==")


def _nb(*cells: dict) -> dict:
    return {"nbformat": 4, "nbformat_minor": 5, "metadata": {},
            "cells": [dict(c, id=f"c{i}") for i, c in enumerate(cells)]}


def _md(source: str) -> dict:
    return {"cell_type": "markdown", "metadata": {}, "source": source}


def _code(source: str, *outputs: dict) -> dict:
    return {"cell_type": "code", "metadata": {}, "source": source, "execution_count": 1, "outputs": list(outputs)}


def _display(data: dict, metadata: dict | None = None) -> dict:
    return {"output_type": "display_data", "data": data, "metadata": metadata or {}}


def _stream(text: str) -> dict:
    return {"output_type": "stream", "name": "stderr", "text": text}


GOOD_TABLE = "| claim | test |\n|---|---|\n| C11 | \\|dU\\| < 0.02 |\n| X3 | inf |\n"
BAD_TABLE = "| claim | test |\n|---|---|\n| C11 | |dU| < 0.02 |\n"
NAN_HTML = "<table><tr><th>loss</th></tr><tr><td>nan</td></tr></table>"
GOOD_HTML = "<table><tr><th>loss</th></tr><tr><td>inf</td></tr></table>"


@pytest.mark.parametrize("cell", [
    _md(BAD_TABLE),
    _code("x", _display({"text/markdown": BAD_TABLE, "text/plain": "x"})),
    _md("| a |\n|---|\n| nan |\n"),
    _md("| claim | evidence |\n|---|---|\n| X3 | max loss nan over 320 pairs |\n"),
    _code("x", _display({"text/markdown": "- X3: CappedArgmax max loss nan over 320 pairs", "text/plain": "x"})),
    _code("x", _display({"text/html": NAN_HTML, "text/plain": "x"})),
    _md("The loss \x0barepsilon is bounded."),
    _code("print(1)", _stream("S2 realise:   0%|          | 0/384 [00:00<?, ?it/s]")),
    _code("print(1)", _stream("100%|\u2588\u2588\u2588\u2588| 4/4")),
    _code("print(1)", _stream("S2 realise: 0%")),
    _code("x", _display({"text/plain": "S2 realise:   0%|          | 0/384 [00:00<?, ?it/s]"})),
    _md("| a | b |\n|---|\n| 1 | 2 |\n"),
    _md("The figure `results/figures/01_structure.png` shows the layout."),
    _code("print(1)", {"output_type": "stream", "name": "stdout", "text": "saved results/figures/01_structure.png\n"}),
], ids=["md-pipe", "output-md-pipe", "md-nan", "md-nan-word", "output-md-nan", "html-nan", "control-char", "tqdm-0",
        "tqdm-blocks", "bar-0%", "png-in-md", "png-in-output", "tqdm-display", "md-delimiter"])
def test_render_checks_fail_on_a_bad_notebook(cell: dict, tmp_path: Path):
    assert notebook_problems(_nb(_md("# Title"), cell), [tmp_path]) != []


def test_render_checks_pass_on_a_good_notebook(tmp_path: Path):
    (tmp_path / "01_structure.png").write_bytes(PNG_BYTES)
    image = _display({"image/png": base64.b64encode(PNG_BYTES).decode(), "text/plain": "<Image>"})
    nb = _nb(_md("# Title\n\n" + GOOD_TABLE + "\nThe figure `01_structure.png` below; $\\varepsilon$ "
                 "is 10% of B_a.\n\n```\na | b\n---\n```"),
             _code("x", _display({"text/markdown": GOOD_TABLE, "text/plain": "x"}),
                   _display({"text/html": GOOD_HTML, "text/plain": "x"}), image),
             _code("print(1)", {"output_type": "stream", "name": "stdout", "text": "done: 100 pairs\tok, 10% | 20%\n"}),
             _code("(figures / name).write_bytes(view.png())",
                   _display({"text/plain": "  0%", "text/html": "<p>0%</p>"})),
             _md("| variant | finance | loss |\n|---|---|---|\n| NoCap | nanny fees | 1.284 |\n"))
    assert notebook_problems(nb, [tmp_path]) == []


def test_an_image_named_is_shown_by_its_bytes_or_its_metadata(tmp_path: Path):
    (tmp_path / "a.png").write_bytes(PNG_BYTES)
    other = base64.b64encode(PNG_BYTES + b"x").decode()
    by_bytes = _nb(_md("see a.png"), _code("x", _display({"image/png": base64.b64encode(PNG_BYTES).decode()})))
    by_name = _nb(_md("see b.png"), _code("x", _display({"image/png": other}, {"image/png": {"filename": "b.png"}})))
    neither = _nb(_md("see a.png"), _code("x", _display({"image/png": other})))
    assert notebook_problems(by_bytes, [tmp_path]) == []
    assert notebook_problems(by_name, [tmp_path]) == []
    assert notebook_problems(neither, [tmp_path]) == [
        "cell 0 (c0, markdown): names a.png but the notebook does not show it"]


def test_markdown_tables_split_on_unescaped_pipes_only():
    assert markdown_tables(GOOD_TABLE)[0][2] == ["C11", "\\|dU\\| < 0.02"]
    assert markdown_table_problems(GOOD_TABLE) == []
    assert markdown_table_problems(BAD_TABLE) == [
        "markdown table 1 row 1 has 4 cells, its header 2: 'C11 |  | dU | < 0.02'"]
    assert markdown_tables("```\na | b\n--- | ---\n```") == []
