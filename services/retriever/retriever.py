"""The retriever's domain logic: BM25 and dense routes concurrently, then fusion.

Each route's weight is the KB's weight times the route's measured competence for
this query (competence.py: can the embedder's tokenizer read the query and the
text it reaches, does the keyword engine match the query's terms); the fusion
function (weighted RRF or a convex combination of normalised scores) is the KB's,
fitted by `ragkb tune`. A route that fails or times out is reported in `degraded`
and the other route still answers.

For an answer (`with_vectors`), the fused candidates carry the vectors the indexer stored for them
(`KnowledgeChunk.vectors`: the chunk's and its sentences', read by id under the same filter as the
searches), and the result carries the dense route's query vector, so the generator embeds neither.
With `with_parts`, it also carries every part of the split blocks among the fused candidates, read while
their vectors are, so the reranker restores those blocks without a call back to this service.
"""

from __future__ import annotations

import logging
import time
from concurrent import futures
from dataclasses import dataclass, field

from services.retriever.competence import HitReads, effective_weights, measure
from services.retriever.fusion import FusionSpec, fuse
from services.retriever.kept_vectors import KeptVectors
from shared import components
from shared.config import KBConfig, RetrieverConfig, Settings
from shared.contracts import chunk_pb2
from shared.errors import InvalidArgument, Unavailable
from shared.registry import ComponentRegistry
from shared.sentence_vectors import embedder_key, pack_vector
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
    weights: dict[str, float]  # effective: KB weight x competence
    language: str
    stages: dict[str, float] = field(default_factory=dict)
    signals: dict[str, float] = field(default_factory=dict)
    competence: dict[str, float] = field(default_factory=dict)
    fusion: str = ""
    sparse: list[chunk_pb2.Candidate] = field(default_factory=list)  # only for an embedder with lexical weights
    query_vector: chunk_pb2.QueryVector | None = None  # the dense route's, when it answered
    split_parts: list[chunk_pb2.KnowledgeChunk] | None = None  # with `with_parts`, unless reading them failed


def fusion_spec(config: RetrieverConfig) -> FusionSpec:
    return FusionSpec(method=config.fusion, normalization=config.normalization, rrf_k=config.rrf_k)


def base_weights(config: RetrieverConfig) -> dict[str, float]:
    return {"bm25": config.bm25_weight, "dense": config.dense_weight, "sparse": config.sparse_weight}


def route_depths(config: RetrieverConfig, requested: int = 0) -> tuple[int, int]:
    """(bm25, dense) candidate depth: the request's depth for both, else each route's own, else the KB's."""
    if requested < 0:
        raise InvalidArgument(f"candidate_depth must be >= 0, got {requested}")
    if requested:
        return requested, requested
    return config.bm25_depth or config.candidate_depth, config.dense_depth or config.candidate_depth


class Retriever:
    """Stateless per knowledge base: each call gets the KB's effective config (from the request's settings)."""

    def __init__(self, settings: Settings, registry: ComponentRegistry | None = None, *, max_workers: int = 32):
        """`max_workers` route threads: two routes for each call the server runs at once (16 RPC threads), so
        every concurrent query's dense route reaches the query embedder's micro-batcher together."""
        self._settings = settings
        self._registry = registry or components.storage_registry("retriever")
        self._pool = futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="route")
        self.hit_reads = HitReads()  # per-text competence reads, shared by every KB (keys name the model)
        self.kept_vectors = KeptVectors()  # answers' chunk vectors read from a Milvus server, shared by every KB

    def retrieve(self, kb: KBConfig, query: str, search_filter: chunk_pb2.SearchFilter, *, top_k: int = 0,
                 candidate_depth: int = 0, with_vectors: bool = False, with_parts: bool = False) -> RetrievalResult:
        # a bad filter is the caller's error, not a route failure: check it before the routes run
        require_namespaces(search_filter)
        metadata_pairs(search_filter)
        config = kb.retriever
        bm25_depth, dense_depth = route_depths(config, candidate_depth)
        top_k = top_k or config.top_k
        embedder = components.embedder_for(kb, self._registry)
        language = detect_language(query)

        # Stores are opened inside the routes: a store whose engine is down fails only its own route.
        def bm25_route():
            started = time.perf_counter()
            keyword = components.keyword_store_for(kb, self._settings, self._registry)
            hits = keyword.search(query, search_filter, bm25_depth)
            if with_parts:  # looked up while the dense route still runs: most of them get fused
                namespaces, groups = split_groups(hits[:top_k])
                missing = groups_missing_parts(groups, parts_among(groups, [hits]))
                if missing:
                    parts_ahead.append(self._pool.submit(self._group_parts, kb, namespaces, missing))
            return hits, _ms(started)

        def dense_route():
            started = time.perf_counter()
            vector = components.vector_store_for(kb, self._settings, self._registry)
            query_vector = embedder.embed_query(query)
            embedded.append(query_vector)
            return vector.search(query_vector, search_filter, dense_depth), _ms(started)

        def sparse_route():
            started = time.perf_counter()
            vector = components.vector_store_for(kb, self._settings, self._registry)
            return vector.search_sparse(embedder.sparse_query(query), search_filter, dense_depth), _ms(started)

        embedded: list = []  # the dense route's query vector
        parts_ahead: list[futures.Future] = []  # the BM25 route's split hits' parts
        # the dense route first: it waits for the model thread almost at once, and a BM25 route started
        # before it would hold the GIL while the embedding is still to be handed over
        dense = self._pool.submit(dense_route)
        submitted = {"bm25": self._pool.submit(bm25_route), "dense": dense}
        if getattr(embedder, "sparse", False):  # bge-m3: its lexical weights are a third route
            submitted["sparse"] = self._pool.submit(sparse_route)
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
        measured = measure(query, lists.get("bm25"), lists.get("dense"), embedder, kb.keyword_store.analyzer, config,
                           sparse=lists.get("sparse"), reads=self.hit_reads)
        weights = effective_weights({r: w for r, w in base_weights(config).items() if r in lists},
                                    measured.competence)
        spec = fusion_spec(config)
        fused = fuse(lists, weights, spec, top_k=top_k)
        stages["fusion"] = _ms(started)
        split_parts = None
        if with_parts:
            started = time.perf_counter()
            split_parts = self._split_parts(kb, fused, list(lists.values()), parts_ahead)
            stages["split_parts"] = _ms(started)
        query_vector = None
        if with_vectors and "dense" not in degraded:  # a vector store that just failed is not asked again
            started = time.perf_counter()
            # the candidates' and the parts' vectors in one read
            parts = [chunk_pb2.Candidate(chunk=c) for c in split_parts or ()]
            carrying = self._with_vectors(kb, fused + parts, search_filter, found_by_searches=True)
            fused = carrying[:len(fused)]
            if split_parts is not None:
                split_parts = [c.chunk for c in carrying[len(fused):]]
            stages["chunk_vectors"] = _ms(started)
            if embedded:
                query_vector = chunk_pb2.QueryVector(embedder=embedder_key(embedder), text=query,
                                                     vector=pack_vector(embedded[0]))
        return RetrievalResult(candidates=fused, bm25=lists.get("bm25", []), dense=lists.get("dense", []),
                               sparse=lists.get("sparse", []), degraded=degraded, weights=weights, language=language, stages=stages,
                               signals=measured.signals, competence=measured.competence, fusion=spec.describe(),
                               query_vector=query_vector, split_parts=split_parts)

    def _split_parts(self, kb: KBConfig, fused: list[chunk_pb2.Candidate], routes: list[list[chunk_pb2.Candidate]],
                     ahead: list[futures.Future]) -> list[chunk_pb2.KnowledgeChunk] | None:
        """Every part of the split blocks among `fused`: those the routes' own hits hold (found under the
        query's filter), those the BM25 route looked up `ahead`, the others looked up now. Fails soft: None,
        and the reranker asks for the parts itself."""
        namespaces, groups = split_groups(fused)
        if not groups:
            return []
        found = parts_among(groups, routes)
        try:
            for part in ahead[0].result() if ahead else ():
                found.setdefault((part.group_id, part.part_index), part)
        except Exception as error:  # looked up again below
            log.warning("split parts looked up ahead failed: %s", error)
        try:
            missing = groups_missing_parts(groups, found)
            if missing:
                for part in self._group_parts(kb, namespaces, missing):
                    found.setdefault((part.group_id, part.part_index), part)
        except Exception as error:
            log.warning("split parts not read with the candidates: %s", error)
            return None
        order = {g: i for i, g in enumerate(groups)}
        return sorted((p for p in found.values() if p.group_id in order),
                      key=lambda c: (order[c.group_id], c.part_index, c.position))

    def _with_vectors(self, kb: KBConfig, fused: list[chunk_pb2.Candidate], search_filter: chunk_pb2.SearchFilter,
                      *, found_by_searches: bool = False) -> list[chunk_pb2.Candidate]:
        """Copies of the fused candidates carrying their stored vectors (read by id with the searches' filter).
        Candidates `found_by_searches` under that filter (and their split parts) may be answered from
        `kept_vectors` when the store does not keep what it reads itself. Fails soft: without them the
        generator computes the vectors itself."""
        try:
            vector = components.vector_store_for(kb, self._settings, self._registry)
            if found_by_searches and not vector.keeps_read_vectors:
                stored = self.kept_vectors.vectors(vector.collection, [c.chunk for c in fused],
                                                   lambda chunk_ids: vector.chunk_vectors(chunk_ids, search_filter))
            else:
                stored = vector.chunk_vectors([c.chunk.chunk_id for c in fused], search_filter)
        except Exception as error:  # the answer goes on without them
            log.warning("stored chunk vectors not read: %s", error)
            return fused
        carrying = []
        for candidate in fused:
            found = stored.get(candidate.chunk.chunk_id)
            if found is not None:
                copy = chunk_pb2.Candidate()
                copy.CopyFrom(candidate)  # fused candidates may be the routes' own messages, kept for traces
                copy.chunk.vectors.CopyFrom(found)
                candidate = copy
            carrying.append(candidate)
        return carrying

    def chunks_by_group(self, kb: KBConfig, namespaces: list[str], group_ids: list[str], *,
                        vectors_for: chunk_pb2.SearchFilter | None = None) -> list[chunk_pb2.KnowledgeChunk]:
        """Every part of the given split groups (the reranker restores split blocks with it); with
        `vectors_for` (the caller's filter), each part carries its stored vectors for an answer."""
        parts = self._group_parts(kb, namespaces, group_ids)
        if vectors_for is None:
            return parts
        candidates = self._with_vectors(kb, [chunk_pb2.Candidate(chunk=c) for c in parts], vectors_for)
        return [c.chunk for c in candidates]

    def _group_parts(self, kb: KBConfig, namespaces: list[str], group_ids: list[str]) -> list[chunk_pb2.KnowledgeChunk]:
        """The stored parts of the groups, from the keyword store, else from the vector store."""
        require_namespaces(chunk_pb2.SearchFilter(namespaces=namespaces))
        try:
            keyword = components.keyword_store_for(kb, self._settings, self._registry)
            return keyword.chunks_by_group(namespaces, group_ids)
        except Unavailable as error:
            # the keyword engine is down: the vector store holds the same chunks, so parts are still restored
            log.warning("sibling fetch falls back to the vector store: %s", error)
            vector = components.vector_store_for(kb, self._settings, self._registry)
            return vector.chunks_by_group(namespaces, group_ids)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def split_groups(candidates: list[chunk_pb2.Candidate]) -> tuple[list[str], list[str]]:
    """(namespaces, group ids) of the split blocks among `candidates`, groups in candidate order."""
    split = [c.chunk for c in candidates if c.chunk.part_count > 1 and c.chunk.group_id]
    return sorted({c.namespace for c in split}), list(dict.fromkeys(c.group_id for c in split))


def parts_among(groups: list[str],
                routes: list[list[chunk_pb2.Candidate]]) -> dict[tuple[str, int], chunk_pb2.KnowledgeChunk]:
    """(group, part index) -> part, for the parts of `groups` the route lists hold."""
    wanted = set(groups)
    found: dict[tuple[str, int], chunk_pb2.KnowledgeChunk] = {}
    for hits in routes:
        for hit in hits:
            if hit.chunk.group_id in wanted:
                found.setdefault((hit.chunk.group_id, hit.chunk.part_index), hit.chunk)
    return found


def groups_missing_parts(groups: list[str], found: dict[tuple[str, int], chunk_pb2.KnowledgeChunk]) -> list[str]:
    """The groups some of whose parts are not in `found`: only those need a look-up (a block's parts often
    match the same query, so the routes' hits may hold them all)."""
    have: dict[str, int] = {}
    count: dict[str, int] = {}
    for (group, _), part in found.items():
        have[group] = have.get(group, 0) + 1
        count[group] = part.part_count
    return [g for g in groups if g not in count or have[g] < count[g]]


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 2)
