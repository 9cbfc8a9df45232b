"""Phrase banks and the fixed public policy spec of the benchmark (PairedMem S1-S4)."""
from .background import BACKGROUND
from .evidence import EVIDENCE
from .policy_spec import (ATTRIBUTE_CUES, BEHAVIOURS, GENERIC_BEHAVIOURS, INTENTS, OVERLAP_TEMPLATES,
                          POSITIONS, SLOTS, TEMPLATES, VIEWS, gold_rules_dict, template_policy_dict,
                          view_links)
from .queries import QUERIES

__all__ = ["ATTRIBUTE_CUES", "BACKGROUND", "BEHAVIOURS", "EVIDENCE", "GENERIC_BEHAVIOURS", "INTENTS",
           "OVERLAP_TEMPLATES", "POSITIONS", "QUERIES", "SLOTS", "TEMPLATES", "VIEWS", "gold_rules_dict",
           "template_policy_dict", "view_links"]
