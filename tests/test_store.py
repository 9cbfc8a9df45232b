"""Memory stores on the policy layout, adjacency M ~_a M' and the differing positions D."""
from __future__ import annotations

import pytest

from dpmv_lib.core.errors import StoreError, UnknownAttributeError
from dpmv_lib.core.memview import MemView
from dpmv_lib.core.store import (MemoryStore, adjacency_problem, check_adjacent, differing_positions,
                            is_adjacent)


def test_running_example_pairs_are_adjacent_for_their_attribute_only(running):
    policy, m, m_d, m_b = running
    assert differing_positions(m, m_d) == {1, 2, 3}
    assert differing_positions(m, m_b) == {3, 4, 5}
    assert is_adjacent(m, m_d, policy, "diabetes") and is_adjacent(m_d, m, policy, "diabetes")
    assert is_adjacent(m, m_b, policy, "debt") and is_adjacent(m_b, m, policy, "debt")
    assert not is_adjacent(m, m_d, policy, "debt")
    assert not is_adjacent(m, m_b, policy, "diabetes")
    assert is_adjacent(m, m, policy, "debt")  # D empty
    with pytest.raises(StoreError, match=r"not adjacent w.r.t. 'debt'.*positions \[1, 2\] outside I_debt"):
        check_adjacent(m, m_d, policy, "debt")
    with pytest.raises(UnknownAttributeError, match="cancer"):
        check_adjacent(m, m_d, policy, "cancer")


def test_store_missing_or_extra_positions(running):
    policy, m, _, _ = running
    contents = dict(m.contents)
    del contents[4]
    with pytest.raises(StoreError, match=r"no content for positions \[4\]"):
        MemoryStore.from_policy(policy, contents, "broken")
    with pytest.raises(StoreError, match=r"contents at positions \[9\] outside its layout"):
        MemoryStore.from_policy(policy, {**m.contents, 9: "x"})
    with pytest.raises(StoreError, match=r"content at position 2 must be a string, got int"):
        MemoryStore.from_policy(policy, {**m.contents, 2: 7})
    with pytest.raises(StoreError, match=r"layout repeats a position id"):
        MemoryStore(((1, "a"), (1, "b")), {1: ""})


def test_replace_and_read(running):
    _, m, _, _ = running
    m2 = m.replace({2: "new"})
    assert m2.contents[2] == "new" and m.contents[2] != "new"  # frozen: m unchanged
    assert differing_positions(m, m2) == {2}
    assert m.read((3, 1)) == (m.contents[3], m.contents[1])
    with pytest.raises(StoreError, match=r"cannot replace unknown position 9"):
        m.replace({9: "x"})
    with pytest.raises(StoreError, match=r"read of unknown position 9"):
        m.read((1, 9))


def test_layout_mismatch(running, policy_dict):
    from dpmv_lib.core.policy import Policy
    policy, m, _, _ = running
    policy_dict["positions"][1]["slot"] = "health"  # position 2 moves to another slot
    other = Policy.from_dict(policy_dict)
    with pytest.raises(StoreError, match="layout does not match policy"):
        m.check_layout(other)
    with pytest.raises(StoreError, match="layout does not match policy"):
        MemView(other, m)
    m_other = MemoryStore.from_policy(other, m.contents)
    with pytest.raises(StoreError, match="different layouts"):
        differing_positions(m, m_other)
    assert adjacency_problem(m, m_other, policy, "diabetes") == "the stores do not share the policy's layout"
