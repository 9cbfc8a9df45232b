"""The README's MemView example runs and prints exactly the output shown under it."""
from __future__ import annotations

import contextlib
import io
import re

import pandas as pd

from dpmv_lib.common.paths import project_root


def test_readme_memview_example_output_matches():
    text = (project_root() / "README.md").read_text(encoding="utf-8")
    section = text.split("## The `MemView` API", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    shown = re.search(r"```python\n.*?```.*?```\n(.*?)```", section, re.S).group(1)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(compile(code, "README.md", "exec"), {"__name__": "readme_example"})
    assert buf.getvalue().strip() == shown.strip()


def test_readme_claims_block_is_generated_from_the_committed_tables(tmp_path):
    """The README's claims summary is the output of claims_summary on the committed results."""
    from dpmv_lib.experiments import claims_summary as CS

    assert CS.main(["--check"]) == 0, "run: python -m dpmv_lib.experiments.claims_summary"
    # a changed verdict makes the block stale
    (tmp_path / "results" / "tables").mkdir(parents=True)
    pd.DataFrame({"id": ["C1"], "claim": ["a | b"], "verdict": ["INCONCLUSIVE"]}).to_csv(
        tmp_path / "results" / "tables" / "rq1_claims.csv", index=False)
    block = CS.summary_markdown(tmp_path, runs=(("x", "results"),))
    assert "| C1 | a \\| b | INCONCLUSIVE |" in block
    assert "utility_lift" not in block and CS.STARRED not in block
    # a table of point estimates only (no verdict column) is starred, and the note says why
    pd.DataFrame({"claim": ["c"], "holds": [True]}).to_csv(tmp_path / "results" / "tables" / "04_rq2_claims.csv",
                                                           index=False)
    starred = CS.summary_markdown(tmp_path, runs=(("x", "results"),))
    assert "| R1 | c | holds* |" in starred and CS.STARRED in starred
    (tmp_path / "results" / "tables" / "04_rq2_claims.csv").unlink()
    # the utility finding that notebook 03 writes above its lift table is shown beneath
    (tmp_path / "results" / "tables" / "03_utility_lift.md").write_text("Lift is small here.\n\n| a |\n|---|\n| 1 |\n")
    block = CS.summary_markdown(tmp_path, runs=(("x", "results"),))
    assert "(`results/tables/03_utility_lift.md`): Lift is small here." in block and "| 1 |" not in block


def test_the_findings_are_the_head_paragraph_of_each_run_s_table(tmp_path):
    """Each finding is the paragraph that heads its table's Markdown, from the run directory it names."""
    from dpmv_lib.experiments import claims_summary as CS

    (tmp_path / "results" / "llm" / "tables").mkdir(parents=True)
    (tmp_path / "results" / "llm" / "tables" / "03_u_label_claims.md").write_text(
        "SmolLM2 finding.\n\n| a |\n| - |\n", encoding="utf-8")
    (tmp_path / "results" / "tables").mkdir(parents=True)
    (tmp_path / "results" / "tables" / "03_u_label_claims.md").write_text("| a |\n| - |\n", encoding="utf-8")
    text = CS.findings_markdown(tmp_path, runs=(("default", "results"), ("SmolLM2 (llm)", "results/llm")))
    assert "SmolLM2 (llm)** (`results/llm/tables/03_u_label_claims.md`): SmolLM2 finding." in text
    assert "results/tables/03_u_label_claims.md" not in text      # a table without a paragraph: no finding
    assert "utility_lift" not in text                             # a missing table: left out
