"""The indexer's domain logic: embed, write both stores under the same ids, keep the registry true.

Replacement order for a changed document: write the new chunks to both stores
first, record the new version, then delete the old version's chunks that the new
one does not reuse. A crash in between leaves extra chunks (repairable), never a
missing document. Chunk ids are content-derived, so chunks that did not change
keep their id and are neither re-embedded nor rewritten.

Chunks are embedded and written in batches so callers see progress. An attempt
that is abandoned part-way (the caller cancelled or went away) is rolled back:
the chunks it wrote are deleted and the registry entry restored. An attempt cut
short by a crash of the indexer itself leaves the entry in `indexing`; the next
attempt trusts only what both stores hold, so a replay ends with exactly the new
chunk set.

A write or delete is reported done only once searches see it (`VectorStore.await_visible`; the keyword
stores' writes are searchable when they return), so searches never pay for read-your-writes.
"""

from __future__ import annotations

import threading
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field

from services.indexer.registry import INDEXED, INDEXING, DocumentEntry, DocumentRegistry
from shared import components
from shared.config import KBConfig, Settings
from shared.contracts import chunk_pb2, indexer_pb2
from shared.errors import FailedPrecondition, InvalidArgument, NotFound
from shared.kb import KnowledgeBaseCatalog
from shared.registry import ComponentRegistry


@dataclass
class IndexReport:
    outcome: int
    doc_version: int
    chunks_written: int
    chunks_deleted: int
    stages: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Progress:
    chunks_done: int
    chunks_total: int


class Indexer:
    def __init__(self, settings: Settings, catalog: KnowledgeBaseCatalog, registry: DocumentRegistry,
                 components_registry: ComponentRegistry | None = None):
        self._settings = settings
        self._components = components_registry or components.storage_registry("indexer")
        self._catalog = catalog
        self._registry = registry
        self._locks = [threading.Lock() for _ in range(64)]

    def create_kb(self, name: str, *, description: str = "", config_yaml: str = "") -> KBConfig:
        config = self._catalog.create(name, description=description, config_yaml=config_yaml)
        self.open_stores(config)
        return config

    def open_stores(self, kb: KBConfig):
        """Open (creating if needed) both stores; refuses a KB whose recorded model differs from its config."""
        embedder = components.embedder_for(kb, self._components)
        recorded = self._registry.model_of(kb.name)
        if recorded and recorded != (embedder.model_id, embedder.dimension):
            raise FailedPrecondition(
                f"knowledge base {kb.name!r} was indexed with {recorded[0]} ({recorded[1]}-d) but is configured "
                f"with {embedder.model_id} ({embedder.dimension}-d); create a new knowledge base to change models"
            )
        keyword = components.keyword_store_for(kb, self._settings, self._components)
        vector = components.vector_store_for(kb, self._settings, self._components)
        self._registry.record_model(kb.name, embedder.model_id, embedder.dimension)
        return embedder, keyword, vector

    def index_document(self, kb: KBConfig, namespace: str, doc_id: str, content_hash: str,
                       chunks: list[chunk_pb2.KnowledgeChunk], source_uri: str = "") -> IndexReport:
        report = None
        for step in self.index_steps(kb, namespace, doc_id, content_hash, chunks, source_uri):
            if isinstance(step, IndexReport):
                report = step
        return report

    def index_steps(self, kb: KBConfig, namespace: str, doc_id: str, content_hash: str,
                    chunks: list[chunk_pb2.KnowledgeChunk], source_uri: str = "") -> Iterator[Progress | IndexReport]:
        """Index one document, yielding `Progress` after each written batch and the `IndexReport` last.

        `kb` is the effective config the request carried. Closing the generator before it finishes rolls
        the attempt back.
        """
        _validate_chunks(kb.name, namespace, doc_id, chunks)
        embedder, keyword, vector = self.open_stores(kb)
        with self.document_lock(kb.name, namespace, doc_id):
            yield from self._index_locked(kb, embedder, keyword, vector, namespace, doc_id, content_hash, chunks,
                                          source_uri)

    def _index_locked(self, kb, embedder, keyword, vector, namespace, doc_id, content_hash, chunks, source_uri):
        kb_name, total = kb.name, len(chunks)
        previous = self._registry.get(kb_name, namespace, doc_id)
        new_ids = [c.chunk_id for c in chunks]
        if previous and previous.status == INDEXED and previous.content_hash == content_hash \
                and list(previous.chunk_ids) == new_ids:
            if source_uri and source_uri != previous.source_uri:  # moved, same content: only the address changes
                self._put(previous, source_uri=source_uri)
            yield Progress(total, total)
            yield IndexReport(indexer_pb2.INDEX_OUTCOME_UNCHANGED, previous.version, 0, 0)
            return

        if previous is None or previous.status == INDEXED:
            present = set(previous.chunk_ids) if previous else set()
            version = (previous.version + 1) if previous else 1
            first = previous is None
        else:  # an earlier attempt stopped part-way: trust only what both stores hold
            present = keyword.chunk_ids(namespace, doc_id) & vector.chunk_ids(namespace, doc_id)
            version = previous.version
            first = previous.status == INDEXING and previous.version == 1
        old_ids = set(previous.chunk_ids) if previous else set()
        fresh = [c for c in chunks if c.chunk_id not in present]
        for chunk in fresh:
            chunk.doc_version = version
        stages = {"embed": 0.0, "vector_write": 0.0, "keyword_write": 0.0}
        # record intent first: a crash from here on leaves a registry entry that a replay or the reconciler finishes
        self._registry.put(kb_name, namespace, doc_id, version=version, content_hash=content_hash,
                           chunk_ids=sorted(old_ids | set(new_ids)), status=INDEXING, source_uri=source_uri)
        written: list[str] = []
        done = total - len(fresh)
        finished = False
        try:
            yield Progress(done, total)
            batch_size = kb.embedder.batch_size
            for start in range(0, len(fresh), batch_size):
                batch = fresh[start:start + batch_size]
                started = time.perf_counter()
                vectors = embedder.embed_documents([c.content for c in batch])
                stages["embed"] += _ms(started)
                written.extend(c.chunk_id for c in batch)  # before the writes: a half-written batch is undone too
                started = time.perf_counter()
                vector.upsert(batch, vectors)
                stages["vector_write"] += _ms(started)
                started = time.perf_counter()
                keyword.upsert(batch)
                stages["keyword_write"] += _ms(started)
                self._registry.put_chunks(kb_name, batch)
                done += len(batch)
                yield Progress(done, total)
            # sweep the stores too, so chunks the registry lost track of cannot survive a new version
            stale = sorted((old_ids | keyword.chunk_ids(namespace, doc_id) | vector.chunk_ids(namespace, doc_id))
                           - set(new_ids))
            started = time.perf_counter()
            vector.delete_ids(stale)
            keyword.delete_ids(stale)
            stages["delete_stale"] = _ms(started)
            started = time.perf_counter()
            vector.await_visible(written, stale)
            stages["await_visible"] = _ms(started)
            self._registry.put(kb_name, namespace, doc_id, version=version, content_hash=content_hash,
                               chunk_ids=new_ids, status=INDEXED, source_uri=source_uri)
            self._registry.keep_chunks(kb_name, namespace, doc_id, new_ids)
            finished = True
        finally:
            if not finished:
                self._roll_back(kb_name, namespace, doc_id, previous, written, keyword, vector)
        outcome = indexer_pb2.INDEX_OUTCOME_CREATED if first else indexer_pb2.INDEX_OUTCOME_UPDATED
        yield IndexReport(outcome, version, len(fresh), len(stale), stages)

    def _roll_back(self, kb_name, namespace, doc_id, previous: DocumentEntry | None, written: list[str],
                   keyword, vector) -> None:
        """Undo an abandoned attempt: its new chunks go, the previous registry entry comes back."""
        ids = sorted(set(written) - (set(previous.chunk_ids) if previous else set()))
        vector.delete_ids(ids)
        keyword.delete_ids(ids)
        if previous is None:
            self._registry.delete(kb_name, namespace, doc_id)
        else:
            self._put(previous)
            self._registry.keep_chunks(kb_name, namespace, doc_id, previous.chunk_ids)

    def _put(self, entry: DocumentEntry, **changes) -> None:
        values = dict(version=entry.version, content_hash=entry.content_hash, chunk_ids=list(entry.chunk_ids),
                      status=entry.status, source_uri=entry.source_uri)
        values.update(changes)
        self._registry.put(entry.kb, entry.namespace, entry.doc_id, **values)

    def document_lock(self, kb_name: str, namespace: str, doc_id: str) -> threading.Lock:
        """One writer per document at a time (indexing, deletion, repair); striped to bound memory."""
        key = "\x1f".join((kb_name, namespace, doc_id)).encode()
        return self._locks[zlib.crc32(key) % len(self._locks)]

    def delete_document(self, kb: KBConfig, namespace: str, doc_id: str) -> int:
        kb_name = kb.name
        _, keyword, vector = self.open_stores(kb)
        with self.document_lock(kb_name, namespace, doc_id):
            previous = self._registry.get(kb_name, namespace, doc_id)
            ids = set(previous.chunk_ids) if previous else set()
            # also sweep the stores themselves, so chunks the registry lost track of go too
            ids |= keyword.chunk_ids(namespace, doc_id) | vector.chunk_ids(namespace, doc_id)
            if not previous and not ids:
                raise NotFound(f"document {doc_id!r} not found in knowledge base {kb_name!r} namespace {namespace!r}")
            ordered = sorted(ids)
            deleted = max(vector.delete_ids(ordered), keyword.delete_ids(ordered))
            vector.await_visible(deleted=ordered)
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
