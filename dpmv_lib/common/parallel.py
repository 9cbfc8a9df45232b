"""Work over the usable cores: :func:`parallel_map`, ``[fn(x) for x in items]`` in order over forked
processes, with the same result for any worker count (used by the exact grid, the greedy adversary
and the exact oracle)."""
from __future__ import annotations

import gc
import multiprocessing as mp
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Callable, Iterable

from ..core.errors import ParameterError
from .machine import usable_cores

_TASK: list[Callable[[Any], Any]] = []  # the function of the running parallel_map (inherited by fork)


def _run_task(item: Any) -> Any:
    return _TASK[0](item)


def check_workers(workers: int | None) -> int | None:
    """``workers`` as given, if it is None (the usable cores) or an int >= 1.

    Raises
    ------
    ParameterError
        If ``workers`` is anything else."""
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise ParameterError(f"workers must be None (the usable cores) or an int >= 1, got {workers!r}")
    return workers


def parallel_map(fn: Callable[[Any], Any], items: Iterable[Any], *, workers: int | None = None,
                 progress: bool = False, desc: str = "", unit: str = "it") -> list[Any]:
    """``[fn(x) for x in items]``, in order, over ``workers`` forked processes (None: the usable
    cores; 1, one item, or no ``fork`` start method: this process). ``fn`` is inherited, not
    pickled (it may hold caches and data); each item and result is pickled.

    Raises
    ------
    ParameterError
        If ``workers`` is not None or an int >= 1."""
    check_workers(workers)
    items = list(items)
    n = min(usable_cores() if workers is None else workers, len(items))
    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=len(items), desc=desc, unit=unit)
    out = []
    try:
        if n <= 1 or "fork" not in mp.get_all_start_methods() or _TASK:
            for x in items:
                out.append(fn(x))
                if bar is not None:
                    bar.update()
            return out
        _TASK.append(fn)
        gc.freeze()  # a child's collections then skip the inherited objects (writing them would copy their pages)
        try:
            with ProcessPoolExecutor(max_workers=n, mp_context=mp.get_context("fork")) as pool:
                for r in pool.map(_run_task, items):
                    out.append(r)
                    if bar is not None:
                        bar.update()
        finally:
            _TASK.clear()
            gc.unfreeze()
        return out
    finally:
        if bar is not None:
            bar.close()
