"""Weighted Reciprocal Rank Fusion.

score(chunk) = sum over routes of weight_route / (k + rank_route(chunk)), ranks
1-based. Scores of different routes live on different scales (BM25 vs cosine),
so only ranks are fused.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from shared.contracts import chunk_pb2


def rrf_fuse(routes: Mapping[str, Sequence[chunk_pb2.Candidate]], weights: Mapping[str, float], *, k: int = 60,
             top_k: int | None = None) -> list[chunk_pb2.Candidate]:
    """Fuse ranked lists keyed by route name ("bm25", "dense"); ties break by chunk id for determinism."""
    if k <= 0:
        raise ValueError(f"RRF k must be positive, got {k}")
    fused: dict[str, chunk_pb2.Candidate] = {}
    for route, candidates in routes.items():
        weight = weights.get(route, 1.0)
        for rank, candidate in enumerate(candidates, start=1):
            chunk_id = candidate.chunk.chunk_id
            merged = fused.get(chunk_id)
            if merged is None:
                merged = chunk_pb2.Candidate(route=chunk_pb2.ROUTE_FUSED)
                merged.chunk.CopyFrom(candidate.chunk)
                fused[chunk_id] = merged
            if route == "bm25":
                merged.bm25_rank, merged.bm25_score = rank, candidate.score
            elif route == "dense":
                merged.dense_rank, merged.dense_score = rank, candidate.score
            merged.score += weight / (k + rank)
    ranked = sorted(fused.values(), key=lambda c: (-c.score, c.chunk.chunk_id))
    return ranked[:top_k] if top_k is not None else ranked
