"""Checks of the trusted core: the C1-C6 contract checker, the contract-violating ablation
variants (Table 4), the paper's running example, the B.5 counterexamples, small random instances
for exact checks, privacy accounting from public releases (Corollary 1, B.4) and the DP utility
frontier. Imports only ``core`` (tests/test_architecture.py, docs/architecture.md)."""
