"""Tables for the notebooks as styled HTML (pandas Styler) instead of raw text.

:func:`styled` formats numbers to a fixed precision, hides the default integer index, adds a
caption and a light zebra style; JupyterLab renders it as an HTML ``<table>`` and plain-text
frontends (papermill logs) still get a readable text fallback.
"""
from __future__ import annotations

from typing import Any

import pandas as pd

from ..core.errors import ParameterError

TABLE_STYLES = [
    {"selector": "caption", "props": "caption-side: top; text-align: left; font-weight: bold; padding: 4px 0;"},
    {"selector": "th", "props": "background: #eef2f7; text-align: center; padding: 3px 8px;"},
    {"selector": "td", "props": "padding: 2px 8px; font-variant-numeric: tabular-nums;"},
    {"selector": "tbody tr:nth-child(even)", "props": "background: #f8f9fb;"},
]


class StyledTable:
    """A pandas Styler with a text fallback (``text/plain``) for non-HTML frontends."""

    def __init__(self, frame: pd.DataFrame, styler: Any):
        self.frame, self.styler = frame, styler

    def _repr_html_(self) -> str:
        return self.styler.to_html()

    def __repr__(self) -> str:
        return self.frame.to_string()

    def to_html(self) -> str:
        return self.styler.to_html()


def styled(df: pd.DataFrame | pd.Series, *, precision: int = 4, caption: str | None = None,
           index: bool | None = None) -> StyledTable:
    """``df`` as a styled HTML table: floats to ``precision`` digits, booleans as is, the index
    shown unless it is the default RangeIndex (or ``index`` says otherwise)."""
    if isinstance(df, pd.Series):
        df = df.to_frame()
    if not isinstance(df, pd.DataFrame):
        raise ParameterError(f"styled() needs a DataFrame or Series, got {type(df).__name__}")
    if isinstance(precision, bool) or not isinstance(precision, int) or precision < 0:
        raise ParameterError(f"precision must be an int >= 0, got {precision!r}")
    show_index = (not isinstance(df.index, pd.RangeIndex)) if index is None else bool(index)
    floats = [c for c in df.columns if pd.api.types.is_float_dtype(df[c])]
    sty = df.style.format({c: f"{{:.{precision}f}}" for c in floats}, na_rep="–")
    sty = sty.set_table_styles(TABLE_STYLES)
    if not show_index:
        sty = sty.hide(axis="index")
    if caption:
        sty = sty.set_caption(caption)
    return StyledTable(df, sty)

