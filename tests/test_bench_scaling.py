"""Smoke test of benchmarks/bench_scaling.py: the synthetic policy generator, one
measurement at the smallest sizes and the exponent fit on data with a known slope. No timing
is asserted (speed is measured by the benchmark, never in tests)."""
from __future__ import annotations

import json
import math

import pytest

from helpers.scripts import script_module

from dpmv_lib.common.paths import project_root
from dpmv_lib.core.errors import PolicyError, QueryError
from dpmv_lib.core.memview import MemView
from dpmv_lib.core.policy import Policy, Query


@pytest.fixture(scope="module")
def bench():
    with script_module(project_root() / "benchmarks" / "bench_scaling.py", "bench_scaling_under_test") as mod:
        yield mod


# ---- the exponent fit ----------------------------------------------------------------------------
@pytest.mark.parametrize("k", [0.0, 0.5, 1.0, 2.0, -1.0])
def test_fit_recovers_a_known_exponent(bench, k):
    xs = [4, 16, 64, 256, 1024, 4096]
    wobble = [1.03, 0.98, 1.01, 0.97, 1.02, 0.99]  # +-3% noise around c * x^k
    f = bench.fit_exponent(xs, [7.5 * x ** k * w for x, w in zip(xs, wobble)])
    assert f["exponent"] == pytest.approx(k, abs=0.02)
    assert f["x_min"] == 4 and f["x_max"] == 4096 and f["points"] == 6
    exact = bench.fit_exponent(xs, [3 * x ** k for x in xs])
    assert exact["exponent"] == pytest.approx(k, abs=1e-12)
    assert exact["r2"] == pytest.approx(1.0)


def test_fit_sees_a_bend_and_refuses_bad_input(bench):
    xs = [10, 100, 1000, 10000]
    ys = [100 + x for x in xs]  # a fixed cost, then linear: the upper half is close to 1
    up = bench.upper_half(xs)
    assert [xs[i] for i in up] == [1000, 10000]
    assert bench.fit_exponent([xs[i] for i in up], [ys[i] for i in up])["exponent"] > 0.95
    assert bench.fit_exponent(xs, ys)["exponent"] < 0.8
    for bad in (([1], [1]), ([1, 2], [1]), ([0, 2], [1, 1]), ([1, 2], [1, -1]), ([3, 3], [1, 2])):
        with pytest.raises(ValueError):
            bench.fit_exponent(*bad)
    def fits(full, upper):
        return {"full": {"exponent": full}, "upper": {"exponent": upper}}
    assert bench.verdict(1, fits(0.5, 1.1)) == "yes" and bench.verdict(1, fits(1.0, 1.3)).startswith("no")
    assert bench.verdict(0, fits(-0.1, 0.05)) == "yes" and bench.verdict(0, fits(0.4, 0.0)).startswith("no")
    assert bench.verdict(0, fits(0.05, 0.3)).startswith("no")  # a cost that appears late in the range
    assert bench.verdict(None, fits(3.0, 3.0)) == "n/a"
    assert bench.percentile([1, 2, 3, 4, 5], 0.9) == pytest.approx(4.6)


# ---- the synthetic policy -----------------------------------------------------------------------
def test_synthetic_policy_has_the_requested_shape(bench):
    p = Policy.from_dict(bench.synthetic_policy(views=5, attributes=6, positions=40, slots=3), limits=bench.LIMITS)
    active = p.route(bench.QUERY)
    assert active == ("s0", "s1", "s2")
    assert all(len(p.slot(s).views) == 5 for s in active) and len(p.attributes) == 6
    assert len(p.positions) == 40 and p.slot_names[-1] == "rest"  # 40 = 3 x 13 + 1 unread
    reads = [p.read(bench.QUERY, s) for s in active]
    assert [len(r) for r in reads] == [13, 13, 13]
    assert p.charge_set(sum(reads, ())) == frozenset(p.attribute_names)
    # a fixed small read in a big policy: the rest lies in a slot the query never activates
    q = Policy.from_dict(bench.synthetic_policy(attributes=64, positions=500, slots=4, read_per_slot=8),
                         limits=bench.LIMITS)
    read = sum((q.read(bench.QUERY, s) for s in q.route(bench.QUERY)), ())
    assert read == tuple(range(1, 33)) and len(q.charge_set(read)) == 33
    # more attributes than positions: no empty group, and the extra groups stay out of the read
    r = Policy.from_dict(bench.synthetic_policy(attributes=300, positions=200, slots=2, read_per_slot=4),
                         limits=bench.LIMITS)
    assert all(a.group for a in r.attributes)
    assert len(r.charge_set(sum((r.read(bench.QUERY, s) for s in r.route(bench.QUERY)), ()))) == 9
    with pytest.raises(ValueError):
        bench.synthetic_policy(positions=10, slots=4, read_per_slot=3)


@pytest.mark.parametrize("ledger", ["memory", "sqlite"])
def test_one_measurement_at_the_smallest_size(bench, ledger, tmp_path):
    params = {"views": 2, "attributes": 2, "positions": 4, "slots": 1}
    p = bench.measure_point(params, ledger, str(tmp_path), warmup=1, n=3, budget_s=0.0)
    assert p["releases"] == 3 and p["ledger"] == ledger
    assert p["read_positions"] == 4 and p["read_views"] == 2 and p["charged_attributes"] == 2
    assert p["mechanisms"] == ["em"]  # big caps: the charge was admitted
    for key in ("median_us", "p90_us", "min_us", "first_us", "release_peak_kib", "retained_mib"):
        assert p[key] > 0 and math.isfinite(p[key])
    assert p["min_us"] <= p["median_us"] <= p["p90_us"]


def test_quick_run_writes_its_report(bench, tmp_path):
    stem = tmp_path / "scaling_smoke"
    assert bench.main(["--quick", "--only", "views", "history", "--ledgers", "memory", "--out", str(stem)]) == 0
    res = json.loads(stem.with_suffix(".json").read_text())
    assert set(res["dimensions"]) == {"views"} and "isa" in res["machine"]["cpu"]
    fit = res["dimensions"]["views"]["fits"]["memory"]["median_us"]["full"]
    assert fit["x_min"] == 4 and fit["x_max"] == 16 and math.isfinite(fit["exponent"])
    assert [r["release"] for r in res["history"][0]["rows"]] == [10, 100]
    text = stem.with_suffix(".md").read_text()
    assert "| views | memory | 1 |" in text and "history (history list passed)" in text


# ---- the library changes this benchmark led to ---------------------------------------------------
def test_read_check_and_lookups_keep_their_answers(running, dinner):
    policy, store = running[0], running[1]
    assert policy.positions_of("food") == (2, 3) and policy.positions_of("finance") == (4, 5)
    assert policy.view("food.cheap").slot == "food"
    for bad in ("food.nope", 3, None, ["food.cheap"]):
        with pytest.raises(PolicyError, match="unknown view"):
            policy.view(bad)
    mv = MemView(policy, store, seed=0)
    rel = mv.release(dinner)
    with pytest.raises(QueryError, match="only Release objects, got str"):
        mv.release(dinner, [rel, rel, "not a release", 5])
    with pytest.raises(QueryError, match="only Release objects, got int"):
        mv.release(dinner, (rel, 5))
    assert mv.release(Query("a", "affordable_dinner"), [rel, rel]).query.text == "a"
