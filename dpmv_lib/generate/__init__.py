"""Transcripts: the compared interfaces (Tables 1/8), output filters, response backends, the
generation cache and store, batch generation and the LLM writer of PairedMem. Imports only
``core``, ``common``, ``checks`` and ``bench`` (tests/test_architecture.py, docs/architecture.md)."""
