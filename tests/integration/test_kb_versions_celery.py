"""A KB version's re-index as Celery jobs on a real Redis with real worker processes: the build queues one
job per batch of documents, the workers run them (nothing is re-indexed while no worker runs), progress is
kept in the version row, and batches lost from the broker are queued again when an indexer starts.

The stack is embedded (in-process gRPC servers) with its gateway and indexer publishing to Redis; the worker
is `python -m services.worker.main`, as in tests/integration/test_ingestion_celery.py.
"""

from __future__ import annotations

import time
from functools import partial

import pytest
import redis as redis_client

from ragkb.embedded import EmbeddedStack
from services.worker.celery_app import REINDEX_QUEUE, create_celery
from services.worker.tasks import publish_reindex
from shared.config import Settings
from tests.integration.ingestion_support import Worker, wait_for
from tests.integration.versions_support import DOCS, Indexing

pytestmark = pytest.mark.integration

NEW_ANALYZER = "keyword_store: {analyzer: char}\n"
# more documents than one re-index job takes (services/indexer/versions.py BATCH_DOCUMENTS = 16): two jobs
EXTRA = {f"note-{i}": f"Maintenance note {i}: inspect castor wheel {i} and record its wear." for i in range(12)}
CLIENT_TIMEOUT_S = 300  # the client fixture's timeout: these calls run long


@pytest.fixture(scope="module")
def stack(redis, tmp_path_factory):
    settings = Settings(data_dir=tmp_path_factory.mktemp("data"), broker_url=redis.url, ingest_workers=1,
                        ingest_step_timeout_s=60.0, reconcile_interval_s=0, rpc_timeout_s=300)
    running = EmbeddedStack(settings, ephemeral_ports=True).start()
    yield running
    running.stop()


def queued_reindex_jobs(redis) -> int:
    return redis_client.Redis.from_url(redis.url).llen(REINDEX_QUEUE)


def test_a_re_index_runs_as_celery_jobs_with_progress_and_survives_lost_messages(stack, client, redis,
                                                                                  tmp_path):
    kb = "celery-versions"
    client.create_kb(kb)
    worker = Worker(stack.settings, tmp_path / "worker-1.log")
    try:
        documents = {**DOCS, **EXTRA}
        jobs = [client.upload(kb, f"{doc_id}.txt", text.encode(), doc_id=doc_id)["job_id"]
                for doc_id, text in documents.items()]
        assert {job["state"] for job in client.wait(jobs, timeout_s=600)} == {"done"}
    finally:
        worker.stop()

    created = client.create_version(kb, NEW_ANALYZER)
    assert created["state"] == "building"
    # no worker runs: the build has planned two jobs and queued them, and done nothing itself
    planned = wait_for(lambda: queued_reindex_jobs(redis) == 2 and client.get_version(kb, 2), timeout_s=120,
                       what="two re-index jobs on the queue")
    assert (planned["docs_done"], planned["docs_total"]) == (0, len(documents))
    client.delete_document(kb, "wifi")  # a write during the build reaches the version being built
    time.sleep(1)
    assert client.get_version(kb, 2)["docs_done"] == 0

    # the broker loses the messages; an indexer that starts queues the undone batches again
    redis_client.Redis.from_url(redis.url).delete(REINDEX_QUEUE)
    celery = create_celery(stack.settings)
    restarted = Indexing.build(stack.settings, publish=partial(publish_reindex, celery))
    restarted.versions.resume_builds()
    assert restarted.versions.wait(kb, 2, timeout_s=60).state == "building"
    assert queued_reindex_jobs(redis) == 2
    celery.close()

    worker = Worker(stack.settings, tmp_path / "worker-2.log")
    try:
        built = wait_for(lambda: (found := client.get_version(kb, 2))["state"] != "building" and found,
                         timeout_s=600, interval_s=0.2, what="version 2 built by the worker")
    finally:
        worker.stop()
    assert built["state"] == "ready", built["error"]
    assert built["docs_done"] == built["docs_total"] == len(documents)
    assert queued_reindex_jobs(redis) == 0
    log = (tmp_path / "worker-2.log").read_text(errors="replace")
    assert "ragkb.reindex" in log
    assert restarted.doc_ids(kb, 2) == set(documents) - {"wifi"} == restarted.doc_ids(kb, 1)
