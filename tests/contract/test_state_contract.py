"""Document registry, KB catalog, traces and API keys: the same behaviour on the embedded backend
(SQLite and YAML files) and on PostgreSQL. A second repository built from the same settings stands
for another process or replica."""

from __future__ import annotations

import threading

import pytest

from services.gateway.auth import key_store_for
from services.gateway.traces.store import TraceStore
from services.indexer.registry import INDEXED, INDEXING, DocumentRegistry
from shared.contracts import chunk_pb2
from shared.errors import AlreadyExists, InvalidArgument, NotFound, Unauthenticated
from shared.kb import KnowledgeBaseCatalog

ES_KB = "keyword_store: {name: elasticsearch}\n"


# --- document registry --------------------------------------------------------------------------------------


def chunk(doc_id: str, chunk_id: str, text: str) -> chunk_pb2.KnowledgeChunk:
    return chunk_pb2.KnowledgeChunk(chunk_id=chunk_id, doc_id=doc_id, kb="kb", namespace="ns", content=text)


def test_registry_keeps_documents_chunks_and_models(settings):
    registry = DocumentRegistry.for_settings(settings)
    registry.put("kb", "ns", "文档", version=1, content_hash="h1", chunk_ids=["c1", "c2"], status=INDEXING,
                 source_uri="a/文档.md")
    registry.put("kb", "ns", "b", version=1, content_hash="h2", chunk_ids=["c3"], status=INDEXED, source_uri="b")
    assert registry.counts("kb") == (1, 1)  # a version being written does not count
    registry.set_status("kb", "ns", "文档", INDEXED)
    registry.put("kb", "ns", "文档", version=2, content_hash="h3", chunk_ids=["c1", "c2"], status=INDEXED,
                 source_uri="a/文档.md")
    entry = DocumentRegistry.for_settings(settings).get("kb", "ns", "文档")  # another process sees it
    assert (entry.version, entry.content_hash, entry.chunk_ids, entry.status) == (2, "h3", ("c1", "c2"), INDEXED)
    assert [e.doc_id for e in registry.list("kb")] == sorted(["文档", "b"])
    assert registry.counts("kb", ["ns"]) == (2, 3) and registry.counts("kb", ["other"]) == (0, 0)

    registry.put_chunks("kb", [chunk("文档", "c1", "一"), chunk("文档", "c2", "二")])
    registry.put_chunks("kb", [chunk("文档", "c2", "二 (new)")])  # replaces, never duplicates
    assert {c.chunk_id: c.content for c in registry.chunks("kb", "ns", "文档", ["c1", "c2"])} == \
        {"c1": "一", "c2": "二 (new)"}
    registry.keep_chunks("kb", "ns", "文档", ["c2"])
    assert [c.chunk_id for c in registry.chunks("kb", "ns", "文档", ["c1", "c2"])] == ["c2"]
    registry.delete("kb", "ns", "文档")
    assert registry.get("kb", "ns", "文档") is None and registry.chunks("kb", "ns", "文档", ["c2"]) == []

    assert registry.model_of("kb") is None
    registry.record_model("kb", "all-MiniLM-L6-v2", 384)
    registry.record_model("kb", "other-model", 768)  # the first model recorded stays
    assert registry.model_of("kb") == ("all-MiniLM-L6-v2", 384)


# --- KB catalog ---------------------------------------------------------------------------------------------


def test_catalog_versions_grow_and_every_reader_sees_the_next_one(settings):
    writer, replica = KnowledgeBaseCatalog.for_settings(settings), KnowledgeBaseCatalog.for_settings(settings)
    created = writer.create("docs", description="中文文档", config_yaml=ES_KB)
    assert created.description == "中文文档" and replica.names() == ["docs"] and replica.exists("docs")
    first = replica.version("docs")
    assert replica.get("docs").retriever.top_k == created.retriever.top_k
    changed = writer.tenant_config("docs")
    changed = changed.model_copy(update={"retriever": changed.retriever.model_copy(update={"top_k": 7})})
    writer.replace(changed)
    config, second = replica.get_with_version("docs")  # the replica's cache is not stale: no restart
    assert config.retriever.top_k == 7 and second > first
    writer.replace(changed)
    assert replica.version("docs") > second


def test_catalog_refuses_duplicates_unknown_names_and_bad_names(settings):
    catalog = KnowledgeBaseCatalog.for_settings(settings)
    catalog.create("docs", config_yaml=ES_KB)
    with pytest.raises(AlreadyExists, match="already exists"):
        KnowledgeBaseCatalog.for_settings(settings).create("docs", config_yaml=ES_KB)
    with pytest.raises(NotFound, match="'nope' does not exist"):
        catalog.get("nope")
    with pytest.raises(NotFound, match="does not exist"):
        catalog.replace(catalog.tenant_config("docs").model_copy(update={"name": "nope"}))
    with pytest.raises(InvalidArgument, match="invalid knowledge base name"):
        catalog.get("../etc")
    assert not catalog.exists("nope")


def test_catalog_refuses_a_name_whose_vector_collection_another_kb_has(settings):
    """Milvus spells '-' as '_': 'team-a' and 'team_a' would read and write one collection."""
    catalog = KnowledgeBaseCatalog.for_settings(settings)
    catalog.create("team-a", config_yaml=ES_KB)
    with pytest.raises(AlreadyExists, match="'team_a' cannot be created: 'team-a' already exists"):
        KnowledgeBaseCatalog.for_settings(settings).create("team_a", config_yaml=ES_KB)
    catalog.create("team-b", config_yaml=ES_KB)
    assert catalog.names() == ["team-a", "team-b"]


def test_two_replicas_creating_clashing_names_at_once_get_one_kb(settings):
    start = threading.Barrier(2)
    outcomes: dict[str, str] = {}

    def create(name: str) -> None:
        replica = KnowledgeBaseCatalog.for_settings(settings)
        start.wait()
        try:
            replica.create(name, config_yaml=ES_KB)
            outcomes[name] = "created"
        except AlreadyExists as error:
            outcomes[name] = str(error)

    threads = [threading.Thread(target=create, args=(name,)) for name in ("x-y", "x_y")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes.values())[0] == "created"
    assert "differs only in '-' and '_'" in sorted(outcomes.values())[1]
    assert len(KnowledgeBaseCatalog.for_settings(settings).names()) == 1


def test_single_process_stores_are_refused_only_in_cluster_mode(settings):
    catalog = KnowledgeBaseCatalog.for_settings(settings)
    lite = ES_KB + "vector_store: {profile: lite}\n"  # a profile without a Milvus server: a Milvus Lite file
    if settings.database_url:
        with pytest.raises(InvalidArgument, match="sqlite-fts5.*not offered in cluster mode.*elasticsearch"):
            catalog.create("docs")
        with pytest.raises(InvalidArgument, match="profile 'lite' names no Milvus server.*Milvus Lite"):
            catalog.create("docs", config_yaml=lite)
        assert catalog.names() == []
        catalog.create("docs", config_yaml=ES_KB)
        stored = catalog.tenant_config("docs")
        embedded = stored.keyword_store.model_copy(update={"name": "sqlite-fts5"})
        with pytest.raises(InvalidArgument, match="sqlite-fts5"):  # a change cannot bring one back either
            catalog.replace(stored.model_copy(update={"keyword_store": embedded}))
    else:
        assert catalog.create("docs").keyword_store.name == "sqlite-fts5"
        assert catalog.create("lite", config_yaml=lite).vector_store.uri == ""


# --- traces -------------------------------------------------------------------------------------------------


def trace(trace_id: str) -> dict:
    return {"trace_id": trace_id, "request": {"namespaces": ["ns"], "query": f"问题 {trace_id}"}, "lists": {}}


def test_traces_are_bounded_and_shared_by_every_gateway(settings):
    store = TraceStore.for_settings(settings)
    store.limit = 3
    for i in range(5):
        store.put(trace(f"t{i}"))
    other = TraceStore.for_settings(settings)
    assert store.count() == 3 and other.get("t4")["request"]["query"] == "问题 t4"
    with pytest.raises(NotFound, match="evicted"):
        other.get("t0")
    with pytest.raises(InvalidArgument, match="invalid trace id"):
        other.get("../x")


# --- API keys -----------------------------------------------------------------------------------------------


def test_keys_authenticate_and_a_deleted_key_stops_at_once_everywhere(settings):
    operator, gateway = key_store_for(settings), key_store_for(settings)
    assert not gateway.enabled and gateway.authenticate(None, loopback_peer=True).role == "admin"  # open mode
    raw = operator.create("reader-a", role="reader", namespaces=["ns"], groups=["团队"])
    operator.create("root", role="admin", namespaces=["*"], groups=["*"])
    principal = gateway.authenticate(raw)
    assert (principal.name, principal.role, principal.namespaces, principal.groups) == \
        ("reader-a", "reader", ("ns",), ("团队",))
    assert [k["name"] for k in gateway.list()] == ["reader-a", "root"] and "sha256" not in gateway.list()[0]
    with pytest.raises(AlreadyExists, match="already exists"):
        operator.create("root", role="admin", namespaces=["*"])
    with pytest.raises(Unauthenticated, match="not valid"):
        gateway.authenticate("rk_wrong")
    operator.delete("reader-a")
    with pytest.raises(Unauthenticated, match="not valid"):
        gateway.authenticate(raw)
    with pytest.raises(NotFound, match="no key named"):
        operator.delete("reader-a")
