"""One writer per document at a time, across every indexer replica.

Indexing, deleting and repairing a document each hold its lock. In embedded mode
there is one indexer, so a striped in-process lock is enough. In cluster mode
several indexer replicas share the stores and the control-plane database, so the
lock is also a PostgreSQL session-level advisory lock, held on its own connection
for as long as the write lasts: PostgreSQL releases it the moment that connection
dies, so a lock that can be taken means no live writer holds the document. That
is what lets an indexer that starts roll back documents a dead writer left
`indexing` without undoing what a live replica is writing right now.

The other side of that: a writer whose lock connection dies (database restart,
network cut) no longer holds the document, and another replica may already be
rolling it back. So a writer confirms it still holds the lock (`confirm_held`)
before each batch it writes, before it sweeps the previous version and before it
marks the document indexed; once the lock is lost it stops without touching the
document again (no further write, no rollback).
"""

from __future__ import annotations

import hashlib
import threading
import zlib

import psycopg
from psycopg_pool import ConnectionPool

from shared.errors import Unavailable

STRIPES = 64
# the first key of the two-key advisory lock space ("dc", "bl", "sw"): documents, builds and switches never
# collide with each other nor with the single-key lock the schema migrations take
DOCUMENT_LOCK_CLASS = 0x6463
BUILD_LOCK_CLASS = 0x626C
SWITCH_LOCK_CLASS = 0x7377
LOCK_POOL_MAX = 16  # documents written at once by one indexer process (each holds one connection)
# A lock connection that silently stops answering (a network cut) is declared dead in about 30 s, not after the
# kernel's ~15 min of retransmits: `confirm_held` must fail fast rather than hold the writer that long.
LOCK_TCP = {"keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5, "keepalives_count": 3,
            "tcp_user_timeout": 30_000}


def _key(kb_name: str, namespace: str, doc_id: str) -> bytes:
    return "\x1f".join((kb_name, namespace, doc_id)).encode()


class LocalDocumentLocks:
    """Striped in-process locks (bounded memory; two documents on one stripe just wait for each other)."""

    def __init__(self, stripes: int = STRIPES):
        self._locks = [threading.Lock() for _ in range(stripes)]
        self._builds: dict[tuple[str, int], threading.Lock] = {}
        self._switches: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def lock(self, kb_name: str, namespace: str, doc_id: str) -> threading.Lock:
        return self._locks[zlib.crc32(_key(kb_name, namespace, doc_id)) % len(self._locks)]

    def build_lock(self, kb_name: str, version: int) -> threading.Lock:
        """One builder of a KB version (a lock of its own: a build takes document locks while it holds it)."""
        with self._guard:
            return self._builds.setdefault((kb_name, version), threading.Lock())

    def switch_lock(self, kb_name: str) -> threading.Lock:
        """One change of a KB's live version at a time (switch, rollback, repair)."""
        with self._guard:
            return self._switches.setdefault(kb_name, threading.Lock())

    def close(self) -> None:
        """Nothing to release: the locks live and die with the process."""


class PostgresDocumentLocks:
    """The in-process stripe first (threads of one replica queue locally), then the advisory lock."""

    def __init__(self, dsn: str):
        self._local = LocalDocumentLocks()
        self._pool = ConnectionPool(dsn, min_size=0, max_size=LOCK_POOL_MAX, kwargs={"autocommit": True, **LOCK_TCP},
                                    check=ConnectionPool.check_connection, name="ragkb-document-locks", open=True)

    def lock(self, kb_name: str, namespace: str, doc_id: str) -> DocumentLock:
        return DocumentLock(self._pool, self._local.lock(kb_name, namespace, doc_id), kb_name, namespace, doc_id)

    def build_lock(self, kb_name: str, version: int) -> DocumentLock:
        """One builder of a KB version across every replica; freed when the building replica dies."""
        return DocumentLock(self._pool, self._local.build_lock(kb_name, version), kb_name, "", f"v{version}",
                            lock_class=BUILD_LOCK_CLASS)

    def switch_lock(self, kb_name: str) -> DocumentLock:
        """One change of a KB's live version at a time across every replica, so a repair never undoes the alias
        step of a switch another replica is making."""
        return DocumentLock(self._pool, self._local.switch_lock(kb_name), kb_name, "", "live",
                            lock_class=SWITCH_LOCK_CLASS)

    def close(self) -> None:
        self._pool.close()


class DocumentLock:
    """A `threading.Lock`-like lock (`acquire(blocking)`, `release`, `with`) over an advisory lock."""

    def __init__(self, pool: ConnectionPool, local: threading.Lock, kb_name: str, namespace: str, doc_id: str, *,
                 lock_class: int = DOCUMENT_LOCK_CLASS):
        self._pool = pool
        self._local = local
        self._name = f"{kb_name}/{namespace}/{doc_id}"
        self._class = lock_class
        digest = hashlib.blake2b(_key(kb_name, namespace, doc_id), digest_size=4).digest()
        self._object_key = int.from_bytes(digest, "big", signed=True)
        self._connection: psycopg.Connection | None = None

    def acquire(self, blocking: bool = True) -> bool:
        if not self._local.acquire(blocking):
            return False
        try:
            connection = self._pool.getconn()
        except Exception as error:
            self._local.release()
            raise Unavailable(f"document lock {self._name}: control-plane database unreachable: {error}") from None
        try:
            if blocking:
                connection.execute("SELECT pg_advisory_lock(%s, %s)", (self._class, self._object_key))
                taken = True
            else:
                row = connection.execute("SELECT pg_try_advisory_lock(%s, %s)",
                                         (self._class, self._object_key)).fetchone()
                taken = bool(row[0])
        except BaseException:
            self._pool.putconn(connection)  # the pool checks (and replaces) a broken connection
            self._local.release()
            raise
        if not taken:
            self._pool.putconn(connection)
            self._local.release()
            return False
        self._connection = connection
        return True

    def release(self) -> None:
        connection, self._connection = self._connection, None
        try:
            if connection is not None:
                connection.execute("SELECT pg_advisory_unlock(%s, %s)", (self._class, self._object_key))
        except psycopg.Error:
            # a connection that broke took the lock with it: closing it makes sure the server lets go
            connection.close()
        finally:
            if connection is not None:
                self._pool.putconn(connection)
            self._local.release()

    def confirm_held(self) -> None:
        """Raise Unavailable unless this lock's database session is still alive (so the lock still held)."""
        if self._connection is None:
            raise Unavailable(f"document lock {self._name} is not held")
        try:
            self._connection.execute("SELECT 1")
        except psycopg.Error as error:
            raise Unavailable(f"document lock {self._name} was lost: its database session ended ({error})") from None

    def __enter__(self) -> DocumentLock:
        self.acquire()
        return self

    def __exit__(self, *_) -> None:
        self.release()


def confirm_held(lock: threading.Lock | DocumentLock) -> None:
    """Raise Unavailable if `lock` was lost since it was taken; a process lock cannot be while its process lives."""
    if isinstance(lock, DocumentLock):
        lock.confirm_held()


def document_locks(database_url: str) -> LocalDocumentLocks | PostgresDocumentLocks:
    """Advisory locks in cluster mode (a DSN), striped process locks in embedded mode."""
    return PostgresDocumentLocks(database_url) if database_url else LocalDocumentLocks()
