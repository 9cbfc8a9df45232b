"""Shared fixtures (keep small; other test modules may add their own)."""
from __future__ import annotations

import os

import pytest

from dpmv_lib.checks.examples import RUNNING_EXAMPLE_POLICY, running_example
from dpmv_lib.core.policy import Query


@pytest.fixture
def running():
    """(policy, M, M'_diabetes, M'_debt) of the paper's Figure 2."""
    return running_example()


@pytest.fixture
def policy_dict():
    """A fresh, mutable copy of the running example's policy JSON."""
    import copy
    return copy.deepcopy(RUNNING_EXAMPLE_POLICY)


@pytest.fixture
def dinner() -> Query:
    return Query("Any ideas for an affordable dinner?", "affordable_dinner")


@pytest.fixture(scope="module")
def pairedmem_bench():
    """The committed PairedMem benchmark (checksums verified by the loader)."""
    from dpmv_lib.bench.datasets import load_benchmark
    from dpmv_lib.common.paths import project_root
    data = project_root() / "data"
    if not (data / "pairedmem" / "manifest.json").exists():
        pytest.skip("data/pairedmem not built (python -m dpmv_lib.bench.pairedmem --build)")
    return load_benchmark("pairedmem", data)


# ---- a throw-away PostgreSQL server on loopback (PostgresLedger tests) -----------------------------
@pytest.fixture(scope="session")
def pg_server():
    """initdb + postgres on 127.0.0.1 (free port, as the postgres user when root), database
    ``dpmv``; stopped at the end of the session. Skipped when PostgreSQL or psycopg is absent
    locally; in CI (CI=true, .ci/run installs both) their absence FAILS the tests."""
    import tempfile
    from tests.helpers.pg_server import PgServer, find_bin
    missing = None
    try:
        import psycopg  # noqa: F401
    except ImportError:
        missing = 'psycopg is not installed (pip install "dpmv[postgres]")'
    if missing is None and find_bin() is None:
        missing = "PostgreSQL server binaries are not installed (apt-get install postgresql)"
    if missing:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true but {missing}: .ci/run must install them")
        pytest.skip(missing)
    import shutil
    base = tempfile.mkdtemp(prefix="dpmv-test-pg-")
    try:
        srv = PgServer.start(base)
        yield srv
        srv.stop()
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def pg_dsn(pg_server):
    """A DSN whose search_path is a fresh, empty schema (one per test)."""
    import uuid
    import psycopg
    schema = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(pg_server.dsn, autocommit=True) as c:
        c.execute(f"CREATE SCHEMA {schema}")
    return f"{pg_server.dsn} options='-csearch_path={schema}'"
