"""The trusted interface (what must be exactly right): public policy and stores, the scorer,
the Eq. (7) selectors, exact ledgers and budget rules, :class:`~dpmv_lib.core.memview.MemView`,
the contract checker, exact accounting, the durable ledgers and the paper's constructions.
Imports nothing else of dpmv_lib (docs/architecture.md)."""
