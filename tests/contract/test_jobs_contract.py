"""Job records and uploads: the same behaviour on SQLite + files and on PostgreSQL."""

from __future__ import annotations

import multiprocessing
import random
import threading

import pytest

from services.gateway.metrics import GatewayMetrics
from services.worker.fairness import LocalGate
from services.worker.tasks import TaskContext, resume_abandoned
from shared.config import Settings
from shared.contracts import gateway_pb2
from shared.errors import FailedPrecondition, NotFound
from shared.jobs import JobStore

CONTENT = "# 标题\n\nChinese and English text / 中文与英文。".encode()


def new_job(jobs: JobStore, namespace: str = "default", name: str = "a.md") -> gateway_pb2.IngestJob:
    return jobs.create(kb="kb", namespace=namespace, doc_id=name, filename=name, content=b"# A\n\ntext")


def new_chinese_job(jobs: JobStore) -> gateway_pb2.IngestJob:
    return jobs.create(kb="kb", namespace="default", doc_id="笔记.md", filename="笔记.md", content=CONTENT,
                       metadata_json='{"lang": "zh"}')


@pytest.fixture
def jobs(settings):
    store = JobStore.for_settings(settings)
    yield store
    store.close()


def test_a_job_keeps_its_record_and_its_upload(jobs):
    job = new_chinese_job(jobs)
    assert job.state == gateway_pb2.JOB_STATE_QUEUED and job.filename == "笔记.md" and job.attempts == 0
    assert jobs.get(job.job_id) == job
    assert jobs.upload_of(job.job_id) == (CONTENT, '{"lang": "zh"}')
    with pytest.raises(NotFound, match="does not exist"):
        jobs.get("nope")


def test_a_job_keeps_the_kb_settings_it_was_accepted_with_and_a_retry_takes_new_ones(jobs):
    accepted = "设置 settings \x00\xff".encode()  # any bytes: a serialized KnowledgeBaseSettings
    job = jobs.create(kb="kb", namespace="default", doc_id="a.md", filename="a.md", content=CONTENT,
                      kb_settings=accepted)
    assert jobs.kb_settings_of(job.job_id) == accepted
    assert jobs.kb_settings_of(new_job(jobs).job_id) == b""
    jobs.update(job.job_id, state=gateway_pb2.JOB_STATE_FAILED)
    kept = jobs.retry(job.job_id)
    assert jobs.kb_settings_of(kept.job_id) == accepted
    jobs.update(kept.job_id, state=gateway_pb2.JOB_STATE_FAILED)
    assert jobs.kb_settings_of(jobs.retry(kept.job_id, kb_settings=b"renewed").job_id) == b"renewed"


def test_cluster_uploads_need_no_disk(settings, jobs):
    job = new_chinese_job(jobs)
    uploads = settings.data_dir / "uploads"
    on_disk = list(uploads.iterdir()) if uploads.exists() else []
    assert bool(on_disk) == (not settings.database_url)
    assert jobs.upload_of(job.job_id)[0] == CONTENT


def test_start_claims_a_queued_job_once_per_runner(settings, jobs):
    job = new_job(jobs)
    other = JobStore.for_settings(settings)
    try:
        assert jobs.start(job.job_id)
        assert not other.start(job.job_id)  # running under another runner: left alone, not failed
        assert jobs.start(job.job_id)  # a redelivery to the runner holding it
        current = jobs.get(job.job_id)
        assert current.state == gateway_pb2.JOB_STATE_PARSING and current.attempts == 2
        jobs.requeue(job.job_id, "interrupted while parsing")
        assert other.start(job.job_id)  # queued again: any runner may take it
    finally:
        other.close()


def test_a_delivery_that_finds_its_job_held_elsewhere_knows_when_to_look_again(settings, jobs):
    job = new_job(jobs)
    assert jobs.takeover_in(job.job_id) is None  # queued: anyone may take it now
    other = JobStore.for_settings(settings, stale_after_s=600)
    impatient = JobStore.for_settings(settings, stale_after_s=0)
    try:
        assert other.start(job.job_id)
        assert other.takeover_in(job.job_id) is None  # its own
        assert 3500 < jobs.takeover_in(job.job_id) <= 3600  # this store's bound (3600 s), less the silence
        assert impatient.takeover_in(job.job_id) == 0
        other.update(job.job_id, state=gateway_pb2.JOB_STATE_DONE)
        assert jobs.takeover_in(job.job_id) is None
    finally:
        other.close()
        impatient.close()


def test_a_silent_runner_loses_its_job(settings, jobs):
    job = new_job(jobs)
    assert jobs.start(job.job_id)
    successor = JobStore.for_settings(settings, stale_after_s=0.0)
    try:
        assert successor.start(job.job_id)  # the first runner has been silent longer than the bound
        assert successor.get(job.job_id).attempts == 2
    finally:
        successor.close()


def test_a_runner_taken_over_can_no_longer_write_its_job(settings, jobs):
    """A runner that comes back after its job was taken over neither overwrites progress nor ends the job."""
    job = new_job(jobs)
    assert jobs.start(job.job_id)
    assert jobs.advance(job.job_id, state=gateway_pb2.JOB_STATE_EMBEDDING, chunks_total=4, chunks_done=1)
    successor = JobStore.for_settings(settings, stale_after_s=0.0)
    try:
        assert successor.start(job.job_id)
        assert successor.advance(job.job_id, state=gateway_pb2.JOB_STATE_EMBEDDING, chunks_total=4, chunks_done=3)
        assert not jobs.advance(job.job_id, state=gateway_pb2.JOB_STATE_EMBEDDING, chunks_done=2)
        assert not jobs.advance(job.job_id, state=gateway_pb2.JOB_STATE_FAILED, error="step deadline")
        current = jobs.get(job.job_id)
        assert (current.state, current.chunks_done, current.error) == (gateway_pb2.JOB_STATE_EMBEDDING, 3, "")
        assert successor.advance(job.job_id, state=gateway_pb2.JOB_STATE_DONE, chunks_done=4)
        assert jobs.get(job.job_id).state == gateway_pb2.JOB_STATE_DONE
    finally:
        successor.close()
    other = new_job(jobs, name="b.md")  # writes that are not a runner's (cancel) need no claim
    jobs.cancel(other.job_id)
    assert jobs.get(other.job_id).state == gateway_pb2.JOB_STATE_CANCELLED


def test_counts_by_state_and_list_limit(jobs):
    for namespace in ("a", "a", "b"):
        new_job(jobs, namespace=namespace)
    jobs.update(jobs.list("kb", "a")[-1].job_id, state=gateway_pb2.JOB_STATE_DONE)
    assert len(jobs.list("kb", limit=2)) == 2
    assert jobs.counts_by_state() == {gateway_pb2.JOB_STATE_QUEUED: 2, gateway_pb2.JOB_STATE_DONE: 1}
    scraped = GatewayMetrics(jobs=jobs).render().decode()
    assert 'ragkb_ingest_jobs{state="queued"} 2.0' in scraped and 'ragkb_ingest_jobs{state="done"} 1.0' in scraped


def test_start_counts_deliveries_and_keeps_the_first_start_time(jobs):
    job = new_job(jobs)
    assert jobs.start(job.job_id)
    first = jobs.get(job.job_id)
    assert jobs.start(job.job_id)  # a redelivery after a crash
    again = jobs.get(job.job_id)
    assert (first.attempts, again.attempts) == (1, 2)
    assert again.started_at == first.started_at != ""
    assert again.state == gateway_pb2.JOB_STATE_PARSING


def test_a_final_job_never_changes_again(jobs):
    job = new_job(jobs)
    cancelled = jobs.cancel(job.job_id)
    assert cancelled.state == gateway_pb2.JOB_STATE_CANCELLED and cancelled.error == "cancelled on request"
    assert not jobs.update(job.job_id, state=gateway_pb2.JOB_STATE_DONE)
    assert not jobs.start(job.job_id)
    assert jobs.get(job.job_id).state == gateway_pb2.JOB_STATE_CANCELLED
    with pytest.raises(FailedPrecondition, match="already cancelled"):
        jobs.cancel(job.job_id)


def test_retry_makes_a_new_job_from_the_saved_upload(jobs):
    job = new_job(jobs)
    jobs.update(job.job_id, state=gateway_pb2.JOB_STATE_FAILED, error="parser: boom")
    retried = jobs.retry(job.job_id)
    assert retried.job_id != job.job_id and retried.state == gateway_pb2.JOB_STATE_QUEUED
    assert (retried.doc_id, retried.filename) == (job.doc_id, job.filename)
    assert jobs.upload_of(retried.job_id)[0] == b"# A\n\ntext"


@pytest.mark.parametrize("state", [
    pytest.param(gateway_pb2.JOB_STATE_PARSING, id="parsing"),
    pytest.param(gateway_pb2.JOB_STATE_EMBEDDING, id="embedding"),
    pytest.param(gateway_pb2.JOB_STATE_INDEXING, id="indexing"),
])
def test_a_running_job_cannot_be_retried(jobs, state):
    job = new_job(jobs)
    jobs.update(job.job_id, state=state)
    with pytest.raises(FailedPrecondition, match="running job cannot be retried"):
        jobs.retry(job.job_id)


@pytest.mark.parametrize("state", [
    pytest.param(gateway_pb2.JOB_STATE_QUEUED, id="queued"),
    pytest.param(gateway_pb2.JOB_STATE_DONE, id="done"),
    pytest.param(gateway_pb2.JOB_STATE_CANCELLED, id="cancelled"),
])
def test_any_job_that_is_not_running_can_be_retried(jobs, state):
    job = new_job(jobs)
    jobs.update(job.job_id, state=state)
    retried = jobs.retry(job.job_id)
    assert retried.state == gateway_pb2.JOB_STATE_QUEUED
    old = jobs.get(job.job_id)
    if state == gateway_pb2.JOB_STATE_QUEUED:  # the stuck one can never run next to its replacement
        assert old.state == gateway_pb2.JOB_STATE_CANCELLED and retried.job_id in old.error
    else:
        assert old.state == state


def test_a_job_started_too_often_fails_with_the_retry_limit_and_its_last_interruption(settings):
    store = JobStore.for_settings(settings, max_attempts=2)
    try:
        job = new_job(store)
        for _ in range(2):
            assert store.start(job.job_id)
            store.requeue(job.job_id, "interrupted while parsing")
        assert not store.start(job.job_id)
        failed = store.get(job.job_id)
        assert failed.state == gateway_pb2.JOB_STATE_FAILED and failed.attempts == 2
        assert failed.error == "retry_limit: started 2 times without finishing; last: interrupted while parsing"
    finally:
        store.close()


def test_abandoned_lists_active_jobs_idle_for_the_given_time(jobs):
    queued, running, done = new_job(jobs, name="q.md"), new_job(jobs, name="r.md"), new_job(jobs, name="d.md")
    jobs.start(running.job_id)
    jobs.update(done.job_id, state=gateway_pb2.JOB_STATE_DONE)
    assert {j.job_id for j in jobs.abandoned()} == {queued.job_id, running.job_id}
    assert jobs.abandoned(idle_s=3600) == []  # all were touched just now


def test_resume_requeues_running_jobs_with_a_note_and_admits_each_once(jobs):
    queued, running, waiting = new_job(jobs, name="q.md"), new_job(jobs, name="r.md"), new_job(jobs, name="w.md")
    jobs.start(running.job_id)
    gate = LocalGate(slots=1)
    assert gate.admit("default", "busy") == ["busy"]  # the one slot is taken
    assert gate.admit("default", waiting.job_id) == []  # still waiting in the gate: must not be added twice
    dispatched: list[str] = []
    context = TaskContext(jobs=jobs, run_job=lambda job_id: None, gate=gate, dispatch=dispatched.append)
    assert sorted(resume_abandoned(context)) == sorted([queued.job_id, running.job_id])
    assert dispatched == [] and gate.waiting("default") == 3
    note = jobs.get(running.job_id)
    assert note.state == gateway_pb2.JOB_STATE_QUEUED
    assert note.error == "interrupted while parsing (the process running it stopped; attempt 1 of 3)"
    assert gate.release("default", "busy") == [waiting.job_id]  # the fairness order is kept


def test_retry_without_the_upload_says_so(jobs):
    job = new_job(jobs)
    jobs.update(job.job_id, state=gateway_pb2.JOB_STATE_FAILED, error="x")
    jobs.discard_upload(job.job_id)
    with pytest.raises(FailedPrecondition, match="no longer stored"):
        jobs.retry(job.job_id)


def test_list_filters_by_namespace(jobs):
    for namespace in ("a", "a", "b"):
        new_job(jobs, namespace)
    assert len(jobs.list("kb")) == 3
    assert {j.namespace for j in jobs.list("kb", "b")} == {"b"} and len(jobs.list("kb", "a")) == 2


# --- concurrency: many runners, each job claimed exactly once -----------------------------------------------

JOBS = 40
RUNNERS = 6


def _claim_all(settings: Settings, job_ids: list[str], seed: int, start) -> list[str]:
    """Claim every job this runner can, in its own random order, once all runners are ready."""
    store = JobStore.for_settings(settings)
    order = list(job_ids)
    random.Random(seed).shuffle(order)
    start.wait()
    claimed = [job_id for job_id in order if store.start(job_id)]
    store.close()
    return claimed


def _claim_in_process(settings: Settings, job_ids: list[str], seed: int, start, results) -> None:
    results.put(_claim_all(settings, job_ids, seed, start))


def test_threads_claim_each_job_exactly_once(settings, jobs):
    job_ids = [new_job(jobs, name=f"{i}.md").job_id for i in range(JOBS)]
    barrier = threading.Barrier(RUNNERS)
    claims: list[list[str]] = [[] for _ in range(RUNNERS)]

    def run(index: int) -> None:
        claims[index] = _claim_all(settings, job_ids, index, barrier)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(RUNNERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    every = [job_id for claimed in claims for job_id in claimed]
    assert sorted(every) == sorted(job_ids)  # each job once: none twice, none lost
    assert all(jobs.get(job_id).attempts == 1 for job_id in job_ids)


def test_processes_claim_each_job_exactly_once(settings, jobs):
    job_ids = [new_job(jobs, name=f"{i}.md").job_id for i in range(JOBS)]
    spawn = multiprocessing.get_context("spawn")
    results, start = spawn.Queue(), spawn.Barrier(RUNNERS)
    processes = [spawn.Process(target=_claim_in_process, args=(settings, job_ids, seed, start, results))
                 for seed in range(RUNNERS)]
    for process in processes:
        process.start()
    claims = [results.get(timeout=120) for _ in processes]
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0
    every = [job_id for claimed in claims for job_id in claimed]
    assert sorted(every) == sorted(job_ids)
    assert all(jobs.get(job_id).attempts == 1 for job_id in job_ids)
