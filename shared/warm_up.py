"""The sample questions and sources a service runs through its own query path before SERVING.

Health turns SERVING only after a service's warm-up (`shared/server.py`), and a first query must not
load a model (an embedder, a cross-encoder, jieba's dictionary) nor pay a model's first call (torch and
tokenizer set-up): each service's warm-up loads what the default knowledge base needs and runs these
samples, one English and one Chinese, through it. A KB naming other models still loads them on its
first query: inner services learn a KB's settings from its requests, never from the catalog.
"""

from __future__ import annotations

from shared.config import KBConfig
from shared.contracts import chunk_pb2

# (question, a passage that answers it)
SAMPLES = (
    ("How long does a full charge of the battery take?", "A full charge of the battery takes 90 minutes."),
    ("电池充满电需要多长时间？", "电池充满电需要九十分钟。"),
)


def default_kb() -> KBConfig:
    """The config a knowledge base gets when its tenant sets nothing."""
    return KBConfig(name="default")


def sources(passage: str, *, kb: str = "default", namespace: str = "default") -> list[chunk_pb2.Candidate]:
    """`passage` as the one strong candidate of a sample query, scored as a confident hit of both routes."""
    chunk = chunk_pb2.KnowledgeChunk(chunk_id="warm-up-1", kb=kb, namespace=namespace, doc_id="warm-up",
                                     content=passage, heading_path=["Warm-up"])
    return [chunk_pb2.Candidate(chunk=chunk, score=1.0, bm25_rank=1, bm25_score=20.0, dense_rank=1,
                                dense_score=0.95, rerank_score=0.95)]
