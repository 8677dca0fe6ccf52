"""One small interface over the two SQL engines the control plane runs on.

Statements are written once with `?` placeholders and the syntax both engines
share (`INSERT ... ON CONFLICT ... DO UPDATE`, `RETURNING`); the PostgreSQL
engine turns `?` into psycopg's `%s`. Schemas differ: a SQLite repository
creates its tables itself (one file, one owner), PostgreSQL tables come from
the numbered migrations in shared/state/migrations.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True)
class Result:
    rows: list[tuple]
    rowcount: int

    def one(self) -> tuple | None:
        return self.rows[0] if self.rows else None


class Executor(Protocol):
    def execute(self, sql: str, params: Sequence = ()) -> Result: ...

    def execute_many(self, sql: str, rows: Sequence[Sequence]) -> None: ...


class SqlDatabase(Executor, Protocol):
    dialect: str  # "sqlite" | "postgres"

    def transaction(self) -> contextlib.AbstractContextManager[Executor]:
        """Statements run inside as one transaction (rolled back if the block raises)."""

    def close(self) -> None: ...


class SqliteDatabase:
    """One SQLite file in WAL mode, shared by the threads of a process through one connection."""

    dialect = "sqlite"

    def __init__(self, path: Path, *, schema: str = "", durable: bool = True):
        """`durable=False`: commits skip the fsync (WAL `synchronous=NORMAL`), for records that may be lost on a
        power cut but never corrupt the file (an application crash loses nothing)."""
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, timeout=30, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        if not durable:
            self._db.execute("PRAGMA synchronous=NORMAL")
        if schema:
            self._db.executescript(schema)

    def execute(self, sql: str, params: Sequence = ()) -> Result:
        with self._lock:
            cursor = self._db.execute(sql, tuple(params))
            return Result(cursor.fetchall(), cursor.rowcount)

    def execute_many(self, sql: str, rows: Sequence[Sequence]) -> None:
        with self._lock:
            self._db.executemany(sql, rows)

    def executescript(self, script: str) -> None:
        with self._lock:
            self._db.executescript(script)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[SqliteDatabase]:
        # IMMEDIATE takes the write lock at BEGIN, so two processes never both read-then-write
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def close(self) -> None:
        with self._lock:
            self._db.close()
