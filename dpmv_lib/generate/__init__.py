"""Transcripts: the compared interfaces (Tables 1/8), output filters, response backends, the
generation cache and batch generation. Imports only ``core``, ``common`` and ``bench``
(docs/architecture.md)."""
