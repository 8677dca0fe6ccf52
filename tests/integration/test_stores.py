"""The embedded engines themselves: SQLite FTS5 (BM25) and Milvus Lite, with real data on disk."""

import numpy as np
import pytest

from shared.contracts import chunk_pb2
from shared.errors import FailedPrecondition, InvalidArgument
from shared.stores.milvus import MilvusVectorStore
from shared.stores.sqlite_fts import SqliteFtsKeywordStore

pytestmark = pytest.mark.integration


def chunk(chunk_id, text, namespace="a", doc_id="d1") -> chunk_pb2.KnowledgeChunk:
    return chunk_pb2.KnowledgeChunk(chunk_id=chunk_id, doc_id=doc_id, kb="kb", namespace=namespace, content=text)


def only(*namespaces):
    return chunk_pb2.SearchFilter(namespaces=list(namespaces))


@pytest.fixture
def keyword(tmp_path):
    store = SqliteFtsKeywordStore(tmp_path / "kw.sqlite")
    yield store
    store.close()


def test_bm25_matches_english_with_stemming_and_chinese_words(keyword):
    keyword.upsert([chunk("en", "The dock charges the battery in 45 minutes."),
                    chunk("zh", "AMR-7 的最大载重为300公斤。"), chunk("other", "Unrelated text about maps.")])
    assert [c.chunk.chunk_id for c in keyword.search("charging battery", only("a"), 5)] == ["en"]
    hits = keyword.search("最大载重是多少", only("a"), 5)
    assert hits[0].chunk.chunk_id == "zh" and hits[0].score > 0 and hits[0].bm25_rank == 1


def test_bm25_namespace_filter_is_inside_the_query(keyword):
    keyword.upsert([chunk("a1", "battery charging", namespace="a"), chunk("b1", "battery charging", namespace="b")])
    assert [c.chunk.chunk_id for c in keyword.search("battery", only("b"), 5)] == ["b1"]
    assert {c.chunk.chunk_id for c in keyword.search("battery", only("a", "b"), 5)} == {"a1", "b1"}
    with pytest.raises(InvalidArgument, match="namespace"):
        keyword.search("battery", chunk_pb2.SearchFilter(), 5)


def test_bm25_upsert_replaces_and_delete_removes(keyword):
    keyword.upsert([chunk("c1", "old wording"), chunk("c2", "kept")])
    keyword.upsert([chunk("c1", "new wording")])
    assert keyword.search("old", only("a"), 5) == []
    assert keyword.count() == 2
    assert keyword.delete_document("a", "d1") == 2
    assert keyword.count() == 0 and keyword.search("new", only("a"), 5) == []


def test_bm25_chunk_ids_of_many_documents_in_one_namespace(keyword):
    keyword.upsert([chunk("a1", "x"), chunk("a2", "y"), chunk("a3", "z", doc_id="d2"),
                    chunk("b1", "w", namespace="b", doc_id="d2")])
    assert keyword.chunk_ids_of("a", ["d1", "d2", "none"]) == {"d1": {"a1", "a2"}, "d2": {"a3"}, "none": set()}
    assert keyword.chunk_ids_of("a", []) == {}


def test_bm25_data_survives_reopening(tmp_path):
    store = SqliteFtsKeywordStore(tmp_path / "kw.sqlite")
    store.upsert([chunk("c1", "persistent battery facts")])
    store.close()
    reopened = SqliteFtsKeywordStore(tmp_path / "kw.sqlite")
    assert [c.chunk.chunk_id for c in reopened.search("battery", only("a"), 5)] == ["c1"]
    reopened.close()


def test_milvus_search_filters_by_namespace_and_deletes(milvus_uri):
    store = MilvusVectorStore(milvus_uri, kb="kb", model_id="test", dimension=4)
    vectors = np.eye(4, dtype=np.float32)
    store.upsert([chunk("a1", "x", namespace="a"), chunk("a2", "y", namespace="a"), chunk("b1", "z", namespace="b"),
                  chunk("b2", "w", namespace="b", doc_id="d2")], vectors)
    hits = store.search(vectors[2], only("a"), 10)
    assert {h.chunk.chunk_id for h in hits} == {"a1", "a2"}
    assert store.search(vectors[2], only("b"), 1)[0].chunk.chunk_id == "b1"
    assert store.chunk_ids("b", "d2") == {"b2"}
    assert store.chunk_ids_of("b", ["d1", "d2", "none"]) == {"d1": {"b1"}, "d2": {"b2"}, "none": set()}
    assert store.delete_document("b", "d2") == 1
    assert store.count() == 3


def test_milvus_refuses_a_collection_of_another_dimension(milvus_uri):
    MilvusVectorStore(milvus_uri, kb="kb", model_id="test", dimension=4)
    store = MilvusVectorStore(milvus_uri, kb="kb", model_id="test", dimension=4)
    with pytest.raises(FailedPrecondition, match="3-d"):
        store.upsert([chunk("a1", "x")], np.ones((1, 3), dtype=np.float32))
    # the collection name carries model and dimension, so a different model never shares it
    other = MilvusVectorStore(milvus_uri, kb="kb", model_id="test", dimension=8)
    assert other.collection != store.collection


def test_milvus_finds_documents_and_namespaces_named_in_chinese(milvus_uri):
    store = MilvusVectorStore(milvus_uri, kb="kb", model_id="test", dimension=2)
    store.upsert([chunk("c1", "x", namespace="团队甲", doc_id="zh/使用手册.md"),
                  chunk("c2", "y", namespace="团队甲", doc_id="zh/常见问题.txt")], np.eye(2, dtype=np.float32))
    assert store.chunk_ids("团队甲", "zh/使用手册.md") == {"c1"}
    assert store.chunk_ids_of("团队甲", ["zh/使用手册.md", "zh/常见问题.txt"]) == {"zh/使用手册.md": {"c1"},
                                                                              "zh/常见问题.txt": {"c2"}}
    search_filter = chunk_pb2.SearchFilter(namespaces=["团队甲"], doc_ids=["zh/常见问题.txt"])
    assert [h.chunk.chunk_id for h in store.search(np.array([1, 0], dtype=np.float32), search_filter, 5)] == ["c2"]
    assert store.delete_document("团队甲", "zh/使用手册.md") == 1
