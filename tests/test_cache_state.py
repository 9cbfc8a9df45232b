"""Same parameters, same tables, from any cache state: notebooks 03-05 on the smoke profile run
twice into one results directory (the first run with empty caches, the second reusing every cache
the first wrote) give byte-identical tables and figures. Only the wall times in ``*_run.json``
may differ. (The ``*_instruments`` tables name the commit and whether the tree is clean: a commit
made between the two runs shows there, as it should.)"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from dpmv_lib import run as runner

WALL_TIMES = ("timings_s", "total_s")


def _snapshot(results: Path) -> dict[str, bytes]:
    out = {}
    for sub in ("tables", "figures", "grids"):
        for f in sorted((results / sub).rglob("*")):
            if not f.is_file():
                continue
            data = f.read_bytes()
            if f.name.endswith("_run.json"):
                body = {k: v for k, v in json.loads(data).items() if k not in WALL_TIMES}
                data = json.dumps(body, sort_keys=True).encode()
            out[str(f.relative_to(results))] = data
    return out


def test_snapshot_ignores_wall_times_only(tmp_path):
    (tmp_path / "tables").mkdir()
    f = tmp_path / "tables" / "04_run.json"
    f.write_text(json.dumps({"T": 16, "timings_s": {"audit": 1.0}, "total_s": 2.0}))
    a = _snapshot(tmp_path)
    f.write_text(json.dumps({"T": 16, "timings_s": {"audit": 9.0}, "total_s": 3.0}))
    assert _snapshot(tmp_path) == a
    f.write_text(json.dumps({"T": 32, "timings_s": {"audit": 9.0}, "total_s": 3.0}))
    assert _snapshot(tmp_path) != a


@pytest.mark.slow
def test_cold_and_warm_smoke_runs_write_the_same_bytes(tmp_path):
    rd = tmp_path / "results"
    args = ["--profile", "smoke", "--only", "03", "04", "05", "--results-dir", str(rd)]
    assert runner.main(args) == 0
    cold = _snapshot(rd)
    assert any(k.startswith("tables/") for k in cold) and any(k.startswith("figures/") for k in cold)
    assert list((rd / "cache" / "transcripts").glob("*.parquet"))          # the warm run has caches to reuse
    assert runner.main(args) == 0
    warm = _snapshot(rd)
    assert warm.keys() == cold.keys()
    assert [k for k in cold if cold[k] != warm[k]] == []
