"""Durable ledgers (C5 across crashes, processes and machines): the hash-chained ledger and its
verifier, the SQLite and PostgreSQL backends, group commit, the hash chain, the records, replay
and state export/import, the rollback witness, and the process id kept across ``fork()``.
Implements :class:`dpmv_lib.core.ledger.Ledger`; imports only :mod:`dpmv_lib.core`. See
docs/deployment.md."""
