"""The retriever's two routes on the embedded stores when the query embedding fails or is stuck: the BM25
route still answers, within the route timeout.

The embedder is the shipped MiniLM, wrapped so it can be made to fail or stall (a real model cannot be made
to do either on demand); the keyword store is the real SQLite FTS5 one, wrapped to note when it searches.
Milvus Lite holds the vectors.
"""

from __future__ import annotations

import hashlib
import threading
import time

import pytest

from services.retriever.retriever import Retriever
from shared import components
from shared.config import KBConfig, Settings
from shared.contracts import chunk_pb2
from shared.kb import KnowledgeBaseCatalog

pytestmark = pytest.mark.unit

TEXTS = {
    "charging": "The charging dock charges the battery from 20% to 80% in 45 minutes.",
    "speed": "The top speed of the robot is 1.8 m/s in open aisles.",
    "payload": "AMR-7 的最大载重为300公斤。",
}
QUERY = "How long does charging the battery take?"
ANYWHERE = chunk_pb2.SearchFilter(namespaces=["default"])


class ObservedEmbedder:
    """The real embedder, with each query embedding's end time noted, or made to fail or stall."""

    def __init__(self, real, events: list[tuple[str, float]]):
        self._real = real
        self.events = events
        self.fail: Exception | None = None
        self.hold: threading.Event | None = None  # set: the embedding goes on (or fails)

    def embed_query(self, text: str):
        try:
            if self.hold is not None:
                self.hold.wait(30)
            if self.fail is not None:
                raise self.fail
            return self._real.embed_query(text)
        finally:
            self.events.append(("embedded", time.perf_counter()))

    def __getattr__(self, name):
        return getattr(self._real, name)


class ObservedKeywordStore:
    """The real keyword store, with each search's start time noted."""

    def __init__(self, real, events: list[tuple[str, float]]):
        self._real = real
        self._events = events

    def search(self, query, search_filter, limit):
        self._events.append(("bm25 search", time.perf_counter()))
        return self._real.search(query, search_filter, limit)

    def __getattr__(self, name):
        return getattr(self._real, name)


@pytest.fixture(scope="module")
def observed_embedder():
    """One for the module: components are cached by their factory and config, across registries."""
    return ObservedEmbedder(components.embedder_for(KBConfig(name="routes")), [])


@pytest.fixture()
def routes(tmp_path, observed_embedder):
    settings = Settings(data_dir=tmp_path)
    catalog = KnowledgeBaseCatalog.for_settings(settings)
    config = catalog.create("routes", config_yaml="retriever: {route_timeout_s: 2}")
    chunks = [chunk_pb2.KnowledgeChunk(chunk_id=hashlib.sha256(doc.encode()).hexdigest()[:32], doc_id=doc,
                                       kb="routes", namespace="default", content=text, raw_content=text)
              for doc, text in TEXTS.items()]
    embedder, events = observed_embedder, observed_embedder.events
    embedder.fail, embedder.hold = None, None
    events.clear()
    real_embedder = components.embedder_for(config)
    components.keyword_store_for(config, settings).upsert(chunks)
    components.vector_store_for(config, settings).upsert(
        chunks, real_embedder.embed_documents([c.content for c in chunks]))

    registry = components.storage_registry("retriever")
    registry.add("embedder", "sentence-transformers", lambda _config: embedder)
    registry.add("keyword_store", "sqlite-fts5",
                 lambda kb_config, **kwargs: ObservedKeywordStore(components.sqlite_fts5_store(kb_config, **kwargs),
                                                                  events))
    retriever = Retriever(settings, registry)
    yield retriever, config, embedder, events
    retriever.close()


def test_a_failed_query_embedding_leaves_the_bm25_route_to_answer(routes):
    retriever, config, embedder, events = routes
    embedder.fail = RuntimeError("the model thread is gone")
    result = retriever.retrieve(config, QUERY, ANYWHERE, top_k=3)
    assert result.degraded == ["dense"]
    assert [c.chunk.doc_id for c in result.candidates][0] == "charging" and result.bm25
    assert sorted(name for name, _ in events) == ["bm25 search", "embedded"]


def test_a_stuck_query_embedding_leaves_the_bm25_route_to_answer_within_the_route_timeout(routes):
    retriever, config, embedder, events = routes
    embedder.hold = threading.Event()  # stuck past the whole route timeout (2 s)
    try:
        result = retriever.retrieve(config, QUERY, ANYWHERE, top_k=3)
        assert result.degraded == ["dense"] and result.candidates[0].chunk.doc_id == "charging"
        assert [name for name, _ in events] == ["bm25 search"]  # it answered while the embedding was stuck
    finally:
        embedder.fail = RuntimeError("released")  # the stuck route ends without touching the stores again
        embedder.hold.set()
    while not any(name == "embedded" for name, _ in events):
        time.sleep(0.01)


PARTS = [  # (doc, part index, block type, text): block "manual:2" was split in three, "notes:1" in two
    ("manual", 1, chunk_pb2.BLOCK_TYPE_PARAGRAPH, "Charging starts when the robot docks."),
    ("manual", 2, chunk_pb2.BLOCK_TYPE_PARAGRAPH, "Charging from 20% to 80% takes 45 minutes."),
    ("manual", 3, chunk_pb2.BLOCK_TYPE_PARAGRAPH, "Charging stops at 100% and the dock light turns green."),
    ("notes", 1, chunk_pb2.BLOCK_TYPE_PARAGRAPH, "Battery health is checked weekly."),
    ("notes", 2, chunk_pb2.BLOCK_TYPE_TABLE, "| week | cells replaced |"),
]


@pytest.fixture()
def split_blocks(tmp_path, observed_embedder):
    """Two split blocks in the embedded stores; the keyword store notes every split-parts look-up."""
    settings = Settings(data_dir=tmp_path)
    config = KnowledgeBaseCatalog.for_settings(settings).create("parts")
    group = {"manual": "manual:2", "notes": "notes:1"}
    chunks = [chunk_pb2.KnowledgeChunk(
        chunk_id=hashlib.sha256(text.encode()).hexdigest()[:32], doc_id=doc, kb="parts", namespace="default",
        content=text, raw_content=text, block_type=block_type, group_id=group[doc], part_index=index,
        part_count=sum(d == doc for d, *_ in PARTS), position=index) for doc, index, block_type, text in PARTS]
    embedder = components.embedder_for(config)
    components.keyword_store_for(config, settings).upsert(chunks)
    components.vector_store_for(config, settings).upsert(chunks, embedder.embed_documents([c.content for c in chunks]))
    lookups: list[list[str]] = []

    class LookupsNoted(ObservedKeywordStore):
        def chunks_by_group(self, namespaces, group_ids):
            lookups.append(list(group_ids))
            return self._real.chunks_by_group(namespaces, group_ids)

    registry = components.storage_registry("retriever")
    registry.add("keyword_store", "sqlite-fts5",
                 lambda kb_config, **kwargs: LookupsNoted(components.sqlite_fts5_store(kb_config, **kwargs), []))
    retriever = Retriever(settings, registry)
    yield retriever, config, components.keyword_store_for(config, settings), lookups
    retriever.close()


def test_split_parts_the_routes_found_are_not_looked_up_again(split_blocks):
    retriever, config, keyword, lookups = split_blocks
    result = retriever.retrieve(config, "How long does charging take?", ANYWHERE, top_k=2, with_parts=True)
    assert {c.chunk.group_id for c in result.candidates} == {"manual:2"}
    # every part of the block matched the query: the BM25 route's own hits hold them, nothing is looked up
    assert lookups == []
    assert [p.SerializeToString() for p in result.split_parts] == [
        p.SerializeToString() for p in keyword.chunks_by_group(["default"], ["manual:2"])]


def test_split_parts_no_route_could_return_are_looked_up_for_their_block_only(split_blocks):
    retriever, config, keyword, lookups = split_blocks
    paragraphs = chunk_pb2.SearchFilter(namespaces=["default"], block_types=[chunk_pb2.BLOCK_TYPE_PARAGRAPH])
    result = retriever.retrieve(config, "charging battery", paragraphs, top_k=5, with_parts=True)
    groups = list(dict.fromkeys(c.chunk.group_id for c in result.candidates))
    assert sorted(groups) == ["manual:2", "notes:1"]
    # the table part of "notes:1" is outside the filter, so neither route returned it: only that block is read
    assert lookups == [["notes:1"]]
    assert [p.SerializeToString() for p in result.split_parts] == [
        p.SerializeToString() for p in keyword.chunks_by_group(["default"], groups)]
