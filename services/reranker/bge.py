"""Cross-encoder reranking with FlagEmbedding's FlagReranker (bge-reranker-base/-large, bge-reranker-v2-m3).

Scores are normalised with a sigmoid to 0..1, so the absolute threshold
(`min_score`) means the same for every bge model. The relative threshold keeps a
candidate only when its score is at least `relative_threshold` x the top score:
it cuts the long tail when the best match is strong and keeps more when every
match is weak (the absolute threshold, and the generator's refusal, handle that).
"""

from __future__ import annotations

from pathlib import Path

from services.reranker.rerankers import RerankOutcome, drop
from shared.config import RerankerConfig
from shared.contracts import chunk_pb2
from shared.cross_encoder import CrossEncoder


class BgeReranker:
    """Cap, score with the cross-encoder, sort, then absolute and relative thresholds."""

    name = "bge"

    def __init__(self, config: RerankerConfig, encoder: CrossEncoder | None = None):
        self._config = config
        self._encoder = encoder
        if encoder is None and config.enabled:
            self._encoder = CrossEncoder.for_config(config)

    @property
    def encoder(self) -> CrossEncoder | None:
        return self._encoder

    def rerank(self, query: str, candidates: list[chunk_pb2.Candidate], top_n: int) -> RerankOutcome:
        config = self._config
        if not config.enabled or self._encoder is None:
            return RerankOutcome(kept=list(candidates), dropped=[], model="bge(disabled)")
        scored = list(candidates[:config.candidate_cap])
        dropped = [drop(c, "beyond_candidate_cap") for c in candidates[config.candidate_cap:]]
        scores = self._encoder.score(query, [_passage(c.chunk) for c in scored])
        reranked = []
        for candidate, score in zip(scored, scores):
            copy = chunk_pb2.Candidate()
            copy.CopyFrom(candidate)
            copy.rerank_score = score
            copy.score = score
            copy.route = chunk_pb2.ROUTE_RERANKED
            reranked.append(copy)
        reranked.sort(key=lambda c: -c.rerank_score)
        kept: list[chunk_pb2.Candidate] = []
        top = reranked[0].rerank_score if reranked else 0.0
        for candidate in reranked:
            if candidate.rerank_score < config.min_score:
                dropped.append(drop(candidate, "below_min_score"))
            elif candidate.rerank_score < config.relative_threshold * top:
                dropped.append(drop(candidate, "below_relative_threshold"))
            else:
                kept.append(candidate)
        return RerankOutcome(kept=kept, dropped=dropped, model=f"bge:{Path(self._encoder.model).name}")


def _passage(chunk: chunk_pb2.KnowledgeChunk) -> str:
    # `content` carries the heading path, which often is what makes a passage relevant
    return chunk.content or chunk.raw_content
