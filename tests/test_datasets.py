"""The public loader (dpmv_lib.bench.datasets): typed objects, checksum verification, clear errors."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from dpmv_lib.bench import pairedmem as pm
from dpmv_lib.bench.benchmark import Benchmark, Pair
from dpmv_lib.bench.datasets import load_benchmark, load_gold_rules, load_policies
from dpmv_lib.core.errors import ParameterError, StoreError
from dpmv_lib.common.paths import project_root


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("data")
    pm.write_pairedmem(pm.build_pairedmem(seed=2, n_candidates_per_attribute=8, n_selected_per_attribute=4), d)
    return d


def test_load_typed(built: Path):
    b = load_benchmark("pairedmem", built)
    assert isinstance(b, Benchmark) and len(b) == 16
    p = b.pairs[0]
    assert isinstance(p, Pair) and p.track == "pairedmem"
    assert b.policy(p).name == p.policy_id
    assert len(p.turns) == 32 and p.turns[0].query.qtype in ("target", "neutral", "distractor")
    assert all(bid in b.behaviours for t in p.turns for bid in t.gold.generic)
    assert b.manifest["counts"]["selected_pairs"] == 16
    reserves = (built / "pairedmem" / "reserves.jsonl").read_text().splitlines()
    assert reserves and len(load_benchmark("pairedmem", built, include_reserves=True)) == 16 + len(reserves)
    assert set(load_policies(built)) == {f"pairedmem-t{i}" for i in range(1, 9)}
    assert "view_links" in load_gold_rules(built)


def test_checksum_mismatch_and_missing_files(built: Path, tmp_path: Path):
    d = tmp_path / "copy"
    shutil.copytree(built, d)
    with (d / "pairedmem" / "pairs.jsonl").open("a") as f:
        f.write("\n")
    with pytest.raises(StoreError, match="checksum mismatch.*python -m dpmv_lib.bench.pairedmem --build"):
        load_benchmark("pairedmem", d)
    (d / "pairedmem" / "pairs.jsonl").unlink()
    with pytest.raises(StoreError, match="missing"):
        load_benchmark("pairedmem", d)
    shutil.rmtree(d / "policy")
    with pytest.raises(StoreError, match="no manifest"):
        load_benchmark("pairedmem", d)
    with pytest.raises(StoreError, match="notebooks/01_data_construction"):
        load_benchmark("pairedmem", tmp_path / "nowhere")


def test_unknown_track(built: Path):
    with pytest.raises(ParameterError, match="unknown track"):
        load_benchmark("nope", built)


def test_committed_default_benchmark_loads():
    data = project_root() / "data"
    if not (data / "pairedmem" / "manifest.json").exists():
        pytest.skip("data/pairedmem not built")
    b = load_benchmark("pairedmem", data)
    assert len(b) == 320 and sum(len(p.turns) for p in b) == 10240
