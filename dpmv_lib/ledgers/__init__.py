"""Durable ledgers (C5 across crashes, processes and machines): SQLite, PostgreSQL, group
commit, the hash chain and its verification, records and replay, the rollback witness. Built on
:mod:`dpmv_lib.core.ledger`; see docs/deployment.md."""
