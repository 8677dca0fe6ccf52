"""Job queues: where the gateway hands ingestion jobs to the worker code.

Both admit jobs through a per-namespace gate (see `fairness`), so one
namespace's bulk upload cannot starve another's.

`InProcessQueue` runs the task code on a thread pool inside the process
(embedded mode, no broker needed); `CeleryQueue` publishes to Redis for the
worker processes.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent import futures
from typing import Protocol

from services.worker.fairness import LocalGate, RedisGate
from services.worker.tasks import TaskContext, publish, resume_abandoned, run_and_hand_off
from shared.jobs import JobStore


class JobQueue(Protocol):
    def submit(self, job_id: str, namespace: str) -> None: ...

    def resume_abandoned(self) -> list[str]: ...

    def close(self) -> None: ...


class InProcessQueue:
    def __init__(self, run_job: Callable[[str], object], jobs: JobStore, *, workers: int = 2, slots: int = 2):
        if workers < 1:
            raise ValueError(f"in-process queue needs at least 1 worker thread, got {workers}")
        self._pool = futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ingest")
        self._gate = LocalGate(slots=slots)
        self._context = TaskContext(jobs=jobs, run_job=run_job, gate=self._gate, dispatch=self._dispatch)

    def _dispatch(self, job_id: str) -> None:
        self._pool.submit(run_and_hand_off, self._context, job_id)

    def submit(self, job_id: str, namespace: str) -> None:
        for admitted in self._gate.admit(namespace, job_id):
            self._dispatch(admitted)

    def resume_abandoned(self) -> list[str]:
        """Every active job in the store was left by a process that died: this queue is the only runner."""
        return resume_abandoned(self._context)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=False)


class CeleryQueue:
    """Publishes admitted jobs as Celery tasks; the workers hand slots on as jobs finish."""

    def __init__(self, settings):
        from services.worker.celery_app import create_celery

        self._app = create_celery(settings)
        self._gate = RedisGate(settings.broker_url, slots=settings.ingest_namespace_slots)

    def submit(self, job_id: str, namespace: str) -> None:
        for admitted in self._gate.admit(namespace, job_id):
            publish(self._app, admitted)

    def resume_abandoned(self) -> list[str]:
        """Nothing here: each Celery worker resumes abandoned jobs when it starts (services.worker.main)."""
        return []

    def close(self) -> None:
        self._gate.close()
        self._app.close()
