"""Vectors stored at ingest (shared/sentence_vectors.py): the by-id read keeps to the caller's namespaces and
ACL, collections made before the field still work, and on the embedded stack an answer's generator step
embeds nothing: the only model call of a query is the retriever's query embedding. Readings stored at ingest
(shared/hit_reading.py): route competence tokenizes the query and no hit."""

import numpy as np
import pytest

from shared import components
from shared.config import KBConfig
from shared.contracts import chunk_pb2
from shared.sentence_vectors import unpack_sentences, unpack_vector
from shared.stores.milvus import MilvusVectorStore, collection_name, milvus_client

pytestmark = pytest.mark.integration

MANUAL = ("# AMR-7 battery\n\nThe AMR-7 battery takes 90 minutes to charge fully. Charging starts as soon as the "
          "robot reaches its dock. The dock light turns green when the battery is full.\n\n"
          "# Driving\n\nThe AMR-7 drives at up to 2 metres per second on flat floors. It slows down to half that "
          "speed near people.\n")


def chunk(chunk_id: str, text: str, *, namespace: str = "a", acl: str = "") -> chunk_pb2.KnowledgeChunk:
    return chunk_pb2.KnowledgeChunk(chunk_id=chunk_id, doc_id="d1", kb="kb", namespace=namespace, raw_content=text,
                                    content=text, metadata={"acl": acl} if acl else {})


def scope(*namespaces: str, groups: list[str] | None = None) -> chunk_pb2.SearchFilter:
    search_filter = chunk_pb2.SearchFilter(namespaces=namespaces)
    if groups is not None:
        search_filter.acl_enforced = True
        search_filter.acl_groups.extend(groups)
    return search_filter


def test_the_by_id_read_keeps_to_the_callers_namespaces_and_groups(milvus_uri):
    store = MilvusVectorStore(milvus_uri, kb="kb", model_id="test", dimension=4)
    vectors = np.eye(4, dtype=np.float32)
    sentences = [np.full((2, 4), 0.5, dtype=np.float32), np.eye(4, dtype=np.float32)[:1], None,
                 np.eye(4, dtype=np.float32)[:3]]
    store.upsert([chunk("a1", "x"), chunk("a2", "y", acl="hr"), chunk("a3", "z"), chunk("b1", "w", namespace="b")],
                 vectors, sentences)
    ids = ["a1", "a2", "a3", "b1"]
    assert set(store.chunk_vectors(ids, scope("a"))) == {"a1", "a2", "a3"}
    assert set(store.chunk_vectors(ids, scope("b"))) == {"b1"}
    assert set(store.chunk_vectors(ids, scope("a", groups=["ops"]))) == {"a1", "a3"}  # a2 is for hr only
    assert set(store.chunk_vectors(ids, scope("a", groups=["hr"]))) == {"a1", "a2", "a3"}
    assert store.chunk_vectors(ids, scope("c")) == {}
    found = store.chunk_vectors(ids, scope("a", "b"))
    assert found["a1"].embedder == "test/4" and found["a1"].sentence_count == 2
    np.testing.assert_array_equal(unpack_vector(found["a1"].chunk, 4), vectors[0])
    np.testing.assert_array_equal(unpack_sentences(found["b1"].sentences, 3, 4), sentences[3])
    assert found["a3"].sentence_count == 0 and found["a3"].splitter == 0 and found["a3"].chunk
    # searches do not return them: the payload is the chunk as written
    hit = store.search(vectors[0], scope("a"), 1)[0]
    assert not hit.chunk.HasField("vectors")


def test_a_collection_made_before_sentence_vectors_still_works(milvus_uri):
    from pymilvus import DataType

    client = milvus_client(milvus_uri)
    name = collection_name("old", "test", 4)
    schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=128)
    schema.add_field("vector", DataType.FLOAT_VECTOR, dim=4)
    for field in ("namespace", "doc_id", "acl"):
        schema.add_field(field, DataType.VARCHAR, max_length=1024)
    schema.add_field("block_type", DataType.INT64)
    schema.add_field("payload", DataType.JSON)
    index = client.prepare_index_params()
    index.add_index(field_name="vector", index_type="AUTOINDEX", metric_type="COSINE")
    client.create_collection(name, schema=schema, index_params=index, consistency_level="Strong")
    store = MilvusVectorStore(milvus_uri, kb="old", model_id="test", dimension=4)
    assert not store.has_sentences
    store.upsert([chunk("a1", "x")], np.eye(4, dtype=np.float32)[:1], [np.ones((1, 4), dtype=np.float32)])
    found = store.chunk_vectors(["a1"], scope("a"))["a1"]
    assert found.sentence_count == 0 and unpack_vector(found.chunk, 4) is not None


class EncodeCalls:
    """Every text the process-wide embedding model encodes, as passed to `encode`."""

    def __init__(self, model):
        self._encode = model.encode
        self.calls: list[list[str]] = []

    def __call__(self, texts, *args, **kwargs):
        self.calls.append(list(texts))
        return self._encode(texts, *args, **kwargs)


def test_an_answer_embeds_only_the_query_when_the_vectors_were_stored_at_ingest(client, monkeypatch):
    client.create_kb("vectors")
    job = client.upload("vectors", "amr7.md", MANUAL.encode())
    assert client.wait([job["job_id"]])[0]["state"] == "done"
    model = components.embedder_for(KBConfig(name="vectors"))._model  # the stack's, shared in this process
    encode = EncodeCalls(model)
    monkeypatch.setattr(model, "encode", encode)
    question = "How long does the AMR-7 battery take to charge?"
    result = client.query("vectors", question)
    assert "90 minutes" in result["answer"] and not result["refused"]
    assert encode.calls == [[question]]  # the retriever's query embedding, and nothing else
    generation = result["stages"]["generation"]["metadata"]
    computed = {k: int(v) for k, v in generation.items() if k.startswith("vectors_computed_")}
    assert computed and set(computed.values()) == {0}
    assert int(generation["vectors_carried_question"]) == 1 and int(generation["vectors_carried_sentences"]) > 0
    assert int(generation["vectors_carried_claims"]) >= 1 and int(generation["vectors_carried_chunks"]) >= 1
    assert "chunk_vectors_ms" in result["stages"]["retrieval"]["metadata"]
    # the stored vectors are the generator's: API clients never see them
    assert result["chunks"] and all("vectors" not in c["chunk"] for c in result["chunks"])


def test_route_competence_reads_each_hits_unknown_share_from_the_index(client, stack, monkeypatch):
    client.create_kb("readings")
    job = client.upload("readings", "amr7.md", MANUAL.encode())
    assert client.wait([job["job_id"]])[0]["state"] == "done"
    kb = KBConfig(name="readings")
    embedder = components.embedder_for(kb)  # the stack's, shared in this process
    keyword, vector = components.keyword_store_for(kb, stack.settings), components.vector_store_for(kb, stack.settings)
    for hits in (keyword.search("AMR-7 battery", scope("default"), 10),
                 vector.search(embedder.embed_query("AMR-7 battery"), scope("default"), 10)):
        assert hits and all(h.chunk.reading.embedder == f"{embedder.model_id}/{embedder.dimension}" for h in hits)
        assert all(h.chunk.reading.unknown_share == embedder.unknown_token_share(h.chunk.content) for h in hits)
    read = []
    share = embedder.unknown_token_share
    monkeypatch.setattr(embedder, "unknown_token_share", lambda text: read.append(text) or share(text))
    question = "How long does the AMR-7 battery take to charge?"
    result = client.query("readings", question)
    assert "90 minutes" in result["answer"] and not result["refused"]
    assert read == [question]  # the query's own share; every hit's came with its chunk


def test_another_tenant_gets_no_vectors_of_a_namespace_it_cannot_read(client, stack):
    client.create_kb("vectors-tenants")
    jobs = [client.upload("vectors-tenants", "amr7.md", MANUAL.encode(), namespace="team-a")["job_id"]]
    assert {j["state"] for j in client.wait(jobs)} == {"done"}
    kb = KBConfig(name="vectors-tenants")
    store = components.vector_store_for(kb, stack.settings)
    ids = [h.chunk.chunk_id for h in store.search(np.ones(store.dimension, dtype=np.float32) / store.dimension ** 0.5,
                                                   scope("team-a"), 10)]
    assert ids and set(store.chunk_vectors(ids, scope("team-a"))) == set(ids)
    assert store.chunk_vectors(ids, scope("team-b")) == {}
    result = client.query("vectors-tenants", "How long does the AMR-7 battery take to charge?", namespaces=["team-b"])
    assert result["chunks"] == [] and result["refused"]
