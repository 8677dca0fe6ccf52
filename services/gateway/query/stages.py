"""The four stage contracts of the query runtime, their light defaults and the gRPC-backed stages.

A stage is any object with the right method (typing.Protocol): tests and
deployments can swap one without touching the others. Each stage returns its
output plus string metadata that ends up in the stage report and the trace.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from services.gateway.query.steps import StepsConfig
from shared.clients import GeneratorClient, RerankerClient, RetrieverClient
from shared.contracts import chunk_pb2, generator_pb2, reranker_pb2, retriever_pb2

PRE_RETRIEVAL, RETRIEVAL, POST_RETRIEVAL, GENERATION = "pre-retrieval", "retrieval", "post-retrieval", "generation"
STAGES = (PRE_RETRIEVAL, RETRIEVAL, POST_RETRIEVAL, GENERATION)


@dataclass
class StepNote:
    """What happened to a named step in one request: applied, skipped, disabled or failed (soft)."""

    step: str
    status: str
    detail: str = ""
    ms: float = 0.0


@dataclass
class QueryContext:
    """Everything a stage may need about the request besides the query text."""

    kb: str
    namespaces: list[str]
    acl_groups: list[str] | None  # None = ACLs not enforced (open mode)
    top_k: int
    steps: StepsConfig
    language: str = "und"
    notes: list[StepNote] = field(default_factory=list)
    query_vector: chunk_pb2.QueryVector | None = None  # the retriever's, handed on to the generator

    def query_vector_of(self, query: str) -> chunk_pb2.QueryVector | None:
        """The retriever's vector of `query`, when it embedded exactly that text."""
        vector = self.query_vector
        return vector if vector is not None and vector.text == query else None

    def search_filter(self) -> chunk_pb2.SearchFilter:
        search_filter = chunk_pb2.SearchFilter(namespaces=self.namespaces)
        if self.acl_groups is not None:
            search_filter.acl_enforced = True
            search_filter.acl_groups.extend(self.acl_groups)
        return search_filter

    def note(self, step: str, status: str, detail: str = "", ms: float = 0.0) -> None:
        self.notes.append(StepNote(step, status, detail, ms))


@dataclass
class Preprocessed:
    query: str                                              # the effective query
    extra_queries: list[str] = field(default_factory=list)  # more queries to retrieve with and fuse
    metadata: dict[str, str] = field(default_factory=dict)


@dataclass
class Retrieved:
    candidates: list[chunk_pb2.Candidate]                   # fused, best first
    bm25: list[chunk_pb2.Candidate] = field(default_factory=list)
    dense: list[chunk_pb2.Candidate] = field(default_factory=list)
    degraded: list[str] = field(default_factory=list)
    variants: dict[str, list[chunk_pb2.Candidate]] = field(default_factory=dict)  # extra query -> its fused list
    metadata: dict[str, str] = field(default_factory=dict)
    split_parts: list[chunk_pb2.KnowledgeChunk] | None = None  # parts of the split candidates; None = not read


@dataclass
class Refined:
    candidates: list[chunk_pb2.Candidate]
    dropped: list[reranker_pb2.DroppedCandidate] = field(default_factory=list)
    metadata: dict[str, str] = field(default_factory=dict)


@dataclass
class Generated:
    answer: str
    citations: list[generator_pb2.Citation] = field(default_factory=list)
    citation_issues: list[generator_pb2.CitationIssue] = field(default_factory=list)
    refused: bool = False
    metadata: dict[str, str] = field(default_factory=dict)
    answerability: generator_pb2.Answerability | None = None  # evidence score, decision, reason


@runtime_checkable
class QueryPreprocessor(Protocol):
    def preprocess(self, query: str, context: QueryContext) -> Preprocessed: ...


@runtime_checkable
class Retriever(Protocol):
    def retrieve(self, query: Preprocessed, context: QueryContext) -> Retrieved: ...


@runtime_checkable
class PostProcessor(Protocol):
    def postprocess(self, query: str, retrieved: Retrieved, context: QueryContext, *,
                    timeout_s: float | None = None) -> Refined: ...


@runtime_checkable
class Generator(Protocol):
    def generate(self, query: str, chunks: list[chunk_pb2.Candidate], context: QueryContext, *,
                 timeout_s: float | None = None) -> Generated: ...


class NoopPreprocessor:
    """The light default: the normalised query goes through unchanged."""

    def preprocess(self, query: str, context: QueryContext) -> Preprocessed:
        return Preprocessed(query=query)


class PassthroughPostProcessor:
    """The light default: keep the fused order, cut to top_k when one is asked for."""

    def postprocess(self, query: str, retrieved: Retrieved, context: QueryContext, *,
                    timeout_s: float | None = None) -> Refined:
        kept = list(retrieved.candidates)
        dropped = []
        if context.top_k and len(kept) > context.top_k:
            dropped = [reranker_pb2.DroppedCandidate(chunk_id=c.chunk.chunk_id, reason="top_k", score=c.score)
                       for c in kept[context.top_k:]]
            kept = kept[:context.top_k]
        return Refined(candidates=kept, dropped=dropped, metadata={"model": "passthrough"})


class GrpcRetriever:
    """Retrieval through the retriever service; extra queries are retrieved too and fused by RRF."""

    def __init__(self, client: RetrieverClient, *, rrf_k: int = 60):
        if rrf_k < 1:
            raise ValueError(f"rrf_k must be >= 1, got {rrf_k}")
        self._client = client
        self._rrf_k = rrf_k

    def retrieve(self, query: Preprocessed, context: QueryContext) -> Retrieved:
        main = self._client.retrieve(self._request(query.query, context))
        context.language = main.query_language or context.language
        context.query_vector = main.query_vector if main.HasField("query_vector") else None
        variants = {}
        parts = _SplitParts(main)
        for extra in query.extra_queries:
            response = self._client.retrieve(self._request(extra, context))
            variants[extra] = list(response.candidates)
            parts.add(response)
        candidates = list(main.candidates)
        if variants:
            candidates = rrf_merge([candidates, *variants.values()], k=self._rrf_k,
                                   limit=max(len(candidates), context.top_k))
        metadata = {
            "language": main.query_language,
            "weights": _pairs(main.weights), "competence": _pairs(main.competence),
            "route_signals": _pairs(main.route_signals), "fusion": main.fusion,
            "bm25_hits": str(len(main.bm25)), "dense_hits": str(len(main.dense)),
            "fused": str(len(candidates)), "queries": str(1 + len(variants)),
            **{f"{s.name}_ms": f"{s.ms:g}" for s in main.stages},
        }
        return Retrieved(candidates=candidates, bm25=list(main.bm25), dense=list(main.dense),
                         degraded=list(main.degraded), variants=variants, metadata=metadata,
                         split_parts=parts.chunks)

    @staticmethod
    def _request(query: str, context: QueryContext) -> retriever_pb2.RetrieveRequest:
        """The candidates' stored vectors serve generation's checks, the split parts the reranker's assembly:
        each is read only while its step is on (a retrieval-only query reads neither)."""
        return retriever_pb2.RetrieveRequest(kb=context.kb, query=query, filter=context.search_filter(),
                                             top_k=context.top_k, chunk_vectors=context.steps.generation.enabled,
                                             split_parts=context.steps.rerank.enabled)


class _SplitParts:
    """The split parts of every retrieval of one query, once each; None once any retrieval did not read them."""

    def __init__(self, first: retriever_pb2.RetrieveResponse):
        self.chunks: list[chunk_pb2.KnowledgeChunk] | None = []
        self._seen: set[str] = set()
        self.add(first)

    def add(self, response: retriever_pb2.RetrieveResponse) -> None:
        if self.chunks is None:
            return
        if not response.HasField("split_parts"):
            self.chunks = None
            return
        for chunk in response.split_parts.chunks:
            if chunk.chunk_id not in self._seen:
                self._seen.add(chunk.chunk_id)
                self.chunks.append(chunk)


def _pairs(values) -> str:
    return ",".join(f"{k}={v:g}" for k, v in sorted(values.items()))


class GrpcPostProcessor:
    """Post-retrieval through the reranker service (thresholds, MMR, budget live there)."""

    def __init__(self, client: RerankerClient):
        self._client = client

    def postprocess(self, query: str, retrieved: Retrieved, context: QueryContext, *,
                    timeout_s: float | None = None) -> Refined:
        response = self._client.rerank(context.kb, query, retrieved.candidates, timeout_s=timeout_s,
                                       split_parts=retrieved.split_parts)
        return Refined(candidates=list(response.candidates), dropped=list(response.dropped),
                       metadata={"model": response.model, "kept": str(len(response.candidates)),
                                 "dropped": str(len(response.dropped))})


class GrpcGenerator:
    """Generation through the generator service (prompt, LLM, citation validation)."""

    def __init__(self, client: GeneratorClient):
        self._client = client

    def generate(self, query: str, chunks: list[chunk_pb2.Candidate], context: QueryContext, *,
                 timeout_s: float | None = None) -> Generated:
        response = self._client.generate(context.kb, query, chunks, timeout_s=timeout_s,
                                         query_vector=context.query_vector_of(query))
        return Generated(answer=response.answer, citations=list(response.citations),
                         citation_issues=list(response.citation_issues), refused=response.refused,
                         answerability=response.answerability,
                         metadata={"generator": response.generator, "evidence": f"{response.evidence_score:.2f}",
                                   "decision_reason": response.answerability.reason,
                                   "citation_issues": str(len(response.citation_issues)),
                                   "refused": str(response.refused).lower(),
                                   "refusal_reason": response.refusal_reason,
                                   **{f"{stage.name}_ms": f"{stage.ms:.2f}" for stage in response.stages},
                                   # which vectors the generator computed and which came with the chunks
                                   **{f"vectors_{key}": value for stage in response.stages if stage.name == "embed"
                                      for key, value in stage.metadata.items()}})


def rrf_merge(lists: list[list[chunk_pb2.Candidate]], *, k: int, limit: int) -> list[chunk_pb2.Candidate]:
    """Reciprocal-rank fusion of several fused lists (one per query), by chunk id."""
    scores: dict[str, float] = {}
    first: dict[str, chunk_pb2.Candidate] = {}
    for ranked in lists:
        for rank, candidate in enumerate(ranked, start=1):
            chunk_id = candidate.chunk.chunk_id
            scores[chunk_id] = scores.get(chunk_id, 0.0) + 1.0 / (k + rank)
            first.setdefault(chunk_id, candidate)
    merged = []
    for chunk_id in sorted(scores, key=lambda c: -scores[c])[:limit or None]:
        candidate = chunk_pb2.Candidate()
        candidate.CopyFrom(first[chunk_id])
        candidate.score = scores[chunk_id]
        candidate.route = chunk_pb2.ROUTE_FUSED
        merged.append(candidate)
    return merged


def elapsed_ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 2)
