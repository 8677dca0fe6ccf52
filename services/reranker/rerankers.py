"""Rerankers: score and threshold the fused candidate list. The default passes candidates through.

A reranker returns the kept candidates (best first) and the dropped ones with a
reason, so traces can show what was cut and why. Dedup, diversity, budget and
split-part restoration happen afterwards in `assembly`, whichever reranker ran.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from shared.config import RerankerConfig
from shared.cross_encoder import add_cross_encoder, cross_encoder_for
from shared.registry import ComponentRegistry
from shared.contracts import chunk_pb2, reranker_pb2


@dataclass
class RerankOutcome:
    kept: list[chunk_pb2.Candidate]
    dropped: list[reranker_pb2.DroppedCandidate]
    model: str


class Reranker(Protocol):
    def rerank(self, query: str, candidates: list[chunk_pb2.Candidate], top_n: int) -> RerankOutcome: ...


def drop(candidate: chunk_pb2.Candidate, reason: str) -> reranker_pb2.DroppedCandidate:
    return reranker_pb2.DroppedCandidate(chunk_id=candidate.chunk.chunk_id, reason=reason, score=candidate.score)


class PassthroughReranker:
    """Keeps recall order and every candidate; assembly then dedups and trims to the budget."""

    name = "passthrough"

    def rerank(self, query: str, candidates: list[chunk_pb2.Candidate], top_n: int) -> RerankOutcome:
        return RerankOutcome(kept=list(candidates), dropped=[], model=self.name)


def add_rerankers(registry: ComponentRegistry) -> ComponentRegistry:
    """The reranker service's components: its rerankers and the shared cross-encoder the bge one scores with."""
    add_cross_encoder(registry)
    return registry.add("reranker", "passthrough", passthrough).add("reranker", "bge", bge)


def passthrough(config: RerankerConfig, *, registry: ComponentRegistry) -> Reranker:
    return PassthroughReranker()


def bge(config: RerankerConfig, *, registry: ComponentRegistry) -> Reranker:
    from services.reranker.bge import BgeReranker

    return BgeReranker(config, cross_encoder_for(config, registry) if config.enabled else None)
