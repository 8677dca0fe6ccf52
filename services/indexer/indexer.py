"""The indexer's domain logic: embed, write both stores under the same ids, keep the registry true.

Replacement order for a changed document: write the new chunks to both stores
first, record the new version, then delete the old version's chunks that the new
one does not reuse. A crash in between leaves extra chunks (repairable), never a
missing document. Chunk ids are content-derived, so chunks that did not change
keep their id and are neither re-embedded nor rewritten.

A KB with more than one version (shared/kb_versions.py) gets every write in each version
whose index exists (building, ready, live, retired): the request's version first, then
the others from the registry's stored chunks, inside the same document lock, so a
version being built and one kept for rollback miss nothing.

Chunks are embedded and written in batches so callers see progress; the vectors of each chunk's
scored sentences are embedded in the same call and stored beside the chunk's (shared/sentence_vectors.py),
so the generator embeds no source text per query. An attempt
that is abandoned part-way (the caller cancelled or went away) is rolled back:
the chunks it wrote are deleted and the registry entry restored. An attempt cut
short by a crash of the indexer itself leaves the entry in `indexing`; the next
attempt trusts only what both stores hold, so a replay ends with exactly the new
chunk set.

A writer that lost its document lock (cluster mode: its database session ended) no longer owns the
document: it writes no further batch, rolls nothing back, and leaves the `indexing` entry to the lock's
new holder, the replay or the reconciler. So does a failure after the last batch (the sweep of the
previous version cannot be undone by this attempt).

A write or delete is reported done only once searches see it (`VectorStore.await_visible`; the keyword
stores' writes are searchable when they return), so searches never pay for read-your-writes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from services.indexer.locks import LocalDocumentLocks, PostgresDocumentLocks, confirm_held, document_locks
from services.indexer.registry import INDEXED, INDEXING, DocumentEntry, DocumentRegistry
from shared import components
from shared.config import KBConfig, Settings
from shared.contracts import chunk_pb2, indexer_pb2
from shared.errors import FailedPrecondition, InvalidArgument, NotFound, Unavailable
from shared.kb import KnowledgeBaseCatalog
from shared.kb_versions import VersionRows, version_config
from shared.registry import ComponentRegistry
from shared.hit_reading import mark_readings
from shared.sentence_vectors import embed_for_index

log = logging.getLogger("ragkb.indexer")


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
                 components_registry: ComponentRegistry | None = None, versions: VersionRows | None = None,
                 *, locks: LocalDocumentLocks | PostgresDocumentLocks | None = None):
        self._settings = settings
        self._components = components_registry or components.storage_registry("indexer")
        self._catalog = catalog
        self._registry = registry
        self.versions = versions or VersionRows.for_settings(settings)
        self._locks = locks or document_locks(settings.database_url)

    def create_kb(self, name: str, *, description: str = "", config_yaml: str = "") -> KBConfig:
        config = self._catalog.create(name, description=description, config_yaml=config_yaml)
        self.open_stores(config)
        return config

    def open_stores(self, kb: KBConfig):
        """Open (creating if needed) both stores; refuses a KB whose recorded model differs from its config."""
        embedder = components.embedder_for(kb, self._components)
        recorded = self._registry.model_of(model_key(kb))
        if recorded and recorded != (embedder.model_id, embedder.dimension):
            raise FailedPrecondition(
                f"knowledge base {kb.name!r} version {kb.index_version} was indexed with {recorded[0]} "
                f"({recorded[1]}-d) but is configured with {embedder.model_id} ({embedder.dimension}-d); "
                "change models with a new version (ragkb kb version create)"
            )
        keyword = components.keyword_store_for(kb, self._settings, self._components)
        vector = components.vector_store_for(kb, self._settings, self._components)
        self._registry.record_model(model_key(kb), embedder.model_id, embedder.dimension)
        return embedder, keyword, vector

    def _other_versions(self, kb: KBConfig) -> list[KBConfig]:
        """The effective configs of the KB's other versions whose index exists; refuses a write for a version
        whose index was dropped (a job accepted before the drop: its retry takes the live config)."""
        held = self.versions.held(kb.name)
        if held and kb.index_version not in {v.version for v in held}:
            raise FailedPrecondition(f"version {kb.index_version} of knowledge base {kb.name!r} was dropped; "
                                     "retry with the knowledge base's current config")
        return [version_config(v, self._catalog.profiles) for v in held if v.version != kb.index_version]

    def _mirror(self, kb: KBConfig, namespace: str, doc_id: str) -> None:
        """Bring every other version of the KB in line with the registry for one document (lock held).

        A version this fails for is repaired by the reconciliation that precedes its switch."""
        for other in self._other_versions(kb):
            try:
                self.copy_document(other, namespace, doc_id)
            except Exception:
                log.exception("could not write %s/%s to version %d of %s", namespace, doc_id, other.index_version,
                              kb.name)

    def copy_document(self, kb: KBConfig, namespace: str, doc_id: str) -> int:
        """Make version `kb`'s stores hold exactly the registry's complete chunks of one document, embedded with
        that version's embedder; returns the chunks written. The caller holds the document lock."""
        embedder, keyword, vector = self.open_stores(kb)
        entry = self._registry.get(kb.name, namespace, doc_id)
        wanted = set(entry.chunk_ids) if entry is not None and entry.status == INDEXED else set()
        in_keyword, in_vector = keyword.chunk_ids(namespace, doc_id), vector.chunk_ids(namespace, doc_id)
        missing = wanted - (in_keyword & in_vector)
        chunks = self._registry.chunks(kb.name, namespace, doc_id, sorted(missing)) if missing else []
        batch_size = kb.embedder.batch_size
        for start in range(0, len(chunks), batch_size):
            batch = chunks[start:start + batch_size]
            mark_readings(embedder, batch)
            embedded = embed_for_index(embedder, batch, sentences=vector.has_sentences)
            vector.upsert(batch, embedded.chunks, embedded.sentences)
            keyword.upsert(batch)
        stale = sorted((in_keyword | in_vector) - wanted)
        vector.delete_ids(stale)
        keyword.delete_ids(stale)
        return len(chunks)

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
        for chunk in chunks:
            chunk.ClearField("vectors")  # the index computes its own; a chunk's stored payload never holds them
        self._other_versions(kb)  # refuses a dropped version before anything is written
        embedder, keyword, vector = self.open_stores(kb)
        lock = self.document_lock(kb.name, namespace, doc_id)
        with lock:
            report = None
            steps = self._index_locked(kb, embedder, keyword, vector, namespace, doc_id, content_hash, chunks,
                                       source_uri, lambda: confirm_held(lock))
            try:
                for step in steps:
                    if isinstance(step, IndexReport):
                        report = step
                    else:
                        yield step
            finally:
                steps.close()  # an abandoned attempt rolls back here, still under the lock
            # versions are looked up after the registry write: a version created since is built from it
            self._mirror(kb, namespace, doc_id)
            yield report

    def _index_locked(self, kb, embedder, keyword, vector, namespace, doc_id, content_hash, chunks, source_uri,
                      confirm_lock: Callable[[], None]):
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
        undo_on_failure = True
        try:
            yield Progress(done, total)
            batch_size = kb.embedder.batch_size
            for start in range(0, len(fresh), batch_size):
                batch = fresh[start:start + batch_size]
                try:  # a writer without its lock writes no further batch: the document may be someone else's now
                    confirm_lock()
                except Unavailable:
                    undo_on_failure = False
                    raise
                started = time.perf_counter()
                mark_readings(embedder, batch)
                embedded = embed_for_index(embedder, batch, sentences=vector.has_sentences)
                stages["embed"] += _ms(started)
                written.extend(c.chunk_id for c in batch)  # before the writes: a half-written batch is undone too
                started = time.perf_counter()
                vector.upsert(batch, embedded.chunks, embedded.sentences)
                stages["vector_write"] += _ms(started)
                started = time.perf_counter()
                keyword.upsert(batch)
                stages["keyword_write"] += _ms(started)
                self._registry.put_chunks(kb_name, batch)
                done += len(batch)
                yield Progress(done, total)
            # From here a failure is not undone by this attempt: the sweep removes the previous version's chunks
            # (this attempt could not bring them back), and a writer that lost its lock no longer owns the
            # document (another replica may be writing or rolling it back). The `indexing` entry stays for the
            # replay, the lock's new holder or the reconciler, which restore from the registry's chunk copies.
            undo_on_failure = False
            confirm_lock()
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
            confirm_lock()
            self._registry.put(kb_name, namespace, doc_id, version=version, content_hash=content_hash,
                               chunk_ids=new_ids, status=INDEXED, source_uri=source_uri)
            self._registry.keep_chunks(kb_name, namespace, doc_id, new_ids)
            finished = True
        finally:
            if not finished and undo_on_failure:
                self._undo_if_still_held(kb_name, namespace, doc_id, previous, written, keyword, vector, confirm_lock)
        outcome = indexer_pb2.INDEX_OUTCOME_CREATED if first else indexer_pb2.INDEX_OUTCOME_UPDATED
        yield IndexReport(outcome, version, len(fresh), len(stale), stages)

    def _undo_if_still_held(self, kb_name, namespace, doc_id, previous: DocumentEntry | None, written: list[str],
                            keyword, vector, confirm_lock: Callable[[], None]) -> None:
        """Roll a failed or cancelled attempt back, unless its lock was lost meanwhile: the lock's new holder may
        have finished the document already, and restoring `previous` would delete that holder's chunks."""
        try:
            confirm_lock()
        except Unavailable as error:
            log.warning("%s/%s/%s: not rolled back (%s); the attempt is left to the lock's next holder",
                        kb_name, namespace, doc_id, error)
            return
        self._roll_back(kb_name, namespace, doc_id, previous, written, keyword, vector)

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

    def document_lock(self, kb_name: str, namespace: str, doc_id: str):
        """One writer per document at a time (indexing, deletion, repair), across every indexer replica."""
        return self._locks.lock(kb_name, namespace, doc_id)

    def build_lock(self, kb_name: str, version: int):
        """One builder of a KB version at a time, across every indexer replica."""
        return self._locks.build_lock(kb_name, version)

    def switch_lock(self, kb_name: str):
        """One change of a KB's live version at a time (switch, rollback, repair), across every indexer replica."""
        return self._locks.switch_lock(kb_name)

    def close(self) -> None:
        self._locks.close()

    def delete_document(self, kb: KBConfig, namespace: str, doc_id: str) -> int:
        kb_name = kb.name
        self._other_versions(kb)  # refuses a dropped version before its index is opened again
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
            self._mirror(kb, namespace, doc_id)
            return deleted


def model_key(kb: KBConfig) -> str:
    """The registry's key for the embedding model of one version ('/' is not allowed in KB names)."""
    return kb.name if kb.index_version == 1 else f"{kb.name}/v{kb.index_version}"


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
