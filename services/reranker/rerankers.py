"""Rerankers: score and threshold the fused candidate list. The default passes candidates through.

A reranker returns the kept candidates (best first) and the dropped ones with a
reason, so traces can show what was cut and why. Dedup, diversity, budget and
split-part restoration happen afterwards in `assembly`, whichever reranker ran.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from shared import registry
from shared.config import RerankerConfig
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


@registry.register("reranker", "passthrough")
def _passthrough(config: RerankerConfig) -> Reranker:
    return PassthroughReranker()


@registry.register("reranker", "bge")
def _bge(config: RerankerConfig) -> Reranker:
    from services.reranker.bge import BgeReranker

    return BgeReranker(config)
