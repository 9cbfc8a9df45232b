"""Typed errors. Every bad input gets one of these with a message naming the problem."""
from __future__ import annotations

import reprlib
from typing import Any


class DPMVError(ValueError):
    """Base class for all dpmv errors (a ValueError, so generic handlers still catch it)."""


class DPMVTypeError(DPMVError, TypeError):
    """An argument of the wrong type. A TypeError, and a DPMVError like every dpmv error; each
    domain has its own (``PolicyTypeError`` is both a PolicyError and a DPMVTypeError)."""


class PolicyError(DPMVError):
    """The public policy is malformed (unknown position, missing generic view, bad cap...)."""


class StoreError(DPMVError):
    """A memory store does not match the policy layout or is not adjacent as claimed."""


class UnknownAttributeError(PolicyError, KeyError):
    """An attribute name that the policy does not define."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class QueryError(DPMVError):
    """A query or released history that the policy cannot route."""


class BudgetError(DPMVError):
    """A budget rule or ledger operation is invalid (not the silent cap fallback, which is normal)."""


class LedgerIntegrityError(BudgetError):
    """A durable ledger's stored totals, hash-chained audit log or key do not verify (tampering,
    a lost or edited record, a wrong key); the ledger is refused and nothing is written."""


class LedgerRollbackError(LedgerIntegrityError):
    """A ledger's chain is behind its rollback witness (records deleted from the end, a truncated
    file or write-ahead log, an old copy restored): acknowledged charges are missing."""


class LedgerFormatError(LedgerIntegrityError):
    """A ledger database written in an older (or unknown) on-disk format version."""


class ParameterError(DPMVError):
    """A bad parameter value (non-finite epsilon, unknown profile, ...)."""


class CorpusError(DPMVError):
    """A corpus file needed for the transfer track is missing or unreadable."""


class GenerationError(DPMVError):
    """A response backend or the generation cache failed (HTTP status, timeout, bad model path...)."""


class PolicyTypeError(PolicyError, DPMVTypeError):
    """A policy argument of the wrong type (e.g. MemView given something that is not a Policy)."""


class StoreTypeError(StoreError, DPMVTypeError):
    """A store argument of the wrong type."""


class QueryTypeError(QueryError, DPMVTypeError):
    """A query, slot name or released history of the wrong type."""


class BudgetTypeError(BudgetError, DPMVTypeError):
    """A budget rule, ledger, scorer or amount of the wrong type."""


class ParameterTypeError(ParameterError, DPMVTypeError):
    """A parameter of the wrong type (e.g. a seed that is not an integer)."""


_TYPE_ERRORS: dict[type[Exception], type[Exception]] = {
    DPMVError: DPMVTypeError, PolicyError: PolicyTypeError, StoreError: StoreTypeError, QueryError: QueryTypeError,
    BudgetError: BudgetTypeError, ParameterError: ParameterTypeError}


def type_error_for(error: type[Exception]) -> type[Exception]:
    """The wrong-type twin of a domain error class (``PolicyError`` -> ``PolicyTypeError``, ...).

    Helpers that take the domain error class as an argument raise this for an argument of the
    wrong type, so that the error is a ``TypeError`` and still the domain error.

    Parameters
    ----------
    error : type
        A domain error class, e.g. :class:`BudgetError`.

    Returns
    -------
    type
        Its ``*TypeError`` subclass, or ``error`` itself when it has none (e.g. a subclass such
        as :class:`LedgerIntegrityError`, or a class from outside dpmv).
    """
    return _TYPE_ERRORS.get(error, error)


_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 60
_REPR.maxlevel = 3


def short_repr(x: Any) -> str:
    """A short, recursion-safe repr for error messages (hostile values can be huge or deep).

    Parameters
    ----------
    x : object
        Any value.

    Returns
    -------
    str
        At most about 60 characters per string or object, three levels deep.
    """
    if isinstance(x, int) and x.bit_length() > 256:
        return f"<{type(x).__name__} of {x.bit_length()} bits>"
    try:
        return _REPR.repr(x)
    except Exception:  # a hostile __repr__, or an int over Python's digit limit inside a container
        return f"<{type(x).__name__}>"
