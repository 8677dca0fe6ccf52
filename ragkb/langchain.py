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

from ragkb.chunks import chunk_metadata, chunk_text
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
    chunk_id = candidate["chunk"]["chunk_id"]
    return Document(page_content=chunk_text(candidate), metadata=chunk_metadata(candidate, trace_id), id=chunk_id)
