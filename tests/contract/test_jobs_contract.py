"""Job records and uploads: the same behaviour on SQLite + files and on PostgreSQL."""

from __future__ import annotations

import multiprocessing
import random
import threading

import pytest

from services.worker.tasks import TaskContext, resume_abandoned
from services.worker.fairness import LocalGate
from shared.config import Settings
from shared.contracts import gateway_pb2
from shared.errors import FailedPrecondition, NotFound
from shared.jobs import JobStore

CONTENT = "# 标题\n\nChinese and English text / 中文与英文。".encode()


def new_job(jobs: JobStore, name: str = "笔记.md", namespace: str = "default") -> gateway_pb2.IngestJob:
    return jobs.create(kb="kb", namespace=namespace, doc_id=name, filename=name, content=CONTENT,
                       metadata_json='{"lang": "zh"}')


@pytest.fixture
def jobs(settings):
    store = JobStore.for_settings(settings)
    yield store
    store.close()


def test_a_job_keeps_its_record_and_its_upload(jobs):
    job = new_job(jobs)
    assert job.state == gateway_pb2.JOB_STATE_QUEUED and job.filename == "笔记.md" and job.attempts == 0
    assert jobs.get(job.job_id) == job
    assert jobs.upload_of(job.job_id) == (CONTENT, '{"lang": "zh"}')
    with pytest.raises(NotFound, match="does not exist"):
        jobs.get("nope")


def test_cluster_uploads_need_no_disk(settings, jobs):
    job = new_job(jobs)
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


def test_a_silent_runner_loses_its_job(settings, jobs):
    job = new_job(jobs)
    assert jobs.start(job.job_id)
    successor = JobStore.for_settings(settings, stale_after_s=0.0)
    try:
        assert successor.start(job.job_id)  # the first runner has been silent longer than the bound
        assert successor.get(job.job_id).attempts == 2
    finally:
        successor.close()


def test_the_retry_cap_fails_a_job_with_its_last_interruption(settings):
    store = JobStore.for_settings(settings, max_attempts=2)
    job = new_job(store)
    for _ in range(2):
        assert store.start(job.job_id)
        store.requeue(job.job_id, "interrupted while parsing")
    assert not store.start(job.job_id)
    failed = store.get(job.job_id)
    assert failed.state == gateway_pb2.JOB_STATE_FAILED and failed.attempts == 2
    assert failed.error == "retry_limit: started 2 times without finishing; last: interrupted while parsing"


def test_final_jobs_never_change(jobs):
    job = new_job(jobs)
    assert jobs.cancel(job.job_id).state == gateway_pb2.JOB_STATE_CANCELLED
    assert not jobs.update(job.job_id, state=gateway_pb2.JOB_STATE_DONE)
    assert not jobs.start(job.job_id)
    with pytest.raises(FailedPrecondition, match="already cancelled"):
        jobs.cancel(job.job_id)


def test_retry_uses_the_stored_upload_and_says_when_it_is_gone(jobs):
    job = new_job(jobs)
    jobs.update(job.job_id, state=gateway_pb2.JOB_STATE_FAILED, error="parser: boom")
    retried = jobs.retry(job.job_id)
    assert retried.state == gateway_pb2.JOB_STATE_QUEUED and jobs.upload_of(retried.job_id)[0] == CONTENT
    jobs.update(retried.job_id, state=gateway_pb2.JOB_STATE_FAILED, error="x")
    jobs.discard_upload(retried.job_id)
    with pytest.raises(FailedPrecondition, match="no longer stored"):
        jobs.retry(retried.job_id)


def test_recovery_requeues_what_a_dead_process_left_running(jobs):
    queued, running, done = new_job(jobs, "q.md"), new_job(jobs, "r.md"), new_job(jobs, "d.md")
    jobs.start(running.job_id)
    jobs.update(done.job_id, state=gateway_pb2.JOB_STATE_DONE)
    assert [j.job_id for j in jobs.abandoned()] == [queued.job_id, running.job_id]
    assert jobs.abandoned(idle_s=3600) == []
    dispatched: list[str] = []
    context = TaskContext(jobs=jobs, run_job=lambda job_id: None, gate=LocalGate(slots=5), dispatch=dispatched.append)
    assert sorted(resume_abandoned(context)) == sorted([queued.job_id, running.job_id])
    assert sorted(dispatched) == sorted([queued.job_id, running.job_id])
    requeued = jobs.get(running.job_id)
    assert requeued.state == gateway_pb2.JOB_STATE_QUEUED and requeued.error.startswith("interrupted while parsing")


def test_list_and_counts(jobs):
    for namespace in ("a", "a", "b"):
        new_job(jobs, namespace=namespace)
    first = jobs.list("kb", "a")[-1]
    jobs.update(first.job_id, state=gateway_pb2.JOB_STATE_DONE)
    assert len(jobs.list("kb")) == 3 and {j.namespace for j in jobs.list("kb", "b")} == {"b"}
    assert len(jobs.list("kb", limit=2)) == 2
    assert jobs.counts_by_state() == {gateway_pb2.JOB_STATE_QUEUED: 2, gateway_pb2.JOB_STATE_DONE: 1}


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
    job_ids = [new_job(jobs, f"{i}.md").job_id for i in range(JOBS)]
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
    job_ids = [new_job(jobs, f"{i}.md").job_id for i in range(JOBS)]
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
