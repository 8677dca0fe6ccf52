"""Typed answers of the gateway's REST API, as `ragkb.AsyncClient` returns them.

Fields the server adds later are kept (`extra="allow"`), so an older client
still reads a newer gateway. Protobuf's JSON renders 64-bit counts as strings;
they become ints here.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow")


class KnowledgeBase(_Model):
    name: str
    description: str = ""
    config_yaml: str = ""
    document_count: int = 0  # of the caller's namespaces
    chunk_count: int = 0
    embedding_model: str = ""
    embedding_dimension: int = 0


class Source(_Model):
    uri: str = ""


class Chunk(_Model):
    chunk_id: str
    doc_id: str
    kb: str = ""
    namespace: str = ""
    content: str = ""
    raw_content: str = ""
    heading_path: list[str] = Field(default_factory=list)
    source: Source = Field(default_factory=Source)
    metadata: dict[str, str] = Field(default_factory=dict)

    @property
    def text(self) -> str:
        return self.raw_content or self.content


class Candidate(_Model):
    """One final chunk of an answer, with its scores: `score` after fusion, `rerank_score` after reranking."""

    chunk: Chunk
    score: float = 0.0
    rerank_score: float = 0.0
    bm25_rank: int = 0
    dense_rank: int = 0


class Citation(_Model):
    number: int  # the [n] marker; chunk n of the answer's chunks (1-based)
    chunk_id: str = ""
    doc_id: str = ""
    heading_path: list[str] = Field(default_factory=list)
    source_uri: str = ""
    quote: str = ""  # the answer sentence that cites it


class Stage(_Model):
    ms: float = 0.0
    metadata: dict[str, str] = Field(default_factory=dict)


class QueryResult(_Model):
    answer: str
    citations: list[Citation] = Field(default_factory=list)
    chunks: list[Candidate] = Field(default_factory=list)
    refused: bool = False
    trace_id: str = ""
    original_query: str = ""
    effective_query: str = ""
    degraded: list[str] = Field(default_factory=list)
    stages: dict[str, Stage] = Field(default_factory=dict)

    @property
    def refusal_reason(self) -> str:
        """Why the answer was refused ("" when it was not)."""
        generation = self.stages.get("generation")
        return generation.metadata.get("refusal_reason", "") if generation else ""


class Job(_Model):
    job_id: str
    kb: str = ""
    namespace: str = ""
    doc_id: str = ""
    filename: str = ""
    state: str = ""  # queued | running | done | failed | cancelled
    outcome: str = ""  # added | updated | unchanged | ... once done
    error: str = ""  # the reason when failed
    chunks_total: int = 0
    chunks_done: int = 0


class TokenEvent(_Model):
    kind: Literal["token"] = "token"
    text: str  # the model's raw text, as it arrives


class CitationsEvent(_Model):
    """The validated answer: after marker repair and claim checks it may differ from the streamed tokens."""

    kind: Literal["citations"] = "citations"
    answer: str = ""
    citations: list[Citation] = Field(default_factory=list)
    refused: bool = False


class DoneEvent(_Model):
    kind: Literal["done"] = "done"
    response: QueryResult
    trace: dict = Field(default_factory=dict)


StreamEvent = TokenEvent | CitationsEvent | DoneEvent
