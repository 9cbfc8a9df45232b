"""The README's MemView example runs and prints exactly the output shown under it."""
from __future__ import annotations

import contextlib
import io
import re

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
