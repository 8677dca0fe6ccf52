"""Job queues: where the gateway hands ingestion jobs to the worker code.

`InProcessQueue` runs the same task code on a thread pool inside the process
(embedded mode, no broker needed).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent import futures
from typing import Protocol


class JobQueue(Protocol):
    def submit(self, job_id: str) -> None: ...

    def close(self) -> None: ...


class InProcessQueue:
    def __init__(self, run_job: Callable[[str], object], *, workers: int = 2):
        self._run_job = run_job
        self._pool = futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ingest")

    def submit(self, job_id: str) -> None:
        self._pool.submit(self._run_job, job_id)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=False)
