"""The trusted core, what Theorem 1 rests on (what must be exactly right): the public policy and
its strict format, memory stores and adjacency, the scorer, the Eq. (7) selectors and their
exact samplers, exact ledgers and budget rules, :class:`~dpmv_lib.core.memview.MemView`, and
exact transcript enumeration. Imports nothing else of dpmv_lib (docs/architecture.md)."""
