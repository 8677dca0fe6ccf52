"""Store Protocols shared by every backend.

Both stores hold the full chunk next to its index entry, so either route can
answer alone when the other is down. Every search takes a `SearchFilter` whose
namespaces are mandatory and applied inside the backend's own query.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from shared.contracts import chunk_pb2
from shared.errors import InvalidArgument


def require_namespaces(search_filter: chunk_pb2.SearchFilter) -> list[str]:
    namespaces = [ns for ns in search_filter.namespaces if ns]
    if not namespaces:
        raise InvalidArgument("a search must name at least one namespace")
    return namespaces


def sibling_fetch_args(namespaces: Sequence[str], group_ids: Sequence[str]) -> tuple[list[str], list[str]]:
    """(namespaces, distinct non-empty group ids) of a split-part fetch; namespaces are mandatory."""
    namespaces = [ns for ns in namespaces if ns]
    if not namespaces:
        raise InvalidArgument("a sibling fetch must name at least one namespace")
    return namespaces, [g for g in dict.fromkeys(group_ids) if g]


@runtime_checkable
class KeywordStore(Protocol):
    """BM25 over analyzed chunk text."""

    def upsert(self, chunks: Sequence[chunk_pb2.KnowledgeChunk]) -> None: ...

    def delete_ids(self, chunk_ids: Sequence[str]) -> int: ...

    def delete_document(self, namespace: str, doc_id: str) -> int: ...

    def search(self, query: str, search_filter: chunk_pb2.SearchFilter, limit: int) -> list[chunk_pb2.Candidate]: ...

    def chunk_ids(self, namespace: str, doc_id: str) -> set[str]: ...

    def chunk_ids_of(self, namespace: str, doc_ids: Sequence[str]) -> dict[str, set[str]]:
        """`chunk_ids` of many documents of one namespace in one round trip (every doc id is a key)."""
        ...

    def chunks_by_group(self, namespaces: Sequence[str], group_ids: Sequence[str]) -> list[chunk_pb2.KnowledgeChunk]:
        """Every part of the given split groups within the namespaces, ordered by group then part_index."""
        ...

    def count(self) -> int: ...

    def drop(self) -> None: ...

    def make_live(self) -> None:
        """Point the KB's live alias at this store's index (the version switch; see shared/kb_versions.py)."""
        ...


@runtime_checkable
class VectorStore(Protocol):
    """Nearest-neighbour search over chunk embeddings."""

    dimension: int

    has_sentences: bool  # the store keeps chunks' sentence vectors (shared/sentence_vectors.py)

    collection: str  # names the model and dimension: a chunk id's vectors in it never change

    keeps_read_vectors: bool  # `chunk_vectors` answers repeated reads from memory itself

    def upsert(self, chunks: Sequence[chunk_pb2.KnowledgeChunk], vectors: np.ndarray,
               sentence_vectors: Sequence[np.ndarray] | None = None) -> None: ...

    def delete_ids(self, chunk_ids: Sequence[str]) -> int: ...

    def delete_document(self, namespace: str, doc_id: str) -> int: ...

    def search(self, vector: np.ndarray, search_filter: chunk_pb2.SearchFilter, limit: int) -> list[chunk_pb2.Candidate]: ...

    def await_visible(self, written: Sequence[str] = (), deleted: Sequence[str] = ()) -> None:
        """Block until searches see the `written` chunk ids and no longer see the `deleted` ones."""
        ...

    def chunk_vectors(self, chunk_ids: Sequence[str],
                      search_filter: chunk_pb2.SearchFilter) -> dict[str, chunk_pb2.ChunkVectors]:
        """Stored vectors of the given chunks that the filter lets its caller read, by chunk id."""
        ...

    def chunk_ids(self, namespace: str, doc_id: str) -> set[str]: ...

    def chunk_ids_of(self, namespace: str, doc_ids: Sequence[str]) -> dict[str, set[str]]: ...

    def count(self) -> int: ...

    def drop(self) -> None: ...

    def make_live(self) -> None:
        """Point the KB's live alias at this store's collection (the version switch)."""
        ...
