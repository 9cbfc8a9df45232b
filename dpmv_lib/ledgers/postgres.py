"""A PostgreSQL backend for the durable, hash-chained ledger (C5 across machines).

:class:`PostgresLedger` has the interface and the integrity semantics of
:class:`~dpmv_lib.ledgers.sqlite.SqliteLedger` (the decision, chaining and verification code is shared:
``dpmv_lib.ledgers.chain.ChainLedger`` and ``dpmv_lib.ledgers.hashchain``); only the connection and the locking
differ. Each write transaction (the prospective check, the charges of all slots of a release and
their audit records: ``try_charge_many``) first takes a transaction-scoped advisory lock on the
user (``pg_advisory_xact_lock``), so writers of one user are serialised by the server (waiters
sleep on the lock and wake at the holder's COMMIT; no retry loop) while different users proceed
in parallel; the statements then run under READ COMMITTED and see every earlier commit. Reads
(``spent``, ``log``, ``verify``) use one REPEATABLE READ snapshot. COMMIT is durable with the
server's default ``synchronous_commit = on``.

Needs ``psycopg`` 3 (``pip install "dpmv[postgres]"``). The same tables as the SQLite format
(version 2) live in the connection's current schema (``search_path``).
"""
from __future__ import annotations

import hashlib
from typing import Any, Iterable, Iterator, Mapping, Sequence

from ..core.rationals import Number
from . import _proc
from .chain_verify import SCHEMA
from .chain import ChainLedger, Tx
from ..core.errors import BudgetError, BudgetTypeError
from ..core.policy import Policy

# The SQLite schema, with the sequence columns as BIGINT (PostgreSQL INTEGER is 32-bit).
_PG_SCHEMA = SCHEMA.replace("seq INTEGER", "seq BIGINT").rstrip().rstrip(";") + "\n"
_SCHEMA_LOCK = 0x64706D76  # "dpmv": serialises schema creation across processes


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        raise BudgetError('PostgresLedger needs psycopg 3: pip install "dpmv[postgres]" '
                          '(or pip install "psycopg[binary]")') from None
    return psycopg


def _user_lock_key(user_id: str) -> int:
    """A signed 64-bit advisory-lock key for the user (hash of the id)."""
    return int.from_bytes(hashlib.sha256(b"dpmv-ledger-user\x00" + user_id.encode()).digest()[:8], "big",
                          signed=True)


def _describe(dsn: str) -> str:
    """``postgresql://host:port/dbname`` (no password) for messages."""
    try:
        from psycopg.conninfo import conninfo_to_dict
        d = conninfo_to_dict(dsn)
    except Exception:
        return "postgresql database"
    return f"postgresql://{d.get('host', '')}:{d.get('port', '')}/{d.get('dbname', '')}"


class PostgresLedger(ChainLedger):
    """One user's durable ledger in a PostgreSQL database. Implements the Ledger protocol.

    ``PostgresLedger(dsn, user_id, caps, policy_fingerprint, key=None)``: ``dsn`` is a libpq
    connection string or URI. Same guarantees as SqliteLedger: the whole chain is verified on
    open; before every charge, inside the locked write transaction, the last verified record is
    re-hashed, records appended since are verified and the head and totals are checked; any
    mismatch raises LedgerIntegrityError and nothing is written (C5).

    Parameters
    ----------
    dsn : str
        libpq connection string or URI (``postgresql://user@host/db``).
    user_id : str
        The user whose ledger this is.
    caps : Mapping of str to number
        attribute -> cap B_a > 0; must equal the stored caps when the ledger exists.
    policy_fingerprint : str
        :meth:`~dpmv_lib.core.policy.Policy.fingerprint` of the policy; must equal the stored one.
    key : bytes, optional
        The operator's HMAC key (>= 16 bytes); None: an unkeyed sha256 chain.
    connect_timeout : int, optional
        Seconds to wait for the server (default 30).
    witness : str, os.PathLike or Witness, optional
        A rollback witness (a directory for a FileWitness, or an object with
        ``read``/``advance``); None (default): none.

    Raises
    ------
    BudgetTypeError
        If an argument has the wrong type (``dsn``, ``user_id``, ``policy_fingerprint``,
        ``key``, ``connect_timeout``, ``witness``, the caps).
    BudgetError
        If psycopg is missing, the server cannot be reached, an argument has a bad value (an
        empty ``dsn`` or ``user_id``, a cap <= 0, a short key), or the stored ledger was
        created for another policy or other caps.
    LedgerIntegrityError
        If the stored chain, totals or key do not verify.
    """

    def __init__(self, dsn: str, user_id: str, caps: Mapping[str, Number], policy_fingerprint: str, *,
                 key: bytes | None = None, connect_timeout: int = 30, witness: Any = None) -> None:
        if not isinstance(dsn, str) or not dsn:
            raise (BudgetError if isinstance(dsn, str) else BudgetTypeError)(
                f"dsn must be a PostgreSQL connection string, got {dsn!r}")
        if isinstance(connect_timeout, bool) or not isinstance(connect_timeout, (int, float)):
            raise BudgetTypeError(f"connect_timeout must be a number of seconds, got {connect_timeout!r}")
        psycopg = _psycopg()
        super().__init__(_describe(dsn), user_id, caps, policy_fingerprint, key)
        self._pg = psycopg
        self._db_errors = (psycopg.Error,)
        self._dsn = dsn
        self._connect_timeout = int(connect_timeout)
        self._conn: Any = None
        self._pid = -1
        self._sql: dict[str, str] = {}
        self._lock_key = _user_lock_key(user_id)
        self._set_witness(witness, None)
        self._start()

    # ---- connection ------------------------------------------------------------------------
    def _open(self) -> None:
        try:
            conn = self._pg.connect(self._dsn, autocommit=True, connect_timeout=self._connect_timeout)
        except self._pg.Error as exc:
            raise BudgetError(f"cannot connect to ledger database {self.path}: {exc}") from None
        self._conn, self._pid = conn, _proc.pid()

    def _q(self, sql: str) -> str:
        out = self._sql.get(sql)
        if out is None:
            out = self._sql[sql] = sql.replace("?", "%s")
        return out

    def _begin(self, write: bool) -> None:
        conn = self._db()
        if write:  # the user's ledger is held until COMMIT/ROLLBACK; waiters wake at once
            conn.execute("BEGIN ISOLATION LEVEL READ COMMITTED")
            try:
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (self._lock_key,))
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        else:
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")

    def _commit(self) -> None:
        self._conn.execute("COMMIT")

    def _rollback(self) -> None:
        if self._conn is not None and not self._conn.closed:
            self._conn.execute("ROLLBACK")

    def _exec(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self._conn.execute(self._q(sql), params or None)

    def _executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> Any:
        cur = self._conn.cursor()
        cur.executemany(self._q(sql), list(rows))
        return cur

    def close(self) -> None:
        """Close the connection and the witness (idempotent; also via ``with``)."""
        with self._lock:
            if self._conn is not None and self._pid == _proc.pid():
                self._conn.close()
                self._close_witness()
            self._conn = None

    def _ensure_schema(self, db: Tx) -> None:
        db.execute("SELECT pg_advisory_xact_lock(?)", (_SCHEMA_LOCK,))
        names = {r[0] for r in db.execute("SELECT table_name FROM information_schema.tables "
                                          "WHERE table_schema = current_schema()").fetchall()}
        self._verifier.check_tables(db, names, _PG_SCHEMA)

    def integrity_check(self) -> str:
        """"ok" when the server answers and the whole chain verifies.

        Returns
        -------
        str

        Raises
        ------
        LedgerIntegrityError
            If the chain does not verify.
        BudgetError
            If the ledger is closed or the server fails.
        """
        self.verify()
        return "ok"

    @staticmethod
    def users(dsn: str) -> list[str]:
        """The user ids that have a ledger in the database.

        Parameters
        ----------
        dsn : str
            libpq connection string or URI.

        Returns
        -------
        list of str

        Raises
        ------
        BudgetError
            If psycopg is missing or the database is not a dpmv ledger database.
        """
        psycopg = _psycopg()
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                return [r[0] for r in conn.execute("SELECT user_id FROM ledger_user ORDER BY user_id")]
        except psycopg.Error as exc:
            raise BudgetError(f"{_describe(dsn)} is not a dpmv ledger database: {exc}") from None

    def __repr__(self) -> str:
        return f"PostgresLedger({self.path!r}, user={self.user_id!r}, keyed={self.keyed})"


class PostgresLedgerStore:
    """Per-user PostgresLedgers in one database (rows keyed by user id).

    Parameters
    ----------
    dsn : str
        libpq connection string or URI.
    **kwargs
        Passed to every :class:`PostgresLedger` (``key``, ``connect_timeout``, ``witness``).
    """

    def __init__(self, dsn: str, **kwargs: Any) -> None:
        self.dsn = dsn
        self._kwargs = kwargs

    def ledger(self, user_id: str, policy: Policy) -> PostgresLedger:
        """The user's :class:`PostgresLedger` for ``policy``.

        Parameters
        ----------
        user_id : str
            The user.
        policy : Policy
            The public policy (caps and fingerprint).

        Returns
        -------
        PostgresLedger

        Raises
        ------
        PolicyTypeError, BudgetTypeError, BudgetError, LedgerIntegrityError
            As :class:`PostgresLedger` and its ``for_policy``.
        """
        return PostgresLedger.for_policy(self.dsn, user_id, policy, **self._kwargs)

    def users(self) -> list[str]:
        """The users that have a ledger in the database (see :meth:`PostgresLedger.users`)."""
        return PostgresLedger.users(self.dsn)

    def __iter__(self) -> Iterator[str]:
        return iter(self.users())
