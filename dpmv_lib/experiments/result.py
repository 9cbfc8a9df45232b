"""What a notebook step returns: its tables, figures and finding, displayed by the cell.

A step computes, writes its full tables to ``<results_dir>/tables`` and its figures to
``<results_dir>/figures``, and returns a :class:`Result`; the notebook cell that called it ends with
the result, and Jupyter shows the title, the tables (styled), the figures and the finding, a
sentence generated from the numbers. Values that later steps need travel in ``result.data``
(``result["audit"]``)."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ..core.errors import ParameterError


@dataclass
class Result:
    """One notebook step's output.

    Attributes
    ----------
    title : str
        What the step shows (a heading line).
    finding : str
        Markdown: what we found, generated from the numbers (empty when the step only builds).
    tables : dict of str to DataFrame
        Tables shown, in order (a summary where the full table is large; the full one is written).
    figures : dict of str to Path
        PNG files shown, in order.
    notes : list of str
        Markdown lines shown between the tables and the finding (e.g. what a table ran on).
    data : dict
        Values for later steps (``result[name]``); not shown.
    precision : int
        Digits of floats in shown tables.
    """

    title: str
    finding: str = ""
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    figures: dict[str, Path] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    precision: int = 3

    def __getitem__(self, name: str) -> Any:
        try:
            return self.data[name]
        except KeyError:
            raise KeyError(f"{self.title!r} holds no {name!r}; it holds {sorted(self.data)}") from None

    def show_table(self, name: str, df: pd.DataFrame | pd.Series) -> "Result":
        if isinstance(df, pd.Series):
            df = df.to_frame()
        if not isinstance(df, pd.DataFrame):
            raise ParameterError(f"table {name!r} must be a DataFrame, got {type(df).__name__}")
        self.tables[name] = df
        return self

    def show_figure(self, name: str, path: str | Path) -> "Result":
        p = Path(path)
        if p.suffix.lower() != ".png":
            raise ParameterError(f"figure {name!r} must be a PNG file, got {p}")
        self.figures[name] = p
        return self

    def _ipython_display_(self) -> None:
        from IPython.display import Image, Markdown, display

        from .styled import styled

        display(Markdown(f"**{self.title}**"))
        for name, df in self.tables.items():
            display(styled(df, precision=self.precision, caption=name))
        for p in self.figures.values():
            display(Image(filename=str(p)))
        for line in self.notes:
            display(Markdown(line))
        if self.finding:
            display(Markdown(f"**Found.** {self.finding}"))

    def __repr__(self) -> str:
        parts = [self.title]
        parts += [f"[{name}]\n{df.to_string()}" for name, df in self.tables.items()]
        parts += [f"[figure {name}] {p}" for name, p in self.figures.items()]
        parts += self.notes
        if self.finding:
            parts.append(f"Found. {self.finding}")
        return "\n\n".join(parts)


_PLACEHOLDER = re.compile(r"\{([a-z_][a-z0-9_]*)(:[^{}]*)?\}")


def sentence(template: str, **values: Any) -> str:
    """``template`` with ``{name[:format]}`` filled from ``values``; a missing value or a NaN is an
    error naming it, so a finding never says "nan" (infinity is a value: an unbounded loss)."""
    for m in _PLACEHOLDER.finditer(template):
        if m.group(1) not in values:
            raise ParameterError(f"finding needs a value for {m.group(1)!r}")
    for k, v in values.items():
        if isinstance(v, float) and math.isnan(v):
            raise ParameterError(f"finding value {k!r} is NaN: say in words what is undefined instead")
    return template.format(**values)
