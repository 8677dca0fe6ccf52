"""The in-process vector mirror against Milvus Lite's own search of the same collection.

Every store here writes a real Milvus Lite file; a store of the same collection without a mirror
(`mirror_rows=0`) is the reference, and only mirrored stores write (as in a process where every
store gets the operator's settings).
"""

from __future__ import annotations

import random
import threading

import numpy as np
import pytest

from shared.contracts import chunk_pb2
from shared.stores import milvus
from shared.stores.milvus import UPSERT_BATCH, MilvusVectorStore, close_clients

pytestmark = pytest.mark.integration

DIMENSION = 16
NAMESPACES = ["a", "b", "团队"]
DOCS = ["d1", "d2", "手册"]
GROUPS = ["hr", "finance", "研发"]


def store(uri, *, mirror_rows=10_000) -> MilvusVectorStore:
    return MilvusVectorStore(uri, kb="kb", model_id="m", dimension=DIMENSION, mirror_rows=mirror_rows)


def chunk(rng: random.Random, chunk_id: str, text: str = "") -> chunk_pb2.KnowledgeChunk:
    groups = rng.sample(GROUPS, rng.randint(0, 2))
    return chunk_pb2.KnowledgeChunk(
        chunk_id=chunk_id, kb="kb", namespace=rng.choice(NAMESPACES), doc_id=rng.choice(DOCS),
        content=text or f"text of {chunk_id}", block_type=rng.choice([chunk_pb2.BLOCK_TYPE_PARAGRAPH,
                                                                      chunk_pb2.BLOCK_TYPE_TABLE]),
        metadata={"acl": ", ".join(groups), "lang": rng.choice(["en", "zh"])} if groups else
        {"lang": rng.choice(["en", "zh"])}, heading_path=["Section", "第一节"])


def filters() -> list[chunk_pb2.SearchFilter]:
    return [
        chunk_pb2.SearchFilter(namespaces=["a"]),
        chunk_pb2.SearchFilter(namespaces=NAMESPACES),
        chunk_pb2.SearchFilter(namespaces=["团队", "b"], doc_ids=["手册", "d2"]),
        chunk_pb2.SearchFilter(namespaces=NAMESPACES, block_types=[chunk_pb2.BLOCK_TYPE_TABLE]),
        chunk_pb2.SearchFilter(namespaces=NAMESPACES, acl_enforced=True),
        chunk_pb2.SearchFilter(namespaces=NAMESPACES, acl_enforced=True, acl_groups=["研发"]),
        chunk_pb2.SearchFilter(namespaces=["a", "b"], acl_enforced=True, acl_groups=["hr", "finance"]),
        chunk_pb2.SearchFilter(namespaces=["nobody"]),
        chunk_pb2.SearchFilter(namespaces=["a"], doc_ids=["no such document"]),
    ]


def assert_same_hits(mirrored: MilvusVectorStore, reference: MilvusVectorStore, vector, search_filter, limit=20):
    got, want = mirrored.search(vector, search_filter, limit), reference.search(vector, search_filter, limit)
    assert [c.chunk for c in got] == [c.chunk for c in want], search_filter
    np.testing.assert_allclose([c.score for c in got], [c.score for c in want], rtol=1e-5, atol=1e-6)
    assert [c.dense_rank for c in got] == list(range(1, len(got) + 1))


def test_random_writes_keep_the_mirror_equal_to_milvus(milvus_uri):
    mirrored, reference = store(milvus_uri), store(milvus_uri, mirror_rows=0)
    rng, vectors = random.Random(7), np.random.default_rng(7)
    for step in range(12):
        batch = list({c.chunk_id: c for c in (chunk(rng, f"c{rng.randrange(120)}") for _ in range(25))}.values())
        if step % 3 == 2:
            mirrored.bulk_insert(batch, vectors.standard_normal((len(batch), DIMENSION)).astype(np.float32))
        else:
            mirrored.upsert(batch, vectors.standard_normal((len(batch), DIMENSION)).astype(np.float32))
        if step == 0:
            assert mirrored.await_mirror()
        mirrored.delete_ids([f"c{rng.randrange(120)}" for _ in range(6)])
        for search_filter in filters():
            assert_same_hits(mirrored, reference, vectors.standard_normal(DIMENSION), search_filter)
    mirror = mirrored._mirror
    assert mirror.ready and len(mirror) == mirrored.count() > 0  # the searches above were the mirror's


def test_every_store_of_the_collection_writes_through_one_mirror(milvus_uri):
    """The indexer's and the retriever's registries each build a store of the same collection."""
    writer, reader, reference = store(milvus_uri), store(milvus_uri), store(milvus_uri, mirror_rows=0)
    rng, vectors = random.Random(1), np.random.default_rng(1)
    first = [chunk(rng, f"c{i}") for i in range(30)]
    writer.upsert(first, vectors.standard_normal((30, DIMENSION)).astype(np.float32))
    query = vectors.standard_normal(DIMENSION)
    everything = chunk_pb2.SearchFilter(namespaces=NAMESPACES)
    assert reader.await_mirror() and writer._mirror.ready  # built from the collection
    assert len(reader.search(query, everything, 100)) == 30
    writer.upsert([chunk(rng, "late", "written after the mirror was built")],
                  vectors.standard_normal((1, DIMENSION)).astype(np.float32))
    writer.delete_ids(["c0", "c1"])
    hits = {c.chunk.chunk_id for c in reader.search(query, everything, 100)}
    assert "late" in hits and not {"c0", "c1"} & hits and len(hits) == 29
    assert reader._mirror is writer._mirror
    assert_same_hits(reader, reference, query, everything, limit=100)


def test_a_metadata_filter_is_answered_by_milvus(milvus_uri):
    mirrored, reference = store(milvus_uri), store(milvus_uri, mirror_rows=0)
    rng, vectors = random.Random(3), np.random.default_rng(3)
    mirrored.upsert([chunk(rng, f"c{i}") for i in range(40)], vectors.standard_normal((40, DIMENSION)).astype(np.float32))
    by_language = chunk_pb2.SearchFilter(namespaces=NAMESPACES, metadata={"lang": "zh"})
    query = vectors.standard_normal(DIMENSION)
    assert mirrored._search_mirror(query, by_language, 10) is None
    hits = mirrored.search(query, by_language, 40)
    assert hits and all(c.chunk.metadata["lang"] == "zh" for c in hits)
    assert_same_hits(mirrored, reference, query, by_language, limit=40)


def test_a_collection_over_the_row_limit_is_searched_in_milvus(milvus_uri):
    mirrored, reference = store(milvus_uri, mirror_rows=25), store(milvus_uri, mirror_rows=0)
    rng, vectors = random.Random(4), np.random.default_rng(4)
    mirrored.upsert([chunk(rng, f"c{i}") for i in range(20)], vectors.standard_normal((20, DIMENSION)).astype(np.float32))
    everything = chunk_pb2.SearchFilter(namespaces=NAMESPACES)
    query = vectors.standard_normal(DIMENSION)
    assert mirrored.await_mirror() and mirrored._search_mirror(query, everything, 10) is not None
    mirrored.upsert([chunk(rng, f"more{i}") for i in range(10)], vectors.standard_normal((10, DIMENSION)).astype(np.float32))
    assert mirrored._mirror.oversized and len(mirrored._mirror) == 0  # its memory is given back
    assert mirrored._search_mirror(query, everything, 10) is None and not mirrored.await_mirror()
    assert len(mirrored.search(query, everything, 100)) == 30
    assert_same_hits(mirrored, reference, query, everything, limit=30)


def test_a_write_failing_part_way_leaves_the_mirror_to_be_rebuilt(milvus_uri, monkeypatch):
    mirrored, reference = store(milvus_uri), store(milvus_uri, mirror_rows=0)
    rng, vectors = random.Random(5), np.random.default_rng(5)
    everything = chunk_pb2.SearchFilter(namespaces=NAMESPACES)
    mirrored.upsert([chunk(rng, f"c{i}") for i in range(10)], vectors.standard_normal((10, DIMENSION)).astype(np.float32))
    query = vectors.standard_normal(DIMENSION)
    assert mirrored.await_mirror() and len(mirrored.search(query, everything, 100)) == 10
    client, real_upsert, calls = mirrored._client, mirrored._client.upsert, []

    def second_batch_fails(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise ConnectionError("Milvus Lite went away mid-write")
        return real_upsert(*args, **kwargs)

    monkeypatch.setattr(client, "upsert", second_batch_fails)
    big = [chunk(rng, f"big{i}") for i in range(UPSERT_BATCH + 5)]
    with pytest.raises(ConnectionError, match="mid-write"):
        mirrored.upsert(big, vectors.standard_normal((len(big), DIMENSION)).astype(np.float32))
    monkeypatch.setattr(client, "upsert", real_upsert)
    assert not mirrored._mirror.ready
    # the first batch reached the collection: Milvus has it, and so has the rebuilt mirror
    assert len(mirrored.search(query, everything, 1000)) == 10 + UPSERT_BATCH
    assert mirrored.await_mirror() and len(mirrored.search(query, everything, 1000)) == 10 + UPSERT_BATCH
    assert_same_hits(mirrored, reference, query, everything, limit=1000)


def test_a_reopened_file_is_mirrored_from_what_it_holds(milvus_uri):
    rng, vectors = random.Random(6), np.random.default_rng(6)
    first = store(milvus_uri)
    first.upsert([chunk(rng, f"c{i}") for i in range(15)], vectors.standard_normal((15, DIMENSION)).astype(np.float32))
    everything = chunk_pb2.SearchFilter(namespaces=NAMESPACES)
    query = vectors.standard_normal(DIMENSION)
    assert first.await_mirror()
    before = [c.chunk for c in first.search(query, everything, 100)]
    close_clients()  # the file is let go: another process could write it now
    assert not first._mirror.ready
    again, reference = store(milvus_uri), store(milvus_uri, mirror_rows=0)
    assert again._mirror is not first._mirror and again.await_mirror()
    assert [c.chunk for c in again.search(query, everything, 100)] == before
    assert_same_hits(again, reference, query, everything, limit=100)


def test_dropping_the_collection_empties_its_mirror(milvus_uri):
    rng, vectors = random.Random(8), np.random.default_rng(8)
    mirrored = store(milvus_uri)
    mirrored.upsert([chunk(rng, f"c{i}") for i in range(5)], vectors.standard_normal((5, DIMENSION)).astype(np.float32))
    everything = chunk_pb2.SearchFilter(namespaces=NAMESPACES)
    assert mirrored.await_mirror() and len(mirrored.search(vectors.standard_normal(DIMENSION), everything, 10)) == 5
    mirrored.drop()
    recreated = store(milvus_uri)
    assert recreated.await_mirror() and recreated.search(vectors.standard_normal(DIMENSION), everything, 10) == []


def test_a_search_sees_a_write_whole_or_not_at_all(milvus_uri):
    """Each write replaces all 30 chunks at once; concurrent searches must see one round's text, never a mix."""
    mirrored = store(milvus_uri)
    vectors = np.random.default_rng(9).standard_normal((30, DIMENSION)).astype(np.float32)
    everything = chunk_pb2.SearchFilter(namespaces=["a"])

    def round_(number):
        return [chunk_pb2.KnowledgeChunk(chunk_id=f"c{i}", kb="kb", namespace="a", doc_id="d", content=f"round {number}")
                for i in range(30)]

    mirrored.upsert(round_(0), vectors)
    assert mirrored.await_mirror()
    seen, problems, stop = [], [], threading.Event()

    def search():
        while not stop.is_set():
            hits = mirrored.search(vectors[0], everything, 100)
            texts = {c.chunk.content for c in hits}
            seen.append(len(hits))
            if len(hits) != 30 or len(texts) != 1:
                problems.append((len(hits), texts))

    readers = [threading.Thread(target=search) for _ in range(3)]
    for reader in readers:
        reader.start()
    for number in range(1, 25):
        mirrored.upsert(round_(number), vectors)
    stop.set()
    for reader in readers:
        reader.join()
    assert seen and not problems


def test_a_small_collection_is_mirrored_by_the_first_search(milvus_uri):
    mirrored, reference = store(milvus_uri), store(milvus_uri, mirror_rows=0)
    rng, vectors = random.Random(11), np.random.default_rng(11)
    mirrored.upsert([chunk(rng, f"c{i}") for i in range(30)], vectors.standard_normal((30, DIMENSION)).astype(np.float32))
    everything = chunk_pb2.SearchFilter(namespaces=NAMESPACES)
    query = vectors.standard_normal(DIMENSION)
    assert not mirrored._mirror.ready
    assert mirrored._search_mirror(query, everything, 30) is not None and mirrored._mirror.ready
    assert_same_hits(mirrored, reference, query, everything, limit=30)


def test_searches_do_not_wait_for_a_large_collection_s_build(milvus_uri, monkeypatch):
    """The first search starts the build in a thread of its own; until it is done, Milvus answers."""
    monkeypatch.setattr(milvus, "MIRROR_BUILD_WAIT_ROWS", 10)
    mirrored, reference = store(milvus_uri), store(milvus_uri, mirror_rows=0)
    rng, vectors = random.Random(10), np.random.default_rng(10)
    mirrored.upsert([chunk(rng, f"c{i}") for i in range(40)], vectors.standard_normal((40, DIMENSION)).astype(np.float32))
    mirror, release = mirrored._mirror, threading.Event()
    real_apply = mirror.apply
    # the build's pages wait until released (between its page reads, as a long build does)
    monkeypatch.setattr(mirror, "apply", lambda rows: (release.wait(30), real_apply(rows))[1])
    everything = chunk_pb2.SearchFilter(namespaces=NAMESPACES)
    query = vectors.standard_normal(DIMENSION)
    for _ in range(3):  # each answered by Milvus while the build waits
        assert_same_hits(mirrored, reference, query, everything, limit=40)
    assert not mirror.ready and mirror.filling
    release.set()
    assert mirrored.await_mirror(timeout_s=30)
    assert mirrored._search_mirror(query, everything, 40) is not None
    assert_same_hits(mirrored, reference, query, everything, limit=40)


def sentence_vectors(rng: np.random.Generator, count: int) -> list[np.ndarray | None]:
    return [None if i % 4 == 3 else rng.standard_normal((1 + i % 3, DIMENSION)).astype(np.float32)
            for i in range(count)]


def test_the_by_id_read_through_the_mirror_equals_milvus_s(milvus_uri):
    """Answer sources' stored vectors: what the mirror lets through and keeps is what Milvus returns, for every
    filter, after rewrites and deletes, and whether or not it was kept before."""
    mirrored, reference = store(milvus_uri), store(milvus_uri, mirror_rows=0)
    rng, vectors = random.Random(11), np.random.default_rng(11)
    for step in range(8):
        batch = list({c.chunk_id: c for c in (chunk(rng, f"c{rng.randrange(60)}") for _ in range(20))}.values())
        mirrored.upsert(batch, vectors.standard_normal((len(batch), DIMENSION)).astype(np.float32),
                        sentence_vectors(vectors, len(batch)))
        if step == 0:
            assert mirrored.await_mirror()
        mirrored.delete_ids([f"c{rng.randrange(60)}" for _ in range(4)])
        ids = [f"c{rng.randrange(70)}" for _ in range(25)]  # some never written, some deleted
        for search_filter in filters():
            for _ in range(2):  # the second read is served from what the first kept
                assert mirrored.chunk_vectors(ids, search_filter) == reference.chunk_vectors(ids, search_filter), \
                    search_filter
    assert mirrored._mirror._kept  # the reads above went through the mirror


def test_kept_vectors_are_read_from_milvus_once_and_again_after_a_write(milvus_uri, monkeypatch):
    mirrored = store(milvus_uri)
    rng, vectors = random.Random(12), np.random.default_rng(12)
    chunks = [chunk(rng, f"c{i}") for i in range(10)]
    mirrored.upsert(chunks, vectors.standard_normal((10, DIMENSION)).astype(np.float32),
                    sentence_vectors(vectors, 10))
    assert mirrored.await_mirror()
    read = []
    original = mirrored._read_vectors
    monkeypatch.setattr(mirrored, "_read_vectors", lambda ids, f: read.append(sorted(ids)) or original(ids, f))
    everything = chunk_pb2.SearchFilter(namespaces=NAMESPACES)
    ids = [c.chunk_id for c in chunks]
    first = mirrored.chunk_vectors(ids, everything)
    assert mirrored.chunk_vectors(ids, everything) == first and read == [ids]
    rewritten = np.full((1, DIMENSION), 0.25, np.float32)
    mirrored.upsert([chunks[3]], rewritten, [rewritten])
    again = mirrored.chunk_vectors(ids, everything)
    assert read == [ids, ["c3"]]  # only the rewritten chunk is read again
    assert again["c3"] != first["c3"] and again["c3"].sentence_count == 1
    assert {k: v for k, v in again.items() if k != "c3"} == {k: v for k, v in first.items() if k != "c3"}
    mirrored.delete_ids(["c4"])
    assert "c4" not in mirrored.chunk_vectors(ids, everything) and read[-1] == ["c3"]  # nothing read for c4


def test_vectors_read_before_a_write_are_not_kept_after_it(milvus_uri):
    """A read from Milvus that a write overtakes is not kept: it was read for the row's old slot."""
    mirrored = store(milvus_uri)
    rng, vectors = random.Random(13), np.random.default_rng(13)
    written = chunk(rng, "c0")
    mirrored.upsert([written], vectors.standard_normal((1, DIMENSION)).astype(np.float32))
    assert mirrored.await_mirror()
    mirror, everything = mirrored._mirror, chunk_pb2.SearchFilter(namespaces=NAMESPACES)
    slots = mirror.readable(["c0"], namespaces=NAMESPACES)
    stale = mirrored._read_vectors(["c0"], everything)["c0"]
    mirrored.upsert([written], vectors.standard_normal((1, DIMENSION)).astype(np.float32))  # the write overtakes
    mirror.keep("c0", slots["c0"], stale, stale.ByteSize())
    assert mirror.kept(slots) == {} and mirror.kept(mirror.readable(["c0"], namespaces=NAMESPACES)) == {}
    assert mirrored.chunk_vectors(["c0"], everything)["c0"] != stale


def test_the_mirror_keeps_a_bounded_number_of_chunks_vectors(milvus_uri, monkeypatch):
    monkeypatch.setattr("shared.stores.vector_mirror.KEPT_ROWS", 5)
    mirrored = store(milvus_uri)
    rng, vectors = random.Random(14), np.random.default_rng(14)
    mirrored.upsert([chunk(rng, f"c{i}") for i in range(12)], vectors.standard_normal((12, DIMENSION)).astype(np.float32),
                    sentence_vectors(vectors, 12))
    assert mirrored.await_mirror()
    everything = chunk_pb2.SearchFilter(namespaces=NAMESPACES)
    before = mirrored.mirror_bytes()
    read = mirrored.chunk_vectors([f"c{i}" for i in range(12)], everything)
    mirror = mirrored._mirror
    assert len(read) == 12 and len(mirror._kept) == 5
    assert all(read[chunk_id] == value for chunk_id, (_, value, _) in mirror._kept.items())
    assert set(mirrored.chunk_vectors(["c0", "c1"], everything)) == {"c0", "c1"}
    assert list(mirror._kept)[-2:] == ["c0", "c1"] and len(mirror._kept) == 5  # the most recently read stay
    assert mirrored.mirror_bytes() - before == sum(size for _, _, size in mirror._kept.values()) > 0
