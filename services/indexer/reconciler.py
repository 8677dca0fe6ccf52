"""Consistency reconciler: the registry, the keyword store and the vector store must agree.

For every document the registry lists, the chunk ids in each store are compared
with the registry's. A chunk missing from one store is restored from the chunk
the registry keeps (re-embedded for the vector store); chunks a store holds but
the registry does not list are deleted from both stores; chunks missing
everywhere cannot be rebuilt without the source, so the document is marked
`incomplete` and the next ingestion of it re-indexes instead of skipping.

A document that is being indexed right now is skipped (its writer holds the
document lock). One left `indexing` with no writer was interrupted by a crash:
it is rolled back to its last complete version (or removed, if it had none),
the registry never lists a half-written version as indexed, and the
re-run of its job writes it again. The indexer does this for every knowledge
base when it starts (`roll_back_interrupted`), before it serves.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from services.indexer.indexer import Indexer
from services.indexer.registry import INCOMPLETE, INDEXED, INDEXING, DocumentEntry, DocumentRegistry
from shared.config import KBConfig
from shared.kb import KnowledgeBaseCatalog
from shared.hit_reading import mark_readings
from shared.sentence_vectors import embed_for_index

log = logging.getLogger("ragkb.indexer.reconciler")
BATCH_DOCUMENTS = 200
BATCH_CHUNKS = 4000  # chunk ids one store query returns at most per batch (a Milvus query stops at 16,384 rows)


@dataclass
class Repair:
    namespace: str
    doc_id: str
    restored_keyword: int = 0
    restored_vector: int = 0
    strays_deleted: int = 0
    unrecoverable: int = 0
    action: str = ""


@dataclass
class Report:
    kb: str
    documents_checked: int = 0
    chunks_checked: int = 0
    repairs: list[Repair] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    keyword_chunks: int = 0  # what each store holds for the whole KB (a whole-KB run only)
    vector_chunks: int = 0


class Reconciler:
    def __init__(self, indexer: Indexer, catalog: KnowledgeBaseCatalog, registry: DocumentRegistry):
        self._indexer = indexer
        self._catalog = catalog
        self._registry = registry

    def reconcile(self, kb: KBConfig, namespace: str = "", *, dry_run: bool = False) -> Report:
        kb_name = kb.name
        embedder, keyword, vector = self._indexer.open_stores(kb)
        report = Report(kb=kb_name)
        for batch in _batches(self._registry.list(kb_name, namespace)):
            # what each store holds for the whole batch, in one round trip per store
            batch_namespace, doc_ids = batch[0].namespace, [e.doc_id for e in batch]
            in_keyword = keyword.chunk_ids_of(batch_namespace, doc_ids)
            in_vector = vector.chunk_ids_of(batch_namespace, doc_ids)
            for entry in batch:
                lock = self._indexer.document_lock(kb_name, entry.namespace, entry.doc_id)
                if not lock.acquire(blocking=False):
                    report.skipped.append(f"{entry.namespace}/{entry.doc_id}: being indexed")
                    continue
                try:
                    current = self._registry.get(kb_name, entry.namespace, entry.doc_id)
                    if current is None:
                        continue  # deleted since the listing
                    if current.status == INDEXING:
                        if not dry_run:
                            report.repairs.append(self._roll_back(current, embedder, keyword, vector))
                        else:
                            report.repairs.append(Repair(entry.namespace, entry.doc_id, action="would-roll-back"))
                        continue
                    report.documents_checked += 1
                    report.chunks_checked += len(current.chunk_ids)
                    # a write between the batch read and the lock changed the entry: read the stores again
                    stored = (in_keyword[entry.doc_id], in_vector[entry.doc_id]) if current == entry else None
                    repair = self._check(current, embedder, keyword, vector, dry_run=dry_run, stored=stored)
                    if repair is not None:
                        report.repairs.append(repair)
                finally:
                    lock.release()
        if not namespace:
            report.keyword_chunks, report.vector_chunks = keyword.count(), vector.count()
        if report.repairs:
            log.warning("reconciled %s: %d documents repaired", kb_name, len(report.repairs))
        return report

    def roll_back_interrupted(self) -> int:
        """Roll back every document an interrupted write left `indexing`, in every knowledge base."""
        rolled_back = 0
        for kb_name in self._catalog.names():
            if not any(e.status == INDEXING for e in self._registry.list(kb_name)):
                continue
            report = self.reconcile(self._catalog.get(kb_name))
            rolled_back += sum(r.action.startswith("rolled-back") for r in report.repairs)
        if rolled_back:
            log.warning("rolled back %d documents whose indexing was interrupted", rolled_back)
        return rolled_back

    def _roll_back(self, entry: DocumentEntry, embedder, keyword, vector) -> Repair:
        """Back to the last complete version: its chunks are the kept ones of an older `doc_version`."""
        kept = [c for c in self._registry.chunks(entry.kb, entry.namespace, entry.doc_id, entry.chunk_ids)
                if c.doc_version < entry.version]
        held = keyword.chunk_ids(entry.namespace, entry.doc_id) | vector.chunk_ids(entry.namespace, entry.doc_id)
        if not kept:  # the first version never completed: nothing of it may stay
            doomed = sorted(held | set(entry.chunk_ids))
            vector.delete_ids(doomed)
            keyword.delete_ids(doomed)
            self._registry.delete(entry.kb, entry.namespace, entry.doc_id)
            return Repair(entry.namespace, entry.doc_id, strays_deleted=len(held), action="rolled-back-removed")
        previous = DocumentEntry(kb=entry.kb, namespace=entry.namespace, doc_id=entry.doc_id,
                                 version=max(c.doc_version for c in kept), content_hash="",  # unknown: re-index
                                 chunk_ids=tuple(c.chunk_id for c in kept), status=INDEXED,
                                 source_uri=entry.source_uri, updated_at=entry.updated_at)
        self._registry.put(entry.kb, entry.namespace, entry.doc_id, version=previous.version, content_hash="",
                           chunk_ids=list(previous.chunk_ids), status=INDEXED, source_uri=previous.source_uri)
        self._registry.keep_chunks(entry.kb, entry.namespace, entry.doc_id, previous.chunk_ids)
        repair = self._check(previous, embedder, keyword, vector, dry_run=False) or Repair(entry.namespace,
                                                                                         entry.doc_id)
        repair.action = "rolled-back"
        return repair

    def _check(self, entry: DocumentEntry, embedder, keyword, vector, *, dry_run: bool,
               stored: tuple[set[str], set[str]] | None = None) -> Repair | None:
        """Repair `entry`'s chunks in both stores; `stored` = the chunk ids each store holds, when already read."""
        expected = set(entry.chunk_ids)
        if stored is None:
            stored = keyword.chunk_ids(entry.namespace, entry.doc_id), vector.chunk_ids(entry.namespace, entry.doc_id)
        in_keyword, in_vector = stored
        missing_keyword, missing_vector = expected - in_keyword, expected - in_vector
        strays = sorted((in_keyword | in_vector) - expected)
        if not (missing_keyword or missing_vector or strays):
            return None
        repair = Repair(entry.namespace, entry.doc_id, strays_deleted=len(strays))
        known = {c.chunk_id: c for c in self._registry.chunks(entry.kb, entry.namespace, entry.doc_id,
                                                               sorted(missing_keyword | missing_vector))}
        for_keyword = [known[i] for i in sorted(missing_keyword) if i in known]
        for_vector = [known[i] for i in sorted(missing_vector) if i in known]
        repair.restored_keyword, repair.restored_vector = len(for_keyword), len(for_vector)
        repair.unrecoverable = len((missing_keyword | missing_vector) - set(known))
        if dry_run:
            repair.action = "would-repair"
            return repair
        mark_readings(embedder, list(known.values()))  # each repaired chunk once, whichever stores miss it
        if for_keyword:
            keyword.upsert(for_keyword)
        if for_vector:
            embedded = embed_for_index(embedder, for_vector, sentences=vector.has_sentences)
            vector.upsert(for_vector, embedded.chunks, embedded.sentences)
        vector.delete_ids(strays)
        keyword.delete_ids(strays)
        vector.await_visible([c.chunk_id for c in for_vector], strays)  # a reported repair is what searches see
        if repair.unrecoverable:
            self._registry.set_status(entry.kb, entry.namespace, entry.doc_id, INCOMPLETE)
            repair.action = "needs-reingest"
        else:
            if entry.status == INCOMPLETE:
                self._registry.set_status(entry.kb, entry.namespace, entry.doc_id, INDEXED)
            repair.action = "repaired"
        return repair


def _batches(entries: list[DocumentEntry]) -> Iterator[list[DocumentEntry]]:
    """Registry entries in runs of one namespace, small enough for one store query each."""
    batch: list[DocumentEntry] = []
    chunks = 0
    for entry in sorted(entries, key=lambda e: e.namespace):
        if batch and (entry.namespace != batch[0].namespace or len(batch) == BATCH_DOCUMENTS
                      or chunks + len(entry.chunk_ids) > BATCH_CHUNKS):
            yield batch
            batch, chunks = [], 0
        batch.append(entry)
        chunks += len(entry.chunk_ids)
    if batch:
        yield batch


class PeriodicReconciler:
    """Reconciles every knowledge base every `interval_s` seconds on a daemon thread (0 = never).

    `configs_of(kb)`: the configs reconciled for a KB (default: its live one; the indexer passes every complete
    version, services/indexer/versions.py); `after_round`: run after each round (version retention)."""

    def __init__(self, reconciler: Reconciler, catalog: KnowledgeBaseCatalog, interval_s: float, *,
                 configs_of: Callable[[str], list[KBConfig]] | None = None,
                 after_round: Callable[[], None] | None = None):
        if interval_s < 0:
            raise ValueError(f"reconcile interval must be >= 0 seconds, got {interval_s}")
        self._reconciler = reconciler
        self._catalog = catalog
        self._configs_of = configs_of or (lambda kb: [catalog.get(kb)])
        self._after_round = after_round
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._interval_s and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="reconciler", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self.run_once()

    def run_once(self) -> None:
        """One round: reconcile every KB (each config `configs_of` gives), then `after_round`."""
        for name in self._catalog.names():
            try:
                for config in self._configs_of(name):
                    self._reconciler.reconcile(config)
            except Exception:  # one broken KB must not stop the schedule for the others
                log.exception("scheduled reconciliation of %s failed", name)
        if self._after_round is not None:
            try:
                self._after_round()
            except Exception:
                log.exception("the scheduled step after reconciliation failed")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
