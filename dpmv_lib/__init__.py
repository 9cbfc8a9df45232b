"""dpmv_lib: DP-MemView, a differentially private memory-view interface for LLM agents.

The small public API an agent builder needs::

    from dpmv_lib import Policy, MemoryStore, MemView, Query, OnlineBudget

Every bad input raises a :class:`DPMVError` (a ``ValueError``) naming the problem; an argument of
the wrong type raises the ``*TypeError`` class of its domain (``PolicyTypeError``, ...), which is
also a ``TypeError`` and the domain error (``PolicyError``).
"""
from .core.errors import (BudgetError, BudgetTypeError, CorpusError, DPMVError, DPMVTypeError, LedgerFormatError,
                          LedgerIntegrityError, ParameterError, ParameterTypeError, PolicyError, PolicyTypeError,
                          QueryError, QueryTypeError, StoreError, StoreTypeError, UnknownAttributeError)
from .core.ledger import InMemoryLedger, OnlineBudget, PreallocatedBudget, planned_charges
from .core.memview import MemView
from .core.policy import Policy, Query, View
from .core.releases import PreparedSlot, Release, SlotPlan, SlotRelease
from .core.store import MemoryStore, check_adjacent, differing_positions, is_adjacent

__version__ = "0.1.0"

__all__ = [
    "BudgetError", "CorpusError", "DPMVError", "LedgerFormatError", "LedgerIntegrityError", "ParameterError",
    "PolicyError", "QueryError",
    "DPMVTypeError", "BudgetTypeError", "ParameterTypeError", "PolicyTypeError", "QueryTypeError", "StoreTypeError",
    "StoreError", "UnknownAttributeError", "InMemoryLedger", "OnlineBudget", "PreallocatedBudget",
    "planned_charges", "MemView", "Release", "SlotRelease", "SlotPlan", "PreparedSlot", "Policy", "Query", "View",
    "MemoryStore",
    "check_adjacent", "differing_positions", "is_adjacent",
]
