"""The benchmark: record types, PairedMem (S1-S4), the public-corpus transfer track, the phrase
bank and the benchmark's quality audit. Imports only ``core``, ``common`` and ``checks``
(tests/test_architecture.py, docs/architecture.md)."""
