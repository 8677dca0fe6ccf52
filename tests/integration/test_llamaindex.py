"""The LlamaIndex retriever and query engine against the embedded stack, through LlamaIndex's own interfaces."""

from __future__ import annotations

import asyncio

import pytest
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.schema import NodeWithScore, QueryBundle
from llama_index.core.tools import QueryEngineTool

from ragkb.llamaindex import RagkbQueryEngine, RagkbRetriever
from services.gateway.auth import key_store_for
from tests.integration.conftest import QUESTIONS, create_samples_kb

pytestmark = pytest.mark.integration

KB = "samples"


@pytest.fixture(scope="module")
def samples_kb(client):
    create_samples_kb(client, KB)
    return KB


@pytest.mark.parametrize(("question", "answer", "doc_id"), QUESTIONS)
def test_retriever_returns_scored_nodes_holding_the_answer(stack, samples_kb, question, answer, doc_id):
    retriever = RagkbRetriever(KB, base_url=stack.http_url)
    assert isinstance(retriever, BaseRetriever)
    nodes = retriever.retrieve(question)
    assert nodes and all(isinstance(n, NodeWithScore) for n in nodes)
    holding = [n for n in nodes if answer in n.node.get_content()]
    assert holding and holding[0].node.metadata["doc_id"] == doc_id
    assert holding[0].node.node_id == holding[0].node.metadata["chunk_id"] and holding[0].node.metadata["trace_id"]
    assert all(n.score > 0 for n in nodes)  # in the gateway's order: node i is the answer's source [i + 1]
    asynchronous = asyncio.run(retriever.aretrieve(QueryBundle(question)))
    assert [n.node.node_id for n in asynchronous] == [n.node.node_id for n in nodes]


@pytest.mark.parametrize(("question", "answer", "doc_id"), QUESTIONS[:1] + QUESTIONS[3:4])
def test_query_engine_answers_with_citations_and_source_nodes(stack, samples_kb, question, answer, doc_id):
    engine = RagkbQueryEngine(kb=KB, base_url=stack.http_url)
    assert isinstance(engine, BaseQueryEngine)
    for response in (engine.query(question), asyncio.run(engine.aquery(question))):
        assert answer in response.response and not response.metadata["refused"]
        cited = [c for c in response.metadata["citations"] if answer in c["quote"]]
        assert cited and cited[0]["doc_id"] == doc_id
        assert response.source_nodes[cited[0]["number"] - 1].node.node_id == cited[0]["chunk_id"]
    tool = QueryEngineTool.from_defaults(engine, name="handbook", description="robot manuals")
    assert answer in tool.call(question).content


def test_a_key_of_another_namespace_sees_nothing_and_is_refused(stack, samples_kb):
    store = key_store_for(stack.settings)
    key = store.create("li-elsewhere", role="reader", namespaces=["elsewhere"])
    try:
        question = "How long does it take to charge the AMR-7 from 20% to 80%?"
        assert RagkbRetriever(KB, base_url=stack.http_url, api_key=key).retrieve(question) == []
        response = RagkbQueryEngine(kb=KB, base_url=stack.http_url, api_key=key).query(question)
        assert response.metadata["refused"] and response.metadata["refusal_reason"] and response.source_nodes == []
    finally:
        store.delete("li-elsewhere")


def test_bad_settings_are_refused_naming_them(stack):
    with pytest.raises(ValueError, match="top_k"):
        RagkbRetriever(KB, base_url=stack.http_url, top_k=500)
    with pytest.raises(ValueError, match="kb"):
        RagkbRetriever("", base_url=stack.http_url)
    with pytest.raises(ValueError, match="top_k"):
        RagkbQueryEngine(kb=KB, top_k=-1)
