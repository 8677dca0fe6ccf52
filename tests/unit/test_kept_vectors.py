"""The retriever's kept chunk vectors: read once, then answered from memory, never across texts or models."""

import pytest

from services.retriever.kept_vectors import KeptVectors
from shared.contracts import chunk_pb2


def chunk(chunk_id: str, content_hash: str = "h") -> chunk_pb2.KnowledgeChunk:
    return chunk_pb2.KnowledgeChunk(chunk_id=chunk_id, content_hash=content_hash)


class Store:
    """What a vector store's `chunk_vectors` returns: vectors named after the read that produced them."""

    def __init__(self, absent: frozenset[str] = frozenset()):
        self.reads: list[list[str]] = []
        self.absent = absent

    def read(self, chunk_ids: list[str]) -> dict[str, chunk_pb2.ChunkVectors]:
        self.reads.append(list(chunk_ids))
        return {i: chunk_pb2.ChunkVectors(embedder=f"read {len(self.reads)}", chunk=i.encode())
                for i in chunk_ids if i not in self.absent}


def test_a_chunk_is_read_once_then_answered_from_memory():
    kept, store = KeptVectors(), Store()
    first = kept.vectors("c", [chunk("a"), chunk("b")], store.read)
    second = kept.vectors("c", [chunk("b"), chunk("a"), chunk("d")], store.read)
    assert store.reads == [["a", "b"], ["d"]]
    assert second["a"] == first["a"] and second["b"] == first["b"] and second["d"].embedder == "read 2"
    assert (kept.hits, kept.misses) == (2, 3)


@pytest.mark.parametrize("other", [
    pytest.param(("c", "a", "edited"), id="another-text"),
    pytest.param(("c2", "a", "h"), id="another-collection"),
])
def test_another_text_or_collection_is_never_answered_from_memory(other):
    kept, store = KeptVectors(), Store()
    kept.vectors("c", [chunk("a", "h")], store.read)
    collection, chunk_id, content_hash = other
    found = kept.vectors(collection, [chunk(chunk_id, content_hash)], store.read)
    assert store.reads == [["a"], ["a"]] and found["a"].embedder == "read 2"


def test_a_chunk_the_store_did_not_return_is_absent_and_asked_for_again():
    kept, store = KeptVectors(), Store(absent=frozenset({"gone"}))
    assert set(kept.vectors("c", [chunk("a"), chunk("gone")], store.read)) == {"a"}
    assert set(kept.vectors("c", [chunk("a"), chunk("gone")], store.read)) == {"a"}
    assert store.reads == [["a", "gone"], ["gone"]]


def test_the_least_recently_used_chunks_go_first_beyond_the_bound():
    kept, store = KeptVectors(max_entries=2), Store()
    kept.vectors("c", [chunk("a"), chunk("b")], store.read)
    kept.vectors("c", [chunk("a")], store.read)  # a is now the most recently used
    kept.vectors("c", [chunk("d")], store.read)  # b goes
    assert len(kept) == 2
    kept.vectors("c", [chunk("a"), chunk("b"), chunk("d")], store.read)
    assert store.reads[-1] == ["b"]


def test_a_bound_below_one_is_refused():
    with pytest.raises(ValueError, match="max_entries"):
        KeptVectors(max_entries=0)
