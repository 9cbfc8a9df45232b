"""The papermill runner (dpmv_lib.run): argument errors, parameter parsing, the manifest.

Uses tiny throwaway notebooks written into tmp dirs (never the project's notebooks)."""
from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from dpmv_lib import run as runner
from dpmv_lib.core.errors import ParameterError
from dpmv_lib.common.machine import cpu_info
from dpmv_lib.common.paths import project_root
from dpmv_lib.experiments.profiles import PROFILES

PARAMS_CELL = ("profile = 'default'\nseed = 0\nresults_dir = 'results'\nINTERACTIVE = True\n"
               "x: int = 1\nlabel = 'a'")
RECORD_CELL = ("import json, os, pathlib\n"
               "pathlib.Path(results_dir).mkdir(parents=True, exist_ok=True)\n"
               "pathlib.Path(results_dir, NAME + '.json').write_text(json.dumps(\n"
               "    {'profile': profile, 'seed': seed, 'results_dir': results_dir, 'x': x,\n"
               "     'label': label, 'INTERACTIVE': INTERACTIVE, 'cwd': os.getcwd(),\n"
               "     'progress_log': os.environ.get('DPMV_PROGRESS_LOG')}))")


def write_notebook(path: Path, *, fail: bool = False, params: str = PARAMS_CELL) -> Path:
    nb = nbformat.v4.new_notebook()
    pcell = nbformat.v4.new_code_cell(params)
    pcell.metadata["tags"] = ["parameters"]
    cells = [nbformat.v4.new_markdown_cell("# throwaway"), pcell,
             nbformat.v4.new_code_cell(f"NAME = {path.stem!r}\n" + RECORD_CELL)]
    if fail:
        cells.append(nbformat.v4.new_code_cell("raise RuntimeError('deliberate failure')"))
    nb.cells = cells
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, str(path))
    return path


@pytest.fixture
def nbdir(tmp_path: Path) -> Path:
    d = tmp_path / "nbs"
    d.mkdir()
    write_notebook(d / "01_alpha.ipynb")
    write_notebook(d / "02_beta.ipynb")
    (d / "scratch.ipynb").write_text("{}")  # not NN_*: ignored
    return d


# ---- errors before anything runs -------------------------------------------------------------
def test_unknown_profile_exits_2_and_lists_profiles(nbdir, capsys):
    rc = runner.main(["--profile", "nope", "--notebooks-dir", str(nbdir)])
    err = capsys.readouterr().err
    assert rc == 2
    assert "unknown profile 'nope'" in err
    for name in PROFILES:
        assert name in err


def test_unknown_notebook_exits_2_and_lists_notebooks(nbdir, tmp_path, capsys):
    rc = runner.main(["--profile", "smoke", "--only", "07", "--notebooks-dir", str(nbdir),
                      "--results-dir", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert rc == 2
    assert "unknown notebook '07'" in err and "01_alpha" in err and "02_beta" in err
    assert not (tmp_path / "r" / "manifest.json").exists()


def test_cli_entry_point_exit_code(nbdir):
    r = subprocess.run([sys.executable, "-m", "dpmv_lib.run", "--profile", "nope",
                        "--notebooks-dir", str(nbdir)], capture_output=True, text=True,
                       cwd=project_root(), timeout=120)
    assert r.returncode == 2
    assert "valid profiles: " + ", ".join(PROFILES) in r.stderr


def test_override_not_declared_anywhere_is_an_error(nbdir, tmp_path, capsys):
    rc = runner.main(["--profile", "smoke", "--notebooks-dir", str(nbdir), "--results-dir",
                      str(tmp_path / "r"), "-p", "typo_key", "3"])
    err = capsys.readouterr().err
    assert rc == 2 and "typo_key" in err and "available" in err and "'x'" in err


@pytest.mark.parametrize("key", ["profile", "seed", "results_dir"])
def test_reserved_keys_need_their_flags(key):
    with pytest.raises(ParameterError, match="--" + key.replace("_", "-")):
        runner.parse_overrides([(key, "1")])


@pytest.mark.parametrize("key", ["1abc", "a-b", "class", ""])
def test_override_key_must_be_identifier(key):
    with pytest.raises(ParameterError, match="identifier"):
        runner.parse_overrides([(key, "1")])


def test_bad_notebooks_dir(tmp_path):
    with pytest.raises(ParameterError, match="does not exist"):
        runner.discover_notebooks(tmp_path / "missing")


def test_empty_notebooks_dir(tmp_path):
    with pytest.raises(ParameterError, match="no notebooks to run"):
        runner.run_notebooks("smoke", notebooks_dir=tmp_path, results_dir=tmp_path / "r")


# ---- parsing and selection -------------------------------------------------------------------
@pytest.mark.parametrize("text, value", [
    ("3", 3), ("-2", -2), ("0.5", 0.5), ("1e3", 1000.0), ("true", True), ("false", False),
    ("True", True), ("False", False), ("null", None), ("None", None), ("[1, 2]", [1, 2]),
    ('{"a": 1}', {"a": 1}), ('"quoted"', "quoted"), ("hashing", "hashing"),
    ("st:/models/mpnet", "st:/models/mpnet"), ("01", "01"), ("", ""),
])
def test_parse_value(text, value):
    got = runner.parse_value(text)
    assert got == value and type(got) is type(value)


def test_parse_value_nan_is_float():
    assert math.isnan(runner.parse_value("NaN"))


def test_parse_overrides_last_wins():
    assert runner.parse_overrides([("pairs", "8"), ("encoder", "minilm"), ("pairs", "4")]) == \
        {"pairs": 4, "encoder": "minilm"}


def test_discovery_order_and_only_forms(nbdir):
    nbs = runner.discover_notebooks(nbdir)
    assert [nb.name for nb in nbs] == ["01_alpha", "02_beta"]
    assert nbs[0].parameters == ("profile", "seed", "results_dir", "INTERACTIVE", "x", "label")
    for form in ["02", "02_beta", "02_beta.ipynb", str(nbdir / "02_beta.ipynb")]:
        assert [nb.name for nb in runner.select_notebooks(nbs, [form])] == ["02_beta"]
    # order is the run order, whatever the order given
    assert [nb.name for nb in runner.select_notebooks(nbs, ["02", "01"])] == ["01_alpha", "02_beta"]
    assert runner.select_notebooks(nbs, None) == nbs


def test_notebook_without_parameters_cell(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("x = 1")]
    nbformat.write(nb, str(tmp_path / "01_x.ipynb"))
    assert runner.notebook_parameters(tmp_path / "01_x.ipynb") == ()


def test_default_results_dir():
    assert runner.default_results_dir("default") == "results"
    assert runner.default_results_dir("smoke") == "results/smoke"


def test_write_json_atomic_leaves_no_temp_files(tmp_path):
    target = tmp_path / "sub" / "manifest.json"
    runner.write_json_atomic(target, {"a": 1})
    runner.write_json_atomic(target, {"a": 2})
    assert json.loads(target.read_text()) == {"a": 2}
    assert [p.name for p in target.parent.iterdir()] == ["manifest.json"]


# ---- real executions (a kernel start each, a few seconds) -------------------------------------
def _without_shutdown_race(log: str) -> str:
    """``log`` without ipykernel's own shutdown race: an async ZMQStream callback of the kernel (a
    control/shell reply or the closing "idle" status) that sends on a socket the exiting kernel has
    already closed logs "Uncaught exception in ZMQStream callback" and a traceback that ends in a
    ``zmq.error`` exception. It comes after the last cell, under load, on any transport (ipykernel
    PR 1518 fixed one case of it, ENOTSOCK on IOPub). Only that block is dropped; anything else the
    kernel or the transport says stays."""
    out, block = [], None
    for line in log.splitlines():
        if block is None and "Uncaught exception in ZMQStream callback" in line:
            block = [line]
            continue
        if block is not None:
            block.append(line)
            if line.startswith("zmq.error."):             # ZMQError, ContextTerminated, ...
                block = None                         # a complete shutdown-race block: dropped
            elif not (line.startswith(("Traceback", "  ", "During handling", "The above")) or not line):
                out += block                         # not the race: keep every line of it
                block = None
            continue
        out.append(line)
    return "\n".join(out + (block or []))


def test_the_shutdown_race_filter_drops_only_that_block():
    race = ("Uncaught exception in ZMQStream callback\nTraceback (most recent call last):\n"
            '  File "zmq/eventloop/zmqstream.py", line 585, in _log_error\n'
            '  File "zmq/backend/cython/_zmq.py", line 1468, in zmq.backend.cython._zmq._send_copy\n'
            "zmq.error.ZMQError: Socket operation on non-socket")
    other = "Uncaught exception in ZMQStream callback\nTraceback (most recent call last):\nValueError: x"
    assert _without_shutdown_race("a\n" + race + "\nb") == "a\nb"
    assert _without_shutdown_race("a\n" + other) == "a\n" + other
    assert "without encryption" in _without_shutdown_race(race + "\nMessage signing is without encryption")


def test_run_injects_parameters_and_writes_manifest(nbdir, tmp_path, capfd):
    rd = tmp_path / "res"
    rc = runner.main(["--profile", "smoke", "--seed", "7", "--notebooks-dir", str(nbdir),
                      "--results-dir", str(rd), "-p", "x", "5", "-p", "label", "hello world"])
    assert rc == 0
    # the log (papermill's and the kernels' stdout/stderr) carries no kernel transport noise, and
    # the kernels' Unix sockets lived in the run's temp folder, not in the working directory
    log = _without_shutdown_race("".join(capfd.readouterr()))
    noise = [ln for ln in log.splitlines() if re.search(
        r"without encryption|didn't respond|Kernel.*(WARNING|warn)|zmq|DeprecationWarning", ln)]
    assert not noise, "\n".join(noise)   # whole lines: the traceback says which send failed
    assert not list(project_root().glob("kernel-ipc*"))
    seen = json.loads((rd / "01_alpha.json").read_text())
    assert seen == {"profile": "smoke", "seed": 7, "results_dir": str(rd), "x": 5,
                    "label": "hello world", "INTERACTIVE": False, "cwd": str(project_root()),
                    "progress_log": str(rd / "progress.log")}   # the kernels' progress log (ETA lines)
    assert "DPMV_PROGRESS_LOG" not in os.environ or os.environ["DPMV_PROGRESS_LOG"] != str(rd / "progress.log")
    for name in ("01_alpha", "02_beta"):
        executed = nbformat.read(str(rd / "notebooks" / f"{name}.ipynb"), as_version=4)
        assert any("injected-parameters" in c.metadata.get("tags", []) for c in executed.cells)

    m = json.loads((rd / "manifest.json").read_text())
    assert m["status"] == "ok" and m["profile"] == "smoke"
    assert m["profile_settings"]["encoder"] == PROFILES["smoke"].encoder
    assert m["seeds"]["seed"] == 7
    assert m["seeds"]["em_seeds"] == list(PROFILES["smoke"].for_seed(7).em_seeds) == [14, 15]
    assert m["parameters"] == {"profile": "smoke", "seed": 7, "results_dir": str(rd), "x": 5,
                               "label": "hello world"}
    assert set(m["packages"]) == set(runner.KEY_PACKAGES)
    assert m["packages"]["papermill"] and m["packages"]["numpy"]
    assert m["python"] == ".".join(map(str, sys.version_info[:3]))
    assert set(m["git"]) == {"commit", "dirty"}
    assert m["git"]["commit"] is None or len(m["git"]["commit"]) == 40
    assert m["kernel_environment"]["HF_HUB_OFFLINE"]
    # the machine: results from CPUs with different instruction sets are not comparable
    assert m["machine"] == json.loads(json.dumps(cpu_info()))
    assert m["machine"]["cores"] == os.cpu_count() and set(m["machine"]) >= {"model", "isa", "cores"}
    assert m["wall_s"] > 0 and m["finished"]
    assert [e["name"] for e in m["notebooks"]] == ["01_alpha", "02_beta"]
    for e in m["notebooks"]:
        assert e["status"] == "ok" and e["run"] == "this" and e["wall_s"] > 0
        assert e["parameters"]["x"] == 5 and e["parameters"]["INTERACTIVE"] is False
        assert Path(e["output"]).exists()
        # what produced it: the notebook (no dpmv_lib imports here), the data sets, the profile
        f = e["fingerprint"]
        assert list(f["files"]) == [(nbdir / f"{e['name']}.ipynb").resolve().as_posix()]
        assert set(f["data_sets"]) >= {"pairedmem", "policy", "transfer"}
        assert f["profile_settings"] == m["profile_settings"]
    status = runner.status_text(results_dir=rd, notebooks_dir=nbdir)
    assert re.search(r"^  01_alpha +current$", status, re.M) and re.search(r"^  02_beta +current$", status, re.M)

    # --only reruns one notebook; the other's earlier entry is kept and marked as previous
    rc = runner.main(["--profile", "smoke", "--only", "02", "--notebooks-dir", str(nbdir),
                      "--results-dir", str(rd)])
    assert rc == 0
    m2 = json.loads((rd / "manifest.json").read_text())
    runs = {e["name"]: e["run"] for e in m2["notebooks"]}
    assert runs == {"01_alpha": "previous", "02_beta": "this"}
    assert m2["notebooks"][0]["parameters"]["x"] == 5 and "x" not in m2["notebooks"][1]["parameters"]
    assert json.loads((rd / "02_beta.json").read_text())["x"] == 1


def test_failing_notebook_stops_the_run(tmp_path, capsys):
    d = tmp_path / "nbs"
    d.mkdir()
    write_notebook(d / "01_bad.ipynb", fail=True)
    write_notebook(d / "02_never.ipynb")
    rd = tmp_path / "res"
    rc = runner.main(["--profile", "smoke", "--notebooks-dir", str(d), "--results-dir", str(rd)])
    err = capsys.readouterr().err
    assert rc == 1
    executed = rd / "notebooks" / "01_bad.ipynb"
    assert "notebook 01_bad failed" in err and "deliberate failure" in err and str(executed) in err
    assert executed.exists()
    assert not (rd / "02_never.json").exists()
    m = json.loads((rd / "manifest.json").read_text())
    assert m["status"] == "failed"
    status = {e["name"]: e["status"] for e in m["notebooks"]}
    assert status == {"01_bad": "failed", "02_never": "not run"}
    assert "RuntimeError: deliberate failure" in m["notebooks"][0]["error"]


def test_profile_notebook_defaults_apply_where_declared_and_overrides_win(nbdir, tmp_path, monkeypatch):
    from dataclasses import replace
    monkeypatch.setitem(PROFILES, "smoke", replace(PROFILES["smoke"], notebook_defaults={"x": 9, "T_max": 3}))
    rd = tmp_path / "res"
    assert runner.main(["--profile", "smoke", "--notebooks-dir", str(nbdir), "--results-dir", str(rd)]) == 0
    assert json.loads((rd / "01_alpha.json").read_text())["x"] == 9
    m = json.loads((rd / "manifest.json").read_text())
    assert all(e["parameters"]["x"] == 9 and "T_max" not in e["parameters"] for e in m["notebooks"])
    assert runner.main(["--profile", "smoke", "--notebooks-dir", str(nbdir), "--results-dir", str(rd),
                        "-p", "x", "5"]) == 0
    assert json.loads((rd / "01_alpha.json").read_text())["x"] == 5


def test_llm_profiles_stop_the_horizon_at_T_16_in_the_notebooks_that_have_it():
    for name in ("llm", "llm-smoke"):
        assert PROFILES[name].notebook_defaults == {"T_max": 16}
    declaring = [nb.name for nb in runner.discover_notebooks(None) if "T_max" in nb.parameters]
    assert declaring == ["04_rq2_safeguards", "05_budget_sensitivity"]


def test_git_state_ignores_results_but_not_code(tmp_path):
    import subprocess

    from dpmv_lib.run import git_state

    def git(*a):
        subprocess.run(["git", *a], cwd=tmp_path, check=True, capture_output=True)
    git("init", "-q")
    (tmp_path / "code.py").write_text("x = 1\n")
    git("add", "code.py")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    assert git_state(tmp_path)["dirty"] is False
    (tmp_path / "results" / "seeds" / "1").mkdir(parents=True)
    (tmp_path / "results" / "seeds" / "1" / "t.csv").write_text("a\n")
    assert git_state(tmp_path)["dirty"] is False          # run outputs do not make the code dirty
    (tmp_path / "code.py").write_text("x = 2\n")
    assert git_state(tmp_path)["dirty"] is True
