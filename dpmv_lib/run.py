"""Batch runner: execute the notebooks in order with papermill under a named profile.

    python -m dpmv_lib.run [--profile NAME] [--only NOTEBOOK ...] [-p KEY VALUE ...]
                           [--seed N] [--results-dir DIR] [--notebooks-dir DIR] [--timeout S]
    python -m dpmv_lib.run --status [--profile NAME | --results-dir DIR]
    python -m dpmv_lib.run --profile NAME --plan [--rate R]
    python -m dpmv_lib.run --profile NAME --generate-only --minutes N

Notebooks are ``notebooks/NN_*.ipynb`` (01_data_construction, 02_mechanism,
03_rq1_privacy_utility, 04_rq2_safeguards, 05_budget_sensitivity, 06_adaptive_adversary,
07_memview_playground); those
that exist run in order. Each gets the parameters ``profile``, ``seed`` and ``results_dir``,
``INTERACTIVE=False`` (batch runs have no browser) and any ``-p`` override that its parameters cell
declares. Executed copies go to ``{results_dir}/notebooks/`` and a
``{results_dir}/manifest.json`` records the git commit, profile, parameters, seeds, package
versions, the machine (CPU model, ISA flags, cores: :func:`dpmv_lib.common.machine.cpu_info`) and wall
time per notebook, and per notebook the fingerprint of what produced it (the source of the
dpmv_lib modules it imports, the data manifests, the profile: :mod:`dpmv_lib.common.fingerprint`).
``--status`` compares those fingerprints with the checkout: each notebook of each result set is
``current``, ``stale`` (with what changed) or ``unknown`` (no fingerprint recorded, or the run did
not finish); it exits 0 either way. The default profile writes to ``results/``; any other
profile to ``results/<profile>/`` so smoke runs never overwrite the committed results.

A real response model's generations go to the committed store ``{results_dir}/generations/``
(:mod:`dpmv_lib.generate.store`; kernels get its path in ``DPMV_GENERATION_STORE``). ``--plan``
and ``--generate-only --minutes N``: :mod:`dpmv_lib.experiments.generation_plan`.

Exit codes: 0 all notebooks ran; 1 a notebook failed (the run stops there); 2 bad arguments
(unknown profile, notebook or parameter).
"""
from __future__ import annotations

import argparse
import ast
import contextlib
import datetime as _dt
import json
import keyword
import logging
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from .core.errors import DPMVError, ParameterError
from .common import fingerprint as fp
from .common.machine import cpu_info
from .common.paths import GENERATION_STORE_ENV as STORE_ENV, project_root, resolve
from .common.progress import ENV as PROGRESS_ENV
from .experiments.profiles import PROFILES, get_profile

NOTEBOOK_ORDER = ("01_data_construction", "02_mechanism", "03_rq1_privacy_utility",
                  "04_rq2_safeguards", "05_budget_sensitivity", "06_adaptive_adversary",
                  "07_memview_playground")
NOTEBOOK_RE = re.compile(r"^(\d\d)_\w+\.ipynb$")
RESERVED = ("profile", "seed", "results_dir")
# Injected when a notebook's parameters cell declares them (``-p`` may override): batch runs have
# no browser, so widget cells render their static figure.
BATCH_DEFAULTS = {"INTERACTIVE": False}
KEY_PACKAGES = ("numpy", "pandas", "scikit-learn", "torch", "transformers", "papermill", "dpmv")
KERNEL_NAME = "python3"
# Set for the kernels unless the caller already set them: no model hub at run time, and
# reproducible string hashing (set iteration order) inside every notebook.
KERNEL_ENV_DEFAULTS = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
                       "PYTHONHASHSEED": "0", "TOKENIZERS_PARALLELISM": "false",
                       # no progress bars in executed copies (model loading, tqdm): the progress log
                       # follows long steps (small, readable executed notebooks)
                       "TQDM_DISABLE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
MANIFEST_SCHEMA = 1
PACKAGE_DIR = Path(__file__).resolve().parent
# Kernel sockets: Unix sockets in the run's own temp folder (no TCP port, hence no "running over
# TCP without encryption" warning from every kernel); a socket path must stay under ~100 bytes.
IPC_PATH_MAX = 90

log = logging.getLogger("dpmv.run")


class NotebookFailed(DPMVError):
    """A notebook raised while executing; ``output`` is the executed copy to look at."""

    def __init__(self, notebook: str, output: Path, detail: str) -> None:
        self.notebook, self.output, self.detail = notebook, output, detail
        super().__init__(f"notebook {notebook} failed: {detail}\n"
                         f"  see the executed copy: {output}")


@dataclass(frozen=True)
class Notebook:
    """One discovered notebook: ``name`` is the file stem (e.g. ``02_mechanism``)."""

    name: str
    path: Path
    parameters: tuple[str, ...]  # names assigned in the cell tagged `parameters`

    @property
    def number(self) -> str:
        return self.name[:2]


# ---- discovery and selection ---------------------------------------------------------------
def discover_notebooks(notebooks_dir: str | Path | None = None) -> list[Notebook]:
    """Every ``NN_*.ipynb`` in ``notebooks_dir`` (default ``<root>/notebooks``), in order."""
    d = Path(notebooks_dir) if notebooks_dir is not None else project_root() / "notebooks"
    if not d.is_dir():
        raise ParameterError(f"notebooks directory {d} does not exist")
    paths = sorted(p for p in d.iterdir() if p.is_file() and NOTEBOOK_RE.match(p.name))
    return [Notebook(p.stem, p, notebook_parameters(p)) for p in paths]


def select_notebooks(notebooks: Sequence[Notebook], only: Sequence[str] | None) -> list[Notebook]:
    """The notebooks named in ``only`` ("02", "02_mechanism" or "02_mechanism.ipynb"), in run
    order; all of them when ``only`` is empty. Unknown names list the valid ones."""
    if not only:
        return list(notebooks)
    chosen: set[str] = set()
    for raw in only:
        key = Path(raw).name
        key = key[:-len(".ipynb")] if key.endswith(".ipynb") else key
        hits = [nb.name for nb in notebooks if key in (nb.name, nb.number)]
        if len(hits) != 1:
            valid = ", ".join(nb.name for nb in notebooks) or "(none found)"
            why = "ambiguous" if hits else "unknown"
            raise ParameterError(f"{why} notebook {raw!r}; valid notebooks: {valid} "
                                 f"(give the number, the name or the file name)")
        chosen.add(hits[0])
    return [nb for nb in notebooks if nb.name in chosen]


def notebook_parameters(path: str | Path) -> tuple[str, ...]:
    """Names assigned at top level in the notebook's cell tagged ``parameters`` (empty if none)."""
    import nbformat

    nb = nbformat.read(str(path), as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code" and "parameters" in cell.get("metadata", {}).get("tags", []):
            try:
                tree = ast.parse(cell.source)
            except SyntaxError as exc:
                raise ParameterError(f"{path}: the parameters cell is not valid Python ({exc})") from None
            names: list[str] = []
            for node in tree.body:
                targets = node.targets if isinstance(node, ast.Assign) else (
                    [node.target] if isinstance(node, ast.AnnAssign) else [])
                for t in targets:
                    for n in ast.walk(t):
                        if isinstance(n, ast.Name) and n.id not in names:
                            names.append(n.id)
            return tuple(names)
    return ()


# ---- parameters ----------------------------------------------------------------------------
def parse_value(text: str) -> Any:
    """A ``-p`` value: JSON (numbers, true/false/null, lists, objects, quoted strings) or the
    Python literals True/False/None when it parses, else the string itself."""
    stripped = text.strip()
    if stripped in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[stripped]
    try:
        return json.loads(stripped)
    except ValueError:
        return text


def parse_overrides(pairs: Sequence[Sequence[str]] | None) -> dict[str, Any]:
    """``[(key, value), ...]`` from ``-p KEY VALUE`` into a dict; keys must be identifiers and
    not one of the dedicated flags (``--profile``, ``--seed``, ``--results-dir``)."""
    out: dict[str, Any] = {}
    for pair in pairs or ():
        if len(pair) != 2:
            raise ParameterError(f"-p needs KEY VALUE, got {list(pair)}")
        key, value = pair
        if not key.isidentifier() or keyword.iskeyword(key):
            raise ParameterError(f"parameter name {key!r} is not a valid Python identifier")
        if key in RESERVED:
            flag = "--" + key.replace("_", "-")
            raise ParameterError(f"set {key!r} with {flag}, not -p")
        out[key] = parse_value(value)
    return out


def default_results_dir(profile: str) -> str:
    """``results`` for the default profile, ``results/<profile>`` for every other one."""
    return "results" if profile == "default" else f"results/{profile}"


def _display_path(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path.resolve())


# ---- provenance ------------------------------------------------------------------------------
def git_state(root: Path) -> dict[str, Any]:
    """{"commit": HEAD or None, "dirty": bool or None} (None when git or the repo is missing).
    Dirty means a change to anything but ``results/``: the outputs of runs (e.g. the runs with
    other seeds that notebooks 03 and 05 read, written just before) do not change what code and
    data produced a result."""
    def git(*args: str) -> str | None:
        try:
            r = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return None
        return r.stdout if r.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--", ".", ":(exclude)results") if commit else None
    return {"commit": commit.strip() if commit else None,
            "dirty": bool(status.strip()) if status is not None else None}


def package_versions(names: Sequence[str] = KEY_PACKAGES) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for n in names:
        try:
            out[n] = metadata.version(n)
        except metadata.PackageNotFoundError:
            out[n] = None
    return out


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def write_json_atomic(path: Path, data: Mapping[str, Any]) -> None:
    """Write JSON so that readers see the old file or the new one, never a partial one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2, sort_keys=False, default=str)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def strip_widget_state(path: Path) -> None:
    """Drop ipywidgets state from an executed copy (``metadata.widgets`` and widget views, whose
    plain-text fallback stays): a batch run has no live widgets, only their serialised blobs."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    changed = nb.get("metadata", {}).pop("widgets", None) is not None
    for cell in nb.get("cells", []):
        for out in cell.get("outputs", []):
            if WIDGET_VIEW in out.get("data", {}):
                del out["data"][WIDGET_VIEW]
                changed = True
    if changed:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        tmp.replace(path)


def _previous_entries(manifest_path: Path, profile: str) -> dict[str, dict[str, Any]]:
    """Entries of an earlier manifest in the same results dir and profile (kept for --only runs)."""
    try:
        old = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(old, dict) or old.get("profile") != profile:
        return {}
    return {e["name"]: e for e in old.get("notebooks", []) if isinstance(e, dict) and "name" in e
            and e.get("status") == "ok"}


# ---- fingerprints and --status -------------------------------------------------------------------
def _source_files(notebook: Path, root: Path) -> dict[str, str] | str:
    """The notebook's source hashes, or why they could not be taken (the run goes on)."""
    try:
        return fp.source_files(notebook, PACKAGE_DIR, root)
    except (OSError, ValueError, SyntaxError) as exc:
        log.warning("%s: no fingerprint (%s)", notebook.name, exc)
        return f"{type(exc).__name__}: {exc}"


def _fingerprint(files: dict[str, str] | str, params: Mapping[str, Any], root: Path,
                 settings: Mapping[str, Any]) -> dict[str, Any]:
    """The entry's recorded fingerprint: ``files`` taken before the notebook ran, the data after
    (notebook 01 writes it)."""
    if isinstance(files, str):
        return {"error": files}
    data_dir = resolve(str(params.get("data_dir", "data")), root)
    try:
        return fp.Fingerprint(files, fp.data_sets(data_dir), settings).to_dict()
    except OSError as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


def status_text(profile: str | None = None, results_dir: str | Path | None = None,
                notebooks_dir: str | Path | None = None) -> str:
    """The ``--status`` list: each notebook of each result set under ``results/`` (or only those
    of ``profile``, or only ``results_dir``) as current, stale (with the reasons) or unknown."""
    root = project_root()
    if results_dir is not None:
        manifests = [resolve(results_dir, root) / "manifest.json"]
        if not manifests[0].is_file():
            raise ParameterError(f"no run manifest at {manifests[0]}")
    else:
        manifests = fp.find_result_sets(root / "results")
    profiles = {n: p.to_dict() for n, p in PROFILES.items()}
    cache: dict[tuple[str, str], Any] = {}
    sets: dict[str, list[fp.NotebookStatus]] = {}
    for m in manifests:
        try:
            rows = fp.result_status(m, root=root, package_dir=PACKAGE_DIR, profiles=profiles, cache=cache)
        except ValueError as exc:
            rows = [fp.NotebookStatus(_display_path(m, root), "?", "(manifest)", "unknown", (str(exc),))]
        if profile is None or any(r.profile == profile for r in rows):
            sets[_display_path(m, root)] = rows
    try:
        names = [nb.name for nb in discover_notebooks(notebooks_dir)]
    except ParameterError:
        names = []
    head = ("Result sets against this checkout (current: today's code, data and profile made them; "
            "stale: what changed since; unknown: no fingerprint or an unfinished run)")
    return head + "\n" + fp.format_status(sets, names)


# ---- kernel --------------------------------------------------------------------------------
@contextlib.contextmanager
def _kernel_environment() -> Iterator[dict[str, Any]]:
    """Make kernel ``python3`` this interpreter (not whatever a user-level kernelspec says) and
    set the offline/hash-seed defaults for the kernels; restores os.environ afterwards. Yields
    the papermill engine options: IPC transport in the temp folder where Unix sockets fit."""
    saved = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="dpmv-kernel-") as tmp:
        spec_dir = Path(tmp) / "kernels" / KERNEL_NAME
        spec_dir.mkdir(parents=True)
        spec = {"argv": [sys.executable, "-Xfrozen_modules=off", "-m", "ipykernel_launcher",
                         "-f", "{connection_file}"],
                "display_name": "Python 3 (ipykernel)", "language": "python",
                "metadata": {"debugger": True}}
        (spec_dir / "kernel.json").write_text(json.dumps(spec), encoding="utf-8")
        os.environ["JUPYTER_PATH"] = os.pathsep.join(
            [tmp] + ([os.environ["JUPYTER_PATH"]] if os.environ.get("JUPYTER_PATH") else []))
        for k, v in KERNEL_ENV_DEFAULTS.items():
            os.environ.setdefault(k, v)
        try:
            yield _engine_options(Path(tmp))
        finally:
            os.environ.clear()
            os.environ.update(saved)


def _engine_options(tmp: Path) -> dict[str, Any]:
    """``config`` for nbclient's kernel manager: the kernel talks over Unix sockets under ``tmp``
    (TCP, and the kernel's plain-text transport warning, only where those cannot be used)."""
    prefix = tmp / "kernel"
    if os.name != "posix" or len(str(prefix)) > IPC_PATH_MAX:
        return {}
    from traitlets.config import Config
    return {"config": Config({"KernelManager": {"transport": "ipc", "ip": str(prefix)}})}


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def _configure_logging(log_output: bool) -> None:
    pm = logging.getLogger("papermill")
    if log_output and not any(getattr(h, "_dpmv", False) for h in pm.handlers):
        h = logging.StreamHandler(sys.stdout)
        h.setFormatter(logging.Formatter("%(message)s"))
        h._dpmv = True  # type: ignore[attr-defined]
        pm.addHandler(h)
        pm.propagate = False
    pm.setLevel(logging.INFO if log_output else logging.WARNING)


# ---- the run ---------------------------------------------------------------------------------
def run_notebooks(profile: str = "default", *, only: Sequence[str] | None = None,
                  overrides: Mapping[str, Any] | None = None, seed: int = 0,
                  results_dir: str | Path | None = None, notebooks_dir: str | Path | None = None,
                  timeout: float | None = None, log_output: bool | None = None,
                  progress: bool | None = None, command: Sequence[str] | None = None,
                  echo=print) -> dict[str, Any]:
    """Execute the selected notebooks in order; returns the manifest (also written to disk).

    Raises ParameterError for bad arguments before anything runs, and NotebookFailed (after
    recording the failure in the manifest) when a notebook raises."""
    import papermill as pm
    from papermill.exceptions import PapermillExecutionError

    prof = get_profile(profile)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ParameterError(f"seed must be an int, got {seed!r}")
    overrides = dict(overrides or {})
    for k in overrides:
        if k in RESERVED:
            raise ParameterError(f"set {k!r} with its own argument, not as an override")
    root = project_root()
    notebooks = discover_notebooks(notebooks_dir)
    selected = select_notebooks(notebooks, only)
    if not selected:
        raise ParameterError(f"no notebooks to run in {Path(notebooks_dir or root / 'notebooks')} "
                             f"(expected files named like {NOTEBOOK_ORDER[0]}.ipynb)")
    declared = {p for nb in selected for p in nb.parameters}
    unknown = sorted(set(overrides) - declared)
    if unknown:
        raise ParameterError(f"parameter(s) {unknown} are not in the parameters cell of any selected "
                             f"notebook; available: {sorted(declared - set(RESERVED))}")

    rd_text = str(results_dir) if results_dir is not None else default_results_dir(prof.name)
    rd = Path(rd_text).expanduser()
    rd_abs = rd if rd.is_absolute() else root / rd
    out_dir = rd_abs / "notebooks"
    out_dir.mkdir(parents=True, exist_ok=True)
    manifest_path = rd_abs / "manifest.json"

    interactive = sys.stdout.isatty() and not _in_ci()
    log_output = (not interactive) if log_output is None else log_output
    progress = interactive if progress is None else progress
    _configure_logging(log_output)

    base = {"profile": prof.name, "seed": seed, "results_dir": rd_text}
    previous = _previous_entries(manifest_path, prof.name)
    selected_names = {nb.name for nb in selected}
    entries: list[dict[str, Any]] = []
    for nb in notebooks:
        if nb.name in selected_names:
            entries.append({"name": nb.name, "input": _display_path(nb.path, root),
                            "output": _display_path(out_dir / nb.path.name, root),
                            "status": "pending", "run": "this"})
        elif nb.name in previous:
            entries.append({**previous[nb.name], "run": "previous"})
    git = git_state(root)
    manifest: dict[str, Any] = {
        "schema": MANIFEST_SCHEMA,
        "status": "running",
        "profile": prof.name,
        "profile_settings": prof.to_dict(),
        "seeds": {"seed": seed, "em_seeds": list(prof.for_seed(seed).em_seeds),
                  "streams": "EM seeds, surrogate draws, subset selection and bootstraps follow `seed`"},
        "parameters": {**base, **overrides},
        "overrides": overrides,
        "results_dir": rd_text,
        "git": git,
        "python": platform.python_version(),
        "executable": sys.executable,
        "platform": platform.platform(),
        "machine": cpu_info(),
        "packages": package_versions(),
        "kernel_environment": {k: os.environ.get(k, v) for k, v in KERNEL_ENV_DEFAULTS.items()},
        "command": list(command) if command is not None else None,
        "started": _now(),
        "finished": None,
        "wall_s": None,
        "notebooks": entries,
    }
    write_json_atomic(manifest_path, manifest)

    t_run = time.perf_counter()
    todo = [e for e in entries if e["run"] == "this"]
    by_name = {nb.name: nb for nb in selected}
    with _kernel_environment() as engine_options:
        # long steps (generation) append done/total, rate and ETA here: `tail -f` it
        os.environ.setdefault(PROGRESS_ENV, str(rd_abs / "progress.log"))
        # real models' generations: the results' committed store (the surrogate is not stored)
        os.environ.setdefault(STORE_ENV, str(rd_abs / "generations"))
        manifest["kernel_environment"] = {k: os.environ[k] for k in KERNEL_ENV_DEFAULTS}
        for i, entry in enumerate(todo, 1):
            nb = by_name[entry["name"]]
            params = {**base, **{k: v for k, v in {**BATCH_DEFAULTS, **prof.notebook_defaults, **overrides}.items()
                                 if k in nb.parameters}}
            missing = [k for k in RESERVED if k not in nb.parameters]
            if missing:
                log.warning("%s: parameters cell lacks %s", nb.name, missing)
            output = out_dir / nb.path.name
            entry.update(status="running", started=_now(), parameters=params,
                         git_commit=git["commit"])
            write_json_atomic(manifest_path, manifest)
            files = _source_files(nb.path, root)      # the code the kernel is about to import
            echo(f"[{i}/{len(todo)}] {nb.name} (profile {prof.name}) -> {entry['output']}")
            t0 = time.perf_counter()
            try:
                pm.execute_notebook(str(nb.path), str(output), parameters=params,
                                    kernel_name=KERNEL_NAME, language="python", cwd=str(root),
                                    log_output=log_output,
                                    progress_bar=progress, start_timeout=120,
                                    execution_timeout=timeout, **engine_options)
            except BaseException as exc:
                entry["wall_s"] = round(time.perf_counter() - t0, 3)
                if isinstance(exc, PapermillExecutionError):
                    detail = f"{exc.ename}: {exc.evalue} (at In [{exc.exec_count}])"
                elif isinstance(exc, KeyboardInterrupt):
                    detail = "interrupted"
                else:
                    detail = f"{type(exc).__name__}: {exc}"
                entry.update(status="interrupted" if isinstance(exc, KeyboardInterrupt) else "failed",
                             error=detail)
                for rest in todo[i:]:
                    rest["status"] = "not run"
                manifest.update(status=entry["status"], finished=_now(),
                                wall_s=round(time.perf_counter() - t_run, 3))
                write_json_atomic(manifest_path, manifest)
                if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                    raise
                raise NotebookFailed(nb.name, output, detail) from exc
            strip_widget_state(output)
            entry.update(status="ok", wall_s=round(time.perf_counter() - t0, 3),
                         fingerprint=_fingerprint(files, params, root, prof.to_dict()))
            write_json_atomic(manifest_path, manifest)
            echo(f"      {nb.name}: ok in {entry['wall_s']:.1f} s")
    manifest.update(status="ok", finished=_now(), wall_s=round(time.perf_counter() - t_run, 3))
    write_json_atomic(manifest_path, manifest)
    echo(f"done: {len(todo)} notebook(s) in {manifest['wall_s']:.1f} s; manifest "
         f"{_display_path(manifest_path, root)}")
    return manifest


# ---- command line ----------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m dpmv_lib.run",
        description="Execute the DP-MemView notebooks in order with papermill under a profile.",
        epilog="profiles: " + "; ".join(f"{n} ({pr.description})" for n, pr in PROFILES.items()))
    p.add_argument("--profile", help="parameter set (default: default; with --status: only its result sets)")
    p.add_argument("--only", nargs="+", metavar="NOTEBOOK",
                   help='run only these notebooks: "02", "02_mechanism" or "02_mechanism.ipynb"')
    p.add_argument("-p", "--param", nargs=2, action="append", metavar=("KEY", "VALUE"), default=[],
                   help="override a notebook parameter; VALUE is read as JSON when it parses, "
                        "else as a string (repeatable)")
    p.add_argument("--seed", type=int, default=0, help="the notebooks' `seed` parameter (default 0)")
    p.add_argument("--results-dir", help="where executed notebooks, tables, figures and the "
                   "manifest go (default: results for the default profile, results/<profile> else)")
    p.add_argument("--notebooks-dir", help="directory holding NN_*.ipynb (default: notebooks/)")
    p.add_argument("--timeout", type=float, default=None, help="per-cell time limit in seconds")
    p.add_argument("--list", action="store_true", help="list notebooks and profiles, then exit")
    p.add_argument("--status", action="store_true", help="say for each notebook of each result set "
                   "whether its results are current or stale (and why) against this checkout, then exit")
    p.add_argument("--plan", action="store_true", help="per notebook: the profile's distinct model requests, "
                   "how many its generation store holds, how many are left and the hours left; then exit")
    p.add_argument("--generate-only", action="store_true", help="generate the next missing requests for --minutes")
    p.add_argument("--minutes", type=float, default=None, help="time limit of --generate-only")
    p.add_argument("--rate", type=float, default=None, help="responses/s for --plan (default: one measured batch)")
    p.add_argument("--workers", type=int, default=None, help="processes for --plan's conditioning")
    return p


def plan_command(args: argparse.Namespace, overrides: Mapping[str, Any], echo=print) -> int:
    """``--plan`` / ``--generate-only`` (:func:`dpmv_lib.experiments.generation_plan.plan_and_generate`)."""
    from .experiments.generation_plan import plan_and_generate

    prof = get_profile(args.profile or "default")
    root = project_root()
    rd = resolve(args.results_dir or default_results_dir(prof.name), root)
    return plan_and_generate(prof.name, select_notebooks(discover_notebooks(args.notebooks_dir), args.only),
                             rd / "generations", seed=args.seed, overrides=overrides,
                             generate_minutes=args.minutes if args.generate_only else None,
                             generate=args.generate_only, rate=args.rate, workers=args.workers,
                             cache_dir=root / "results" / "cache" / "plans", echo=echo)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.list:
            for nb in discover_notebooks(args.notebooks_dir):
                print(f"{nb.name}: parameters {', '.join(nb.parameters) or '(none)'}")
            print("profiles: " + ", ".join(PROFILES))
            return 0
        if args.status:
            print(status_text(args.profile, args.results_dir, args.notebooks_dir))
            return 0
        overrides = parse_overrides(args.param)
        if args.plan or args.generate_only:
            return plan_command(args, overrides)
        run_notebooks(args.profile or "default", only=args.only, overrides=overrides, seed=args.seed,
                      results_dir=args.results_dir, notebooks_dir=args.notebooks_dir,
                      timeout=args.timeout,
                      command=["python", "-m", "dpmv_lib.run", *(argv if argv is not None else sys.argv[1:])])
    except NotebookFailed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except ParameterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
