"""How a KB's embedder reads a chunk's text, measured once at ingest.

The retriever's route competence (services/retriever/competence.py) weighs the dense route by the
share of unknown tokens in the texts a query reaches. That share depends only on the text and the
model's tokenizer, so the index measures it when it embeds the chunk and stores it in the chunk
(`KnowledgeChunk.reading`); the retriever reads the stored value instead of tokenizing each hit per
query. A reading is used only when it names the embedder asking, so a chunk read by another model
(or stored before readings existed) is measured at query time as before, with the same result.
"""

from __future__ import annotations

from collections.abc import Sequence

from shared.contracts import chunk_pb2
from shared.sentence_vectors import embedder_key

HIT_CHARS = 2000  # of each hit's text (long chunks are embedded truncated anyway)


def mark_readings(embedder, chunks: Sequence[chunk_pb2.KnowledgeChunk]) -> None:
    """Set each chunk's `reading` as `embedder` reads it, replacing whatever the chunk carried (a caller's
    chunk may say anything)."""
    key = embedder_key(embedder)
    for chunk in chunks:
        chunk.reading.embedder = key
        chunk.reading.unknown_share = embedder.unknown_token_share(chunk.content[:HIT_CHARS])


def stored_unknown_share(chunk: chunk_pb2.KnowledgeChunk, key: str) -> float | None:
    """The unknown-token share stored with the chunk for the model `key`, or None when none is."""
    reading = chunk.reading
    return reading.unknown_share if reading.embedder == key else None
