"""A small synthetic Benchmark built from the paper's running example (Figure 2), for the
interface/generation tests (no dependency on the generated data under data/)."""
from __future__ import annotations

from dpmv_lib.bench.benchmark import Benchmark, Behaviour, GoldTurn, Pair, Turn
from dpmv_lib.checks.examples import running_example
from dpmv_lib.core.policy import Query

# (text, intent, qtype): 8 target-relevant, 4 same-domain neutral, 4 distractor per 16-turn block
_BLOCK = [
    ("Any ideas for an affordable dinner tonight?", "affordable_dinner", "target"),
    ("Can you plan my meals for the week?", "meal_plan", "target"),
    ("How should I prepare for my checkup?", "checkup_prep", "target"),
    ("What's a cheap dinner I can cook fast?", "affordable_dinner", "target"),
    ("Help me plan lunches for the next few days.", "meal_plan", "target"),
    ("What should I ask at my next appointment?", "checkup_prep", "target"),
    ("Give me a budget-friendly dinner idea.", "affordable_dinner", "target"),
    ("Plan a simple breakfast routine for me.", "meal_plan", "target"),
    ("Is my monthly budget on track?", "budget_check", "neutral"),
    ("How can I review my spending this month?", "budget_check", "neutral"),
    ("What should I check in my budget this week?", "budget_check", "neutral"),
    ("Any tips for tracking expenses?", "budget_check", "neutral"),
    ("What could I do this weekend?", "weekend_plan", "distractor"),
    ("Suggest a relaxing weekend activity.", "weekend_plan", "distractor"),
    ("How do I plan a fun Saturday?", "weekend_plan", "distractor"),
    ("Any ideas for a Sunday outing?", "weekend_plan", "distractor"),
]


def toy_benchmark(n_copies: int = 1) -> Benchmark:
    """Two pairs per copy: (M, M'_diabetes) and (M, M'_debt), each with a 32-turn trajectory."""
    policy, m, m_nd, m_nb = running_example()
    rows = _BLOCK + _BLOCK[8:] + _BLOCK[:8]  # second block: same families, another order
    turns = []
    for i, (text, intent, qtype) in enumerate(rows):
        slot = policy.route(Query(text, intent, qtype))[0]
        gold = GoldTurn(("b.target",) if qtype == "target" else (),
                        ("b.unsup",) if qtype == "target" else (), ("b.generic",))
        turns.append(Turn(i, i // 16, Query(text, intent, qtype), slot, gold))
    pairs = []
    for c in range(n_copies):
        for attr, mp, split in (("diabetes", m_nd, "train"), ("debt", m_nb, "test")):
            pairs.append(Pair(f"toy-{attr}-{c}", "pairedmem", attr, "running-example", "running-example",
                              True, split, m, mp, tuple(turns)))
    behaviours = {"b.target": Behaviour("b.target", "target_required", "uses supported target needs"),
                  "b.unsup": Behaviour("b.unsup", "unsupported", "assumes an unsupported target need"),
                  "b.generic": Behaviour("b.generic", "generic", "answers the question")}
    return Benchmark("pairedmem", {"running-example": policy}, tuple(pairs), behaviours)
