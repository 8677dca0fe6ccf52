"""The stored vectors of chunks recently handed out with an answer, kept in the retriever's memory.

A Milvus server answers every vector read with a round trip after fusion (~5 ms on a loopback stack), and a
knowledge base's popular chunks are read again and again. What a chunk's vectors hold is fixed by its text
and the collection's model: the chunk id hashes the KB, namespace, document, heading path and text, and the
collection name names the model and dimension. So an entry keyed by (collection, chunk id, content hash)
can never hold another text's vectors, and a chunk edited or re-embedded gets a new key.

Only chunks the query's own filtered searches returned (and the other parts of their split blocks, which
share their document's namespace, ACL and metadata) are looked up, so a kept entry is never handed to a
caller the store would not have read it for.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence

from shared.contracts import chunk_pb2

KEPT_CHUNKS = 4096  # ~8 kB each (a 384-d vector and a few float16 sentence vectors): ~32 MB at most


class KeptVectors:
    """Bounded LRU of chunk vectors read from a vector store, shared by every knowledge base. Thread-safe."""

    def __init__(self, max_entries: int = KEPT_CHUNKS):
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        self.max_entries = max_entries
        self.hits = self.misses = 0
        self._entries: OrderedDict[tuple[str, str, str], chunk_pb2.ChunkVectors] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def vectors(self, collection: str, chunks: Sequence[chunk_pb2.KnowledgeChunk],
                read: Callable[[list[str]], dict[str, chunk_pb2.ChunkVectors]]) -> dict[str, chunk_pb2.ChunkVectors]:
        """The vectors of `chunks` by chunk id: kept ones from memory, the others through `read(chunk ids)`
        (a chunk `read` does not return stays absent and is asked for again next time)."""
        found: dict[str, chunk_pb2.ChunkVectors] = {}
        missing: list[chunk_pb2.KnowledgeChunk] = []
        with self._lock:
            for chunk in chunks:
                key = (collection, chunk.chunk_id, chunk.content_hash)
                kept = self._entries.get(key)
                if kept is None:
                    missing.append(chunk)
                    continue
                self._entries.move_to_end(key)
                found[chunk.chunk_id] = kept
            self.hits += len(found)
            self.misses += len(missing)
        if not missing:
            return found
        read_now = read([chunk.chunk_id for chunk in missing])
        with self._lock:
            for chunk in missing:
                vectors = read_now.get(chunk.chunk_id)
                if vectors is None:
                    continue
                found[chunk.chunk_id] = vectors
                self._entries[(collection, chunk.chunk_id, chunk.content_hash)] = vectors
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
        return found
