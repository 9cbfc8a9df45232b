"""Phrase banks and the fixed public policy spec of the benchmark (PairedMem S1-S4)."""
from .policy_spec import (ATTRIBUTE_CUES, BEHAVIOURS, GENERIC_BEHAVIOURS, INTENTS, OVERLAP_TEMPLATES,
                          POSITIONS, SLOTS, TEMPLATES, VIEWS, gold_rules_dict, template_policy_dict,
                          view_links)
from .compose import NEUTRAL_REASONS, POSITION_PARTS, REASONS
from .queries import QUERIES, query_variants

__all__ = ["ATTRIBUTE_CUES", "BEHAVIOURS", "GENERIC_BEHAVIOURS", "INTENTS",
           "OVERLAP_TEMPLATES", "POSITIONS", "QUERIES", "SLOTS", "TEMPLATES", "VIEWS", "gold_rules_dict",
           "template_policy_dict", "view_links", "NEUTRAL_REASONS", "POSITION_PARTS", "REASONS",
           "query_variants"]
