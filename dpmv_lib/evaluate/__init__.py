"""Measuring transcripts: encoders, the embedding auditor (C.5), the exact optimal auditor and
the utility judge. Never imports ``experiments`` or the runner (docs/architecture.md)."""
