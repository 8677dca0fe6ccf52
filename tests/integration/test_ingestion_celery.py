"""Asynchronous ingestion on a real Redis with real Celery worker processes.

The parser and indexer are the in-process gRPC servers of an embedded stack whose
gateway publishes to Redis; workers are `python -m services.worker.main`
subprocesses pointed at those servers.
"""

from __future__ import annotations

import io
import sqlite3
from contextlib import redirect_stdout

import pytest

from ragkb import cli
from ragkb.client import RagkbApiError, RagkbClient, iter_files
from ragkb.embedded import EmbeddedStack
from services.indexer.registry import DocumentRegistry
from services.worker.celery_app import visibility_timeout_s
from services.worker.fairness import RedisGate
from shared import components, kb_settings
from shared.config import Settings
from shared.contracts import chunk_pb2
from shared.jobs import JobStore
from shared.kb import KnowledgeBaseCatalog
from tests.conftest import SAMPLES, shared_data
from tests.integration.ingestion_support import Worker, wait_for

pytestmark = pytest.mark.integration

SLOTS = 2          # jobs of one namespace queued or running at once
STEP_TIMEOUT_S = 60.0  # generous: parsing runs in a subprocess and the test machine is shared


@pytest.fixture(scope="module")
def stack(redis, tmp_path_factory):
    settings = Settings(data_dir=tmp_path_factory.mktemp("data"), broker_url=redis.url, ingest_workers=1,
                        ingest_namespace_slots=SLOTS, ingest_step_timeout_s=STEP_TIMEOUT_S, reconcile_interval_s=0,
                        rpc_timeout_s=300)  # a new KB loads its embedder within the call; the machine is shared
    running = EmbeddedStack(settings, ephemeral_ports=True).start()
    yield running
    running.stop()


class Workers:
    """The worker process of the module; tests may kill it and start another."""

    def __init__(self, settings: Settings, log_dir):
        self._settings, self._log_dir, self._started = settings, log_dir, 0
        self.current = self.start()

    def start(self) -> Worker:
        self._started += 1
        self.current = Worker(self._settings, self._log_dir / f"worker-{self._started}.log")
        return self.current


@pytest.fixture(scope="module")
def workers(stack, tmp_path_factory):
    pool = Workers(stack.settings, tmp_path_factory.mktemp("worker-logs"))
    yield pool
    pool.current.stop()


@pytest.fixture(scope="module")
def client(stack, workers):
    api = RagkbClient(stack.http_url)
    yield api
    api.close()


def stores(stack, kb: str):
    config = KnowledgeBaseCatalog.for_settings(stack.settings).get(kb)
    return components.keyword_store_for(config, stack.settings), components.vector_store_for(config, stack.settings)


@pytest.fixture(scope="module")
def registry(stack):
    opened = DocumentRegistry(stack.settings.data_dir / "registry.sqlite")
    yield opened
    opened.close()


def assert_stores_match_registry(stack, registry, kb: str) -> int:
    """Per document, both stores hold exactly the registry's chunk ids; totals agree. Returns the total."""
    keyword, vector = stores(stack, kb)
    total = 0
    for doc in registry.list(kb):
        assert len(set(doc.chunk_ids)) == len(doc.chunk_ids), doc.doc_id
        assert keyword.chunk_ids(doc.namespace, doc.doc_id) == set(doc.chunk_ids), doc.doc_id
        # Milvus Lite 2.5 cannot filter on a non-ASCII string literal (a Chinese doc id); the totals below
        # still cover those documents
        if doc.doc_id.isascii():
            assert vector.chunk_ids(doc.namespace, doc.doc_id) == set(doc.chunk_ids), doc.doc_id
        total += len(doc.chunk_ids)
    assert keyword.count() == vector.count() == total
    return total


def long_markdown(sections: int, word: str = "lumen") -> bytes:
    parts = ["# Field manual\n"]
    for i in range(sections):
        sentence = f"Section {i} explains procedure {i} of the {word} robot, step by step, with checks. "
        parts.append(f"## Procedure {i}\n\n" + sentence * 8 + "\n")
    return "\n".join(parts).encode()


# no readable text in any format: these must fail whatever the parser supports
UNREADABLE = ("empty.txt", "fake-text-all-whitespace.txt", "password.pdf", "password_protected.xlsx")


CRASH_KB = "chunker: {max_chars: 200, min_section_chars: 0, overlap_chars: 0}\n"


def short_sections(count: int) -> bytes:
    return "\n".join(["# Checks\n"] + [f"## Check {i}\n\nInspect wheel {i} and log reading {i}.\n"
                                         for i in range(count)]).encode()


def test_good_files_finish_and_hostile_files_fail_with_their_reason(stack, client, registry):
    kb = "mixed"
    client.create_kb(kb)
    kept = client.wait([client.upload(kb, "kept.md", b"# Kept\n\nA document stored before the batch.")["job_id"]])
    assert kept[0]["state"] == "done"
    kept_before = registry.get(kb, "default", "kept.md")
    good = [(p, n) for p, n in iter_files(SAMPLES) if n != "README.md"]
    hostile = iter_files(shared_data("docs", "hostile"))
    assert {n for _, n in hostile} >= set(UNREADABLE)
    refused: dict[str, str] = {}
    jobs: dict[str, str] = {}
    for path, name in [*good, *hostile]:
        try:
            jobs[name] = client.upload(kb, name, path.read_bytes())["job_id"]
        except RagkbApiError as error:  # a type the parser does not take is refused at upload
            refused[name] = error.message
    finished = {job["filename"]: job for job in client.wait(jobs.values(), timeout_s=600)}

    for _, name in good:
        assert finished[name]["state"] == "done", finished.get(name) or refused.get(name)
        assert finished[name]["chunks_done"] == finished[name]["chunks_total"] > 0
    for _, name in hostile:
        if name in refused:
            assert name in refused[name] or "unsupported" in refused[name], refused[name]
            continue
        job = finished[name]
        if name in UNREADABLE or job["state"] != "done":
            assert job["state"] == "failed" and job["error"].strip(), job
        else:  # a damaged file the parser recovered: then it is indexed completely
            assert job["chunks_done"] == job["chunks_total"] > 0, job
    indexed = {doc.doc_id for doc in registry.list(kb)}
    recovered = {name for name, job in finished.items() if job["state"] == "done"}
    assert indexed == recovered | {"kept.md"}
    assert not indexed & set(UNREADABLE)
    assert registry.get(kb, "default", "kept.md") == kept_before  # nothing already stored is touched
    assert_stores_match_registry(stack, registry, kb)

    failed = finished["fake-text-all-whitespace.txt"]
    retried = client.retry_job(failed["job_id"])
    assert retried["job_id"] != failed["job_id"] and retried["state"] == "queued"
    again = client.wait([retried["job_id"]], timeout_s=120)[0]
    assert again["state"] == "failed" and again["error"] == failed["error"]
    with pytest.raises(RagkbApiError, match="no longer stored"):  # a done job's upload is released
        client.retry_job(finished[good[0][1]]["job_id"])


def test_worker_killed_mid_job_is_redelivered_and_finishes_exactly(stack, client, workers, registry):
    kb = "crash"
    # many short chunks: several progress steps, each quick even on a busy machine
    client.create_kb(kb, config_yaml=CRASH_KB)
    job_id = client.upload(kb, "manual.md", short_sections(200))["job_id"]
    batch = KnowledgeBaseCatalog.for_settings(stack.settings).get(kb).embedder.batch_size
    mid = wait_for(lambda: (job := client.job(job_id))["state"] == "embedding"
                   and batch <= job["chunks_done"] < job["chunks_total"] and job,
                   timeout_s=120, interval_s=0.05, what="a job half-way through embedding")
    workers.current.kill()
    assert client.job(job_id)["state"] not in ("done", "failed")

    workers.start()
    # the unacknowledged task comes back after the visibility timeout, counted from its delivery
    done = client.wait([job_id], timeout_s=visibility_timeout_s(STEP_TIMEOUT_S) + 120)[0]
    assert done["state"] == "done", done
    assert done["attempts"] >= 2
    assert done["chunks_done"] == done["chunks_total"] == mid["chunks_total"]
    doc = registry.get(kb, "default", "manual.md")
    assert doc.status == "indexed" and len(doc.chunk_ids) == mid["chunks_total"]
    assert assert_stores_match_registry(stack, registry, kb) == mid["chunks_total"]


def test_reingest_skips_unchanged_replaces_changed_and_deletes(stack, client, registry):
    kb = "reingest"
    client.create_kb(kb)
    original = "# Dock\n\n## Charging\n\nThe dock charges a quokka battery overnight.\n\n## Storage\n\nKeep it dry.\n"
    first = client.wait([client.upload(kb, "dock.md", original.encode())["job_id"]])[0]
    assert (first["state"], first["outcome"]) == ("done", "created")
    before = registry.get(kb, "default", "dock.md")

    same = client.wait([client.upload(kb, "dock.md", original.encode())["job_id"]])[0]
    assert (same["state"], same["outcome"]) == ("done", "unchanged")
    assert registry.get(kb, "default", "dock.md") == before  # nothing written, version unchanged

    changed = original.replace("quokka", "zebracorn")
    update = client.wait([client.upload(kb, "dock.md", changed.encode())["job_id"]])[0]
    assert (update["state"], update["outcome"]) == ("done", "updated")
    keyword, _ = stores(stack, kb)
    where = chunk_pb2.SearchFilter(namespaces=["default"])
    assert keyword.search("quokka", where, 10) == []
    assert [c.chunk.doc_id for c in keyword.search("zebracorn", where, 10)] == ["dock.md"]
    assert registry.get(kb, "default", "dock.md").version == before.version + 1
    assert_stores_match_registry(stack, registry, kb)

    client.delete_document(kb, "dock.md")
    keyword, vector = stores(stack, kb)
    assert keyword.chunk_ids("default", "dock.md") == vector.chunk_ids("default", "dock.md") == set()
    assert registry.get(kb, "default", "dock.md") is None


def run_cli(*args: str) -> str:
    out = io.StringIO()
    with redirect_stdout(out):
        assert cli.main(list(args)) == 0
    return out.getvalue()


def test_reconciler_repairs_a_store_that_lost_and_gained_chunks(stack, client, registry):
    kb = "reconcile"
    client.create_kb(kb)
    done = client.wait([client.upload(kb, "guide.md", long_markdown(6, "atlas"))["job_id"]])[0]
    assert done["state"] == "done"
    ids = sorted(registry.get(kb, "default", "guide.md").chunk_ids)
    keyword, vector = stores(stack, kb)
    vector.delete_ids(ids[:2])
    keyword.delete_ids(ids[2:3])
    stray = keyword.search("atlas", chunk_pb2.SearchFilter(namespaces=["default"]), 1)[0].chunk
    stray.chunk_id = "stray-chunk"
    keyword.upsert([stray])

    preview = client.reconcile(kb, dry_run=True)
    assert [(r["doc_id"], r["action"], r["restored_vector"], r["restored_keyword"], r["strays_deleted"])
            for r in preview["repairs"]] == [("guide.md", "would-repair", 2, 1, 1)]
    assert vector.chunk_ids("default", "guide.md") == set(ids[2:])  # a dry run changes nothing

    output = run_cli("--url", stack.http_url, "reconcile", "--kb", kb)
    assert "1 repaired" in output and "guide.md: repaired" in output
    assert_stores_match_registry(stack, registry, kb)
    assert client.reconcile(kb)["repairs"] == []

    # lost from both stores: cannot be rebuilt without the source; the next ingestion re-indexes it
    vector.delete_ids(ids[:1])
    keyword.delete_ids(ids[:1])
    registry_chunks = registry.chunks(kb, "default", "guide.md", ids[:1])
    registry.keep_chunks(kb, "default", "guide.md", ids[1:])
    assert registry_chunks and client.reconcile(kb)["repairs"][0]["action"] == "needs-reingest"
    again = client.wait([client.upload(kb, "guide.md", long_markdown(6, "atlas"))["job_id"]])[0]
    assert (again["state"], again["outcome"]) == ("done", "updated")
    assert_stores_match_registry(stack, registry, kb)


def test_folder_sync_propagates_added_changed_moved_and_deleted_files(stack, client, registry, tmp_path):
    kb = "synced"
    client.create_kb(kb)
    (tmp_path / "a.md").write_text("# A\n\nAlpha original text.", encoding="utf-8")
    (tmp_path / "b.md").write_text("---\ndoc_id: handbook\n---\n# 手册\n\n机器人的充电时间为两小时。", encoding="utf-8")
    (tmp_path / "c.txt").write_text("Gamma notes.", encoding="utf-8")
    assert "3 synced (3 created)" in run_cli("--url", stack.http_url, "sync", str(tmp_path), "--kb", kb)
    handbook = registry.get(kb, "default", "handbook")

    (tmp_path / "a.md").write_text("# A\n\nAlpha edited text.", encoding="utf-8")
    (tmp_path / "moved").mkdir()
    (tmp_path / "b.md").rename(tmp_path / "moved" / "b.md")
    (tmp_path / "c.txt").unlink()
    output = run_cli("--url", stack.http_url, "sync", str(tmp_path), "--kb", kb)
    assert "2 synced (1 unchanged, 1 updated), 1 moved, 0 unchanged, 1 deleted, 0 failed" in output

    moved = registry.get(kb, "default", "handbook")
    assert moved.source_uri == "moved/b.md"
    assert (moved.version, moved.chunk_ids) == (handbook.version, handbook.chunk_ids)  # not re-embedded
    assert registry.get(kb, "default", "c.txt") is None
    keyword, vector = stores(stack, kb)
    assert keyword.chunk_ids("default", "c.txt") == vector.chunk_ids("default", "c.txt") == set()
    assert {d.doc_id for d in registry.list(kb)} == {"a.md", "handbook"}
    assert_stores_match_registry(stack, registry, kb)
    again = run_cli("--url", stack.http_url, "sync", str(tmp_path), "--kb", kb)
    assert "0 synced (none), 0 moved, 2 unchanged, 0 deleted, 0 failed" in again


def test_a_bulk_namespace_does_not_delay_another_beyond_the_bound(stack, client):
    """Bound: a job submitted to B starts after at most SLOTS more jobs of A (one worker thread, prefetch 1)."""
    kb = "fair"
    client.create_kb(kb)
    bulk = [client.upload(kb, f"a-{i}.md", f"# A {i}\n\nBulk document number {i}.".encode(), namespace="A")["job_id"]
            for i in range(200)]
    single = client.upload(kb, "b.md", "# B\n\nThe one document of team B.".encode(), namespace="B")
    b_done = client.wait([single["job_id"]], timeout_s=300)[0]
    assert b_done["state"] == "done"

    jobs = client.list_jobs(kb, namespace="A", limit=1000)
    ahead = [j for j in jobs if j["started_at"] and single["created_at"] < j["started_at"] < b_done["started_at"]]
    assert len(ahead) <= SLOTS, [j["filename"] for j in ahead]
    assert sum(1 for j in jobs if j["state"] == "queued") > 100  # A was still far from done: the bound mattered

    for job in client.list_jobs(kb, namespace="A", limit=1000):
        if job["state"] == "queued":
            try:
                client.cancel_job(job["job_id"])
            except RagkbApiError as error:  # the worker got to it first
                assert error.status == 412 and "already" in error.message
    finished = client.wait(bulk, timeout_s=300)
    assert {j["state"] for j in finished} <= {"done", "cancelled"}
    assert sum(j["state"] == "cancelled" for j in finished) > 100
    gate = RedisGate(stack.settings.broker_url, slots=SLOTS)
    try:
        assert wait_for(lambda: gate.waiting("A") == 0, timeout_s=60, what="A's waiting list drained")
    finally:
        gate.close()
    with pytest.raises(RagkbApiError, match="only queued or running"):
        client.cancel_job(finished[0]["job_id"])


def test_a_starting_worker_resumes_jobs_left_behind_by_dead_processes(stack, client, workers):
    """One job was recorded but never published (its gateway died), one was picked up by a worker whose
    task message is gone; both have been silent past the visibility timeout. A worker starting runs them."""
    client.create_kb("resume")
    jobs = JobStore(stack.settings.data_dir)
    # recorded as the gateway records a job: with the KB's settings for the worker
    settings = kb_settings.narrow(kb_settings.for_catalog(KnowledgeBaseCatalog.for_settings(stack.settings),
                                                          "resume"), "worker").SerializeToString()
    try:
        lost = jobs.create(kb="resume", namespace="default", doc_id="lost.md", filename="lost.md",
                           content=b"# Lost\n\nThe lost job is found by the next worker.", kb_settings=settings)
        stuck = jobs.create(kb="resume", namespace="default", doc_id="stuck.md", filename="stuck.md",
                            content=b"# Stuck\n\nThe stuck job is finished by the next worker.", kb_settings=settings)
        assert jobs.start(stuck.job_id)
    finally:
        jobs.close()
    with sqlite3.connect(stack.settings.data_dir / "jobs.sqlite") as db:
        db.execute("UPDATE jobs SET updated_at = '2000-01-01T00:00:00.000000+00:00' WHERE job_id IN (?, ?)",
                   (lost.job_id, stuck.job_id))
    workers.current.stop()
    workers.start()
    finished = {job["doc_id"]: job for job in client.wait([lost.job_id, stuck.job_id], timeout_s=600)}
    assert [finished[d]["state"] for d in ("lost.md", "stuck.md")] == ["done", "done"]
    assert (finished["lost.md"]["attempts"], finished["stuck.md"]["attempts"]) == (1, 2)
