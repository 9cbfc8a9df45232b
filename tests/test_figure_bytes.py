"""Figures are written without text chunks (no matplotlib version, no time), so the same figure
gives the same bytes on every run."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

from PIL import Image  # noqa: E402

from dpmv_lib.experiments.plots import pyplot, save_figure  # noqa: E402


def _figure():
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(2, 2))
    ax.plot([0, 1, 2], [0.5, 0.52, 0.49], marker="o")
    return fig


def test_saved_png_has_no_text_chunks_and_repeats_bytes(tmp_path):
    a, b = tmp_path / "a.png", tmp_path / "sub" / "b.png"
    save_figure(_figure(), a, dpi=50)
    save_figure(_figure(), b, dpi=50)
    assert a.read_bytes() == b.read_bytes()
    info = Image.open(a).info
    assert "Software" not in info and not (set(info) - {"dpi"}), info
    for chunk in (b"tEXt", b"iTXt", b"zTXt", b"tIME"):
        assert chunk not in a.read_bytes()


def test_plain_savefig_would_name_the_version(tmp_path):
    """The check above can fail: matplotlib's default writes a Software text chunk."""
    _figure().savefig(tmp_path / "c.png", dpi=50)
    assert b"tEXt" in (tmp_path / "c.png").read_bytes()
