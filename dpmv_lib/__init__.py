"""dpmv_lib: DP-MemView, a differentially private memory-view interface for LLM agents.

The small public API an agent builder needs::

    from dpmv_lib import Policy, MemoryStore, MemView, Query, OnlineBudget
"""
from .core.errors import (BudgetError, CorpusError, DPMVError, LedgerFormatError, LedgerIntegrityError,
                          ParameterError, PolicyError, QueryError, StoreError, UnknownAttributeError)
from .core.ledger import InMemoryLedger, OnlineBudget, PreallocatedBudget, planned_charges
from .core.memview import MemView, Release, SlotRelease
from .core.policy import Policy, Query, View
from .core.store import MemoryStore, check_adjacent, differing_positions, is_adjacent

__version__ = "0.1.0"

__all__ = [
    "BudgetError", "CorpusError", "DPMVError", "LedgerFormatError", "LedgerIntegrityError", "ParameterError", "PolicyError", "QueryError",
    "StoreError", "UnknownAttributeError", "InMemoryLedger", "OnlineBudget", "PreallocatedBudget",
    "planned_charges", "MemView", "Release", "SlotRelease", "Policy", "Query", "View", "MemoryStore",
    "check_adjacent", "differing_positions", "is_adjacent",
]
