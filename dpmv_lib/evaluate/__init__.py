"""Measuring transcripts: encoders, the embedding auditor (C.5), the exact optimal auditor and
the utility judge. Imports only ``core``, ``common``, ``checks``, ``bench`` and ``generate``; never
``ledgers``, ``experiments`` or the runner (tests/test_architecture.py, docs/architecture.md)."""
