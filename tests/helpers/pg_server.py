"""A throw-away PostgreSQL server on loopback for the PostgresLedger tests and benchmark.

``PgServer.start(base_dir)`` runs ``initdb`` into ``base_dir`` (trust auth, loopback only),
starts ``postgres`` on 127.0.0.1 with a free port (as the ``postgres`` system user when run as
root: the server refuses root), creates database ``dpmv`` and returns the server; ``.dsn`` is
the libpq connection string; ``.stop()`` shuts it down. The binaries come from the Debian
``postgresql`` package (``/usr/lib/postgresql/<ver>/bin``) or PATH; ``find_bin()`` is None
when they are absent.
"""
from __future__ import annotations

import glob
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .net import free_port


def find_bin() -> Path | None:
    """The directory holding initdb/pg_ctl/postgres, or None."""
    for d in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if all(os.access(os.path.join(d, b), os.X_OK) for b in ("initdb", "pg_ctl", "postgres")):
            return Path(d)
    w = shutil.which("pg_ctl")
    if w and shutil.which("initdb") and shutil.which("postgres"):
        return Path(w).resolve().parent
    return None


@dataclass
class PgServer:
    bindir: Path
    datadir: Path
    port: int
    prefix: tuple[str, ...]

    @property
    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} user=dpmv dbname=dpmv connect_timeout=10"

    def _run(self, *args: str) -> None:
        res = subprocess.run([*self.prefix, *args], capture_output=True, text=True, timeout=120)
        if res.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed ({res.returncode}): {res.stdout}{res.stderr}")

    @classmethod
    def start(cls, base_dir: str | Path, bindir: Path | None = None) -> "PgServer":
        bindir = bindir or find_bin()
        if bindir is None:
            raise RuntimeError("PostgreSQL server binaries (initdb, pg_ctl, postgres) not found")
        base = Path(base_dir)
        base.mkdir(parents=True, exist_ok=True)
        prefix: tuple[str, ...] = ()
        if os.geteuid() == 0:  # postgres refuses to run as root
            shutil.chown(base, "postgres")
            os.chmod(base, 0o700)
            prefix = ("runuser", "-u", "postgres", "--")
        data = base / "data"
        srv = cls(bindir, data, free_port(), prefix)
        srv._run(str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "dpmv", "-E", "UTF8",
                 "--no-sync")
        opts = f"-h 127.0.0.1 -p {srv.port} -k {base} -c max_connections=60 -c fsync=on"
        srv._run(str(bindir / "pg_ctl"), "-D", str(data), "-o", opts, "-l", str(base / "log"), "-w",
                 "-t", "60", "start")
        try:
            srv._run(str(bindir / "createdb"), "-h", "127.0.0.1", "-p", str(srv.port), "-U", "dpmv", "dpmv")
        except BaseException:
            srv.stop()
            raise
        return srv

    def stop(self) -> None:
        subprocess.run([*self.prefix, str(self.bindir / "pg_ctl"), "-D", str(self.datadir), "-m", "fast",
                        "-w", "stop"], capture_output=True, timeout=120)
