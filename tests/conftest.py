"""Shared fixtures (keep small; other test modules may add their own)."""
from __future__ import annotations

import pytest

from dpmv_lib.examples import RUNNING_EXAMPLE_POLICY, running_example
from dpmv_lib.policy import Query


@pytest.fixture
def running():
    """(policy, M, M'_diabetes, M'_debt) of the paper's Figure 2."""
    return running_example()


@pytest.fixture
def policy_dict():
    """A fresh, mutable copy of the running example's policy JSON."""
    import copy
    return copy.deepcopy(RUNNING_EXAMPLE_POLICY)


@pytest.fixture
def dinner() -> Query:
    return Query("Any ideas for an affordable dinner?", "affordable_dinner")
