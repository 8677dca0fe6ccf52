"""The ingestion task: run one job, then hand the namespace's slot to its next job.

The same `run_and_hand_off` runs inside a Celery task (worker processes) and on
the in-process queue (embedded mode); only the gate and the dispatch differ.

The re-index task runs one batch of a KB version being built: the indexer does the work
(`BuildVersionBatch`); the task retries while the indexer cannot be reached or runs out of
time, so a batch is never lost to an indexer restart.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from celery import Celery

from services.worker.celery_app import INGEST_QUEUE, INGEST_TASK, REINDEX_QUEUE, REINDEX_TASK
from services.worker.pipeline import run_ingest_job
from shared import tenancy
from shared.clients import IndexerClient
from shared.contracts import gateway_pb2
from shared.errors import DeadlineExceeded, Unavailable
from shared.jobs import FINAL_STATES, RUNNING_STATES, JobStore

log = logging.getLogger("ragkb.worker")


@dataclass
class TaskContext:
    jobs: JobStore
    run_job: Callable[[str], object]    # run_ingest_job with its clients bound
    gate: object                        # RedisGate | LocalGate
    dispatch: Callable[[str], None]     # put an admitted job on the work queue
    reindex: Callable[[str, int, int], object] | None = None  # run_reindex_batch with its client bound


def run_and_hand_off(context: TaskContext, job_id: str) -> str:
    """Run the job; once it is final, free its namespace slot and dispatch what that admits."""
    context.run_job(job_id)
    job = context.jobs.get(job_id)
    if job.state in FINAL_STATES:
        for admitted in context.gate.release(job.namespace, job_id):
            context.dispatch(admitted)
    return job.job_id


def resume_abandoned(context: TaskContext, *, idle_s: float = 0.0) -> list[str]:
    """Run again the jobs a dead process left queued or running; returns their ids.

    A running one goes back to queued with a note naming where it stopped (its
    partial writes are rolled back by the indexer, see `Reconciler.roll_back_interrupted`).
    Its namespace slot is released and the job admitted again, unless it is still
    waiting in the gate, so the fairness bound holds and nothing runs twice.
    """
    resumed = []
    for job in context.jobs.abandoned(idle_s=idle_s):
        if job.state in RUNNING_STATES:
            state = gateway_pb2.JobState.Name(job.state).removeprefix("JOB_STATE_").lower()
            if not context.jobs.requeue(job.job_id, f"interrupted while {state} (the process running it stopped; "
                                                    f"attempt {job.attempts} of {context.jobs.max_attempts})"):
                continue
        if context.gate.is_waiting(job.namespace, job.job_id):
            continue
        for admitted in context.gate.release(job.namespace, job.job_id) + context.gate.admit(job.namespace,
                                                                                               job.job_id):
            context.dispatch(admitted)
        resumed.append(job.job_id)
    if resumed:
        log.warning("resumed %d ingestion jobs left unfinished by a stopped process", len(resumed))
    return resumed


def publish(app: Celery, job_id: str) -> None:
    app.send_task(INGEST_TASK, args=[job_id], queue=INGEST_QUEUE)


def publish_reindex(app: Celery, kb: str, version: int, batch: int) -> None:
    app.send_task(REINDEX_TASK, args=[kb, version, batch], queue=REINDEX_QUEUE)


def run_reindex_batch(kb: str, version: int, batch: int, *, indexer: IndexerClient, timeout_s: float | None):
    """One re-index job, acting for the whole KB (a version holds every namespace)."""
    with tenancy.acting_for(tenancy.operator_tenant("worker")):
        return indexer.build_version_batch(kb, version, batch, timeout_s=timeout_s)


def reindex_retry_s(retries: int) -> float:
    """Wait before the next attempt of a re-index job whose indexer was unreachable: 1 s doubling to a minute."""
    return float(min(60, 2 ** retries))


def register(app: Celery, context: Callable[[], TaskContext]) -> None:
    """Declare the tasks (ingestion, re-index) on `app`; `context` builds the worker's clients on first use
    (after the pool starts)."""

    @app.task(name=INGEST_TASK, bind=True, acks_late=True, reject_on_worker_lost=True, ignore_result=True,
              max_retries=None)
    def ingest(task, job_id: str) -> str:
        worker = context()
        finished = run_and_hand_off(worker, job_id)
        wait_s = worker.jobs.takeover_in(job_id)
        if wait_s is not None:  # another runner holds the job: look again once it may have gone silent
            raise task.retry(countdown=wait_s + 1)
        return finished

    @app.task(name=REINDEX_TASK, bind=True, acks_late=True, reject_on_worker_lost=True, ignore_result=True,
              max_retries=None)
    def reindex(task, kb: str, version: int, batch: int) -> None:
        try:
            context().reindex(kb, version, batch)
        except (Unavailable, DeadlineExceeded) as error:  # the batch is idempotent: run it again later
            log.warning("re-index batch %d of %s v%d: %s; retrying", batch, kb, version, error)
            raise task.retry(countdown=reindex_retry_s(task.request.retries))


def worker_context(settings, app: Celery) -> TaskContext:
    from services.worker.celery_app import visibility_timeout_s
    from services.worker.fairness import RedisGate
    from shared.clients import ParserClient
    from shared.kb_settings import SettingsResolver
    from shared.profiles import LiveProfiles

    # a live job updates its record at least once per step deadline; one silent for longer lost its worker
    jobs = JobStore.for_settings(settings, stale_after_s=visibility_timeout_s(settings.ingest_step_timeout_s))
    indexer = IndexerClient(settings.indexer_addr, timeout_s=settings.ingest_step_timeout_s, tls_dir=settings.tls_dir,
                            identity="worker")
    run_job = partial(run_ingest_job, jobs=jobs, kbs=SettingsResolver(LiveProfiles.for_settings(settings)),
                      parser=ParserClient(settings.parser_addr, timeout_s=settings.ingest_step_timeout_s,
                                          tls_dir=settings.tls_dir, identity="worker"),
                      indexer=indexer, step_timeout_s=settings.ingest_step_timeout_s)
    return TaskContext(jobs=jobs, run_job=run_job,
                       gate=RedisGate(settings.broker_url, slots=settings.ingest_namespace_slots),
                       dispatch=partial(publish, app),
                       reindex=partial(run_reindex_batch, indexer=indexer, timeout_s=settings.ingest_step_timeout_s))
