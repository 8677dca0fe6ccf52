"""An embedded stack (every service a real gRPC server on 127.0.0.1, Milvus Lite + SQLite FTS5) per module."""

from __future__ import annotations

import sys
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from ragkb.client import RagkbApiError, RagkbClient, iter_files
from ragkb.embedded import EmbeddedStack
from services.gateway.auth import key_store_for
from shared import tls
from shared.config import Settings
from shared.stores.milvus import close_clients
from tests.conftest import ROOT, SAMPLES
from tests.integration.ingestion_support import start_redis

sys.path.insert(0, str(ROOT / "scripts"))
import engines  # noqa: E402


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    running = EmbeddedStack(Settings(data_dir=tmp_path_factory.mktemp("data")), ephemeral_ports=True).start()
    yield running
    running.stop()


@pytest.fixture(scope="module")
def es(tmp_path_factory):
    """A real Elasticsearch node for the module (scripts/engines.py)."""
    node = engines.start_elasticsearch(tmp_path_factory.mktemp("elasticsearch"))
    yield node
    node.stop()


@pytest.fixture(scope="module")
def milvus(tmp_path_factory):
    """A real Milvus server for the module."""
    server = engines.start_milvus(tmp_path_factory.mktemp("milvus"))
    yield server
    server.stop()


@pytest.fixture
def milvus_uri(tmp_path):
    """A Milvus Lite file of the test's own; its client is closed after the test."""
    yield str(tmp_path / "milvus.db")
    close_clients()


@pytest.fixture(scope="module")
def redis(tmp_path_factory):
    """A real Redis server for the module (skipped when missing, except in CI)."""
    server = start_redis(tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def client(stack, request):
    """A REST client of the module's stack; a module whose calls run long sets CLIENT_TIMEOUT_S."""
    api = RagkbClient(stack.http_url, timeout_s=getattr(request.module, "CLIENT_TIMEOUT_S", 120.0))
    yield api
    api.close()


def ingest_folder(client: RagkbClient, kb: str, folder=SAMPLES, *, namespace: str = "") -> list[dict]:
    """Upload every sample document (en + zh) and wait for the jobs."""
    jobs = [client.upload(kb, name, path.read_bytes(), namespace=namespace)["job_id"]
            for path, name in iter_files(folder) if name != "README.md"]
    return client.wait(jobs, timeout_s=300)


def create_samples_kb(client: RagkbClient, kb: str, *, description: str = "") -> None:
    """`kb` with every sample document. The first knowledge base of a stack loads the embedding model, which on a
    busy machine can outlast the call's deadline (504) while the indexer goes on: then wait until it exists."""
    try:
        client.create_kb(kb, description=description)
    except RagkbApiError as error:
        if error.status != 504:
            raise
        deadline = time.monotonic() + 300
        while not any(known["name"] == kb for known in client.list_kbs()):
            assert time.monotonic() < deadline, f"knowledge base {kb} was not created"
            time.sleep(1)
    assert {j["state"] for j in ingest_folder(client, kb)} == {"done"}


def samples_and_reader_keys(stack, client: RagkbClient, kb: str, prefix: str, *, description: str = ""):
    """Fixture body: the samples in `kb` (default namespace), then two reader keys, removed afterwards:
    `reader` of the default namespace and `elsewhere` of an empty one. Keys turn authentication on."""
    create_samples_kb(client, kb, description=description)
    store = key_store_for(stack.settings)
    names = {"reader": f"{prefix}-reader", "elsewhere": f"{prefix}-elsewhere"}
    yield {role: store.create(name, role="reader", namespaces=["default" if role == "reader" else "elsewhere"])
           for role, name in names.items()}
    for name in names.values():
        store.delete(name)


# the bundled samples' questions: (question, text the answer and its cited chunk contain, doc id)
QUESTIONS = [
    pytest.param("How long does it take to charge the AMR-7 from 20% to 80%?", "45 minutes",
                 "en/amr7-user-guide.md", id="en-charging"),
    pytest.param("How long is a Beacon pairing code valid?", "valid for 10 minutes", "en/beacon-admin-faq.txt",
                 id="en-pairing"),
    pytest.param("Which firmware version adds obstacle re-routing?", "3.2.1", "en/release-notes.html",
                 id="en-html"),
    pytest.param("AMR-7 的最大载重是多少？", "300公斤", "zh/amr7-使用手册.md", id="zh-payload"),
    pytest.param("Beacon 的遥测数据保留多久？", "30天", "zh/beacon-常见问题.txt", id="zh-gb18030-retention"),
    pytest.param("Beacon 接口每个密钥每分钟允许多少次请求？", "600", "zh/beacon-常见问题.txt", id="zh-rate-limit"),
]


def assert_reingest_adds_nothing(client: RagkbClient, kb: str) -> None:
    """Ingesting the unchanged samples again reports `unchanged` for each and adds no document or chunk."""
    before = client.get_kb(kb)
    jobs = ingest_folder(client, kb)
    assert {j["outcome"] for j in jobs} == {"unchanged"}
    after = client.get_kb(kb)
    assert (after["document_count"], after["chunk_count"]) == (before["document_count"], before["chunk_count"])


def assert_changed_document_replaces_its_chunks(client: RagkbClient, kb: str) -> None:
    """Upload a document, then a changed version: the old text is gone, the new one answers."""
    first = client.upload(kb, "policy.md", "# Policy\n\nRefunds are issued within 14 days of purchase.".encode())
    client.wait([first["job_id"]])
    assert "14 days" in client.query(kb, "When are refunds issued?")["answer"]
    second = client.upload(kb, "policy.md",
                           "# Policy\n\nRefunds are issued within 30 days of a written request.".encode())
    (job,) = client.wait([second["job_id"]])
    assert job["outcome"] == "updated"
    result = client.query(kb, "When are refunds issued?")
    assert "30 days" in result["answer"] and "14 days" not in result["answer"]
    assert all("14 days" not in c["chunk"]["raw_content"] for c in result["chunks"])
    (doc,) = client.list_documents(kb)
    assert doc["version"] == "2" and doc["chunk_count"] == 1
    assert client.get_kb(kb)["chunk_count"] == "1"


def assert_next_query_sees_ingest_and_delete(client: RagkbClient, kb: str, *, rounds: int = 3) -> None:
    """A document whose job is done is found by the very next query on the dense route, and one whose delete has
    returned is not: the indexer pays for read-your-writes, so searches need no Strong consistency. Each round
    uses a namespace of its own, so the dense route must rank the new chunk first if it sees it at all."""
    for n in range(rounds):
        namespace, doc_id = f"fresh-{n}", f"zephyr-{n}.txt"
        fact = f"The Zephyr-{n} relief valve opens at {40 + n} kilopascals."
        (job,) = client.wait([client.upload(kb, doc_id, fact.encode(), namespace=namespace, doc_id=doc_id)["job_id"]])
        assert job["state"] == "done", job["error"]
        question = f"At what pressure does the Zephyr-{n} relief valve open?"
        found = client.query(kb, question, namespaces=[namespace])
        assert [(c["chunk"]["doc_id"], c["dense_rank"]) for c in found["chunks"]] == [(doc_id, 1)], found["chunks"]
        client.delete_document(kb, doc_id, namespace=namespace)
        assert client.query(kb, question, namespaces=[namespace])["chunks"] == []


def assert_answer_cites_its_chunk(result: dict, question: str, answer: str, doc_id: str) -> None:
    """The answer states `answer`, and a citation quoting it points at a returned chunk of `doc_id` holding it."""
    assert not result["refused"] and answer in result["answer"]
    assert result["answerability"]["decision"] == "answer" and result["answerability"]["reason"]
    sources = {n: c["chunk"] for n, c in enumerate(result["chunks"], start=1)}
    supporting = [c for c in result["citations"] if answer in c["quote"]]
    assert supporting, result["citations"]
    for citation in supporting:
        chunk = sources[citation["number"]]
        assert answer in chunk["raw_content"]
        assert chunk["chunk_id"] == citation["chunk_id"] and citation["doc_id"] == doc_id
    assert set(result["stages"]) == {"pre-retrieval", "retrieval", "post-retrieval", "generation"}
    assert result["original_query"] == question and result["effective_query"]
    assert result["degraded"] == []


def assert_serving_and_listed(address: str, service: str | None, *, tls_dir: str = "", identity: str = "") -> None:
    """The server at `address` is SERVING (overall and for `service`) and lists `service` by reflection.

    With `tls_dir`: over mutual TLS with `identity`'s certificate (health and reflection are open to any
    certificate of the CA, the API is not)."""
    channel = grpc.insecure_channel(address) if not tls_dir else grpc.secure_channel(
        address, tls.channel_credentials(tls_dir, identity), options=[("grpc.ssl_target_name_override", identity)])
    with channel:
        health = health_pb2_grpc.HealthStub(channel)
        for target in ("", service) if service else ("",):
            status = health.Check(health_pb2.HealthCheckRequest(service=target), timeout=5).status
            assert status == health_pb2.HealthCheckResponse.SERVING, (address, target)
        reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
        responses = reflection.ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5)
        listed = {s.name for r in responses for s in r.list_services_response.service}
        expected = {"grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection"}
        assert expected | ({service} if service else set()) <= listed, (address, listed)
