"""gRPC servicer for the reranker: the KB's reranker by config, then context assembly."""

from __future__ import annotations

import time
from functools import partial

from services.reranker.assembly import Budget, assemble
from shared import components, tenancy
from shared.clients import RetrieverClient
from shared.config import KBConfig
from shared.contracts import chunk_pb2, reranker_pb2, reranker_pb2_grpc
from shared.kb_settings import SettingsResolver
from shared.registry import ComponentRegistry

SERVICE_NAME = "ragkb.v1.RerankerService"


class RerankerServicer(reranker_pb2_grpc.RerankerServiceServicer):
    """Split parts are restored from the parts the request carries (retrieval read them with the candidates),
    else through the retriever: the reranker never opens a store itself. The KB's settings come with the
    request and go on to the retriever with the sibling fetch."""

    def __init__(self, registry: ComponentRegistry, kbs: SettingsResolver, retriever: RetrieverClient | None = None):
        self._registry = registry
        self._kbs = kbs
        self._retriever = retriever

    def Rerank(self, request: reranker_pb2.RerankRequest, context) -> reranker_pb2.RerankResponse:
        tenancy.check_chunks(c.chunk for c in request.candidates)
        parts = None
        if request.HasField("split_parts"):
            parts = list(request.split_parts.chunks)
            tenancy.check_chunks(parts)
        return self.rerank(self._kbs.config(request), request.query, list(request.candidates), request.top_n,
                           split_parts=parts)

    def rerank(self, kb: KBConfig, query: str, candidates: list[chunk_pb2.Candidate],
               top_n: int = 0, *, split_parts: list[chunk_pb2.KnowledgeChunk] | None = None
               ) -> reranker_pb2.RerankResponse:
        """Rerank and assemble `candidates` under the effective config `kb`; `top_n` 0 = the KB's. With
        `split_parts` (what retrieval read), split blocks are restored from those parts alone."""
        config = kb.reranker
        reranker = self._registry.create("reranker", config.name, config, registry=self._registry,
                                         cache_key=(config.model_dump_json(),))
        top_n = top_n or config.top_n
        started = time.perf_counter()
        outcome = reranker.rerank(query, candidates, top_n)
        rerank_ms = _ms(started)
        started = time.perf_counter()
        budget = Budget(top_n=top_n, max_context_tokens=config.max_context_tokens,
                        mmr_threshold=config.mmr_threshold, restore_parts=config.restore_parts)
        # restored parts carry their stored vectors too when the candidates do (they are for an answer)
        with_vectors = any(c.chunk.HasField("vectors") for c in candidates)
        if split_parts is not None:
            fetch = partial(parts_of, split_parts)
        else:
            fetch = partial(self._retriever.chunks_by_group, kb.name, with_vectors=with_vectors) \
                if self._retriever else None
        assembly = assemble(outcome.kept, budget, count_tokens=components.embedder_for(kb, self._registry).count_tokens,
                            fetch_siblings=fetch)
        assemble_ms = _ms(started)
        dropped = [*outcome.dropped, *assembly.dropped]
        scored = [c.rerank_score for c in outcome.kept if c.rerank_score] + [
            d.score for d in outcome.dropped if d.reason.startswith("below_")]
        rerank_facts = {"model": outcome.model, "scored": str(len(scored)),
                        "top_score": f"{max(scored):.4f}" if scored else "", "dropped": str(len(outcome.dropped)),
                        "thresholds": f"min={config.min_score:g},relative={config.relative_threshold:g}"}
        return reranker_pb2.RerankResponse(
            candidates=assembly.kept, dropped=dropped, model=outcome.model, groups=assembly.groups,
            stages=[chunk_pb2.StageReport(name="rerank", ms=rerank_ms, metadata=rerank_facts),
                    chunk_pb2.StageReport(name="assemble", ms=assemble_ms, metadata=assembly.facts)],
        )


def parts_of(parts: list[chunk_pb2.KnowledgeChunk], namespaces: list[str],
             group_ids: list[str]) -> list[chunk_pb2.KnowledgeChunk]:
    """The sibling fetch answered from parts already read: those of `group_ids` in `namespaces`."""
    wanted_groups, wanted_namespaces = set(group_ids), set(namespaces)
    return [p for p in parts if p.group_id in wanted_groups and p.namespace in wanted_namespaces]


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 2)


def add_to(server, registry: ComponentRegistry, kbs: SettingsResolver,
           retriever: RetrieverClient | None = None) -> RerankerServicer:
    servicer = RerankerServicer(registry, kbs, retriever)
    server.add(reranker_pb2_grpc.add_RerankerServiceServicer_to_server, servicer, SERVICE_NAME)
    return servicer
