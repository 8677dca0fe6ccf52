"""An embedded stack (every service a real gRPC server on 127.0.0.1, Milvus Lite + SQLite FTS5) per module."""

from __future__ import annotations

import pytest

from ragkb.client import RagkbClient, iter_files
from ragkb.embedded import EmbeddedStack
from shared.config import Settings
from tests.conftest import SAMPLES


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    running = EmbeddedStack(Settings(data_dir=tmp_path_factory.mktemp("data")), ephemeral_ports=True).start()
    yield running
    running.stop()


@pytest.fixture(scope="module")
def client(stack):
    api = RagkbClient(stack.http_url)
    yield api
    api.close()


def ingest_folder(client: RagkbClient, kb: str, folder=SAMPLES, *, namespace: str = "") -> list[dict]:
    """Upload every sample document (en + zh) and wait for the jobs."""
    jobs = [client.upload(kb, name, path.read_bytes(), namespace=namespace)["job_id"]
            for path, name in iter_files(folder) if name != "README.md"]
    return client.wait(jobs, timeout_s=300)
