"""Cross-encoder reranking with FlagEmbedding's FlagReranker (bge-reranker-base/-large, bge-reranker-v2-m3).

Scores are normalised with a sigmoid to 0..1, so the absolute threshold
(`min_score`) means the same for every bge model. The relative threshold keeps a
candidate only when its score is at least `relative_threshold` x the top score:
it cuts the long tail when the best match is strong and keeps more when every
match is weak (the absolute threshold, and the generator's refusal, handle that).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from services.reranker.rerankers import RerankOutcome, drop
from shared.config import RerankerConfig
from shared.contracts import chunk_pb2
from shared.errors import FailedPrecondition


class CrossEncoder:
    """A FlagReranker loaded once; `score` is thread-safe and returns sigmoid scores in 0..1."""

    def __init__(self, model: str, *, device: str = "auto", batch_size: int = 16, max_length: int = 512,
                 use_fp16: bool = False):
        if batch_size < 1:
            raise ValueError(f"reranker batch_size must be >= 1, got {batch_size}")
        if max_length < 16:
            raise ValueError(f"reranker max_length must be >= 16, got {max_length}")
        if not model:
            raise ValueError("reranker model is empty: give a bge model name or a local directory")
        # Weights come from a local directory or an already-populated hub cache; never a download at query time.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        from FlagEmbedding import FlagReranker

        _silence_progress_bars()
        self._model = FlagReranker(str(_local_model_dir(model)), use_fp16=use_fp16,
                                   devices=None if device == "auto" else device, batch_size=batch_size,
                                   max_length=max_length, normalize=True)
        self.model = model
        self._lock = threading.Lock()  # one forward pass at a time: torch modules are not re-entrant

    def score(self, query: str, passages: list[str]) -> list[float]:
        if not passages:
            return []
        with self._lock:
            scores = self._model.compute_score([[query, p] for p in passages])
        if isinstance(scores, float):  # FlagReranker returns a bare float for one pair
            scores = [scores]
        return [float(s) for s in scores]


class BgeReranker:
    """Cap, score with the cross-encoder, sort, then absolute and relative thresholds."""

    name = "bge"

    def __init__(self, config: RerankerConfig, encoder: CrossEncoder | None = None):
        self._config = config
        self._encoder = encoder
        if encoder is None and config.enabled:
            self._encoder = CrossEncoder(config.model, device=config.device, batch_size=config.batch_size,
                                         max_length=config.max_length, use_fp16=config.use_fp16)

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


def _silence_progress_bars() -> None:
    """FlagReranker draws tqdm bars for every call over a batch; in a server that is log noise per query."""
    from FlagEmbedding.inference.reranker.encoder_only import base
    from tqdm import tqdm, trange

    base.tqdm = lambda *args, **kwargs: tqdm(*args, **{**kwargs, "disable": True})
    base.trange = lambda *args, **kwargs: trange(*args, **{**kwargs, "disable": True})


def _local_model_dir(model: str) -> Path:
    """A local directory, or a hub name already in the local Hugging Face cache (looked up without network)."""
    path = Path(model).expanduser()
    if model.startswith(("/", "~", ".")) or path.exists():
        if not (path / "config.json").exists():
            raise FailedPrecondition(f"reranker model directory {model!r} has no config.json")
        return path
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(repo_id=model, local_files_only=True))
    except Exception as error:  # not cached (or not a valid repo name): both mean "cannot load here"
        raise FailedPrecondition(
            f"cannot load reranker model {model!r}: it is not a local directory and not in the Hugging Face "
            f"cache, and models are never downloaded at query time ({type(error).__name__})"
        ) from None


def _passage(chunk: chunk_pb2.KnowledgeChunk) -> str:
    # `content` carries the heading path, which often is what makes a passage relevant
    return chunk.content or chunk.raw_content
