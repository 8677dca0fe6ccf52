"""The retriever's domain logic: BM25 and dense routes concurrently, then weighted RRF.

Route weights depend on the query's language: the dense route only gets its full
weight when the embedder declares that language (all-MiniLM-L6-v2 is nearly
blind on Chinese; a multilingual model lifts the restriction). A route that
fails or times out is reported in `degraded` and the other route still answers.
"""

from __future__ import annotations

import logging
import time
from concurrent import futures
from dataclasses import dataclass, field

from services.retriever.fusion import rrf_fuse
from shared import components
from shared.config import KBConfig, RetrieverConfig, Settings
from shared.contracts import chunk_pb2
from shared.errors import InvalidArgument, Unavailable
from shared.kb import KnowledgeBaseCatalog
from shared.stores.base import require_namespaces
from shared.stores.filters import metadata_pairs
from shared.text import detect_language

log = logging.getLogger("ragkb.retriever")


@dataclass
class RetrievalResult:
    candidates: list[chunk_pb2.Candidate]
    bm25: list[chunk_pb2.Candidate]
    dense: list[chunk_pb2.Candidate]
    degraded: list[str]
    weights: dict[str, float]
    language: str
    stages: dict[str, float] = field(default_factory=dict)


def route_weights(kb: KBConfig, language: str, embedder_languages: tuple[str, ...]) -> dict[str, float]:
    config = kb.retriever
    dense = config.dense_weight
    if language not in ("und", *embedder_languages) and "multilingual" not in embedder_languages:
        dense = min(dense, config.dense_weight_foreign_language)
    return {"bm25": config.bm25_weight, "dense": dense}


def route_depths(config: RetrieverConfig, requested: int = 0) -> tuple[int, int]:
    """(bm25, dense) candidate depth: the request's depth for both, else each route's own, else the KB's."""
    if requested < 0:
        raise InvalidArgument(f"candidate_depth must be >= 0, got {requested}")
    if requested:
        return requested, requested
    return config.bm25_depth or config.candidate_depth, config.dense_depth or config.candidate_depth


class Retriever:
    def __init__(self, settings: Settings, catalog: KnowledgeBaseCatalog, *, max_workers: int = 8):
        self._settings = settings
        self._catalog = catalog
        self._pool = futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="route")

    def retrieve(self, kb_name: str, query: str, search_filter: chunk_pb2.SearchFilter, *, top_k: int = 0,
                 candidate_depth: int = 0) -> RetrievalResult:
        # a bad filter is the caller's error, not a route failure: check it before the routes run
        require_namespaces(search_filter)
        metadata_pairs(search_filter)
        kb = self._catalog.get(kb_name)
        config = kb.retriever
        bm25_depth, dense_depth = route_depths(config, candidate_depth)
        top_k = top_k or config.top_k
        embedder = components.embedder_for(kb)
        language = detect_language(query)
        weights = route_weights(kb, language, embedder.languages)

        # Stores are opened inside the routes: a store whose engine is down fails only its own route.
        def bm25_route():
            started = time.perf_counter()
            keyword = components.keyword_store_for(kb, self._settings)
            return keyword.search(query, search_filter, bm25_depth), _ms(started)

        def dense_route():
            started = time.perf_counter()
            vector = components.vector_store_for(kb, self._settings)
            query_vector = embedder.embed_query(query)
            return vector.search(query_vector, search_filter, dense_depth), _ms(started)

        submitted = {"bm25": self._pool.submit(bm25_route), "dense": self._pool.submit(dense_route)}
        deadline = time.monotonic() + config.route_timeout_s
        lists: dict[str, list[chunk_pb2.Candidate]] = {}
        stages: dict[str, float] = {}
        degraded: list[str] = []
        errors: list[str] = []
        for route, future in submitted.items():
            try:
                lists[route], stages[route] = future.result(timeout=max(0.0, deadline - time.monotonic()))
            except futures.TimeoutError:
                degraded.append(route)
                errors.append(f"{route}: timed out after {config.route_timeout_s}s")
            except Exception as error:  # a failing route must not take the query down
                degraded.append(route)
                errors.append(f"{route}: {type(error).__name__}: {error}")
                log.warning("route %s failed: %s", route, error)
        if len(degraded) == len(submitted):
            raise Unavailable(f"every retrieval route failed: {'; '.join(errors)}")
        started = time.perf_counter()
        fused = rrf_fuse({r: lists[r] for r in lists}, weights, k=config.rrf_k, top_k=top_k)
        stages["fusion"] = _ms(started)
        return RetrievalResult(candidates=fused, bm25=lists.get("bm25", []), dense=lists.get("dense", []),
                               degraded=degraded, weights=weights, language=language, stages=stages)

    def chunks_by_group(self, kb_name: str, namespaces: list[str], group_ids: list[str]) -> list[chunk_pb2.KnowledgeChunk]:
        """Every part of the given split groups (the reranker restores split blocks with it)."""
        require_namespaces(chunk_pb2.SearchFilter(namespaces=namespaces))
        kb = self._catalog.get(kb_name)
        try:
            return components.keyword_store_for(kb, self._settings).chunks_by_group(namespaces, group_ids)
        except Unavailable as error:
            # the keyword engine is down: the vector store holds the same chunks, so parts are still restored
            log.warning("sibling fetch falls back to the vector store: %s", error)
            return components.vector_store_for(kb, self._settings).chunks_by_group(namespaces, group_ids)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 2)
