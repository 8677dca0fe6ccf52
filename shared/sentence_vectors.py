"""Sentence vectors: computed once at ingest, carried to the generator with the chunks it answers from.

The generator scores the question against each sentence of its sources (evidence selection) and each
answer sentence against the chunk it cites (claim check). Embedding those sentences per query was
nearly all of an answer's time, so the indexer embeds them with the chunk, in the same
`embed_documents` call (one length-sorted pass over chunk texts and sentences), and the vector store
keeps them beside the chunk's vector (float16: the generator rounds vectors it computes itself the
same way, so an answer does not depend on where its vectors came from). The retriever reads them by
id for the fused top-k only (`KnowledgeChunk.vectors`) and the generator uses them when they were
made by its own embedder (`embedder_key`) and sentence reading (`SPLITTER_VERSION`) and there are as
many as the chunk has scored sentences; otherwise it computes them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from shared.contracts import chunk_pb2
from shared.sentences import SPLITTER_VERSION, scored_sentences

STORED = np.dtype("<f2")  # sentence vectors as stored and carried
CHUNK = np.dtype("<f4")  # chunk and query vectors: as the vector index holds them


def embedder_key(embedder) -> str:
    """Which model produced a vector: its id and dimension."""
    return f"{embedder.model_id}/{embedder.dimension}"


def as_stored(vectors: np.ndarray) -> np.ndarray:
    """Vectors at the precision sentence vectors are stored with (float16), back as float32."""
    return np.asarray(vectors, dtype=np.float32).astype(STORED).astype(np.float32)


def pack_sentences(vectors: np.ndarray) -> bytes:
    return np.ascontiguousarray(vectors, dtype=np.float32).astype(STORED).tobytes()


def unpack_sentences(data: bytes, count: int, dimension: int) -> np.ndarray | None:
    """(count, dimension) float32, or None when the bytes do not hold exactly that many vectors."""
    if count <= 0 or len(data) != count * dimension * STORED.itemsize:
        return None
    return np.frombuffer(data, dtype=STORED).reshape(count, dimension).astype(np.float32)


def pack_vector(vector: np.ndarray) -> bytes:
    return np.ascontiguousarray(vector, dtype=CHUNK).tobytes()


def unpack_vector(data: bytes, dimension: int) -> np.ndarray | None:
    if len(data) != dimension * CHUNK.itemsize:
        return None
    return np.frombuffer(data, dtype=CHUNK).astype(np.float32)


@dataclass(frozen=True)
class Embedded:
    """One indexing batch's vectors: each chunk's, and each chunk's scored-sentence vectors (float32)."""
    chunks: np.ndarray
    sentences: list[np.ndarray] | None  # None when the store keeps none


def embed_for_index(embedder, chunks: Sequence[chunk_pb2.KnowledgeChunk], *, sentences: bool) -> Embedded:
    """Chunk vectors, and with `sentences` each chunk's sentence vectors, from one `embed_documents` call:
    the model sorts its input by length, so short sentences share forward passes instead of one pass
    per chunk's handful. Each distinct text is embedded once: the sentences a split block's parts
    overlap by, and a one-sentence chunk's sentence, would otherwise be embedded twice (a text's vector
    does not depend on what it is batched with: `shared/embedders.length_batches`)."""
    texts = [c.content for c in chunks]
    if not sentences:
        return Embedded(embedder.embed_documents(texts), None)
    per_chunk = [scored_sentences(c) for c in chunks]
    rows = {text: row for row, text in enumerate(dict.fromkeys([*texts, *(s for g in per_chunk for s in g)]))}
    vectors = embedder.embed_documents(list(rows))
    return Embedded(vectors[[rows[t] for t in texts]], [vectors[[rows[s] for s in group]] for group in per_chunk])


def carried(key: str, chunk_vector, sentence_vectors: bytes, sentence_count: int,
            splitter: int = SPLITTER_VERSION) -> chunk_pb2.ChunkVectors:
    """The `KnowledgeChunk.vectors` of one chunk, from what the index holds (no sentences: count 0)."""
    return chunk_pb2.ChunkVectors(embedder=key, chunk=pack_vector(np.asarray(chunk_vector, dtype=np.float32)),
                                  splitter=splitter if sentence_count else 0, sentence_count=sentence_count,
                                  sentences=sentence_vectors if sentence_count else b"")


def without_vectors(candidates: Sequence[chunk_pb2.Candidate]) -> list[chunk_pb2.Candidate]:
    """Copies of the candidates without their carried vectors: what API clients and stores see."""
    stripped = []
    for candidate in candidates:
        if candidate.chunk.HasField("vectors"):
            copy = chunk_pb2.Candidate()
            copy.CopyFrom(candidate)
            copy.chunk.ClearField("vectors")
            candidate = copy
        stripped.append(candidate)
    return stripped
