"""This process's id, kept current across ``fork()`` without a system call per use.

``os.getpid()`` is a system call on every use (glibc caches no pid); the durable ledgers ask
"am I still the process that opened this connection?" several times per release, so the pid is
read once and refreshed in the child of every ``os.fork()`` (also multiprocessing's fork start
method) by an ``os.register_at_fork`` hook. A child created without re-entering Python
(``subprocess``, ``posix_spawn``) runs no ledger code, so it needs no refresh."""
from __future__ import annotations

import os

_pid = [os.getpid()]


def _after_fork_in_child() -> None:
    _pid[0] = os.getpid()


os.register_at_fork(after_in_child=_after_fork_in_child)


def pid() -> int:
    """``os.getpid()`` without the system call."""
    return _pid[0]
