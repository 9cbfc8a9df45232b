"""What the notebooks use, in one import: ``from dpmv_lib.experiments.prelude import *``.

In the spirit of opendp's ``prelude``: this module defines nothing, it only re-exports. Every name
below keeps its one home (the module it is imported from, where its documentation lives); the
prelude just saves a notebook's first cell a dozen import lines and one-letter aliases.

Two kinds of names:

* **modules**, used qualified, for the experiment steps whose functions have short names that only
  make sense with their module (``rq2.table4``, ``sensitivity.cached_grid``, ``verdicts.claims_markdown``,
  ``adversary.attack_table``, ``playground.replay``, ...);
* **functions and classes** with names that stand alone (``write_table``, ``markdown_table``,
  ``get_profile``, ``load_benchmark``, ``run_audit``, ``make_judge``, ``styled``, ...).

A name here never equals a notebook parameter or a variable a notebook assigns (checked by
tests/test_prelude.py), so ``import *`` shadows nothing. Importing the prelude loads every module
below: a notebook's fingerprint (:mod:`dpmv_lib.common.fingerprint`) then covers all of them.
"""
from __future__ import annotations

from ..bench.datasets import load_benchmark, load_gold_rules
from ..common.paths import resolve
from ..core.policy import Query
from ..evaluate import judge_agreement, u_validity
from ..evaluate.audit import AuditConfig, run_audit
from ..evaluate.judge import make_judge, score_transcripts, summarise_utility
from ..generate.interfaces import RQ1_METHODS
from . import (adversary, budget_explorer, instruments, interface_rows, pipeline, playground, playground_widget,
               plots, rq2, rq2_horizon, rq2_score, rq2_support, samples, sensitivity, utility_decomposition,
               utility_frontier, utility_lift, verdicts)
from .auditor_power import auditor_power, power_figure, power_table
from .common import ExperimentConfig, Timer, load_paper_csv, markdown_table, paper_figure, run_encoder
from .judge_degradation import evaluate_judge
from .judge_restatement import restatement_report
from .profiles import get_profile
from .rq1 import RQ1Config, responder_specs, run_rq1, select_pairs
from .styled import styled
from .tables import comparison_markdown, oracle_markdown, table2_markdown, write_table

__all__ = [
    # modules (used qualified)
    "adversary", "budget_explorer", "instruments", "interface_rows", "judge_agreement", "pipeline", "playground",
    "playground_widget", "plots", "rq2", "rq2_horizon", "rq2_score", "rq2_support", "samples",
    "sensitivity", "u_validity", "utility_decomposition", "utility_frontier", "utility_lift", "verdicts",
    # data and paths
    "Query", "load_benchmark", "load_gold_rules", "resolve", "RQ1_METHODS",
    # run settings, timing, the paper's reference tables
    "ExperimentConfig", "Timer", "get_profile", "load_paper_csv", "paper_figure", "run_encoder",
    # RQ1 (notebook 03)
    "RQ1Config", "run_rq1", "select_pairs", "responder_specs",
    # auditor and judge
    "AuditConfig", "run_audit", "auditor_power", "power_table", "power_figure",
    "make_judge", "score_transcripts", "summarise_utility", "evaluate_judge", "restatement_report",
    # result tables
    "write_table", "markdown_table", "styled", "table2_markdown", "comparison_markdown", "oracle_markdown",
]
