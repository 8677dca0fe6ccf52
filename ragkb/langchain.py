"""LangChain retriever over a ragkb gateway (needs only `langchain-core`).

    from ragkb.langchain import RagkbRetriever
    retriever = RagkbRetriever(kb="handbook", namespaces=["team-a"], api_key="rk_...")
    docs = retriever.invoke("How do I reset a robot?")

Each Document is one final chunk (after fusion and reranking), with its ids,
heading path, source and scores in metadata. The gateway's own answer is not
used: LangChain chains bring their own generation.
"""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field, PrivateAttr

from ragkb.client import RagkbClient


class RagkbRetriever(BaseRetriever):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    kb: str
    base_url: str | None = None
    api_key: str | None = None
    namespaces: list[str] = Field(default_factory=list)
    top_k: int = Field(0, ge=0, le=200, description="0 = the knowledge base's default")
    client: RagkbClient | None = None  # pass one to share its connection pool and key
    _owned: RagkbClient | None = PrivateAttr(default=None)

    def _client(self) -> RagkbClient:
        if self.client is not None:
            return self.client
        if self._owned is None:
            self._owned = RagkbClient(self.base_url, api_key=self.api_key)
        return self._owned

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun,
                                **kwargs: Any) -> list[Document]:
        result = self._client().query(self.kb, query, namespaces=self.namespaces, top_k=self.top_k)
        return [to_document(candidate, result["trace_id"]) for candidate in result["chunks"]]


def to_document(candidate: dict, trace_id: str = "") -> Document:
    chunk = candidate["chunk"]
    metadata = {
        "chunk_id": chunk["chunk_id"], "doc_id": chunk["doc_id"], "kb": chunk["kb"], "namespace": chunk["namespace"],
        "heading_path": list(chunk.get("heading_path", [])), "source": chunk.get("source", {}).get("uri", ""),
        "score": candidate.get("score", 0.0), "rerank_score": candidate.get("rerank_score", 0.0),
        "bm25_rank": candidate.get("bm25_rank", 0), "dense_rank": candidate.get("dense_rank", 0),
        "trace_id": trace_id,
    }
    return Document(page_content=chunk.get("raw_content") or chunk.get("content", ""), metadata=metadata,
                    id=chunk["chunk_id"])
