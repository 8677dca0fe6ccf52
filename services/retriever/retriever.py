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
from shared.config import KBConfig, Settings
from shared.contracts import chunk_pb2
from shared.errors import Unavailable
from shared.kb import KnowledgeBaseCatalog
from shared.stores.base import require_namespaces
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


class Retriever:
    def __init__(self, settings: Settings, catalog: KnowledgeBaseCatalog, *, max_workers: int = 8):
        self._settings = settings
        self._catalog = catalog
        self._pool = futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="route")

    def retrieve(self, kb_name: str, query: str, search_filter: chunk_pb2.SearchFilter, *, top_k: int = 0,
                 candidate_depth: int = 0) -> RetrievalResult:
        require_namespaces(search_filter)
        kb = self._catalog.get(kb_name)
        config = kb.retriever
        depth = candidate_depth or config.candidate_depth
        top_k = top_k or config.top_k
        embedder = components.embedder_for(kb)
        language = detect_language(query)
        weights = route_weights(kb, language, embedder.languages)
        keyword = components.keyword_store_for(kb, self._settings)
        vector = components.vector_store_for(kb, self._settings)

        def bm25_route():
            started = time.perf_counter()
            return keyword.search(query, search_filter, depth), _ms(started)

        def dense_route():
            started = time.perf_counter()
            query_vector = embedder.embed_query(query)
            return vector.search(query_vector, search_filter, depth), _ms(started)

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

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 2)
