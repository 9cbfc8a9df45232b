"""One notebook run: its parameters, the profile, where results go, and the step timer.

The first code cell after the parameters is ``run = dx.session.start("04", profile=profile, ...)``;
every step takes ``run`` and writes under ``run.tables_dir`` / ``run.figures_dir``."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ..common.paths import resolve
from ..core.errors import ParameterError
from .common import ExperimentConfig, Timer
from .profiles import Profile, get_profile
from .result import Result
from .tables import TablePaths, write_table

_CONFIG_FIELDS = {f.name for f in dataclasses.fields(ExperimentConfig)}


@dataclass
class Session:
    """A notebook run.

    Attributes
    ----------
    notebook : str
        The notebook's number ("01" ... "07"): the prefix of its tables and figures.
    cfg : ExperimentConfig
        The run's parameters that the experiment steps share.
    profile : Profile
        The named profile under the run seed (:meth:`Profile.for_seed`).
    params : dict
        The notebook's other parameters, as given.
    interactive : bool
        True in JupyterLab (progress bars, widgets), False under papermill.
    """

    notebook: str
    cfg: ExperimentConfig
    profile: Profile
    params: dict[str, Any] = field(default_factory=dict)
    interactive: bool = False
    timer: Timer = field(default_factory=Timer)

    @property
    def results_dir(self) -> Path:
        return resolve(self.cfg.results_dir)

    @property
    def data_dir(self) -> Path:
        return resolve(self.cfg.data_dir)

    @property
    def tables_dir(self) -> Path:
        return self.results_dir / "tables"

    @property
    def figures_dir(self) -> Path:
        return self.results_dir / "figures"

    def write_table(self, name: str, df: pd.DataFrame, markdown: str | None = None) -> TablePaths:
        """Write ``<tables_dir>/<name>.csv`` and ``.md`` (:func:`~.tables.write_table`)."""
        return write_table(df, self.tables_dir, name, markdown)

    def figure_path(self, name: str) -> Path:
        """``<figures_dir>/<name>.png``."""
        return self.figures_dir / f"{name}.png"

    def log(self, message: str) -> None:
        """Print ``message`` in an interactive session only (batch runs keep their output to the
        results)."""
        if self.interactive:
            print(message)

    def timings(self) -> Result:
        """The wall time per step of this run, as a result."""
        t = self.timer.table()
        total = float(t["seconds"].iloc[-1])
        return Result("Time per step", tables={"seconds": t},
                      finding=f"This notebook took {total:.0f} s on profile {self.profile.name}.")


def start(notebook: str, *, profile: str = "default", seed: int = 0, results_dir: str = "results",
          data_dir: str = "data", interactive: bool = False, **params: Any) -> Session:
    """Open a notebook run: the profile under ``seed``, an :class:`ExperimentConfig` of the
    parameters it knows (``B_a``, ``K``, ``T``, ``T_max``, ``workers``, ...), the rest in
    ``params``; matplotlib without a display unless ``interactive``."""
    if not (isinstance(notebook, str) and len(notebook) == 2 and notebook.isdigit()):
        raise ParameterError(f"notebook must be its two-digit number such as '04', got {notebook!r}")
    known = {k: v for k, v in params.items() if k in _CONFIG_FIELDS}
    cfg = ExperimentConfig(profile=profile, seed=seed, results_dir=results_dir, data_dir=data_dir,
                           progress=bool(interactive), **known)
    if not interactive:
        import matplotlib

        matplotlib.use("Agg")
    pd.set_option("display.width", 200, "display.max_columns", 40, "display.max_colwidth", 70)
    rest = {k: v for k, v in params.items() if k not in _CONFIG_FIELDS}
    return Session(notebook, cfg, get_profile(profile).for_seed(seed), rest, bool(interactive))
