"""Leaf utilities with no knowledge of the method: project paths, the machine record, atomic
JSON I/O, the process pool, progress logs and the source fingerprint of results. Imports only
``core`` (its errors) (tests/test_architecture.py, docs/architecture.md)."""
