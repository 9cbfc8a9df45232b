"""benchmarks/bench_reproduce.py's memory sampler: the peak of each notebook and the
cell it was running, read from the runner's log as it grows. No timing is asserted."""
from __future__ import annotations

import os
import time

import pytest

from helpers.scripts import script_module

from dpmv_lib.common.paths import project_root


@pytest.fixture(scope="module")
def bench():
    with script_module(project_root() / "benchmarks" / "bench_reproduce.py", "bench_reproduce_under_test") as mod:
        yield mod


def _wait_for(cond, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "the sampler did not catch up with the log"
        time.sleep(0.02)


def test_peaks_are_attributed_to_the_notebook_and_cell_running(bench, tmp_path):
    log = tmp_path / "run.log"
    log.write_text("[1/2] 01_first (profile default) -> results/notebooks/01_first.ipynb\nExecuting Cell 1---\n")
    mem = bench.TreeMemory(os.getpid(), every=0.02, log=log)
    try:
        _wait_for(lambda: "01_first" in mem.by_notebook)
        with open(log, "a") as f:
            f.write("Ending Cell 1---\nExecuting Cell 4---\nsome output\n[2/2] 02_sec")   # a line still being written
        _wait_for(lambda: mem.cell == 3)
        assert mem.notebook == "01_first"
        with open(log, "a") as f:
            f.write("ond (profile default) -> x\n")
        _wait_for(lambda: "02_second" in mem.by_notebook)
    finally:
        peak_rss, peak_pss = mem.stop()
    first, second = mem.by_notebook["01_first"], mem.by_notebook["02_second"]
    assert first["cell"] in (0, 3) and second["cell"] is None     # papermill's 1-based cell -> 0-based
    assert 0 < first["pss"] <= peak_pss and 0 < second["pss"] <= peak_pss and peak_pss <= peak_rss


def test_without_a_log_only_the_totals_are_kept(bench):
    mem = bench.TreeMemory(os.getpid(), every=0.02)
    _wait_for(lambda: mem.peak_pss > 0)
    mem.stop()
    assert mem.by_notebook == {} and mem.notebook is None


def test_only_what_a_run_wrote_is_timed_and_compared(bench, tmp_path):
    """With ``--only`` the other tables and run files are the committed ones: the report must
    neither list their stages nor count them as byte-identical."""
    runs = []
    for name, started in (("a", 1_000.0), ("b", 2_000.0)):
        tables = tmp_path / name / "tables"
        tables.mkdir(parents=True)
        for f, body, mtime in (("x_run.json", '{"timings_s": {"fit": 2.5}}', started + 5),
                               ("old_run.json", '{"timings_s": {"grid": 9}}', 10.0),
                               ("fresh.csv", "auc\n0.5\n", started + 5), ("committed.csv", "auc\n0.7\n", 10.0)):
            (tables / f).write_text(body)
            os.utime(tables / f, (mtime, mtime))
        runs.append((tmp_path / name, started))
    (a, ta), (b, tb) = runs
    assert bench.stage_times(a, ta) == {"x_run": {"fit": 2.5}}
    assert set(bench.stage_times(a, None)) == {"x_run", "old_run"}
    assert [r["table"] for r in bench.compare_tables(a, b, since=(ta, tb))] == ["fresh.csv"]
    assert [r["table"] for r in bench.compare_tables(a, b)] == ["committed.csv", "fresh.csv"]


def test_stage_table_puts_each_stage_under_its_notebook(bench):
    """rq1_run.json belongs to notebook 03, NN_run.json to NN; "other cells" is the rest of the
    notebook's wall time; a notebook without a run file is one row."""
    rec = {"notebooks": [{"name": "03_rq1_privacy_utility", "wall_s": 100.0},
                         {"name": "04_rq2_safeguards", "wall_s": 50.0},
                         {"name": "06_adaptive_adversary", "wall_s": 20.0}],
           "stages": {"rq1_run": {"audit": 60.0, "judge": 10.0, "total": 70.0}, "04_run": {"audit": 30.0}}}
    t = bench.stage_table(rec)
    assert t == {("03_rq1_privacy_utility", "audit"): 60.0, ("03_rq1_privacy_utility", "judge"): 10.0,
                 ("03_rq1_privacy_utility", "other cells"): 30.0, ("04_rq2_safeguards", "audit"): 30.0,
                 ("04_rq2_safeguards", "other cells"): 20.0, ("06_adaptive_adversary", "whole notebook"): 20.0}
    assert sum(t.values()) == 170.0
