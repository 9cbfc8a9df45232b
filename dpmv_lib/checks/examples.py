"""The paper's running example (Figure 2) as a tiny public policy and an adjacent store pair.

Diabetes group I_D = {1, 2, 3}, debt group I_B = {3, 4, 5}; position 3 belongs to both. The
affordable-dinner query activates the food and finance slots.
"""
from __future__ import annotations

from ..core.policy import Policy
from ..core.store import MemoryStore

RUNNING_EXAMPLE_POLICY = {
    "name": "running-example",
    "sensitivity": "0.6",
    "slots": [
        {"name": "health", "views": [
            {"id": "health.generic", "text": "Give general, widely applicable wellness guidance.", "generic": True},
            {"id": "health.glucose_aware", "text": "Favour steady-energy, blood-sugar-conscious suggestions.",
             "cues": ["a1c", "blood sugar", "metformin", "glucose"], "intents": ["checkup_prep"]},
            {"id": "health.routine", "text": "Focus on routine preventive care.",
             "cues": ["annual", "checkup", "dentist"], "intents": ["checkup_prep"]}]},
        {"name": "food", "views": [
            {"id": "food.generic", "text": "Suggest balanced, broadly suitable meals.", "generic": True},
            {"id": "food.low_sugar", "text": "Prefer blood-sugar-conscious meals: low added sugar, high fibre.",
             "cues": ["sugar", "carbs", "glucose", "a1c"], "intents": ["affordable_dinner", "meal_plan"]},
            {"id": "food.cheap", "text": "Keep ingredient costs very low; use pantry staples.",
             "cues": ["cheap", "budget", "skip restaurants"], "intents": ["affordable_dinner", "meal_plan"]},
            {"id": "food.quick", "text": "Keep preparation under 20 minutes.",
             "cues": ["busy", "quick", "late shifts"], "intents": ["meal_plan"]}]},
        {"name": "finance", "views": [
            {"id": "finance.generic", "text": "Give standard, broadly applicable money tips.", "generic": True},
            {"id": "finance.strict_budget", "text": "Assume a strict budget; prioritise essential spending.",
             "cues": ["maxed", "minimum payments", "collector", "cheap", "debt"],
             "intents": ["affordable_dinner", "budget_check"]},
            {"id": "finance.saving", "text": "Suggest standard saving and investing habits.",
             "cues": ["savings", "invest", "bonus"], "intents": ["budget_check"]}]},
        {"name": "work", "views": [
            {"id": "work.generic", "text": "Give general productivity advice.", "generic": True},
            {"id": "work.teacher", "text": "Frame suggestions around a school-year schedule.",
             "cues": ["teacher", "school"], "intents": ["weekend_plan"]}]},
    ],
    "positions": [
        {"id": 1, "slot": "health", "label": "recent health note"},
        {"id": 2, "slot": "food", "label": "eating habit"},
        {"id": 3, "slot": "food", "label": "dinner routine"},
        {"id": 4, "slot": "finance", "label": "credit status"},
        {"id": 5, "slot": "finance", "label": "payment habit"},
        {"id": 6, "slot": "work", "label": "occupation"},
    ],
    "attributes": [
        {"name": "diabetes", "group": [1, 2, 3], "cap": "2", "description": "type-2 diabetes"},
        {"name": "debt", "group": [3, 4, 5], "cap": "2", "description": "severe unsecured debt"},
    ],
    "routes": {
        "affordable_dinner": ["food", "finance"],
        "meal_plan": ["food"],
        "budget_check": ["finance"],
        "checkup_prep": ["health"],
        "weekend_plan": ["work"],
    },
}

_M = {
    1: "Doctor said my A1C is high and I started metformin.",
    2: "Trying to cut sugar and refined carbs at every meal.",
    3: "I skip restaurants and cook cheap dinners with little sugar.",
    4: "My credit cards are maxed and a collector keeps calling.",
    5: "I can only make minimum payments on my loans.",
    6: "I work as a teacher at the local school.",
}


def running_example() -> tuple[Policy, MemoryStore, MemoryStore, MemoryStore]:
    """(policy, M, M'_diabetes, M'_debt): M' removes one attribute's evidence inside its group,
    keeping the other attribute's evidence at the shared position 3."""
    policy = Policy.from_dict(RUNNING_EXAMPLE_POLICY)
    m = MemoryStore.from_policy(policy, _M, name="M")
    m_no_diabetes = m.replace({
        1: "Doctor said my bloodwork looks fine at the annual checkup.",
        2: "Trying to eat more vegetables at every meal.",
        3: "I skip restaurants and cook cheap dinners at home.",
    }, name="M' (no diabetes)")
    m_no_debt = m.replace({
        3: "I cook dinners at home with little sugar.",
        4: "My credit cards are paid off each month.",
        5: "I put part of each paycheck into savings.",
    }, name="M' (no debt)")
    return policy, m, m_no_diabetes, m_no_debt
