"""The ingestion task: run one job, then hand the namespace's slot to its next job.

The same `run_and_hand_off` runs inside a Celery task (worker processes) and on
the in-process queue (embedded mode); only the gate and the dispatch differ.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from celery import Celery

from services.worker.celery_app import INGEST_QUEUE, INGEST_TASK
from services.worker.pipeline import run_ingest_job
from shared.jobs import FINAL_STATES, JobStore

log = logging.getLogger("ragkb.worker")


@dataclass
class TaskContext:
    jobs: JobStore
    run_job: Callable[[str], object]    # run_ingest_job with its clients bound
    gate: object                        # RedisGate | LocalGate
    dispatch: Callable[[str], None]     # put an admitted job on the work queue


def run_and_hand_off(context: TaskContext, job_id: str) -> str:
    """Run the job; once it is final, free its namespace slot and dispatch what that admits."""
    context.run_job(job_id)
    job = context.jobs.get(job_id)
    if job.state in FINAL_STATES:
        for admitted in context.gate.release(job.namespace, job_id):
            context.dispatch(admitted)
    return job.job_id


def publish(app: Celery, job_id: str) -> None:
    app.send_task(INGEST_TASK, args=[job_id], queue=INGEST_QUEUE)


def register(app: Celery, context: Callable[[], TaskContext]) -> None:
    """Declare the task on `app`; `context` builds the worker's clients on first use (after the pool starts)."""

    @app.task(name=INGEST_TASK, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
    def ingest(job_id: str) -> str:
        return run_and_hand_off(context(), job_id)


def worker_context(settings, app: Celery) -> TaskContext:
    from services.worker.fairness import RedisGate
    from shared.clients import IndexerClient, ParserClient
    from shared.kb import KnowledgeBaseCatalog

    jobs = JobStore(settings.data_dir)
    run_job = partial(run_ingest_job, jobs=jobs, catalog=KnowledgeBaseCatalog.for_settings(settings),
                      parser=ParserClient(settings.parser_addr, timeout_s=settings.ingest_step_timeout_s,
                                          tls_dir=settings.tls_dir, identity="worker"),
                      indexer=IndexerClient(settings.indexer_addr, timeout_s=settings.ingest_step_timeout_s,
                                            tls_dir=settings.tls_dir, identity="worker"),
                      step_timeout_s=settings.ingest_step_timeout_s)
    return TaskContext(jobs=jobs, run_job=run_job,
                       gate=RedisGate(settings.broker_url, slots=settings.ingest_namespace_slots),
                       dispatch=partial(publish, app))
