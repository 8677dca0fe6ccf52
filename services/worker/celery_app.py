"""The Celery application: Redis broker and result backend, settings for crash safety.

Nothing connects at import; `create_celery` builds the app for a worker or for a
gateway that only publishes. Tasks carry job ids only.

Crash safety: a task is acknowledged when it ends (`task_acks_late`), so a worker
killed mid-job leaves the message unacknowledged in Redis; kombu's restore scan
puts it back on the queue once `visibility_timeout` has passed since delivery,
and another worker replays it (the pipeline and the indexer are idempotent). The
visibility timeout must exceed the longest a live job can take, or a job still
running would be delivered a second time; a job is at most two steps (parse,
index), each with the step deadline, so it is derived from that deadline; a re-index job is one
indexer call with that deadline.
"""

from __future__ import annotations

from celery import Celery

from shared.config import Settings

INGEST_TASK = "ragkb.ingest"
INGEST_QUEUE = "ragkb-ingest"
# re-index jobs of a KB version being built (services/indexer/versions.py), one batch of documents each
REINDEX_TASK = "ragkb.reindex"
REINDEX_QUEUE = "ragkb-reindex"
RESTORE_INTERVAL_S = 2


def visibility_timeout_s(step_timeout_s: float) -> float:
    """Two step deadlines plus a quarter for the job's own bookkeeping."""
    return 2.5 * step_timeout_s


def create_celery(settings: Settings) -> Celery:
    if not settings.broker_url.startswith(("redis://", "rediss://")):
        raise ValueError(f"RAGKB_BROKER_URL={settings.broker_url!r} is not a redis:// URL")
    if settings.ingest_step_timeout_s <= 0:
        raise ValueError(f"RAGKB_INGEST_STEP_TIMEOUT_S={settings.ingest_step_timeout_s} must be > 0")
    app = Celery("ragkb", broker=settings.broker_url, backend=settings.broker_url, set_as_current=False)
    app.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_default_queue=INGEST_QUEUE,
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        result_expires=24 * 3600,
        broker_connection_retry_on_startup=True,
        broker_transport_options={
            "visibility_timeout": visibility_timeout_s(settings.ingest_step_timeout_s),
            # without these the restore scan of unacknowledged messages runs rarely (~90 s observed)
            "unacked_restore_interval": RESTORE_INTERVAL_S,
            "unacked_restore_throttle": 1,
        },
        result_backend_transport_options={"visibility_timeout": visibility_timeout_s(settings.ingest_step_timeout_s)},
        worker_hijack_root_logger=False,
        worker_send_task_events=False,
    )
    return app
