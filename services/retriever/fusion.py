"""Fusion of the routes' ranked lists: weighted RRF or a convex combination of normalised scores.

- rrf: score(d) = sum_r w_r / (k + rank_r(d)), ranks 1-based; only ranks count.
- convex: score(d) = sum_r w_r * norm_r(d) / sum_r w_r, where norm_r rescales the
  route's own scores (BM25 and cosine live on different scales):
    minmax           (s - min) / (max - min) over the route's list
    zscore           (s - mean) / std over the route's list
    theoretical_min  (s - floor) / (max - floor), floor = the lowest score the route
                     can give (BM25 0, cosine -1), so a weak list is not stretched to 1..0
  A document a route did not return gets that route's lowest value on the normalised
  scale (0 for minmax and theoretical_min, the list's lowest z for zscore). A list without
  spread (a single hit, or all scores tied) normalises to 1 (minmax, theoretical_min) or 0
  (zscore, absent -1): its hits always rank above the documents it did not return.
  The scores `fuse` gives its candidates are measured from a document no route returned
  (each route's values shifted so its absent value is 0): the same order, and never below 0
  with zscore either, since clients read a candidate's score as relevance.

The core works on plain (id, score) lists so `ragkb tune` can re-fuse thousands of
stored route lists quickly; `fuse` wraps it for the retriever's Candidate messages.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from shared.contracts import chunk_pb2

Method = Literal["rrf", "convex"]
Normalization = Literal["minmax", "zscore", "theoretical_min"]

# The lowest score each route can produce (theoretical_min normalisation); dense assumes cosine/IP.
ROUTE_SCORE_FLOORS = {"bm25": 0.0, "dense": -1.0, "sparse": 0.0}


@dataclass(frozen=True)
class FusionSpec:
    method: Method = "rrf"
    normalization: Normalization = "zscore"
    rrf_k: int = 60

    def __post_init__(self):
        if self.rrf_k <= 0:
            raise ValueError(f"RRF k must be positive, got {self.rrf_k}")

    def describe(self) -> str:
        return f"rrf(k={self.rrf_k})" if self.method == "rrf" else f"convex({self.normalization})"


def normalize_scores(scores: Sequence[float], normalization: Normalization, floor: float = 0.0) -> tuple[np.ndarray, float]:
    """(normalised scores, value for a document the route did not return)."""
    values = np.asarray(scores, dtype=np.float64)
    if values.size == 0:
        return values, 0.0
    top = float(values.max())
    if normalization == "minmax":
        span = top - float(values.min())
        return ((values - values.min()) / span if span > 0 else np.ones_like(values)), 0.0
    if normalization == "theoretical_min":
        span = top - floor
        return ((values - floor) / span if span > 0 else np.ones_like(values)), 0.0
    if normalization == "zscore":
        std = float(values.std())
        if std == 0:  # one hit, or all tied: no spread to scale by, but the hits still beat what was not returned
            return np.zeros_like(values), -1.0
        normalised = (values - values.mean()) / std
        return normalised, float(normalised.min())
    raise ValueError(f"unknown score normalization {normalization!r}")


def fused_scores(routes: Mapping[str, Sequence[tuple[str, float]]], weights: Mapping[str, float],
                 spec: FusionSpec, *, from_unreturned: bool = False) -> dict[str, float]:
    """Fused score per id from each route's best-first (id, score) list; a route missing in `weights` gets 1.

    `from_unreturned`: convex scores minus the score of a document no route returned (order unchanged)."""
    fused: dict[str, float] = {}
    if spec.method == "rrf":
        for route, ranked in routes.items():
            weight = weights.get(route, 1.0)
            for rank, (item, _score) in enumerate(ranked, start=1):
                fused[item] = fused.get(item, 0.0) + weight / (spec.rrf_k + rank)
        return fused
    if spec.method != "convex":
        raise ValueError(f"unknown fusion method {spec.method!r}")
    total_weight = sum(weights.get(route, 1.0) for route in routes)
    if total_weight <= 0:
        raise ValueError("convex fusion needs a positive weight on at least one route")
    every_id = {item for ranked in routes.values() for item, _ in ranked}
    for route, ranked in routes.items():
        weight = weights.get(route, 1.0) / total_weight
        if not ranked or weight == 0:
            continue
        normalised, absent = normalize_scores([s for _, s in ranked], spec.normalization,
                                              ROUTE_SCORE_FLOORS.get(route, 0.0))
        present = dict(zip((item for item, _ in ranked), normalised))
        offset = absent if from_unreturned else 0.0  # the same for every id, so the order stays
        for item in every_id:
            fused[item] = fused.get(item, 0.0) + weight * (float(present.get(item, absent)) - offset)
    return fused


def ranked_ids(scores: Mapping[str, float], top_k: int | None = None) -> list[str]:
    """Best first; ties break by id for determinism."""
    ordered = sorted(scores, key=lambda item: (-scores[item], item))
    return ordered[:top_k] if top_k is not None else ordered


def fuse(routes: Mapping[str, Sequence[chunk_pb2.Candidate]], weights: Mapping[str, float], spec: FusionSpec, *,
         top_k: int | None = None) -> list[chunk_pb2.Candidate]:
    """Fuse candidate lists keyed by route ("bm25", "dense", "sparse"); each fused candidate keeps its per-route ranks.

    Only the `top_k` kept are built (each copies its chunk, the costly part)."""
    scores = fused_scores({route: [(c.chunk.chunk_id, c.score) for c in candidates]
                           for route, candidates in routes.items()}, weights, spec, from_unreturned=True)
    found: dict[str, list[tuple[str, int, chunk_pb2.Candidate]]] = {}
    for route, candidates in routes.items():
        for rank, candidate in enumerate(candidates, start=1):
            found.setdefault(candidate.chunk.chunk_id, []).append((route, rank, candidate))
    fused = []
    for chunk_id in ranked_ids(scores, top_k):
        target = chunk_pb2.Candidate(route=chunk_pb2.ROUTE_FUSED, score=scores[chunk_id])
        for route, rank, candidate in found[chunk_id]:
            if route == "bm25":
                target.bm25_rank, target.bm25_score = rank, candidate.score
            elif route == "dense":
                target.dense_rank, target.dense_score = rank, candidate.score
            elif route == "sparse":
                target.sparse_rank, target.sparse_score = rank, candidate.score
        target.chunk.CopyFrom(found[chunk_id][0][2].chunk)  # the first route's copy, as before
        fused.append(target)
    return fused
