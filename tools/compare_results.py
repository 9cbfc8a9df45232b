"""Compare the result tables of two runs (e.g. the smoke profile before and after a refactor).

    python tools/compare_results.py BEFORE_DIR AFTER_DIR

Every file under ``tables/`` is compared byte for byte. The ``*_run.json`` run records hold wall
times and the run's own directory: when their bytes differ they are compared again without the
timing fields (:data:`TIMING_KEYS`, and any key ending in ``_s``) and with each run's directory
replaced by ``<results_dir>``, and reported as such. Run manifests
(``manifest.json``: commit, time) and executed notebooks are not compared. Exit status 0 when
every table is byte-identical (run records: identical up to timings), 1 otherwise.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

TIMING_KEYS = frozenset({"timings_s", "total_s", "seconds", "wall_s", "timings"})


def _strip_timings(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _strip_timings(v) for k, v in obj.items() if k not in TIMING_KEYS and not k.endswith("_s")}
    if isinstance(obj, list):
        return [_strip_timings(v) for v in obj]
    return obj


def _normalised(raw: bytes, root: Path) -> Any:
    text = raw.decode("utf-8").replace(json.dumps(str(root))[1:-1], "<results_dir>")
    return _strip_timings(json.loads(text))


def compare(before: Path, after: Path) -> tuple[list[str], list[str], list[str]]:
    """(byte-identical, identical up to timings, differing or missing) relative table paths."""
    b_files = {p.relative_to(before).as_posix() for p in (before / "tables").rglob("*") if p.is_file()}
    a_files = {p.relative_to(after).as_posix() for p in (after / "tables").rglob("*") if p.is_file()}
    same, timing_only, bad = [], [], []
    for rel in sorted(b_files | a_files):
        if rel not in b_files or rel not in a_files:
            bad.append(f"{rel} (only in {'after' if rel in a_files else 'before'})")
            continue
        x, y = (before / rel).read_bytes(), (after / rel).read_bytes()
        if x == y:
            same.append(rel)
        elif rel.endswith("_run.json") and _normalised(x, before) == _normalised(y, after):
            timing_only.append(rel)
        else:
            bad.append(rel)
    return same, timing_only, bad


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    args = ap.parse_args(argv)
    for d in (args.before, args.after):
        if not (d / "tables").is_dir():
            print(f"error: {d} has no tables/ directory", file=sys.stderr)
            return 2
    same, timing_only, bad = compare(args.before, args.after)
    print(f"{len(same)} table files byte-identical, {len(timing_only)} run records identical up to "
          f"timings and the results path, {len(bad)} differing or missing")
    for rel in timing_only:
        print(f"  timings only: {rel}")
    for rel in bad:
        print(f"  DIFFERS: {rel}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
