"""The paper's experiments as notebook-callable pipelines: shared configuration and timing,
RQ1 (Table 2), RQ2 (Table 4), budget sensitivity (Table 3), diagnostics, the adaptive
adversary, tables, figures and the named profiles (docs/architecture.md)."""
