"""The trusted core, what Theorem 1 rests on (what must be exactly right): the public policy
(``policy``) and its strict file form (``policy_json``), memory stores and adjacency (``store``),
the scorer (``scorer``), the C3 selectors, Eq. (7) and permute-and-flip (``selection``), and the
exact sampling they draw with (``sampling``), exact ledgers and budget rules (``ledger``), the
release records (``releases``), :class:`~dpmv_lib.core.memview.MemView` (``memview``) and the
attribute-decision interface (``attribute_decision``), exact transcript enumeration (``exact``),
and the shared errors, exact rationals and memo (``errors``, ``rationals``, ``memo``).

Imports no other part of dpmv_lib (docs/architecture.md; ``tests/test_architecture.py`` checks
it); outside the standard library it uses numpy only. This package module imports nothing: import
the modules themselves (the public API is :mod:`dpmv_lib`)."""
