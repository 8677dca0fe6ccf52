"""The spine end to end: REST/gRPC gateway -> parser -> indexer -> retriever -> reranker -> generator."""

import gc

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ragkb.client import RagkbApiError, RagkbClient
from ragkb.embedded import EmbeddedStack
from shared.clients import GatewayClient
from shared.contracts import gateway_pb2
from shared.errors import InvalidArgument, NotFound
from tests.integration.conftest import (QUESTIONS, assert_answer_cites_its_chunk,
                                       assert_changed_document_replaces_its_chunks, assert_reingest_adds_nothing,
                                       assert_serving_and_listed, ingest_folder)

pytestmark = pytest.mark.integration

KB = "samples"


@pytest.fixture(scope="module")
def samples_kb(client):
    client.create_kb(KB, description="bundled samples")
    jobs = ingest_folder(client, KB)
    assert {j["state"] for j in jobs} == {"done"}, [j["error"] for j in jobs]
    return jobs


@pytest.mark.parametrize("question, answer, doc_id", QUESTIONS)
def test_answer_cites_the_chunk_that_contains_it(client, samples_kb, question, answer, doc_id):
    assert_answer_cites_its_chunk(client.query(KB, question), question, answer, doc_id)


def pairs(text: str) -> dict[str, float]:
    return {key: float(value) for key, value in (item.split("=") for item in text.split(","))}


def test_dense_route_gets_no_weight_when_the_english_model_cannot_read_the_query(client, samples_kb):
    metadata = client.query(KB, "AMR-7 的最大载重是多少？")["stages"]["retrieval"]["metadata"]
    signals = pairs(metadata["route_signals"])
    # most of the query's Chinese characters are [UNK] to all-MiniLM-L6-v2's tokenizer
    assert metadata["language"] == "zh" and signals["dense.query_unknown"] > 0.25
    assert pairs(metadata["competence"])["dense"] == 0 and pairs(metadata["weights"])["dense"] == 0
    assert pairs(metadata["weights"])["bm25"] > 0 and metadata["fusion"]


def test_english_query_keeps_both_routes_and_traces_the_signals(client, samples_kb):
    metadata = client.query(KB, "How long is a Beacon pairing code valid?")["stages"]["retrieval"]["metadata"]
    signals = pairs(metadata["route_signals"])
    assert signals["dense.query_unknown"] == 0 and signals["bm25.term_coverage"] == 1
    assert set(signals) >= {"dense.hits_unknown", "bm25.top_z", "dense.top_z", "agreement"}
    assert pairs(metadata["competence"]) == {"bm25": 1.0, "dense": 1.0}
    assert all(weight > 0 for weight in pairs(metadata["weights"]).values())


def test_reingesting_unchanged_documents_adds_nothing(client, samples_kb):
    assert_reingest_adds_nothing(client, KB)


def test_changed_document_replaces_its_chunks(client, stack):
    client.create_kb("changes")
    assert_changed_document_replaces_its_chunks(client, "changes")


def test_deleted_document_is_no_longer_retrievable(client, stack):
    client.create_kb("deletions")
    job = client.upload("deletions", "memo.txt", b"The warehouse opens at 6 am on Saturdays.")
    client.wait([job["job_id"]])
    assert client.delete_document("deletions", "memo.txt")["chunks_deleted"] == 1
    result = client.query("deletions", "When does the warehouse open on Saturdays?")
    assert result["chunks"] == [] and result["refused"]
    assert result["answerability"]["decision"] == "refuse"
    assert result["answerability"]["reason"] == "no sources survived retrieval and reranking"
    with pytest.raises(RagkbApiError) as error:
        client.delete_document("deletions", "memo.txt")
    assert error.value.status == 404


def test_namespaces_are_isolated(client, stack):
    client.create_kb("tenants")
    jobs = [client.upload("tenants", "a.txt", b"Team A's vault code is 4411.", namespace="team-a")["job_id"],
            client.upload("tenants", "b.txt", b"Team B's vault code is 9922.", namespace="team-b")["job_id"]]
    client.wait(jobs)
    result = client.query("tenants", "What is the vault code?", namespaces=["team-a"])
    assert {c["chunk"]["namespace"] for c in result["chunks"]} == {"team-a"}
    assert "9922" not in result["answer"]


def test_unknown_knowledge_base_is_not_found(client, stack):
    with pytest.raises(RagkbApiError) as error:
        client.query("no-such-kb", "anything")
    assert error.value.status == 404 and "no-such-kb" in error.value.message
    with pytest.raises(NotFound, match="no-such-kb"):
        GatewayClient(stack.settings.gateway_grpc_addr).query(gateway_pb2.QueryRequest(kb="no-such-kb", query="x"))


@pytest.mark.parametrize("query, message", [
    pytest.param("", "empty", id="empty"),
    pytest.param("   \n ", "empty", id="blank"),
    pytest.param("x" * 100_000, "limit", id="100KB"),
])
def test_bad_queries_are_invalid_arguments(client, stack, samples_kb, query, message):
    with pytest.raises(RagkbApiError) as error:
        client.query(KB, query)
    assert error.value.status == 400 and message in error.value.message
    with pytest.raises(InvalidArgument, match=message):
        GatewayClient(stack.settings.gateway_grpc_addr).query(gateway_pb2.QueryRequest(kb=KB, query=query))


def test_bad_files_are_reported_while_good_ones_ingest_and_nothing_is_lost(client, samples_kb):
    before = client.get_kb(KB)
    with pytest.raises(RagkbApiError) as unsupported:
        client.upload(KB, "diagram.xyz", b"\x89PNG...")
    assert unsupported.value.status == 415 and "'.xyz'" in unsupported.value.message
    bad = client.upload(KB, "empty.md", b"")
    good = client.upload(KB, "extra/new-note.md", "# Note\n\nThe cafeteria closes at 3 pm.".encode())
    jobs = {j["filename"]: j for j in client.wait([bad["job_id"], good["job_id"]])}
    assert jobs["empty.md"]["state"] == "failed" and "empty" in jobs["empty.md"]["error"]
    assert jobs["extra/new-note.md"]["state"] == "done"
    after = client.get_kb(KB)
    assert int(after["document_count"]) == int(before["document_count"]) + 1
    assert int(after["chunk_count"]) == int(before["chunk_count"]) + 1
    client.delete_document(KB, "extra/new-note.md")


def test_every_service_reports_health_and_lists_itself_by_reflection(stack):
    expected = {
        "parser": "ragkb.v1.ParserService", "indexer": "ragkb.v1.IndexerService",
        "retriever": "ragkb.v1.RetrieverService", "reranker": "ragkb.v1.RerankerService",
        "generator": "ragkb.v1.GeneratorService", "gateway": "ragkb.v1.GatewayService",
    }
    for name, service in expected.items():
        assert_serving_and_listed(stack.servers[name].address, service)


def test_health_is_not_serving_before_ready_and_after_stop(tmp_path):
    from shared.config import Settings
    from services.parser.main import build

    server = build(Settings(data_dir=tmp_path), port=0)
    server.start()
    with grpc.insecure_channel(server.address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        check = lambda: health.Check(health_pb2.HealthCheckRequest(), timeout=5).status  # noqa: E731
        assert check() == health_pb2.HealthCheckResponse.NOT_SERVING
        server.mark_serving()
        assert check() == health_pb2.HealthCheckResponse.SERVING
        server.stop(grace_s=0)
        with pytest.raises(grpc.RpcError):
            check()


def test_restart_keeps_the_data(tmp_path):
    from shared.config import Settings

    settings = Settings(data_dir=tmp_path / "data")
    question = "AMR-7 的最大载重是多少？"
    first_stack = EmbeddedStack(settings, ephemeral_ports=True).start()
    # warmed up, the stack's long-lived objects are out of the collector's reach, and back in it once stopped
    assert gc.get_freeze_count() > 0
    try:
        api = RagkbClient(first_stack.http_url)
        api.create_kb("persist")
        ingest_folder(api, "persist")
        before = api.query("persist", question)
    finally:
        first_stack.stop()
    assert gc.get_freeze_count() == 0
    second_stack = EmbeddedStack(settings, ephemeral_ports=True).start()
    try:
        after = RagkbClient(second_stack.http_url).query("persist", question)
    finally:
        second_stack.stop()
    assert after["answer"] == before["answer"] and "300公斤" in after["answer"]
    assert [c["chunk"]["chunk_id"] for c in after["chunks"]] == [c["chunk"]["chunk_id"] for c in before["chunks"]]
