"""Run a Celery ingestion worker: `python -m services.worker.main`.

Needs RAGKB_BROKER_URL (Redis) and the parser and indexer addresses; reads
uploads and job records from the control-plane database (RAGKB_DATABASE_URL,
cluster mode) or under RAGKB_DATA_DIR, which it then shares with the gateway.
Runs RAGKB_INGEST_WORKERS jobs at once (thread pool: the work is gRPC calls): ingestion jobs and the
re-index jobs of KB versions being built.
A gRPC health endpoint on RAGKB_WORKER_ADDR is SERVING once the worker consumes
and NOT_SERVING as soon as it starts shutting down (probes of compose and
Kubernetes use it); `celery inspect ping` works as well.
"""

from __future__ import annotations

import logging
import socket
import threading

from celery import signals

from services.worker.celery_app import INGEST_QUEUE, REINDEX_QUEUE, create_celery, visibility_timeout_s
from services.worker.tasks import TaskContext, register, resume_abandoned, worker_context
from shared.config import Settings
from shared.server import ServiceServer

log = logging.getLogger("ragkb.worker")


def build(settings: Settings):
    """The Celery app with the task registered, and the health server (not started)."""
    if settings.ingest_workers < 1:
        raise ValueError(f"RAGKB_INGEST_WORKERS={settings.ingest_workers} must be >= 1")
    app = create_celery(settings)
    lock = threading.Lock()
    built: list[TaskContext] = []

    def context() -> TaskContext:
        with lock:
            if not built:
                built.append(worker_context(settings, app))
            return built[0]

    register(app, context)
    # a live job updates its record at least once per step deadline; one silent for longer was abandoned
    idle_s = visibility_timeout_s(settings.ingest_step_timeout_s)
    signals.worker_ready.connect(lambda **_: resume_abandoned(context(), idle_s=idle_s), weak=False)
    health = ServiceServer("worker", host=settings.host, port=settings.port_of(settings.worker_addr))
    return app, health


def main() -> None:
    from shared.logs import configure_logging

    settings = Settings.from_env()
    configure_logging(settings.log_level)
    app, health = build(settings)
    health.start()
    signals.worker_ready.connect(lambda **_: health.mark_serving(), weak=False)
    signals.worker_shutting_down.connect(lambda **_: health.stop(0), weak=False)
    try:
        app.worker_main([
            "worker", "--pool", "threads", "--concurrency", str(settings.ingest_workers),
            "--queues", f"{INGEST_QUEUE},{REINDEX_QUEUE}", "--hostname", f"ragkb-worker@{socket.gethostname()}",
            "--loglevel", settings.log_level, "--without-gossip", "--without-mingle",
        ])
    finally:
        health.stop(0)


if __name__ == "__main__":
    main()
