"""LlamaIndex retriever and query engine over a ragkb gateway (needs only `llama-index-core`).

    from ragkb.llamaindex import RagkbQueryEngine, RagkbRetriever
    nodes = RagkbRetriever(kb="handbook", api_key="rk_...").retrieve("How do I reset a robot?")
    response = RagkbQueryEngine(kb="handbook", api_key="rk_...").query("How do I reset a robot?")

The retriever gives one NodeWithScore per final chunk (after fusion and
reranking), in the gateway's context order (node n is what an answer cites as
[n]), scored by the reranker when the knowledge base reranks and by fusion
otherwise; ids, heading path and source are in the node's metadata. The
query engine returns the gateway's own cited answer (or its refusal) as a
LlamaIndex Response, the chunks as its source nodes. Both have async variants
(`aretrieve`, `aquery`) on `ragkb.AsyncClient`.
"""

from __future__ import annotations

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.response.schema import Response
from llama_index.core.query_engine import CustomQueryEngine
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
from pydantic import Field

from ragkb.aio import AsyncClient
from ragkb.chunks import chunk_metadata, chunk_text
from ragkb.client import RagkbClient


class _Connection:
    """Where and as whom to ask: a gateway URL and key, opened as a sync or an async client per call."""

    def __init__(self, kb: str, base_url: str | None, api_key: str | None, namespaces: list[str] | None, top_k: int):
        if not kb:
            raise ValueError("kb must name a knowledge base")
        if not 0 <= top_k <= 200:
            raise ValueError(f"top_k must be between 0 (the knowledge base's default) and 200, got {top_k}")
        self.kb, self.base_url, self.api_key = kb, base_url, api_key
        self.namespaces, self.top_k = list(namespaces or []), top_k

    def query(self, question: str) -> dict:
        client = RagkbClient(self.base_url, api_key=self.api_key)
        try:
            return client.query(self.kb, question, namespaces=self.namespaces, top_k=self.top_k)
        finally:
            client.close()

    async def aquery(self, question: str) -> dict:
        async with AsyncClient(self.base_url, api_key=self.api_key) as client:
            result = await client.query(self.kb, question, namespaces=self.namespaces, top_k=self.top_k)
            return result.model_dump()


class RagkbRetriever(BaseRetriever):
    def __init__(self, kb: str, *, base_url: str | None = None, api_key: str | None = None,
                 namespaces: list[str] | None = None, top_k: int = 0, **kwargs):
        """`top_k` 0 = the knowledge base's default; `namespaces` empty = every namespace of the key."""
        self._connection = _Connection(kb, base_url, api_key, namespaces, top_k)
        super().__init__(**kwargs)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return to_nodes(self._connection.query(query_bundle.query_str))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return to_nodes(await self._connection.aquery(query_bundle.query_str))


class RagkbQueryEngine(CustomQueryEngine):
    kb: str
    base_url: str | None = None
    api_key: str | None = None
    namespaces: list[str] = Field(default_factory=list)
    top_k: int = Field(0, ge=0, le=200, description="0 = the knowledge base's default")

    def custom_query(self, query_str: str) -> Response:
        return to_response(self._connection().query(query_str))

    async def acustom_query(self, query_str: str) -> Response:
        return to_response(await self._connection().aquery(query_str))

    def _connection(self) -> _Connection:
        return _Connection(self.kb, self.base_url, self.api_key, self.namespaces, self.top_k)


def to_nodes(result: dict) -> list[NodeWithScore]:
    nodes = []
    for candidate in result["chunks"]:
        node = TextNode(id_=candidate["chunk"]["chunk_id"], text=chunk_text(candidate),
                        metadata=chunk_metadata(candidate, result["trace_id"]))
        score = candidate.get("rerank_score") or candidate.get("score", 0.0)
        nodes.append(NodeWithScore(node=node, score=score))
    return nodes


def to_response(result: dict) -> Response:
    generation = result.get("stages", {}).get("generation", {})
    return Response(response=result["answer"], source_nodes=to_nodes(result), metadata={
        "citations": result["citations"], "refused": result["refused"], "trace_id": result["trace_id"],
        "refusal_reason": generation.get("metadata", {}).get("refusal_reason", "")})
