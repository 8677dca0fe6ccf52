"""The indexer's write protocol on real stores (Milvus Lite + SQLite FTS5): rollback and replay.

An attempt abandoned by its caller is rolled back; an attempt cut short by a crash of
the indexer itself is finished by the replay with exactly the new chunk set.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from services.indexer.indexer import Indexer, IndexReport, Progress
from services.indexer.locks import PostgresDocumentLocks
from services.indexer.reconciler import PeriodicReconciler, Reconciler
from services.indexer.registry import INDEXED, INDEXING, DocumentRegistry
from shared import components, registry as component_registry
from shared.config import Settings
from shared.contracts import chunk_pb2
from shared.errors import Unavailable
from shared.kb import KnowledgeBaseCatalog
from shared.stores.milvus import close_clients

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    settings = Settings(data_dir=tmp_path_factory.mktemp("data"))
    catalog = KnowledgeBaseCatalog.for_settings(settings)
    registry = DocumentRegistry(settings.data_dir / "registry.sqlite")
    yield settings, catalog, registry
    registry.close()
    component_registry.clear_cache()
    close_clients()


def chunks(kb: str, doc_id: str, count: int, version: str) -> list[chunk_pb2.KnowledgeChunk]:
    return [chunk_pb2.KnowledgeChunk(chunk_id=f"{doc_id}-{version}-{i}", kb=kb, namespace="default", doc_id=doc_id,
                                     content=f"Step {i} of the {version} wheel inspection procedure.")
            for i in range(count)]


def stored(settings, catalog, kb: str, doc_id: str) -> tuple[set[str], set[str]]:
    config = catalog.get(kb)
    keyword = components.keyword_store_for(config, settings)
    vector = components.vector_store_for(config, settings)
    return keyword.chunk_ids("default", doc_id), vector.chunk_ids("default", doc_id)


def test_an_abandoned_attempt_is_rolled_back_to_the_previous_version(env):
    settings, catalog, registry = env
    indexer = Indexer(settings, catalog, registry)
    kb = indexer.create_kb("rollback", config_yaml="embedder: {batch_size: 8}")
    old = chunks("rollback", "doc", 5, "old")
    indexer.index_document(kb, "default", "doc", "h1", old)
    before = registry.get("rollback", "default", "doc")

    steps = indexer.index_steps(kb, "default", "doc", "h2", chunks("rollback", "doc", 40, "new"))
    progress = [next(steps) for _ in range(3)]
    assert [p.chunks_done for p in progress] == [0, 8, 16]
    assert registry.get("rollback", "default", "doc").status == INDEXING
    steps.close()  # the caller went away

    assert replace(registry.get("rollback", "default", "doc"), updated_at="") == replace(before, updated_at="")
    keyword, vector = stored(settings, catalog, "rollback", "doc")
    assert keyword == vector == {c.chunk_id for c in old}


def test_a_replay_after_an_indexer_crash_ends_with_exactly_the_new_chunks(env, monkeypatch):
    settings, catalog, registry = env
    crashed = Indexer(settings, catalog, registry)
    kb = crashed.create_kb("replay", config_yaml="embedder: {batch_size: 8}")
    crashed.index_document(kb, "default", "doc", "h1", chunks("replay", "doc", 6, "old"))
    new = chunks("replay", "doc", 30, "new")

    steps = crashed.index_steps(kb, "default", "doc", "h2", new)
    for _ in range(3):
        next(steps)
    monkeypatch.setattr(crashed, "_roll_back", lambda *args: None)  # the process died: nothing is undone
    steps.close()
    entry = registry.get("replay", "default", "doc")
    assert entry.status == INDEXING and entry.version == 2

    report = Indexer(settings, catalog, registry).index_document(kb, "default", "doc", "h2", new)
    assert isinstance(report, IndexReport) and report.doc_version == 2
    assert report.chunks_written == len(new) - 16  # the two batches already in both stores are kept
    entry = registry.get("replay", "default", "doc")
    assert entry.status == INDEXED and list(entry.chunk_ids) == [c.chunk_id for c in new]
    keyword, vector = stored(settings, catalog, "replay", "doc")
    assert keyword == vector == set(entry.chunk_ids)
    config = catalog.get("replay")
    assert components.keyword_store_for(config, settings).count() == len(new)
    assert components.vector_store_for(config, settings).count() == len(new)


def test_unchanged_content_writes_nothing(env):
    settings, catalog, registry = env
    indexer = Indexer(settings, catalog, registry)
    kb = indexer.create_kb("same")
    doc = chunks("same", "doc", 3, "v")
    indexer.index_document(kb, "default", "doc", "h", doc)
    steps = list(indexer.index_steps(kb, "default", "doc", "h", chunks("same", "doc", 3, "v"), "moved/doc.md"))
    assert steps[0] == Progress(3, 3) and steps[-1].chunks_written == 0
    assert registry.get("same", "default", "doc").source_uri == "moved/doc.md"


def test_periodic_reconciler_validates_its_interval(env):
    settings, catalog, registry = env
    reconciler = Reconciler(Indexer(settings, catalog, registry), catalog, registry)
    with pytest.raises(ValueError, match="got -1"):
        PeriodicReconciler(reconciler, catalog, -1)


@pytest.mark.parametrize("had_a_complete_version", [pytest.param(True, id="update"),
                                                    pytest.param(False, id="first-version")])
def test_a_restarted_indexer_rolls_an_interrupted_write_back(env, monkeypatch, had_a_complete_version):
    settings, catalog, registry = env
    kb = f"restart-{had_a_complete_version:d}"
    crashed = Indexer(settings, catalog, registry)
    config = crashed.create_kb(kb, config_yaml="embedder: {batch_size: 8}")
    old = chunks(kb, "doc", 6, "old") if had_a_complete_version else []
    if old:
        crashed.index_document(config, "default", "doc", "h1", old)
    steps = crashed.index_steps(config, "default", "doc", "h2", chunks(kb, "doc", 30, "new"))
    for _ in range(3):
        next(steps)
    monkeypatch.setattr(crashed, "_roll_back", lambda *args: None)  # the process died: nothing is undone
    steps.close()
    assert registry.counts(kb) == (0, 0)  # a document is counted once a version of it is complete

    restarted = Reconciler(Indexer(settings, catalog, registry), catalog, registry)
    assert restarted.roll_back_interrupted() == 1
    keyword, vector = stored(settings, catalog, kb, "doc")
    assert keyword == vector == {c.chunk_id for c in old}
    entry = registry.get(kb, "default", "doc")
    if old:
        assert entry.status == INDEXED and set(entry.chunk_ids) == keyword and entry.version == 1
        assert entry.content_hash == ""  # unknown after the rollback: the next ingestion re-indexes
    else:
        assert entry is None
    assert restarted.reconcile(config).repairs == []


def test_a_starting_indexer_leaves_alone_a_document_a_live_replica_is_writing(env, postgres_dsn):
    """Two replicas share the control plane: the one starting sees the other's document lock held, so the
    `indexing` entry belongs to a live writer, not to a crash, and is not rolled back under it."""
    settings, catalog, registry = env
    writer = Indexer(settings, catalog, registry, locks=PostgresDocumentLocks(postgres_dsn))
    config = writer.create_kb("live-replica", config_yaml="embedder: {batch_size: 8}")
    steps = writer.index_steps(config, "default", "doc", "h1", chunks("live-replica", "doc", 30, "new"))
    for _ in range(3):
        next(steps)  # mid-write: the writer holds the document
    starting = Indexer(settings, catalog, registry, locks=PostgresDocumentLocks(postgres_dsn))
    try:
        assert Reconciler(starting, catalog, registry).roll_back_interrupted() == 0
        assert registry.get("live-replica", "default", "doc").status == INDEXING
        report = list(steps)[-1]
        assert isinstance(report, IndexReport) and report.chunks_written == 30
        keyword, vector = stored(settings, catalog, "live-replica", "doc")
        entry = registry.get("live-replica", "default", "doc")
        assert entry.status == INDEXED and keyword == vector == set(entry.chunk_ids) and len(keyword) == 30
    finally:
        starting.close()
        writer.close()


def test_a_writer_cancelled_after_losing_its_lock_does_not_undo_the_new_holders_work(env, postgres_dsn):
    """The writer's lock session ends mid-write, another replica indexes the document in full, and only then is
    the first attempt abandoned (its caller cancels): rolling it back would delete the chunks the new holder
    wrote under the same content-derived ids and restore the old entry."""
    from tests.contract.test_document_locks import end_lock_sessions

    settings, catalog, registry = env
    writer = Indexer(settings, catalog, registry, locks=PostgresDocumentLocks(postgres_dsn))
    other = Indexer(settings, catalog, registry, locks=PostgresDocumentLocks(postgres_dsn))
    try:
        config = writer.create_kb("lost-then-cancelled", config_yaml="embedder: {batch_size: 8}")
        writer.index_document(config, "default", "doc", "h1", chunks("lost-then-cancelled", "doc", 5, "old"))
        steps = writer.index_steps(config, "default", "doc", "h2", chunks("lost-then-cancelled", "doc", 30, "new"))
        for _ in range(3):
            next(steps)
        assert end_lock_sessions(postgres_dsn) == 1
        new = chunks("lost-then-cancelled", "doc", 30, "new")
        other.index_document(config, "default", "doc", "h2", new)
        steps.close()  # the first attempt's caller goes away
        keyword, vector = stored(settings, catalog, "lost-then-cancelled", "doc")
        entry = registry.get("lost-then-cancelled", "default", "doc")
        assert entry.status == INDEXED and entry.content_hash == "h2"
        assert keyword == vector == {c.chunk_id for c in new} == set(entry.chunk_ids)
    finally:
        writer.close()
        other.close()


def test_a_writer_that_lost_its_document_lock_leaves_the_document_to_its_new_holder(env, postgres_dsn):
    """The lock's database session ends mid-write (restart, network cut): another replica may own the document
    now, so the writer neither marks it indexed nor undoes anything; it fails with the cause, and the replica that
    takes the lock next finds the previous version whole and the attempt's `indexing` entry to finish."""
    from tests.contract.test_document_locks import end_lock_sessions

    settings, catalog, registry = env
    writer = Indexer(settings, catalog, registry, locks=PostgresDocumentLocks(postgres_dsn))
    other = Indexer(settings, catalog, registry, locks=PostgresDocumentLocks(postgres_dsn))
    try:
        config = writer.create_kb("lost-lock", config_yaml="embedder: {batch_size: 8}")
        old = chunks("lost-lock", "doc", 5, "old")
        writer.index_document(config, "default", "doc", "h1", old)
        new = chunks("lost-lock", "doc", 30, "new")
        steps = writer.index_steps(config, "default", "doc", "h2", new)
        for _ in range(3):
            next(steps)  # mid-write, holding the document
        assert end_lock_sessions(postgres_dsn) == 1
        with pytest.raises(Unavailable, match="document lock lost-lock/default/doc was lost"):
            list(steps)
        entry = registry.get("lost-lock", "default", "doc")
        assert entry.status == INDEXING and {c.chunk_id for c in old} <= set(entry.chunk_ids)
        keyword, vector = stored(settings, catalog, "lost-lock", "doc")
        assert {c.chunk_id for c in old} <= keyword & vector  # nothing of the previous version was swept
        # the two batches written while it held the lock, and none after
        assert keyword == vector == {c.chunk_id for c in old + new[:16]}
        report = other.index_document(config, "default", "doc", "h2", chunks("lost-lock", "doc", 30, "new"))
        assert report.doc_version == entry.version
        keyword, vector = stored(settings, catalog, "lost-lock", "doc")
        entry = registry.get("lost-lock", "default", "doc")
        assert entry.status == INDEXED and keyword == vector == {c.chunk_id for c in new} == set(entry.chunk_ids)
    finally:
        writer.close()
        other.close()
