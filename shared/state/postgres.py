"""The PostgreSQL engine of the control plane: one connection pool per DSN per process, and migrations.

Migrations are the numbered files in shared/state/migrations (`0001_name.sql`,
...), applied in order at start by whichever process connects first, inside one
transaction holding a PostgreSQL advisory lock, so replicas starting together
never apply one twice and never see half a schema. `schema_migrations` records
each applied version with a checksum of its file; a changed file is refused
(write a new migration instead). An in-house runner rather than Alembic: the
schema is plain SQL with no ORM models to diff, and the whole runner is the
thirty lines below, with no extra dependency.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import re
import select
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg_pool import ConnectionPool

from shared.errors import FailedPrecondition
from shared.state.sql import Result

log = logging.getLogger("ragkb.state")

MIGRATIONS_DIR = Path(__file__).with_name("migrations")
MIGRATION_LOCK_ID = 0x7261676B62  # "ragkb": the advisory lock key migrations run under
POOL_MAX_SIZE = 8
_MIGRATION_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode("utf-8")).hexdigest()


def migrations(directory: Path = MIGRATIONS_DIR) -> list[Migration]:
    """The migration files in version order; a misnamed file or a gap in the numbering is an error."""
    found = []
    for path in sorted(directory.glob("*.sql")):
        match = _MIGRATION_FILE.match(path.name)
        if not match:
            raise ValueError(f"migration file {path.name!r}: expected NNNN_lower_case_name.sql")
        found.append(Migration(int(match[1]), match[2], path.read_text(encoding="utf-8")))
    for expected, migration in enumerate(found, start=1):
        if migration.version != expected:
            raise ValueError(f"migration {migration.version:04d}_{migration.name}: expected version {expected:04d}")
    return found


def migrate(connection: psycopg.Connection, available: Sequence[Migration] | None = None) -> list[int]:
    """Apply the migrations not applied yet; returns their versions."""
    available = migrations() if available is None else available
    with connection.transaction():
        connection.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK_ID,))
        connection.execute("CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, "
                           "name TEXT NOT NULL, checksum TEXT NOT NULL, "
                           "applied_at TIMESTAMPTZ NOT NULL DEFAULT now())")
        applied = dict(connection.execute("SELECT version, checksum FROM schema_migrations").fetchall())
        newer = sorted(set(applied) - {m.version for m in available})
        if newer:
            raise FailedPrecondition(f"the database has schema version {max(newer)}, newer than this release "
                                     f"knows ({len(available)}); upgrade ragkb before connecting it")
        done = []
        for migration in available:
            if migration.version in applied:
                if applied[migration.version] != migration.checksum:
                    raise FailedPrecondition(f"migration {migration.version:04d}_{migration.name} was changed "
                                             "after it was applied; add a new migration instead")
                continue
            connection.execute(migration.sql)
            connection.execute("INSERT INTO schema_migrations(version, name, checksum) VALUES (%s, %s, %s)",
                               (migration.version, migration.name, migration.checksum))
            done.append(migration.version)
    if done:
        log.info("applied schema migrations %s", done)
    return done


class PostgresDatabase:
    """A pooled PostgreSQL database with the control-plane schema migrated; one per DSN per process."""

    dialect = "postgres"

    def __init__(self, dsn: str, *, max_size: int = POOL_MAX_SIZE):
        self.dsn = dsn
        try:
            with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as connection:
                migrate(connection)
        except psycopg.OperationalError as error:
            raise FailedPrecondition(f"cannot reach the control-plane database ({_redacted(dsn)}): "
                                     f"{str(error).strip()}") from None
        # connections are checked when taken, so a database restart or failover costs no failed request
        self._pool = ConnectionPool(dsn, min_size=1, max_size=max_size, kwargs={"autocommit": True},
                                    check=check_idle_connection, name="ragkb-control-plane", open=True)

    def execute(self, sql: str, params: Sequence = ()) -> Result:
        with self._pool.connection() as connection:
            return _run(connection, sql, params)

    def execute_many(self, sql: str, rows: Sequence[Sequence]) -> None:
        with self._pool.connection() as connection, connection.cursor() as cursor:
            cursor.executemany(_placeholders(sql), [tuple(row) for row in rows])

    @contextlib.contextmanager
    def transaction(self) -> Iterator[_Transaction]:
        with self._pool.connection() as connection, connection.transaction():
            yield _Transaction(connection)

    def close(self) -> None:
        """Repositories share the process's pool: closing one of them keeps it open (see `close_database`)."""

    def shutdown(self) -> None:
        self._pool.close()


class _Transaction:
    def __init__(self, connection: psycopg.Connection):
        self._connection = connection

    def execute(self, sql: str, params: Sequence = ()) -> Result:
        return _run(self._connection, sql, params)

    def execute_many(self, sql: str, rows: Sequence[Sequence]) -> None:
        with self._connection.cursor() as cursor:
            cursor.executemany(_placeholders(sql), [tuple(row) for row in rows])


def check_idle_connection(connection: psycopg.Connection) -> None:
    """The pool's check of a connection it is about to hand out, without a round trip when nothing is wrong.

    An idle connection in autocommit mode has nothing to read unless the server closed it (a shutdown,
    restart or `pg_terminate_backend` sends its notice, then the socket's end) or something else went
    wrong; only then is it checked with a round trip, which raises for a closed one, and the pool
    replaces it. Checking every hand-out with a round trip added one to every statement and transaction
    (about five per query on the local stack), to a database that may be a network hop away.
    A backend ended in the moment its connection is handed out has not sent its notice yet, so that one
    statement fails; it is not retried, since an ended backend may have committed before it replied.
    """
    if connection.closed or select.select([connection.fileno()], [], [], 0)[0]:
        ConnectionPool.check_connection(connection)


def _run(connection: psycopg.Connection, sql: str, params: Sequence) -> Result:
    cursor = connection.execute(_placeholders(sql), tuple(params))
    rows = cursor.fetchall() if cursor.description else []
    return Result(rows, cursor.rowcount)


def _placeholders(sql: str) -> str:
    return sql.replace("%", "%%").replace("?", "%s")


def _redacted(dsn: str) -> str:
    """The DSN without its password, for error messages."""
    return re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", re.sub(r"password=\S+", "password=***", dsn))


_databases: dict[str, PostgresDatabase] = {}
_databases_lock = threading.Lock()


def database(dsn: str) -> PostgresDatabase:
    """The process's database for `dsn` (opened, and migrated, on first use)."""
    with _databases_lock:
        if dsn not in _databases:
            _databases[dsn] = PostgresDatabase(dsn)
        return _databases[dsn]


def close_database(dsn: str) -> None:
    """Close the pool of `dsn` (tests dropping a database; processes exit without it)."""
    with _databases_lock:
        opened = _databases.pop(dsn, None)
    if opened is not None:
        opened.shutdown()


def database_for(settings) -> PostgresDatabase | None:
    """Cluster mode's database when the operator set `database_url`; None in embedded mode."""
    return database(settings.database_url) if settings.database_url else None
