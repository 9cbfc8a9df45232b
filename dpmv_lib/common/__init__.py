"""Leaf utilities with no knowledge of the method: project paths and the machine record.
Imports nothing of dpmv_lib (docs/architecture.md)."""
