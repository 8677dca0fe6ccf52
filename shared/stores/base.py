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


@runtime_checkable
class KeywordStore(Protocol):
    """BM25 over analyzed chunk text."""

    def upsert(self, chunks: Sequence[chunk_pb2.KnowledgeChunk]) -> None: ...

    def delete_ids(self, chunk_ids: Sequence[str]) -> int: ...

    def delete_document(self, namespace: str, doc_id: str) -> int: ...

    def search(self, query: str, search_filter: chunk_pb2.SearchFilter, limit: int) -> list[chunk_pb2.Candidate]: ...

    def chunk_ids(self, namespace: str, doc_id: str) -> set[str]: ...

    def count(self) -> int: ...

    def drop(self) -> None: ...


@runtime_checkable
class VectorStore(Protocol):
    """Nearest-neighbour search over chunk embeddings."""

    dimension: int

    def upsert(self, chunks: Sequence[chunk_pb2.KnowledgeChunk], vectors: np.ndarray) -> None: ...

    def delete_ids(self, chunk_ids: Sequence[str]) -> int: ...

    def delete_document(self, namespace: str, doc_id: str) -> int: ...

    def search(self, vector: np.ndarray, search_filter: chunk_pb2.SearchFilter, limit: int) -> list[chunk_pb2.Candidate]: ...

    def chunk_ids(self, namespace: str, doc_id: str) -> set[str]: ...

    def count(self) -> int: ...

    def drop(self) -> None: ...
