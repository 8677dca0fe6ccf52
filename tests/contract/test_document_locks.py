"""One writer per document across indexer replicas: the advisory lock of cluster mode, the striped
process lock of embedded mode."""

from __future__ import annotations

import subprocess
import sys
import threading

import psycopg
import pytest

from services.indexer.locks import LOCK_TCP, LocalDocumentLocks, PostgresDocumentLocks, confirm_held, document_locks
from shared.errors import Unavailable
from tests.conftest import ROOT

HOLD_AND_WAIT = """
import sys, time
from services.indexer.locks import PostgresDocumentLocks
lock = PostgresDocumentLocks(sys.argv[1]).lock("kb", "default", "doc")
assert lock.acquire()
print("held", flush=True)
time.sleep(600)
"""


def test_another_thread_of_the_same_replica_waits_for_the_document(settings):
    locks = document_locks(settings.database_url)
    if settings.database_url:
        assert isinstance(locks, PostgresDocumentLocks)
    else:
        assert isinstance(locks, LocalDocumentLocks)
    lock = locks.lock("kb", "default", "doc")
    with lock:
        taken_elsewhere: list[bool] = []
        thread = threading.Thread(target=lambda: taken_elsewhere.append(
            locks.lock("kb", "default", "doc").acquire(blocking=False)))
        thread.start()
        thread.join()
        assert taken_elsewhere == [False]  # another thread of the same replica waits too
    other = locks.lock("kb", "default", "doc")
    assert other.acquire(blocking=False)
    other.release()
    locks.close()


@pytest.mark.integration
def test_replicas_exclude_each_other_per_document(postgres_dsn):
    first, second = PostgresDocumentLocks(postgres_dsn), PostgresDocumentLocks(postgres_dsn)
    try:
        held = first.lock("kb", "default", "doc")
        assert held.acquire(blocking=False)
        assert not second.lock("kb", "default", "doc").acquire(blocking=False)
        other_document = second.lock("kb", "default", "another")
        assert other_document.acquire(blocking=False)  # other documents are not held up
        other_document.release()
        held.release()
        again = second.lock("kb", "default", "doc")
        assert again.acquire(blocking=False)
        again.release()
    finally:
        first.close()
        second.close()


@pytest.mark.integration
def test_a_killed_writers_lock_is_free_at_once(postgres_dsn):
    """The lock lives in the writer's database session: when its process dies, the server lets go."""
    writer = subprocess.Popen([sys.executable, "-c", HOLD_AND_WAIT, postgres_dsn], cwd=ROOT,
                              stdout=subprocess.PIPE, text=True)
    locks = PostgresDocumentLocks(postgres_dsn)
    try:
        assert writer.stdout.readline().strip() == "held"
        assert not locks.lock("kb", "default", "doc").acquire(blocking=False)
        writer.kill()
        writer.wait(timeout=30)
        lock = locks.lock("kb", "default", "doc")
        assert lock.acquire()  # blocks until the server has ended the dead session
        lock.release()
    finally:
        writer.kill()
        writer.stdout.close()
        locks.close()


def end_lock_sessions(dsn: str) -> int:
    """End every session of this database holding an advisory lock, as a database restart or a network cut
    would; returns once they have exited (their locks released), or fails."""
    with psycopg.connect(dsn, autocommit=True) as admin:
        ended = admin.execute("SELECT pg_terminate_backend(pid, 10000) FROM pg_locks "
                              "WHERE locktype = 'advisory' AND granted AND pid <> pg_backend_pid() "
                              "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
                              ).fetchall()
    assert all(row[0] for row in ended), "a session holding a lock did not exit within 10 s"
    return len(ended)


def test_a_held_lock_is_confirmed_held(settings):
    locks = document_locks(settings.database_url)
    lock = locks.lock("kb", "default", "doc")
    with lock:
        confirm_held(lock)
    locks.close()


@pytest.mark.integration
def test_a_lock_connection_gives_up_on_a_silent_peer_within_seconds(postgres_dsn):
    locks = PostgresDocumentLocks(postgres_dsn)
    try:
        with locks.lock("kb", "default", "doc") as held:
            options = {option.keyword.decode(): (option.val or b"").decode()
                       for option in held._connection.pgconn.info}
        assert {key: options[key] for key in LOCK_TCP} == {key: str(value) for key, value in LOCK_TCP.items()}
    finally:
        locks.close()


@pytest.mark.integration
def test_a_lock_whose_session_ended_is_reported_lost_and_is_free_for_another_replica(postgres_dsn):
    first, second = PostgresDocumentLocks(postgres_dsn), PostgresDocumentLocks(postgres_dsn)
    try:
        held = first.lock("kb", "default", "doc")
        assert held.acquire(blocking=False)
        assert end_lock_sessions(postgres_dsn) == 1
        with pytest.raises(Unavailable, match="document lock kb/default/doc was lost"):
            held.confirm_held()
        taken = second.lock("kb", "default", "doc")
        assert taken.acquire(blocking=False)  # the server let go with the session
        held.release()  # releasing a lost lock is quiet and frees this replica's own threads
        again = first.lock("kb", "default", "other")
        assert again.acquire(blocking=False)
        again.release()
        taken.release()
    finally:
        first.close()
        second.close()


def test_a_build_lock_leaves_every_document_lock_free(settings):
    """A build holds its version's lock while it takes document locks: they must never be the same lock."""
    locks = document_locks(settings.database_url)
    build = locks.build_lock("kb", 2)
    assert build.acquire(blocking=False)
    try:
        for n in range(200):  # more documents than the in-process stripes
            document = locks.lock("kb", "default", f"doc-{n}")
            assert document.acquire(blocking=False)
            document.release()
        assert not locks.build_lock("kb", 2).acquire(blocking=False)
        other_version = locks.build_lock("kb", 3)
        assert other_version.acquire(blocking=False)
        other_version.release()
    finally:
        build.release()
        locks.close()


@pytest.mark.integration
def test_one_replica_builds_a_version(postgres_dsn):
    first, second = PostgresDocumentLocks(postgres_dsn), PostgresDocumentLocks(postgres_dsn)
    try:
        building = first.build_lock("kb", 2)
        assert building.acquire(blocking=False)
        assert not second.build_lock("kb", 2).acquire(blocking=False)
        building.release()
        resumed = second.build_lock("kb", 2)
        assert resumed.acquire(blocking=False)
        resumed.release()
    finally:
        first.close()
        second.close()


def test_a_switch_lock_is_one_per_kb_and_apart_from_builds_and_documents(settings):
    """A switch reconciles (document locks) while it holds its KB's switch lock; a build of the same KB goes on."""
    locks = document_locks(settings.database_url)
    # another replica in cluster mode; another thread of the one process in embedded mode
    other_replica = document_locks(settings.database_url) if settings.database_url else locks
    switching = locks.switch_lock("kb")
    assert switching.acquire(blocking=False)
    try:
        assert not other_replica.switch_lock("kb").acquire(blocking=False)
        for lock in (locks.build_lock("kb", 2), locks.lock("kb", "", "live"), other_replica.switch_lock("other")):
            assert lock.acquire(blocking=False)
            lock.release()
    finally:
        switching.release()
    again = other_replica.switch_lock("kb")
    assert again.acquire(blocking=False)
    again.release()
    locks.close()
    other_replica.close()
