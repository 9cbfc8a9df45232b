"""The notebooks' namespace (``import dpmv_lib.experiments as dx``), the step result and the run."""
import json
import math
from pathlib import Path

import pandas as pd
import pytest

import dpmv_lib
import dpmv_lib.experiments as dx
from dpmv_lib.common import fingerprint
from dpmv_lib.core.errors import ParameterError

PKG = Path(dpmv_lib.__file__).parent


def _notebook(tmp_path, *cells):
    nb = {"cells": [{"cell_type": "code", "source": c, "metadata": {}, "outputs": []} for c in cells],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    p = tmp_path / "nb.ipynb"
    p.write_text(json.dumps(nb))
    return p


def test_namespace_loads_submodules_on_use_and_names_a_missing_one():
    assert dx.rq2.__name__ == "dpmv_lib.experiments.rq2"
    assert "rq2" in dir(dx) and "session" in dir(dx)
    with pytest.raises(AttributeError, match="no module 'nosuch'"):
        dx.nosuch  # noqa: B018


def test_fingerprint_sees_the_modules_a_notebook_reaches_through_dx(tmp_path):
    nb = _notebook(tmp_path, "import dpmv_lib.experiments as dx\n", "r = dx.rq2.table4(run)\nr\n",
                   "x = other.rq1\n")
    used = fingerprint.notebook_imports(nb, PKG)
    assert "dpmv_lib.experiments.rq2" in used and "dpmv_lib.experiments" in used
    assert "dpmv_lib.experiments.rq1" not in used          # ``other`` is not the namespace
    closure = fingerprint.module_closure(used, PKG)
    assert "dpmv_lib.experiments.common" in closure       # rq2's own imports follow


def test_result_shows_tables_figures_and_finding(tmp_path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots()
    ax.plot([0, 1])
    png = tmp_path / "f.png"
    fig.savefig(png)
    r = dx.result.Result("Table", finding="it holds", data={"n": 3})
    r.show_table("t", pd.DataFrame({"a": [1.23456]})).show_figure("f", png)
    assert r["n"] == 3
    with pytest.raises(KeyError, match="holds no 'm'"):
        r["m"]
    with pytest.raises(ParameterError, match="must be a PNG"):
        r.show_figure("g", tmp_path / "g.svg")
    text = repr(r)
    assert "1.23456" in text and "Found. it holds" in text and "f.png" in text
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output
    InteractiveShell.instance()
    with capture_output() as cap:
        r._ipython_display_()
    kinds = [set(o.data) for o in cap.outputs]
    assert any("image/png" in k for k in kinds) and any("text/html" in k for k in kinds)


def test_sentence_refuses_nan_and_missing_values():
    assert dx.result.sentence("AUC {auc:.3f}, loss {loss}", auc=0.5, loss=math.inf) == "AUC 0.500, loss inf"
    with pytest.raises(ParameterError, match="'auc' is NaN"):
        dx.result.sentence("AUC {auc:.3f}", auc=math.nan)
    with pytest.raises(ParameterError, match="needs a value for 'auc'"):
        dx.result.sentence("AUC {auc:.3f}")


def test_session_splits_parameters_and_checks_the_notebook(tmp_path):
    run = dx.session.start("04", profile="smoke", results_dir=str(tmp_path), T=8, T_max=16, label="x")
    assert (run.cfg.T, run.cfg.T_max, run.params) == (8, 16, {"label": "x"})
    paths = run.write_table("04_t", pd.DataFrame({"a": [1]}))
    assert paths.csv.read_text() == "a\n1\n" and run.figure_path("04_f") == tmp_path / "figures" / "04_f.png"
    assert "s on profile smoke" in run.timings().finding
    with pytest.raises(ParameterError, match="two-digit number"):
        dx.session.start("4")


def test_session_log_prints_only_when_interactive(tmp_path, capsys):
    dx.session.start("04", profile="smoke", results_dir=str(tmp_path)).log("[cache] reused")
    assert capsys.readouterr().out == ""
    dx.session.start("04", profile="smoke", results_dir=str(tmp_path), interactive=True).log("[cache] reused")
    assert capsys.readouterr().out == "[cache] reused\n"
