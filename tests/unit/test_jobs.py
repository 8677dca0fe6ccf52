"""The SQLite job database's upgrade path, per-namespace fairness, sync plans, folder manifests and the Celery
settings. Job records themselves are tested on both backends in tests/contract/test_jobs_contract.py."""

from __future__ import annotations

import hashlib
import sqlite3
import threading

import pytest

from ragkb.folder import ManifestError, scan
from services.gateway.sync import plan_sync
from services.worker.celery_app import create_celery, visibility_timeout_s
from services.worker.fairness import LocalGate
from services.worker.queue import InProcessQueue
from shared.config import Settings
from shared.contracts import gateway_pb2, indexer_pb2
from shared.errors import InvalidArgument
from shared.jobs import JobStore

pytestmark = pytest.mark.unit


def new_job(jobs: JobStore, namespace: str = "default", name: str = "a.md") -> gateway_pb2.IngestJob:
    return jobs.create(kb="kb", namespace=namespace, doc_id=name, filename=name, content=b"# A\n\ntext")


def test_a_job_database_from_before_attempts_is_migrated(tmp_path):
    db = sqlite3.connect(tmp_path / "jobs.sqlite")
    db.execute("CREATE TABLE jobs (job_id TEXT PRIMARY KEY, kb TEXT NOT NULL, namespace TEXT NOT NULL, "
               "doc_id TEXT NOT NULL, filename TEXT NOT NULL, upload_path TEXT NOT NULL, state INTEGER NOT NULL, "
               "error TEXT NOT NULL DEFAULT '', chunks_total INTEGER NOT NULL DEFAULT 0, "
               "chunks_done INTEGER NOT NULL DEFAULT 0, outcome INTEGER NOT NULL DEFAULT 0, "
               "metadata TEXT NOT NULL DEFAULT '{}', created_at TEXT NOT NULL, updated_at TEXT NOT NULL)")
    db.execute("INSERT INTO jobs(job_id, kb, namespace, doc_id, filename, upload_path, state, created_at, updated_at)"
               " VALUES ('old', 'kb', 'default', 'a', 'a.md', '/nowhere', 5, 't', 't')")
    db.commit()
    db.close()
    store = JobStore(tmp_path)
    try:
        assert store.get("old").attempts == 0 and store.get("old").state == gateway_pb2.JOB_STATE_DONE
    finally:
        store.close()


# --- fairness -----------------------------------------------------------------------------------------------


def test_a_bulk_namespace_does_not_hold_back_another():
    gate = LocalGate(slots=2)
    admitted = [job for i in range(200) for job in gate.admit("A", f"a{i}")]
    assert admitted == ["a0", "a1"] and gate.waiting("A") == 198
    assert gate.admit("B", "b0") == ["b0"]  # B is admitted at once, whatever A has queued
    assert gate.release("A", "a0") == ["a2"]  # A's slot passes to A's next job, in order
    assert gate.release("B", "b0") == [] and gate.waiting("B") == 0


@pytest.mark.parametrize("slots", [pytest.param(0, id="zero"), pytest.param(-1, id="negative"),
                                   pytest.param(1.5, id="fraction")])
def test_slots_must_be_a_positive_integer(slots):
    with pytest.raises(ValueError, match=f"got {slots}"):
        LocalGate(slots=slots)


def test_in_process_queue_runs_another_namespace_within_the_bound(tmp_path):
    """One thread, one slot per namespace: B's job starts after at most 1 more job of A."""
    jobs = JobStore(tmp_path)
    started: list[str] = []
    gate_open = threading.Event()
    finished = threading.Semaphore(0)

    def run_job(job_id: str) -> None:
        gate_open.wait(10)
        started.append(jobs.get(job_id).namespace)
        jobs.update(job_id, state=gateway_pb2.JOB_STATE_DONE)
        finished.release()

    queue = InProcessQueue(run_job, jobs, workers=1, slots=1)
    try:
        for i in range(50):
            queue.submit(new_job(jobs, "A", f"a{i}.md").job_id, "A")
        queue.submit(new_job(jobs, "B", "b.md").job_id, "B")
        gate_open.set()
        for _ in range(51):
            assert finished.acquire(timeout=30)
    finally:
        queue.close()
        jobs.close()
    assert started.index("B") <= 1
    assert started.count("A") == 50


# --- folder sync ----------------------------------------------------------------------------------------------

H1, H2 = "1" * 64, "2" * 64


def record(doc_id: str, content_hash: str, source_uri: str) -> indexer_pb2.DocumentRecord:
    return indexer_pb2.DocumentRecord(doc_id=doc_id, content_hash=content_hash, source_uri=source_uri)


def entry(doc_id: str, content_hash: str, source_uri: str) -> gateway_pb2.SyncEntry:
    return gateway_pb2.SyncEntry(doc_id=doc_id, content_hash=content_hash, source_uri=source_uri)


def test_sync_plan_sorts_every_case():
    held = [record("same", H1, "same.md"), record("edited", H1, "edited.md"), record("moved", H1, "old/m.md"),
            record("gone", H1, "gone.md")]
    plan = plan_sync([entry("same", H1, "same.md"), entry("edited", H2, "edited.md"), entry("moved", H1, "new/m.md"),
                      entry("added", H2, "added.md")], held)
    assert sorted(plan.upload) == ["added", "edited", "moved"]
    assert plan.moved == ["moved"] and plan.unchanged == ["same"] and plan.deleted == ["gone"]


@pytest.mark.parametrize("entries, message", [
    pytest.param([entry("a", H1, "a.md"), entry("a", H2, "b.md")], "given twice", id="duplicate-id"),
    pytest.param([entry("a", "not-a-hash", "a.md")], "sha256", id="bad-hash"),
    pytest.param([entry("", H1, "a.md")], "no doc_id", id="missing-id"),
])
def test_sync_plan_refuses_a_broken_manifest(entries, message):
    with pytest.raises(InvalidArgument, match=message):
        plan_sync(entries, [])


def test_folder_scan_takes_ids_from_sidecar_front_matter_or_path(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "plain.md").write_text("# Plain\n\ntext", encoding="utf-8")
    (tmp_path / "front.md").write_text("---\ndoc_id: handbook-7\ntitle: x\n---\n# 手册\n\n内容", encoding="utf-8")
    (tmp_path / "sub" / "notes.txt").write_bytes(b"notes")
    (tmp_path / "sub" / "notes.txt.docid").write_text("notes-1\n", encoding="utf-8")
    files = {f.source_uri: f for f in scan(tmp_path)}
    assert set(files) == {"plain.md", "front.md", "sub/notes.txt"}
    assert [files[k].doc_id for k in ("plain.md", "front.md", "sub/notes.txt")] == ["plain.md", "handbook-7", "notes-1"]
    assert files["sub/notes.txt"].content_hash == hashlib.sha256(b"notes").hexdigest()


def test_folder_scan_refuses_two_files_with_one_id(tmp_path):
    for name in ("a.md", "b.md"):
        (tmp_path / name).write_text("---\ndoc_id: same\n---\ntext", encoding="utf-8")
    with pytest.raises(ManifestError, match="both have doc id 'same'"):
        scan(tmp_path)


# --- Celery settings --------------------------------------------------------------------------------------------


def test_celery_app_is_configured_for_redelivery():
    app = create_celery(Settings(broker_url="redis://127.0.0.1:1/0", ingest_step_timeout_s=40))
    conf = app.conf
    assert conf.task_acks_late and conf.task_reject_on_worker_lost and conf.worker_prefetch_multiplier == 1
    options = conf.broker_transport_options
    assert options["visibility_timeout"] == visibility_timeout_s(40) == 100
    assert options["unacked_restore_interval"] <= 2 and options["unacked_restore_throttle"] <= 1


@pytest.mark.parametrize("settings, message", [
    pytest.param(Settings(broker_url="amqp://x"), "not a redis:// URL", id="not-redis"),
    pytest.param(Settings(broker_url="", ), "not a redis:// URL", id="empty"),
    pytest.param(Settings(broker_url="redis://x", ingest_step_timeout_s=0), "must be > 0", id="zero-timeout"),
])
def test_celery_app_refuses_bad_settings(settings, message):
    with pytest.raises(ValueError, match=message):
        create_celery(settings)
