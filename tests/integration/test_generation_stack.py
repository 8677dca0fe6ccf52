"""Rerank -> assemble -> generate through the embedded stack, with an LLM stand-in speaking the OpenAI protocol.

The knowledge base uses the bge reranker (a tiny cross-encoder built here, loaded
through FlagReranker), small chunks so blocks get split, and the `openai`
generator pointed at the local stand-in. Refusal, part restoration (from the parts
retrieval reads, or through the retriever's ChunksByGroup RPC), claim checks and both streaming front doors
(REST SSE, gRPC QueryStream) are checked end to end.
"""

from __future__ import annotations

import json

import grpc
import httpx
import pytest

from shared.clients import GatewayClient
from shared.config import KBConfig
from shared.contracts import chunk_pb2, gateway_pb2, reranker_pb2, reranker_pb2_grpc, retriever_pb2, retriever_pb2_grpc
from shared.kb_settings import settings_of
from shared.errors import InvalidArgument, NotFound
from tests.chat_standin import ChatStandIn, cite_source_containing
from tests.conftest import LEXICAL_ANSWERABILITY
from tests.integration.conftest import ingest_folder
from tests.tiny_cross_encoder import build_tiny_cross_encoder

pytestmark = pytest.mark.integration

KB = "llm"
ANSWERABLE = "How long does it take to charge the AMR-7 battery?"
CHARGING = cite_source_containing("45 minutes", "45分钟", sentence="Charging from 20% to 80% takes 45 minutes [{n}].")
UNANSWERABLE = [
    pytest.param("What is the capital of France?", "No relevant knowledge was found for this question.", id="en"),
    pytest.param("木星有多少颗卫星？", "知识库中没有找到与该问题相关的内容。", id="zh"),
]


@pytest.fixture(scope="module")
def standin():
    server = ChatStandIn(CHARGING).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def llm_kb(stack, client, standin, tmp_path_factory):
    # a random reranker reorders the sources at random, so the shipped answerability defaults (fitted on
    # retrieval scores without a reranker) do not apply: the gate here is the lexical one
    model_dir = build_tiny_cross_encoder(tmp_path_factory.mktemp("tiny-reranker"))
    # the operator's side: the chat endpoint and the model directory, each under a name
    (stack.settings.data_dir / "profiles.yaml").write_text(
        f"llm: {{standin: {{base_url: '{standin.base_url}', model: standin-model}}}}\n"
        f"models: {{tiny-reranker: '{model_dir}'}}\n", encoding="utf-8")
    config = kb_config_yaml()
    client.create_kb(KB, config_yaml=config)
    jobs = ingest_folder(client, KB)
    assert {j["state"] for j in jobs} == {"done"}, [j["error"] for j in jobs]


def kb_config_yaml() -> str:
    return f"""
chunker: {{max_chars: 300, overlap_chars: 0}}
reranker: {{name: bge, model: tiny-reranker, device: cpu, relative_threshold: 0.0, candidate_cap: 20, top_n: 4,
           max_context_tokens: 4000}}
generator: {{name: openai, profile: standin, max_retries: 0, answerability: {json.dumps(LEXICAL_ANSWERABILITY)}}}
"""


@pytest.fixture()
def fresh(standin):
    standin.reset()
    standin.responder = CHARGING
    return standin


def sse_events(response: httpx.Response) -> list[tuple[str, dict]]:
    events = []
    for frame in response.text.split("\n\n"):
        lines = dict(line.split(": ", 1) for line in frame.splitlines() if ": " in line)
        if "event" in lines:
            events.append((lines["event"], json.loads(lines["data"])))
    return events


def test_answerable_question_calls_the_model_and_cites_the_source(client, llm_kb, fresh):
    result = client.query(KB, ANSWERABLE)
    assert len(fresh.requests) == 1 and not result["refused"]
    assert "45 minutes" in result["answer"] and result["citations"]
    cited = result["chunks"][result["citations"][0]["number"] - 1]["chunk"]
    assert "45 minutes" in cited["raw_content"]
    assert all(c["rerank_score"] > 0 and c["route"] == "ROUTE_RERANKED" for c in result["chunks"])
    assert result["stages"]["post-retrieval"]["metadata"]["model"].startswith("bge:")


def test_kept_split_parts_come_with_all_their_siblings_in_order(client, llm_kb, fresh):
    chunks = [c["chunk"] for c in client.query(KB, "What does error code E101 mean?")["chunks"]]
    groups: dict[str, list[dict]] = {}
    for chunk in chunks:
        if chunk["part_count"] > 1:
            groups.setdefault(chunk["group_id"], []).append(chunk)
    assert groups, "the small chunker should have split some blocks"
    assert any(c["metadata"].get("restored_part") == "true" for c in chunks)  # read with the candidates
    for parts in groups.values():
        assert [p["part_index"] for p in parts] == list(range(1, parts[0]["part_count"] + 1))
        assert [p["metadata"]["part"] for p in parts] == [
            f"part {i} of {parts[0]['part_count']}" for i in range(1, parts[0]["part_count"] + 1)]
    positions = [(c["doc_id"], c["position"]) for c in chunks]
    docs = list(dict.fromkeys(d for d, _ in positions))
    assert positions == sorted(positions, key=lambda p: (docs.index(p[0]), p[1]))  # by document, then position


def test_retrieval_reads_the_split_parts_and_the_reranker_restores_the_same_context_from_them(stack, llm_kb):
    """One call fewer per query: the parts come with the candidates. Restoring from them gives the context the
    reranker's own call to ChunksByGroup gives."""
    context = chunk_pb2.CallContext(
        tenant=chunk_pb2.TenantContext(principal="test-root", all_namespaces=True, role="admin"),
        kb=settings_of(KBConfig.from_yaml(kb_config_yaml(), name=KB)))
    query = "What does error code E101 mean?"
    with grpc.insecure_channel(stack.servers["retriever"].address) as retriever_channel, \
            grpc.insecure_channel(stack.servers["reranker"].address) as reranker_channel:
        retrieved = retriever_pb2_grpc.RetrieverServiceStub(retriever_channel).Retrieve(retriever_pb2.RetrieveRequest(
            kb=KB, query=query, filter=chunk_pb2.SearchFilter(namespaces=["default"]), chunk_vectors=True,
            split_parts=True, context=context))
        rerank = reranker_pb2_grpc.RerankerServiceStub(reranker_channel).Rerank
        from_parts = rerank(reranker_pb2.RerankRequest(kb=KB, query=query, candidates=retrieved.candidates,
                                                       split_parts=retrieved.split_parts, context=context))
        fetched = rerank(reranker_pb2.RerankRequest(kb=KB, query=query, candidates=retrieved.candidates,
                                                    context=context))
    split = {c.chunk.group_id: c.chunk.part_count for c in retrieved.candidates if c.chunk.part_count > 1}
    assert split, "the small chunker should have split some blocks"
    parts: dict[str, list[chunk_pb2.KnowledgeChunk]] = {}
    for part in retrieved.split_parts.chunks:
        parts.setdefault(part.group_id, []).append(part)
    assert set(parts) == set(split)
    for group, count in split.items():
        assert [p.part_index for p in parts[group]] == list(range(1, count + 1))
    assert all(p.HasField("vectors") for p in retrieved.split_parts.chunks)  # asked with chunk_vectors
    assert [c.chunk for c in from_parts.candidates] == [c.chunk for c in fetched.candidates]
    assert any(c.chunk.metadata.get("restored_part") == "true" for c in from_parts.candidates)
    assert not any(s.metadata.get("restored_parts") == "0" for s in from_parts.stages if s.name == "assemble")


def test_retrieval_reads_no_split_parts_unless_asked(stack, llm_kb):
    context = chunk_pb2.CallContext(
        tenant=chunk_pb2.TenantContext(principal="test-root", all_namespaces=True, role="admin"),
        kb=settings_of(KBConfig.from_yaml(kb_config_yaml(), name=KB)))
    with grpc.insecure_channel(stack.servers["retriever"].address) as channel:
        retrieved = retriever_pb2_grpc.RetrieverServiceStub(channel).Retrieve(retriever_pb2.RetrieveRequest(
            kb=KB, query="What does error code E101 mean?", filter=chunk_pb2.SearchFilter(namespaces=["default"]),
            context=context))
    assert any(c.chunk.part_count > 1 for c in retrieved.candidates)
    assert not retrieved.HasField("split_parts")


@pytest.mark.parametrize("question, refusal", UNANSWERABLE)
def test_unanswerable_question_is_refused_without_calling_the_model(client, llm_kb, fresh, question, refusal):
    result = client.query(KB, question)
    assert result["refused"] and result["answer"] == refusal and result["citations"] == []
    assert fresh.requests == []


def test_a_fabricated_claim_is_flagged_in_the_response(client, llm_kb, fresh):
    fresh.responder = cite_source_containing(
        "45 minutes", sentence="It takes 45 minutes [{n}]. The AMR-7 can fly at 200 km/h over the racks [{n}].")
    result = client.query(KB, ANSWERABLE)
    flagged = [i for i in result["citation_issues"] if i["reason"] == "unsupported_claim"]
    assert [i["action"] for i in flagged] == ["flagged"] and "fly" in result["answer"]


def test_sse_stream_sends_tokens_then_citations_then_done(client, stack, llm_kb, fresh):
    with httpx.Client(base_url=stack.http_url, timeout=60) as http:
        created = http.post("/v1/conversations", json={"kb": KB, "query": ANSWERABLE})
        assert created.status_code == 201
        url = created.json()["stream_url"]
        response = http.get(url)
        assert response.headers["content-type"].startswith("text/event-stream")
        events = sse_events(response)
        kinds = [kind for kind, _ in events]
        assert kinds[-2:] == ["citations", "done"] and set(kinds[:-2]) == {"token"} and len(kinds) > 4
        streamed = "".join(data["text"] for kind, data in events if kind == "token")
        assert streamed == fresh.responder(fresh.requests[0]["messages"]) and fresh.requests[0]["stream"] is True
        citations, done = events[-2][1], events[-1][1]
        assert citations["citations"][0]["number"] >= 1 and citations["claim_checks"][0]["verdict"] == "supported"
        assert done["response"]["answer"] == citations["answer"]
        assert done["trace"]["trace_id"] == done["response"]["trace_id"]
        assert done["response"]["stages"]["generation"]["metadata"]["streamed"] == "true"
        assert http.get(url).status_code == 409  # a conversation streams once
        assert http.get("/v1/conversations/unknown/stream").status_code == 404


def test_sse_stream_of_a_refusal_makes_no_model_call(stack, llm_kb, fresh):
    with httpx.Client(base_url=stack.http_url, timeout=60) as http:
        url = http.post("/v1/conversations", json={"kb": KB, "query": "木星有多少颗卫星？"}).json()["stream_url"]
        events = sse_events(http.get(url))
    assert [k for k, _ in events] == ["token", "citations", "done"]
    assert events[1][1]["refused"] is True and fresh.requests == []
    reason = events[2][1]["response"]["stages"]["generation"]["metadata"]["refusal_reason"]
    assert reason == "no source sentence shares a content word with the question"
    assert events[2][1]["response"]["answerability"]["reason"] == reason


def test_a_failing_model_ends_the_stream_with_an_error_event_naming_the_stage(stack, llm_kb, fresh):
    fresh.fail_next(503)
    with httpx.Client(base_url=stack.http_url, timeout=60) as http:
        url = http.post("/v1/conversations", json={"kb": KB, "query": ANSWERABLE}).json()["stream_url"]
        events = sse_events(http.get(url))
    assert [k for k, _ in events] == ["error"]
    error = events[0][1]["error"]
    assert error["stage"] == "generation" and "HTTP 503" in error["message"]


@pytest.mark.parametrize("body, message", [
    pytest.param({"kb": KB, "query": "   "}, "query is empty", id="empty"),
    pytest.param({"kb": KB, "query": "x" * 2001}, "the limit is 2000", id="too-long"),
    pytest.param({"kb": KB}, "query", id="missing"),
])
def test_bad_conversation_requests_are_rejected(stack, llm_kb, body, message):
    with httpx.Client(base_url=stack.http_url, timeout=30) as http:
        response = http.post("/v1/conversations", json=body)
    assert response.status_code == 400 and message in response.json()["error"]["message"]


def test_grpc_query_stream_errors_name_the_problem(stack, llm_kb):
    gateway = GatewayClient(stack.settings.gateway_grpc_addr)
    try:
        with pytest.raises(InvalidArgument, match="query is empty"):
            list(gateway.query_stream(gateway_pb2.QueryRequest(kb=KB, query=" ")))
        with pytest.raises(NotFound):
            list(gateway.query_stream(gateway_pb2.QueryRequest(kb="no-such-kb", query=ANSWERABLE)))
    finally:
        gateway.close()


def test_grpc_query_stream(stack, llm_kb, fresh):
    gateway = GatewayClient(stack.settings.gateway_grpc_addr)
    try:
        events = list(gateway.query_stream(gateway_pb2.QueryRequest(kb=KB, query=ANSWERABLE), timeout_s=60))
    finally:
        gateway.close()
    kinds = [e.WhichOneof("event") for e in events]
    assert kinds[-2:] == ["citations", "done"] and set(kinds[:-2]) == {"token"}
    assert "".join(e.token for e in events[:-2]) == fresh.responder(fresh.requests[0]["messages"])
    assert events[-1].done.answer == events[-2].citations.answer and events[-1].done.trace_id
    assert len(fresh.requests) == 1
