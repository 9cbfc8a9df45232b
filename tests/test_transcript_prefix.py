"""Notebooks 03, 04 and 05 make DP-MemView transcripts under the same settings (B_a = 2, K = 3,
plan horizon 16) for different lengths (03 and 05: T = 16; 04: T_max = 32). A transcript's first 16
turns do not depend on how many turns follow, and 03's responder (built from both tracks'
policies) answers PairedMem prompts as 04's does: so the first 16 turns of 04's table are 03's
PairedMem rows, column for column (what a shared transcript cache may rely on)."""
from __future__ import annotations

import pytest

from dpmv_lib.experiments import pipeline
from dpmv_lib.experiments.common import ExperimentConfig
from dpmv_lib.experiments.profiles import get_profile
from dpmv_lib.experiments.rq1 import load_tracks
from dpmv_lib.generate.generation import InterfaceParams, generate_transcripts
from dpmv_lib.generate.responders import make_responder

KEY = ["method", "pair_id", "side", "seed", "turn"]
METHODS = ["DP-MemView (on)", "DP-MemView (pre)"]


@pytest.fixture(scope="module")
def tables():
    prof = get_profile("smoke")
    benches = load_tracks("data", prof, 0)
    r03 = make_responder("surrogate", [p for b in benches.values() for p in b.policies.values()], salt=0)
    t03 = generate_transcripts(benches["pairedmem"], r03, METHODS, seeds=prof.em_seeds, turns=16,
                               params=InterfaceParams(B_a=2, K=3, plan_horizon=16), progress=False)
    cfg = ExperimentConfig(profile="smoke", progress=False)
    bench = pipeline.load_pairs(cfg, prof)
    r04 = pipeline.make_surrogate_or_profile_responder(prof, bench, 0)
    t04 = generate_transcripts(bench, r04, METHODS, seeds=prof.em_seeds, turns=32,
                               params=InterfaceParams(B_a=2, K=3, plan_horizon=16), progress=False)
    return t03, t04, r03, r04


def test_first_16_of_32_turns_are_the_16_turn_transcripts(tables):
    t03, t04, r03, r04 = tables
    assert r03.identity() == r04.identity()
    head = t04[t04["turn"] < 16].sort_values(KEY).reset_index(drop=True)
    t03 = t03.sort_values(KEY).reset_index(drop=True)
    assert len(head) == len(t03) > 0 and list(head.columns) == list(t03.columns)
    assert head.astype(str).equals(t03.astype(str))


def test_a_different_plan_horizon_changes_the_preallocated_transcripts(tables):
    """The check above can fail: with the plan horizon set to the length (32, as a T = 32 run
    with plan = T would), the preallocated budget plans other charges and the rows differ."""
    t03, _, _, r04 = tables
    bench = pipeline.load_pairs(ExperimentConfig(profile="smoke", progress=False), get_profile("smoke"))
    t32 = generate_transcripts(bench, r04, ["DP-MemView (pre)"], seeds=get_profile("smoke").em_seeds, turns=32,
                               params=InterfaceParams(B_a=2, K=3, plan_horizon=32), progress=False)
    head = t32[t32["turn"] < 16].sort_values(KEY).reset_index(drop=True)
    pre = t03[t03["method"] == "DP-MemView (pre)"].sort_values(KEY).reset_index(drop=True)
    assert not head.astype(str).equals(pre.astype(str))
