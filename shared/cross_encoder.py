"""The cross-encoder (FlagEmbedding's FlagReranker: bge-reranker-base/-large, bge-reranker-v2-m3).

Shared by the reranker (scoring candidates) and the generator's claim check
(`claim_check: cross-encoder`, scoring each cited sentence against its sources):
both services add it to their own registry (`add_cross_encoder`), so the claim
check works wherever the generator runs, and one process loads one model.
"""

from __future__ import annotations

import os
from pathlib import Path

from shared import model_thread
from shared.config import RerankerConfig
from shared.errors import FailedPrecondition
from shared.registry import ComponentRegistry

CROSS_ENCODER = "cross_encoder"


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

    def score(self, query: str, passages: list[str]) -> list[float]:
        if not passages:
            return []
        # one pass at a time (torch modules are not re-entrant): the model thread runs them in turn
        scores = model_thread.run_for_request(self._model.compute_score, [[query, p] for p in passages])
        if isinstance(scores, float):  # FlagReranker returns a bare float for one pair
            scores = [scores]
        return [float(s) for s in scores]

    @classmethod
    def for_config(cls, config: RerankerConfig) -> CrossEncoder:
        return cls(config.model, device=config.device, batch_size=config.batch_size,
                   max_length=config.max_length, use_fp16=config.use_fp16)


def add_cross_encoder(registry: ComponentRegistry) -> ComponentRegistry:
    return registry.add(CROSS_ENCODER, "bge", CrossEncoder.for_config)


def cross_encoder_for(config: RerankerConfig, registry: ComponentRegistry) -> CrossEncoder:
    """The model a reranker config names, loaded once per process whatever its thresholds."""
    model = config.model_dump_json(include={"model", "device", "batch_size", "max_length", "use_fp16"})
    return registry.create(CROSS_ENCODER, "bge", config, cache_key=(model,))


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
