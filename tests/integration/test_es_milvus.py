"""Elasticsearch + Milvus server stores, against a real Elasticsearch node and a real Milvus server.

The engines start once for this module (scripts/engines.py); every test uses its own index or
collection (a unique KB name). The fault tests at the end stop the engines and start them again
while the services keep running.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import uuid

import numpy as np
import pytest
from pymilvus import DataType

from ragkb.embedded import EmbeddedStack
from services.retriever.kept_vectors import KeptVectors
from shared import components
from shared.config import Settings
from shared.contracts import chunk_pb2
from shared.errors import FailedPrecondition, InvalidArgument, Unavailable
from shared.kb import KnowledgeBaseCatalog
from shared.stores.base import KeywordStore
from shared.stores.elasticsearch import MAPPINGS, ElasticsearchKeywordStore, index_name, warm_up
from shared.stores.milvus import MilvusVectorStore, collection_name, milvus_client
from shared.stores.sqlite_fts import SqliteFtsKeywordStore
from tests.conftest import ROOT
from tests.integration.conftest import assert_next_query_sees_ingest_and_delete, ingest_folder

sys.path.insert(0, str(ROOT / "scripts"))
import engines  # noqa: E402

pytestmark = pytest.mark.integration


# short timeouts: a stopped engine must fail its route in well under the route timeout
KB_YAML = ("keyword_store:\n  name: elasticsearch\n  request_timeout_s: 2\n"
           "  max_retries: 1\nvector_store:\n  name: milvus\n  index_type: HNSW\n"
           "  index_params: {M: 16, efConstruction: 64}\n  search_params: {ef: 64}\n  timeout_s: 2\n"
           "retriever:\n  route_timeout_s: 6\n")


@pytest.fixture(scope="module")
def stack(tmp_path_factory, es, milvus):
    # a generous deadline: creating a KB loads the model and creates an index and a collection on a busy machine
    settings = Settings(data_dir=tmp_path_factory.mktemp("data"), rpc_timeout_s=180)
    # the operator's profiles: where the engines are (a KB config only chooses them by name)
    (settings.data_dir / "profiles.yaml").write_text(
        f"keyword_store: {{default: {{hosts: ['{es.url}']}}}}\nvector_store: {{default: {{uri: '{milvus.uri}'}}}}\n",
        encoding="utf-8")
    running = EmbeddedStack(settings, ephemeral_ports=True).start()
    yield running
    running.stop()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def stores_of(stack, kb: str):
    config = KnowledgeBaseCatalog.for_settings(stack.settings).get(kb)
    return components.keyword_store_for(config, stack.settings), components.vector_store_for(config, stack.settings)


def chunk(chunk_id, text, *, namespace="a", doc_id="d1", **fields) -> chunk_pb2.KnowledgeChunk:
    return chunk_pb2.KnowledgeChunk(chunk_id=chunk_id, doc_id=doc_id, kb="kb", namespace=namespace, content=text,
                                    **fields)


def only(*namespaces, **fields) -> chunk_pb2.SearchFilter:
    return chunk_pb2.SearchFilter(namespaces=list(namespaces), **fields)


def ids(candidates) -> list[str]:
    return [c.chunk.chunk_id for c in candidates]


@pytest.fixture
def es_store(es):
    store = ElasticsearchKeywordStore([es.url], kb=unique("kw"), request_timeout_s=5)
    yield store
    store.drop()
    store.close()


# ---------------------------------------------------------------- the stack on ES + Milvus server


@pytest.fixture(scope="module")
def samples(client, es, milvus):
    kb = unique("samples")
    client.create_kb(kb, config_yaml=KB_YAML)
    jobs = ingest_folder(client, kb, namespace="team-a")
    assert {j["state"] for j in jobs} == {"done"}, [j["error"] for j in jobs]
    return kb


@pytest.mark.parametrize("question, answer", [
    pytest.param("How long does it take to charge the AMR-7 from 20% to 80%?", "45 minutes", id="en"),
    pytest.param("AMR-7 的最大载重是多少？", "300公斤", id="zh"),
])
def test_query_answers_from_both_server_routes(client, samples, question, answer):
    result = client.query(samples, question, namespaces=["team-a"])
    assert result["degraded"] == [] and answer in result["answer"]
    metadata = result["stages"]["retrieval"]["metadata"]
    assert metadata, result["stages"]["retrieval"]


def test_counts_agree_after_ingest_delete_and_reingest(client, stack, samples):
    keyword, vector = stores_of(stack, samples)
    total = keyword.count()
    assert total > 0 and vector.count() == total
    doc_id = "en/beacon-admin-faq.txt"
    removed = keyword.chunk_ids("team-a", doc_id)
    assert removed and vector.chunk_ids("team-a", doc_id) == removed
    client.delete_document(samples, doc_id, namespace="team-a")
    assert keyword.count() == vector.count() == total - len(removed)
    assert keyword.chunk_ids("team-a", doc_id) == set() == vector.chunk_ids("team-a", doc_id)
    assert "valid for 10 minutes" not in client.query(samples, "How long is a Beacon pairing code valid?",
                                                      namespaces=["team-a"])["answer"]
    # re-ingest: the same chunks come back, nothing duplicated
    jobs = ingest_folder(client, samples, namespace="team-a")
    assert {j["state"] for j in jobs} == {"done"}
    assert keyword.count() == vector.count() == total
    assert keyword.chunk_ids("team-a", doc_id) == removed == vector.chunk_ids("team-a", doc_id)


def test_bounded_searches_see_a_done_job_and_not_a_deleted_document(client, stack, samples):
    assert KnowledgeBaseCatalog.for_settings(stack.settings).get(samples).vector_store.search_consistency == "Bounded"
    assert_next_query_sees_ingest_and_delete(client, samples)


def test_namespace_isolation_across_both_routes(client, samples):
    other = client.query(samples, "How long does it take to charge the AMR-7?", namespaces=["team-b"])
    assert other["chunks"] == [] and other["refused"]
    mine = client.query(samples, "How long does it take to charge the AMR-7?", namespaces=["team-a"])
    assert mine["chunks"] and {c["chunk"]["namespace"] for c in mine["chunks"]} == {"team-a"}


def test_an_answers_chunk_vectors_are_read_from_the_server_once_then_kept(client, stack, samples, monkeypatch):
    read_from_server: list[list[str]] = []
    handed: list[dict] = []
    original_read, original_kept = MilvusVectorStore.chunk_vectors, KeptVectors.vectors

    def recording_read(self, chunk_ids, search_filter):
        read_from_server.append(list(chunk_ids))
        return original_read(self, chunk_ids, search_filter)

    def recording_kept(self, collection, chunks, read):
        handed.append(original_kept(self, collection, chunks, read))
        return handed[-1]

    monkeypatch.setattr(MilvusVectorStore, "chunk_vectors", recording_read)
    monkeypatch.setattr(KeptVectors, "vectors", recording_kept)
    question = "How long is a Beacon pairing code valid?"
    first = client.query(samples, question, namespaces=["team-a"])
    reads_of_first = len(read_from_server)
    second = client.query(samples, question, namespaces=["team-a"])
    assert len(handed) == 2 and handed[0] and set(handed[1]) == set(handed[0])
    assert len(read_from_server) == reads_of_first, "the second query read no vector from the server"
    assert second["answer"] == first["answer"] and second["citations"] == first["citations"]
    # what was kept is what the server holds
    _, vector = stores_of(stack, samples)
    stored = original_read(vector, list(handed[1]), only("team-a"))
    assert stored == handed[1]


# ---------------------------------------------------------------- Elasticsearch keyword store


def test_es_tokenizes_like_the_embedded_engine(es_store, tmp_path):
    assert isinstance(es_store, KeywordStore)
    embedded = SqliteFtsKeywordStore(tmp_path / "kw.sqlite")
    docs = [chunk("en", "The dock charges the battery in 45 minutes."), chunk("zh", "AMR-7 的最大载重为300公斤。"),
            chunk("zh2", "遥测数据保留30天，之后自动删除。"), chunk("other", "Unrelated text about maps.")]
    es_store.upsert(docs)
    embedded.upsert(docs)
    # "charging batteries" needs the same Porter stemming FTS5 applies ("charges" -> "charg")
    for query in ["battery dock", "charging batteries", "最大载重是多少", "遥测数据保留多久", "maps"]:
        assert ids(es_store.search(query, only("a"), 5))[:1] == ids(embedded.search(query, only("a"), 5))[:1]
    hit = es_store.search("最大载重", only("a"), 5)[0]
    assert hit.chunk == docs[1] and hit.score > 0 and hit.bm25_rank == 1 and hit.route == chunk_pb2.ROUTE_BM25
    embedded.close()


def test_es_filters_run_inside_the_query(es_store):
    es_store.upsert([
        chunk("a1", "battery facts", metadata={"lang": "en", "product": "amr-7"}),
        chunk("a2", "battery table", doc_id="d2", block_type=chunk_pb2.BLOCK_TYPE_TABLE, metadata={"lang": "en"}),
        chunk("a3", "battery secret", metadata={"acl": "hr"}),
        chunk("b1", "battery facts", namespace="b"),
    ])
    assert set(ids(es_store.search("battery", only("b"), 10))) == {"b1"}
    assert set(ids(es_store.search("battery", only("a", doc_ids=["d2"]), 10))) == {"a2"}
    assert set(ids(es_store.search("battery", only("a", block_types=[chunk_pb2.BLOCK_TYPE_TABLE]), 10))) == {"a2"}
    assert set(ids(es_store.search("battery", only("a", metadata={"lang": "en"}), 10))) == {"a1", "a2"}
    assert set(ids(es_store.search("battery", only("a", metadata={"lang": "en", "product": "amr-7"}), 10))) == {"a1"}
    assert es_store.search("battery", only("a", metadata={"lang": "zh"}), 10) == []
    assert set(ids(es_store.search("battery", only("a", acl_enforced=True), 10))) == {"a1", "a2"}
    assert "a3" in ids(es_store.search("battery", only("a", acl_enforced=True, acl_groups=["hr"]), 10))
    with pytest.raises(InvalidArgument, match="namespace"):
        es_store.search("battery", chunk_pb2.SearchFilter(), 5)
    with pytest.raises(InvalidArgument, match="key is empty"):
        es_store.search("battery", only("a", metadata={"": "x"}), 5)


def test_es_upsert_replaces_delete_by_document_and_sibling_parts(es_store):
    parts = [chunk(f"p{i}", f"part {i} of the long table", group_id="g1", part_index=i, part_count=3)
             for i in (3, 1, 2)]
    es_store.upsert([chunk("c1", "old wording"), *parts])
    es_store.upsert([chunk("c1", "new wording")])
    assert es_store.search("old", only("a"), 5) == [] and ids(es_store.search("new", only("a"), 5)) == ["c1"]
    assert [c.part_index for c in es_store.chunks_by_group(["a"], ["g1"])] == [1, 2, 3]
    assert es_store.chunks_by_group(["b"], ["g1"]) == []
    assert es_store.count() == 4
    assert es_store.chunk_ids_of("a", ["d1", "none"]) == {"d1": {"c1", "p1", "p2", "p3"}, "none": set()}
    assert es_store.delete_document("a", "d1") == 4
    assert es_store.count() == 0 and es_store.delete_ids(["c1"]) == 0


def create_index_of_schema(es_store: ElasticsearchKeywordStore, kb: str, version: int) -> None:
    """An index as an earlier (1: the payload in `_source`) or a later release would have created it."""
    mappings = {**MAPPINGS, "_meta": {"analyzer": "jieba", "stemmer": "porter", "schema_version": version},
                "properties": {**MAPPINGS["properties"], "payload": {"type": "binary"}}}
    del mappings["_source"]
    es_store._client.indices.create(index=index_name("ragkb", kb), mappings=mappings)


def test_es_payloads_live_in_doc_values_and_a_schema_1_index_is_still_read(es, es_store):
    parts = [chunk("p1", "battery safety rules", group_id="d1:g", part_index=1, part_count=2,
                   metadata={"lang": "en"}),
             chunk("p2", "battery charging rules", group_id="d1:g", part_index=2, part_count=2)]
    kb = unique("schema1")
    create_index_of_schema(es_store, kb, 1)
    earlier = ElasticsearchKeywordStore([es.url], kb=kb, request_timeout_s=5)
    try:
        for store in (es_store, earlier):
            store.upsert(parts)
            assert sorted(c.chunk.SerializeToString() for c in store.search("battery rules", only("a"), 5)) == sorted(
                c.SerializeToString() for c in parts)
            assert [c.SerializeToString() for c in store.chunks_by_group(["a"], ["d1:g"])] == [
                c.SerializeToString() for c in parts]
        stored = {store.index: store._client.search(index=store.index, size=5)["hits"]["hits"][0]["_source"]
                  for store in (es_store, earlier)}
        assert "payload" not in stored[es_store.index] and "payload" in stored[earlier.index]
    finally:
        earlier.drop()
        earlier.close()


def test_es_refuses_an_index_of_a_later_schema(es, es_store):
    kb = unique("schema9")
    create_index_of_schema(es_store, kb, 9)
    try:
        with pytest.raises(FailedPrecondition, match="schema version 9, newer than this release reads"):
            ElasticsearchKeywordStore([es.url], kb=kb, request_timeout_s=5)
    finally:
        es_store._client.indices.delete(index=index_name("ragkb", kb))


def test_es_warm_up_runs_the_search_path_and_leaves_the_node_as_it_found_it(es, es_store):
    es_store.upsert([chunk_pb2.KnowledgeChunk(chunk_id="kept", namespace="default", doc_id="d",
                                              content="battery charge takes ninety minutes")])
    indices = es_store._client.indices
    before = set(indices.get(index="*"))

    def searches() -> int:
        stats = es_store._client.nodes.stats(metric="indices", index_metric="search")
        return sum(node["indices"]["search"]["query_total"] for node in stats["nodes"].values())

    ran = searches()
    warm_up([es.url], searches=30)
    assert searches() - ran >= 30 + 10  # every search, and a sibling read every third one
    assert set(indices.get(index="*")) == before
    found = es_store.search("battery", chunk_pb2.SearchFilter(namespaces=["default"]), 5)
    assert [c.chunk.chunk_id for c in found] == ["kept"]


def test_es_rejected_writes_name_the_chunks_and_keep_stored_data(es_store, es):
    es_store.upsert([chunk("kept", "battery facts")])
    es_store._client.indices.put_settings(index=es_store.index, settings={"index.blocks.write": True})
    try:
        with pytest.raises(FailedPrecondition, match="rejected 2 of 2 chunks.*new1"):
            es_store.upsert([chunk("new1", "x"), chunk("new2", "y")])
    finally:
        es_store._client.indices.put_settings(index=es_store.index, settings={"index.blocks.write": False})
    assert ids(es_store.search("battery", only("a"), 5)) == ["kept"] and es_store.count() == 1


def tenant_chunks(version: str) -> list[chunk_pb2.KnowledgeChunk]:
    """Chunks of two namespaces, one readable by a group only, one with metadata: the fields tenancy rests on."""
    return [chunk("t1", f"battery safety {version}", metadata={"acl": "hr, finance"}),
            chunk("t2", f"battery recycling {version}", metadata={"lang": "en"}),
            chunk("t3", f"电池 回收 {version}", namespace="b", doc_id="d2")]


def es_sources(store: ElasticsearchKeywordStore) -> dict[str, dict]:
    """Every stored document: its `_source` and its payload (kept in doc values, out of `_source`)."""
    hits = store._client.search(index=store.index, query={"match_all": {}}, size=100,
                                docvalue_fields=["payload"])["hits"]["hits"]
    return {hit["_id"]: {**hit["_source"], "payload": hit["fields"]["payload"]} for hit in hits}


def test_es_bulk_loading_writes_what_upsert_writes_then_refreshes_and_restores_settings(es, es_store):
    loaded = ElasticsearchKeywordStore([es.url], kb=unique("bulk"), request_timeout_s=5)
    try:
        loaded._client.indices.put_settings(index=loaded.index, settings={"index.refresh_interval": "7s"})
        es_store.upsert(tenant_chunks("v1"))
        with loaded.bulk_loading():
            loaded.upsert(tenant_chunks("v1"))
            # nothing is refreshed inside the block
            assert loaded.search("battery", only("a"), 5) == []
        assert es_sources(loaded) == es_sources(es_store)
        assert ids(loaded.search("battery", only("a", acl_enforced=True, acl_groups=["finance"]), 5)) == ["t1", "t2"]
        assert ids(loaded.search("battery", only("a", acl_enforced=True, acl_groups=["sales"]), 5)) == ["t2"]
        assert ids(loaded.search("电池", only("a"), 5)) == [] and ids(loaded.search("电池", only("b"), 5)) == ["t3"]
        settings = loaded._client.indices.get_settings(index=loaded.index, flat_settings=True)[loaded.index]["settings"]
        assert settings["index.refresh_interval"] == "7s" and "index.translog.durability" not in settings
    finally:
        loaded.drop()
        loaded.close()


def test_es_bulk_loading_restores_settings_when_a_write_fails(es_store):
    es_store.upsert([chunk("kept", "battery facts")])
    es_store._client.indices.put_settings(index=es_store.index, settings={"index.blocks.write": True})
    try:
        with pytest.raises(FailedPrecondition, match="rejected 1 of 1 chunks"):
            with es_store.bulk_loading():
                es_store.upsert([chunk("new1", "x")])
    finally:
        es_store._client.indices.put_settings(index=es_store.index, settings={"index.blocks.write": None})
    settings = es_store._client.indices.get_settings(index=es_store.index, flat_settings=True)[es_store.index]
    assert "index.refresh_interval" not in settings["settings"]
    assert ids(es_store.search("battery", only("a"), 5)) == ["kept"] and es_store.count() == 1


def test_es_refuses_an_index_built_with_another_analyzer(es):
    kb = unique("analyzer")
    first = ElasticsearchKeywordStore([es.url], kb=kb, analyzer="jieba")
    with pytest.raises(FailedPrecondition, match="'jieba' analyzer.*configured with 'char'"):
        ElasticsearchKeywordStore([es.url], kb=kb, analyzer="char")
    first.drop()


@pytest.mark.parametrize("options, message", [
    pytest.param({"hosts": []}, "hosts", id="no-hosts"),
    pytest.param({"hosts": ["localhost:9200"]}, "http", id="no-scheme"),
    pytest.param({"index_prefix": "Bad Prefix"}, "index_prefix", id="prefix"),
    pytest.param({"refresh": "sometimes"}, "refresh", id="refresh"),
])
def test_es_config_is_validated_in_the_constructor(es, options, message):
    arguments = {"hosts": [es.url], "kb": "x"} | options
    with pytest.raises(ValueError, match=message):
        ElasticsearchKeywordStore(arguments.pop("hosts"), **arguments)


def test_es_unreachable_node_fails_fast_with_a_clear_error():
    with pytest.raises(Unavailable, match="unreachable"):
        ElasticsearchKeywordStore([f"http://127.0.0.1:{engines.free_port()}"], kb="x", request_timeout_s=1,
                                  max_retries=0)


# ---------------------------------------------------------------- Milvus server vector store


def test_milvus_server_filters_namespaces_metadata_and_deletes(milvus):
    store = MilvusVectorStore(milvus.uri, kb=unique("vec").replace("-", "_"), model_id="test", dimension=4,
                              index_type="HNSW", index_params={"M": 8, "efConstruction": 32}, search_params={"ef": 16})
    vectors = np.eye(4, dtype=np.float32)
    store.upsert([chunk("a1", "x", metadata={"lang": "en"}), chunk("a2", "y", metadata={"lang": "zh"}),
                  chunk("b1", "z", namespace="b"), chunk("b2", "w", namespace="b", doc_id="d2")], vectors)
    assert set(ids(store.search(vectors[2], only("a"), 10))) == {"a1", "a2"}
    assert ids(store.search(vectors[0], only("a", metadata={"lang": "zh"}), 10)) == ["a2"]
    assert ids(store.search(vectors[3], only("b", doc_ids=["d2"]), 10)) == ["b2"]
    assert store.count() == 4 and store.chunk_ids("b", "d2") == {"b2"}
    assert store.chunk_ids_of("b", ["d1", "d2", "none"]) == {"d1": {"b1"}, "d2": {"b2"}, "none": set()}
    store.upsert([chunk(f"p{i}", "part", group_id="g1", part_index=i, part_count=2) for i in (2, 1)], vectors[:2])
    assert [c.part_index for c in store.chunks_by_group(["a"], ["g1"])] == [1, 2]
    assert store.chunks_by_group(["b"], ["g1"]) == [] and store.delete_ids(["p1", "p2"]) == 2
    assert store.delete_document("b", "d2") == 1 and store.count() == 3
    store.drop()


def test_milvus_server_enforces_acl_groups_inside_the_search(milvus):
    """The server's LIKE matches prefixes only: the groups are matched in the payload instead."""
    store = MilvusVectorStore(milvus.uri, kb=unique("acl").replace("-", "_"), model_id="test", dimension=4,
                              index_type="HNSW", index_params={"M": 8, "efConstruction": 32})
    try:
        store.upsert([chunk("pub", "x"), chunk("hr", "y", metadata={"acl": "hr, finance"}),
                      chunk("wild", "z", metadata={"acl": "a%b_c"}), chunk("other", "w", namespace="b")],
                     np.eye(4, dtype=np.float32))
        query = np.ones(4, dtype=np.float32) / 2
        assert set(ids(store.search(query, only("a", acl_enforced=True), 10))) == {"pub"}
        assert set(ids(store.search(query, only("a", acl_enforced=True, acl_groups=["finance"]), 10))) == {"pub", "hr"}
        assert set(ids(store.search(query, only("a", acl_enforced=True, acl_groups=["a%b_c"]), 10))) == {"pub", "wild"}
        assert set(ids(store.search(query, only("a", acl_enforced=True, acl_groups=["a"]), 10))) == {"pub"}
        assert set(ids(store.search(query, only("a"), 10))) == {"pub", "hr", "wild"}
        assert [c.chunk.metadata["acl"] for c in store.search(query, only("a", acl_enforced=True,
                                                                            acl_groups=["hr"]), 10)
                if c.chunk.chunk_id == "hr"] == ["hr, finance"]
    finally:
        store.drop()


def test_milvus_bulk_insert_writes_what_upsert_writes_and_never_stores_a_chunk_twice(milvus):
    def store():
        return MilvusVectorStore(milvus.uri, kb=unique("bulk").replace("-", "_"), model_id="test", dimension=4,
                                 index_type="HNSW", index_params={"M": 8, "efConstruction": 32})

    upserted, inserted = store(), store()
    vectors = np.eye(4, dtype=np.float32)[:3]
    try:
        upserted.upsert(tenant_chunks("v1"), vectors)
        inserted.bulk_insert(tenant_chunks("v1"), vectors)

        def rows(target):
            found = target._client.query(target.collection, filter='id != ""', output_fields=["*"],
                                         consistency_level="Strong")
            return sorted(({k: v for k, v in row.items() if k != "vector"} for row in found), key=lambda r: r["id"])

        assert rows(inserted) == rows(upserted)
        assert ids(inserted.search(vectors[0], only("a", metadata={"lang": "en"}), 5)) == ["t2"]
        assert ids(inserted.search(vectors[2], only("b"), 5)) == ["t3"]
        # the same batch again (a redelivered job), one chunk reworded: replaced, not stored twice
        inserted.bulk_insert(tenant_chunks("v2") + [chunk("t4", "new")], np.eye(4, dtype=np.float32))
        assert inserted.count() == 4
        assert {r["id"]: r["payload"]["content"] for r in rows(inserted)}["t1"] == "battery safety v2"
        with pytest.raises(InvalidArgument, match="2 chunks but 1 vectors"):
            inserted.bulk_insert(tenant_chunks("v3")[:2], vectors[:1])
    finally:
        upserted.drop()
        inserted.drop()


def test_milvus_server_whose_port_was_taken_before_it_bound_starts_on_a_fresh_one(tmp_path):
    server = engines.MilvusServer(tmp_path / "milvus")
    with socket.socket() as squatter:  # e.g. another process's outgoing connection took it as its source port
        squatter.bind(("127.0.0.1", server.etcd_ports[1]))
        squatter.listen()
        taken = server.etcd_ports[1]
        server.start()
        try:
            assert server.etcd_ports[1] != taken
            client = milvus_client(server.uri)
            assert client.list_collections() == []
        finally:
            server.stop()


def test_milvus_server_refuses_a_collection_of_another_dimension(milvus):
    kb = unique("dim").replace("-", "_")
    # a collection under this KB's name that holds 8-d vectors (say, written by a misconfigured process)
    client = milvus_client(milvus.uri)
    schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=64)
    schema.add_field("vector", DataType.FLOAT_VECTOR, dim=8)
    name = collection_name(kb, "test", 4)
    client.create_collection(name, schema=schema)
    with pytest.raises(FailedPrecondition, match="holds 8-d vectors but the configured embedder produces 4-d"):
        MilvusVectorStore(milvus.uri, kb=kb, model_id="test", dimension=4)
    client.drop_collection(name)


def test_eval_runs_on_the_stores_the_kb_config_names(es, milvus, tmp_path):
    from ragkb.eval import format_table, run_eval

    dataset = tmp_path / "beir"
    (dataset / "qrels").mkdir(parents=True)
    docs = {"d1": "The dock charges the AMR-7 battery from 20% to 80% in 45 minutes.",
            "d2": "AMR-7 的最大载重为300公斤。", "d3": "Pairing codes stay valid for 10 minutes."}
    (dataset / "corpus.jsonl").write_text("".join(
        f'{{"_id": "{d}", "title": "", "text": "{t}"}}\n' for d, t in docs.items()), encoding="utf-8")
    (dataset / "queries.jsonl").write_text('{"_id": "q1", "text": "how long does charging the battery take"}\n'
                                           '{"_id": "q2", "text": "最大载重是多少"}\n', encoding="utf-8")
    (dataset / "qrels" / "test.tsv").write_text("q1\td1\t1\nq2\td2\t1\n", encoding="utf-8")
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text(f"keyword_store: {{default: {{hosts: ['{es.url}']}}}}\n"
                        f"vector_store: {{default: {{uri: '{milvus.uri}'}}}}\n", encoding="utf-8")
    results = run_eval(dataset, "test", kb_config_yaml=KB_YAML, cache_path=tmp_path / "v.sqlite",
                       profiles_file=profiles)
    assert results["_run"]["keyword_store"] == "elasticsearch" and results["_run"]["degraded_queries"] == 0
    assert results["bm25"]["recall@10"] == results["hybrid"]["recall@10"] == 1.0
    assert results["bm25"]["mrr@10"] == 1.0 and "hybrid" in format_table(results)
    client = milvus_client(milvus.uri)
    assert not [c for c in client.list_collections() if c.startswith("kb_eval")]  # the run cleans up


# ---------------------------------------------------------------- faults: engines stop and come back


def test_elasticsearch_down_answers_from_dense_then_recovers(client, samples, es):
    question = "How long does it take to charge the AMR-7 from 20% to 80%?"
    es.stop()
    try:
        result = client.query(samples, question, namespaces=["team-a"])
        assert result["degraded"] == ["bm25"]
        assert result["chunks"] and "45 minutes" in result["answer"]
    finally:
        es.start()
    result = client.query(samples, question, namespaces=["team-a"])
    assert result["degraded"] == [] and "45 minutes" in result["answer"]


def test_milvus_hung_answers_from_bm25_then_recovers(client, samples, milvus):
    question = "How long does it take to charge the AMR-7 from 20% to 80%?"
    os.kill(milvus.pid, signal.SIGSTOP)  # a hung server: every call runs into its deadline
    try:
        result = client.query(samples, question, namespaces=["team-a"])
        assert result["degraded"] == ["dense"]
        assert result["chunks"] and "45 minutes" in result["answer"]
    finally:
        os.kill(milvus.pid, signal.SIGCONT)
    result = client.query(samples, question, namespaces=["team-a"])
    assert result["degraded"] == [] and "45 minutes" in result["answer"]


def test_milvus_killed_answers_from_bm25(client, samples, milvus):
    question = "AMR-7 的最大载重是多少？"
    os.kill(milvus.pid, signal.SIGKILL)
    result = client.query(samples, question, namespaces=["team-a"])
    assert result["degraded"] == ["dense"] and "300公斤" in result["answer"]
