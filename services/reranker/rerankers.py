"""Rerankers: refine the fused candidate list. The default passes candidates through.

A reranker returns the kept candidates (best first) and the dropped ones with a
reason, so traces can show what was cut and why.
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


class PassthroughReranker:
    """Keeps recall order; drops exact duplicates (same content hash) and anything beyond top_n."""

    name = "passthrough"

    def rerank(self, query: str, candidates: list[chunk_pb2.Candidate], top_n: int) -> RerankOutcome:
        kept: list[chunk_pb2.Candidate] = []
        dropped: list[reranker_pb2.DroppedCandidate] = []
        seen_hashes: set[str] = set()
        for candidate in candidates:
            chunk = candidate.chunk
            if chunk.content_hash and chunk.content_hash in seen_hashes:
                dropped.append(reranker_pb2.DroppedCandidate(chunk_id=chunk.chunk_id, reason="duplicate_content",
                                                             score=candidate.score))
            elif len(kept) >= top_n:
                dropped.append(reranker_pb2.DroppedCandidate(chunk_id=chunk.chunk_id, reason="beyond_top_n",
                                                             score=candidate.score))
            else:
                seen_hashes.add(chunk.content_hash)
                kept.append(candidate)
        return RerankOutcome(kept=kept, dropped=dropped, model=self.name)


@registry.register("reranker", "passthrough")
def _passthrough(config: RerankerConfig) -> Reranker:
    return PassthroughReranker()
