"""The indexer's domain logic: embed, write both stores under the same ids, keep the registry true.

Replacement order for a changed document: write the new chunks to both stores
first, record the new version, then delete the old version's chunks that the new
one does not reuse. A crash in between leaves extra chunks (repairable), never a
missing document. Chunk ids are content-derived, so chunks that did not change
keep their id and are neither re-embedded nor rewritten.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from services.indexer.registry import INDEXED, INDEXING, DocumentRegistry
from shared import components
from shared.config import KBConfig, Settings
from shared.contracts import chunk_pb2, indexer_pb2
from shared.errors import FailedPrecondition, InvalidArgument, NotFound
from shared.kb import KnowledgeBaseCatalog


@dataclass
class IndexReport:
    outcome: int
    doc_version: int
    chunks_written: int
    chunks_deleted: int
    stages: dict[str, float] = field(default_factory=dict)


class Indexer:
    def __init__(self, settings: Settings, catalog: KnowledgeBaseCatalog, registry: DocumentRegistry):
        self._settings = settings
        self._catalog = catalog
        self._registry = registry

    def create_kb(self, name: str, *, description: str = "", config_yaml: str = "") -> KBConfig:
        config = self._catalog.create(name, description=description, config_yaml=config_yaml)
        self.open_stores(config)
        return config

    def open_stores(self, kb: KBConfig):
        """Open (creating if needed) both stores; refuses a KB whose recorded model differs from its config."""
        embedder = components.embedder_for(kb)
        recorded = self._registry.model_of(kb.name)
        if recorded and recorded != (embedder.model_id, embedder.dimension):
            raise FailedPrecondition(
                f"knowledge base {kb.name!r} was indexed with {recorded[0]} ({recorded[1]}-d) but is configured "
                f"with {embedder.model_id} ({embedder.dimension}-d); create a new knowledge base to change models"
            )
        keyword = components.keyword_store_for(kb, self._settings)
        vector = components.vector_store_for(kb, self._settings)
        self._registry.record_model(kb.name, embedder.model_id, embedder.dimension)
        return embedder, keyword, vector

    def index_document(self, kb_name: str, namespace: str, doc_id: str, content_hash: str,
                       chunks: list[chunk_pb2.KnowledgeChunk], source_uri: str = "") -> IndexReport:
        _validate_chunks(kb_name, namespace, doc_id, chunks)
        kb = self._catalog.get(kb_name)
        embedder, keyword, vector = self.open_stores(kb)
        previous = self._registry.get(kb_name, namespace, doc_id)
        new_ids = [c.chunk_id for c in chunks]
        if previous and previous.status == INDEXED and previous.content_hash == content_hash \
                and list(previous.chunk_ids) == new_ids:
            return IndexReport(indexer_pb2.INDEX_OUTCOME_UNCHANGED, previous.version, 0, 0)

        version = (previous.version + 1) if previous else 1
        old_ids = set(previous.chunk_ids) if previous else set()
        fresh = [c for c in chunks if c.chunk_id not in old_ids]
        for chunk in fresh:
            chunk.doc_version = version
        stages: dict[str, float] = {}
        # record intent first: a crash from here on leaves a registry entry a reconciler can finish
        self._registry.put(kb_name, namespace, doc_id, version=version, content_hash=content_hash,
                           chunk_ids=sorted(old_ids | set(new_ids)), status=INDEXING, source_uri=source_uri)
        started = time.perf_counter()
        vectors = embedder.embed_documents([c.content for c in fresh])
        stages["embed"] = _ms(started)
        started = time.perf_counter()
        vector.upsert(fresh, vectors)
        stages["vector_write"] = _ms(started)
        started = time.perf_counter()
        keyword.upsert(fresh)
        stages["keyword_write"] = _ms(started)
        stale = sorted(old_ids - set(new_ids))
        started = time.perf_counter()
        vector.delete_ids(stale)
        keyword.delete_ids(stale)
        stages["delete_stale"] = _ms(started)
        self._registry.put(kb_name, namespace, doc_id, version=version, content_hash=content_hash, chunk_ids=new_ids,
                           status=INDEXED, source_uri=source_uri)
        outcome = indexer_pb2.INDEX_OUTCOME_UPDATED if previous else indexer_pb2.INDEX_OUTCOME_CREATED
        return IndexReport(outcome, version, len(fresh), len(stale), stages)

    def delete_document(self, kb_name: str, namespace: str, doc_id: str) -> int:
        kb = self._catalog.get(kb_name)
        _, keyword, vector = self.open_stores(kb)
        previous = self._registry.get(kb_name, namespace, doc_id)
        ids = set(previous.chunk_ids) if previous else set()
        # also sweep the stores themselves, so chunks the registry lost track of go too
        ids |= keyword.chunk_ids(namespace, doc_id) | vector.chunk_ids(namespace, doc_id)
        if not previous and not ids:
            raise NotFound(f"document {doc_id!r} not found in knowledge base {kb_name!r} namespace {namespace!r}")
        ordered = sorted(ids)
        deleted = max(vector.delete_ids(ordered), keyword.delete_ids(ordered))
        self._registry.delete(kb_name, namespace, doc_id)
        return deleted


def _validate_chunks(kb: str, namespace: str, doc_id: str, chunks: list[chunk_pb2.KnowledgeChunk]) -> None:
    if not kb or not namespace or not doc_id:
        raise InvalidArgument("kb, namespace and doc_id are required")
    if not chunks:
        raise InvalidArgument(f"document {doc_id!r} has no chunks to index")
    seen: set[str] = set()
    for chunk in chunks:
        if (chunk.kb, chunk.namespace, chunk.doc_id) != (kb, namespace, doc_id):
            raise InvalidArgument(
                f"chunk {chunk.chunk_id!r} belongs to {chunk.kb}/{chunk.namespace}/{chunk.doc_id}, "
                f"not {kb}/{namespace}/{doc_id}"
            )
        if not chunk.chunk_id or chunk.chunk_id in seen:
            raise InvalidArgument(f"chunk ids must be present and unique; got {chunk.chunk_id!r} twice or empty")
        if not chunk.content.strip():
            raise InvalidArgument(f"chunk {chunk.chunk_id!r} has no content")
        seen.add(chunk.chunk_id)


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 2)
