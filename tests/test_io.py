"""dpmv_lib.common.io: atomic writes and the one JSON Lines writer/reader, and the one
result-table writer built on it (dpmv_lib.experiments.tables.write_table)."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from dpmv_lib.common.io import read_jsonl, write_atomic, write_jsonl
from dpmv_lib.experiments.common import markdown_table
from dpmv_lib.experiments.tables import TablePaths, write_table


def test_write_atomic_replaces_whole_files_and_leaves_no_temporary(tmp_path):
    p = tmp_path / "a" / "b" / "x.txt"
    assert write_atomic(p, "one\n") == p and p.read_bytes() == b"one\n"
    write_atomic(p, b"two")
    assert p.read_bytes() == b"two"
    assert sorted(q.name for q in p.parent.iterdir()) == ["x.txt"]


def test_write_atomic_keeps_the_old_file_when_writing_fails(tmp_path, monkeypatch):
    p = tmp_path / "x.txt"
    write_atomic(p, "old")

    def boom(self, data):
        raise OSError("disk full")
    monkeypatch.setattr(type(p), "write_bytes", boom)
    with pytest.raises(OSError, match="disk full"):
        write_atomic(p, "new")
    monkeypatch.undo()
    assert p.read_text() == "old" and sorted(q.name for q in tmp_path.iterdir()) == ["x.txt"]


def test_jsonl_round_trip_bytes_and_count(tmp_path):
    rows = [{"b": 1, "a": "é"}, {"z": [1, 2], "m": None}]
    p = tmp_path / "d" / "rows.jsonl"
    assert write_jsonl(p, iter(rows)) == 2
    assert p.read_bytes() == ('{"a": "é", "b": 1}\n{"m": null, "z": [1, 2]}\n').encode()
    assert read_jsonl(p) == rows
    p.write_text(p.read_text(encoding="utf-8") + "\n  \n", encoding="utf-8")   # blank lines are skipped
    assert read_jsonl(p) == rows
    assert write_jsonl(p, []) == 0 and p.read_bytes() == b"" and read_jsonl(p) == []


def test_read_jsonl_rejects_a_bad_line(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"a": 1}\nnot json\n', encoding="utf-8")
    with pytest.raises(json.JSONDecodeError):
        read_jsonl(p)


def test_write_table_csv_and_markdown(tmp_path):
    df = pd.DataFrame({"method": ["a", "b"], "auc": [0.5, 0.123456]})
    paths = write_table(df, tmp_path / "tables", "t")
    assert isinstance(paths, TablePaths) and paths == (tmp_path / "tables" / "t.csv", tmp_path / "tables" / "t.md")
    csv, md = paths
    assert csv.read_bytes() == df.to_csv(index=False).encode("utf-8")
    assert md.read_text(encoding="utf-8") == markdown_table(df) + "\n"          # the default Markdown
    assert write_table(df, tmp_path / "tables", "t", "# mine").md.read_text(encoding="utf-8") == "# mine\n"
    assert sorted(p.name for p in (tmp_path / "tables").iterdir()) == ["t.csv", "t.md"]
