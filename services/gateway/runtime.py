"""The query runtime: pre-retrieval -> retrieval -> post-retrieval -> generation.

The gateway orchestrates; each stage is another service reached through its
typed client. A failure carries the name of the stage it happened in, and the
result carries per-stage milliseconds and metadata.
"""

from __future__ import annotations

import time
import uuid
from contextlib import contextmanager

from shared.clients import GeneratorClient, RerankerClient, RetrieverClient
from shared.config import DEFAULT_NAMESPACE
from shared.contracts import chunk_pb2, gateway_pb2, retriever_pb2
from shared.errors import InvalidArgument, RagkbError
from shared.text import normalize

MAX_QUERY_CHARS = 2000
PRE_RETRIEVAL, RETRIEVAL, POST_RETRIEVAL, GENERATION = "pre-retrieval", "retrieval", "post-retrieval", "generation"


class QueryRuntime:
    def __init__(self, retriever: RetrieverClient, reranker: RerankerClient, generator: GeneratorClient):
        self._retriever = retriever
        self._reranker = reranker
        self._generator = generator

    def run(self, request: gateway_pb2.QueryRequest) -> gateway_pb2.QueryResponse:
        result = gateway_pb2.QueryResponse(original_query=request.query, trace_id=uuid.uuid4().hex)
        with _stage(result, PRE_RETRIEVAL) as meta:
            effective = validate_query(request.query)
            namespaces = [ns for ns in request.namespaces if ns] or [DEFAULT_NAMESPACE]
            meta["namespaces"] = ",".join(namespaces)
            result.effective_query = effective
        with _stage(result, RETRIEVAL) as meta:
            retrieved = self._retriever.retrieve(retriever_pb2.RetrieveRequest(
                kb=request.kb, query=effective, filter=chunk_pb2.SearchFilter(namespaces=namespaces),
                top_k=request.top_k,
            ))
            result.degraded.extend(retrieved.degraded)
            meta.update({
                "language": retrieved.query_language,
                "weights": ",".join(f"{k}={v:g}" for k, v in sorted(retrieved.weights.items())),
                "bm25_hits": str(len(retrieved.bm25)), "dense_hits": str(len(retrieved.dense)),
                "fused": str(len(retrieved.candidates)),
                **{f"{s.name}_ms": f"{s.ms:g}" for s in retrieved.stages},
            })
        with _stage(result, POST_RETRIEVAL) as meta:
            reranked = self._reranker.rerank(request.kb, effective, list(retrieved.candidates))
            meta.update({"model": reranked.model, "kept": str(len(reranked.candidates)),
                         "dropped": str(len(reranked.dropped))})
        with _stage(result, GENERATION) as meta:
            generated = self._generator.generate(request.kb, effective, list(reranked.candidates))
            meta.update({"generator": generated.generator, "citation_issues": str(len(generated.citation_issues)),
                         "refused": str(generated.refused).lower()})
        result.answer = generated.answer
        result.citations.extend(generated.citations)
        result.citation_issues.extend(generated.citation_issues)
        result.refused = generated.refused
        result.chunks.extend(reranked.candidates)
        return result


def validate_query(query: str) -> str:
    if len(query) > MAX_QUERY_CHARS:
        raise InvalidArgument(f"query is {len(query)} characters; the limit is {MAX_QUERY_CHARS}")
    effective = normalize(query)
    if not effective:
        raise InvalidArgument("query is empty")
    return effective


@contextmanager
def _stage(result: gateway_pb2.QueryResponse, name: str):
    metadata: dict[str, str] = {}
    started = time.perf_counter()
    try:
        yield metadata
    except RagkbError as error:
        error.stage = error.stage or name
        raise
    finally:
        result.stages.append(chunk_pb2.StageReport(name=name, ms=round((time.perf_counter() - started) * 1000, 2),
                                                   metadata=metadata))
