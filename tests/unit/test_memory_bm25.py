"""The embedded store's in-memory BM25 index against a hand-computed BM25 and against SQLite FTS5's own bm25().

Every store here is a real SQLite file; the FTS5-only twin (`memory_index=False`) is the reference
for rankings, and a tiny corpus is scored by hand with the formula of fts5_aux.c.
"""

from __future__ import annotations

import math
import random
import threading

import numpy as np
import pytest

from shared.contracts import chunk_pb2
from shared.stores.memory_bm25 import Fts5Tokenizer, IndexedRow, MemoryBm25Index, RowFilter
from shared.stores.sqlite_fts import SqliteFtsKeywordStore

pytestmark = pytest.mark.unit


def chunk(chunk_id, text, namespace="a", doc_id="d1", **fields) -> chunk_pb2.KnowledgeChunk:
    return chunk_pb2.KnowledgeChunk(chunk_id=chunk_id, doc_id=doc_id, kb="kb", namespace=namespace, content=text,
                                    **fields)


def only(*namespaces, **fields):
    return chunk_pb2.SearchFilter(namespaces=list(namespaces), **fields)


@pytest.fixture
def twins(tmp_path):
    """(in-memory index store, FTS5-only store) fed the same writes."""
    memory = SqliteFtsKeywordStore(tmp_path / "memory.sqlite")
    fts = SqliteFtsKeywordStore(tmp_path / "fts.sqlite", memory_index=False)
    yield memory, fts
    memory.close()
    fts.close()


def ranking(store, query, search_filter, limit=10):
    return [(c.chunk.chunk_id, c.score) for c in store.search(query, search_filter, limit)]


def assert_same_ranking(memory, fts, query, search_filter, limit=10):
    got, want = ranking(memory, query, search_filter, limit), ranking(fts, query, search_filter, limit)
    assert len(got) == len(want), query
    np.testing.assert_allclose([s for _, s in got], [s for _, s in want], rtol=1e-9, atol=1e-12)
    # equal scores may come in either order: compare the ids score by score
    assert _by_score(got) == _by_score(want), query


def _by_score(hits):
    groups: dict[float, set[str]] = {}
    for chunk_id, score in hits:
        groups.setdefault(round(score, 9), set()).add(chunk_id)
    return groups


def reference_bm25(documents: dict[str, list[str]], query: list[str]) -> dict[str, float]:
    """FTS5's bm25 (k1 1.2, b 0.75, idf floor 1e-6) over already-stemmed token lists."""
    rows = len(documents)
    average = sum(len(tokens) for tokens in documents.values()) / rows
    scores = {}
    for name, tokens in documents.items():
        score = 0.0
        for term in query:
            hits = sum(term in other for other in documents.values())
            if term not in tokens:
                continue
            idf = max(math.log((rows - hits + 0.5) / (hits + 0.5)), 0) or 1e-6
            frequency = tokens.count(term)
            score += idf * frequency * 2.2 / (frequency + 1.2 * (0.25 + 0.75 * len(tokens) / average))
        if score:
            scores[name] = score
    return scores


def test_scores_equal_bm25_computed_by_hand(twins):
    memory, fts = twins
    texts = {"c1": "battery dock", "c2": "battery battery charging", "c3": "maps of the site floor",
             "c4": "docking station map", "c5": "unrelated words only here", "c6": "more unrelated words"}
    memory.upsert([chunk(i, t) for i, t in texts.items()])
    fts.upsert([chunk(i, t) for i, t in texts.items()])
    # porter stems: charging -> charg, docking -> dock, maps -> map; "the"/"of" are query stopwords only
    stemmed = {"c1": ["batteri", "dock"], "c2": ["batteri", "batteri", "charg"],
               "c3": ["map", "of", "the", "site", "floor"], "c4": ["dock", "station", "map"],
               "c5": ["unrel", "word", "onli", "here"], "c6": ["more", "unrel", "word"]}
    for query, terms in [("battery docking", ["batteri", "dock"]), ("maps", ["map"]),
                         ("charging batteries dock", ["charg", "batteri", "dock"])]:
        want = reference_bm25(stemmed, terms)
        got = dict(ranking(memory, query, only("a")))
        assert got.keys() == want.keys()
        for name, score in want.items():
            assert got[name] == pytest.approx(score, rel=1e-12)
        assert_same_ranking(memory, fts, query, only("a"))


def test_updates_and_deletes_change_the_statistics_like_fts5(twins):
    memory, fts = twins
    for store in twins:
        store.upsert([chunk(f"c{i}", f"battery {'dock ' * i}note {i}", doc_id=f"d{i % 3}") for i in range(12)])
        store.upsert([chunk("c3", "completely new wording about maps"), chunk("c4", "battery battery maps")])
        store.delete_ids(["c5", "c7", "missing"])
        store.delete_document("a", "d2")
    assert memory.count() == fts.count()
    for query in ["battery", "dock maps", "wording", "note 7"]:
        assert_same_ranking(memory, fts, query, only("a"))
    assert ranking(memory, "note 5", only("a")) == ranking(fts, "note 5", only("a"))


def test_filters_match_fts5_and_never_leak_another_namespace(twins):
    memory, fts = twins
    rows = [chunk("a-public", "alpha beta", namespace="a", doc_id="d1"),
            chunk("a-hr", "alpha alpha", namespace="a", doc_id="d2", metadata={"acl": "hr", "lang": "en"}),
            chunk("a-table", "alpha table", namespace="a", doc_id="d3", block_type=chunk_pb2.BLOCK_TYPE_TABLE,
                  metadata={"lang": "zh"}),
            chunk("b-best", "alpha alpha alpha", namespace="b", doc_id="d1"),
            chunk("b-hr", "alpha alpha alpha alpha", namespace="b", doc_id="d2", metadata={"acl": "hr"})]
    for store in twins:
        store.upsert(rows)
    filters = [only("a"), only("b"), only("a", "b"), only("c"), only("a", doc_ids=["d1", "d3"]),
               only("a", block_types=[chunk_pb2.BLOCK_TYPE_TABLE]), only("a", metadata={"lang": "en"}),
               only("a", acl_enforced=True), only("a", acl_enforced=True, acl_groups=["hr"]),
               only("b", acl_enforced=True, acl_groups=["finance"]), only("a", doc_ids=["d1"], acl_enforced=True)]
    for search_filter in filters:
        for limit in (1, 2, 10):
            assert_same_ranking(memory, fts, "alpha", search_filter, limit)
            found = memory.search("alpha", search_filter, limit)
            assert all(c.chunk.namespace in search_filter.namespaces for c in found)
    assert [c.chunk.chunk_id for c in memory.search("alpha", only("a", acl_enforced=True), 1)] == ["a-public"]


def test_hits_are_read_by_rowid_whatever_the_filter(tmp_path):
    """The candidates' rows are fetched by rowid with the filter tested on each, never by walking a
    namespace's whole index (what SQLite's planner picks for `rowid IN (...) AND namespace IN (...)`)."""
    store = SqliteFtsKeywordStore(tmp_path / "kb.sqlite")
    try:
        store.upsert([chunk(f"c{i}", f"alpha {i}", doc_id=f"d{i % 3}", metadata={"lang": "en"},
                            block_type=chunk_pb2.BLOCK_TYPE_PARAGRAPH) for i in range(50)])
        statements: list[str] = []
        store._db.set_trace_callback(statements.append)
        filters = [only("a"), only("a", "b", doc_ids=["d1"]), only("a", block_types=[chunk_pb2.BLOCK_TYPE_PARAGRAPH]),
                   only("a", metadata={"lang": "en"}), only("a", acl_enforced=True, acl_groups=["hr"])]
        for search_filter in filters:
            assert store.search("alpha", search_filter, 10)
        store._db.set_trace_callback(None)
        reads = [s for s in statements if s.startswith("SELECT c.rowid, c.payload")]
        assert len(reads) == len(filters)
        for statement in reads:
            plan = " ".join(row[3] for row in store._db.execute("EXPLAIN QUERY PLAN " + statement))
            assert "USING INTEGER PRIMARY KEY" in plan and "INDEX chunks_by" not in plan, plan
    finally:
        store.close()


@pytest.mark.parametrize("analyzer", ["jieba", "char"])
def test_chinese_words_and_characters(tmp_path, analyzer):
    memory = SqliteFtsKeywordStore(tmp_path / "memory.sqlite", analyzer=analyzer)
    fts = SqliteFtsKeywordStore(tmp_path / "fts.sqlite", analyzer=analyzer, memory_index=False)
    texts = ["AMR-7 的最大载重为300公斤。", "充电桩在仓库北侧，充电需要45分钟。", "最大速度为每秒1.5米。",
             "电池 battery 充电 charging", "地图由管理员更新。"]
    for store in (memory, fts):
        store.upsert([chunk(f"z{i}", text) for i, text in enumerate(texts)])
    for query in ["最大载重是多少", "充电需要多久", "电池充电 charging", "管理员", "速度"]:
        assert ranking(memory, query, only("a"))
        assert_same_ranking(memory, fts, query, only("a"))
    memory.close()
    fts.close()


def test_phrase_words_fall_back_to_fts5(twins):
    """Words FTS5 splits into several tokens ("don't", "1.5") are phrases there: answered by FTS5 itself."""
    memory, fts = twins
    for store in twins:
        store.upsert([chunk("c1", "don't charge at 1.5 amps"), chunk("c2", "don t charge"), chunk("c3", "t don")])
    for query in ["don't charge", "1.5", "don"]:
        assert_same_ranking(memory, fts, query, only("a"))


def test_index_is_rebuilt_on_reopening_and_after_another_connection_writes(tmp_path):
    path = tmp_path / "kw.sqlite"
    store = SqliteFtsKeywordStore(path)
    store.upsert([chunk("c1", "persistent battery facts"), chunk("c2", "battery")])
    store.close()
    reopened = SqliteFtsKeywordStore(path)
    other = SqliteFtsKeywordStore(path)  # e.g. an ingest worker's process on the same file
    assert [c.chunk.chunk_id for c in reopened.search("persistent", only("a"), 5)] == ["c1"]
    other.upsert([chunk("c3", "persistent persistent notes")])
    other.delete_ids(["c1"])
    assert [c.chunk.chunk_id for c in reopened.search("persistent", only("a"), 5)] == ["c3"]
    reopened.upsert([chunk("c4", "persistent")])  # its own write after the other's: nothing lost
    assert {c.chunk.chunk_id for c in reopened.search("persistent", only("a"), 5)} == {"c3", "c4"}
    reference = SqliteFtsKeywordStore(path, memory_index=False)
    assert_same_ranking(reopened, reference, "persistent battery", only("a"))
    for opened in (reopened, other, reference):
        opened.close()


def test_random_writes_keep_the_index_equal_to_fts5(twins):
    memory, fts = twins
    rng = random.Random(20)
    words = [f"w{i}" for i in range(60)] + ["battery", "charging", "dock", "maps", "载重", "充电"]
    namespaces = ["a", "b"]
    for step in range(30):
        batch = [chunk(f"c{rng.randrange(80)}", " ".join(rng.choices(words, k=rng.randint(1, 25))),
                       namespace=rng.choice(namespaces), doc_id=f"d{rng.randrange(6)}") for _ in range(8)]
        batch = list({c.chunk_id: c for c in batch}.values())
        gone = [f"c{rng.randrange(80)}" for _ in range(3)]
        for store in twins:
            store.upsert(batch)
            store.delete_ids(gone)
        if step % 5 == 4:
            for query in ["battery charging", "w1 w2 w3", "dock 载重", "w0 w0 maps"]:
                for search_filter in (only("a"), only("a", "b"), only("b", doc_ids=["d1", "d2"])):
                    assert_same_ranking(memory, fts, query, search_filter, limit=20)


def test_compaction_keeps_scores_and_drops_dead_postings():
    index = MemoryBm25Index(Fts5Tokenizer(), compact_after=4)
    rows = [IndexedRow(i + 1, f"alpha beta {'gamma ' * i}", "a", f"d{i}", 0) for i in range(10)]
    index.add(index.prepare(rows))
    everything = RowFilter(namespaces=["a"])
    before = index.nbytes()
    index.remove(range(2, 10))  # more dead postings than live ones: compacted
    rowids, scores = index.scores(["alpha", "gamma"], everything)
    fresh = MemoryBm25Index(Fts5Tokenizer())
    fresh.add(fresh.prepare([r for r in rows if r.rowid not in range(2, 10)]))
    fresh_rowids, fresh_scores = fresh.scores(["alpha", "gamma"], everything)
    assert rowids.tolist() == fresh_rowids.tolist() == [1, 10]
    assert scores.tolist() == pytest.approx(fresh_scores.tolist(), rel=1e-12)
    assert index.nbytes() < before and len(index) == 2
    index.add(index.prepare([IndexedRow(3, "gamma gamma", "a", "d3", 0)]))  # a rowid SQLite reused
    assert 3 in index.scores(["gamma"], everything)[0].tolist()


def test_a_query_sees_a_write_whole_or_not_at_all(tmp_path):
    """Each write replaces all 30 chunks' text at once; concurrent queries must see 0 or 30 hits, never a part."""
    store = SqliteFtsKeywordStore(tmp_path / "kw.sqlite")
    store.upsert([chunk(f"c{i}", "alpha text") for i in range(30)])
    seen, problems, stop = [], [], threading.Event()

    def query():
        while not stop.is_set():
            hits = store.search("alpha beta", only("a"), 100)
            counts = {c.chunk.content for c in hits}
            seen.append(len(hits))
            if len(hits) != 30 or len(counts) != 1:
                problems.append((len(hits), counts))

    readers = [threading.Thread(target=query) for _ in range(3)]
    for reader in readers:
        reader.start()
    for round_ in range(40):
        word = "alpha" if round_ % 2 else "beta"
        store.upsert([chunk(f"c{i}", f"{word} text round {round_}") for i in range(30)])
    stop.set()
    for reader in readers:
        reader.join()
    store.close()
    assert seen and not problems


def test_tokenizer_remembers_a_bounded_number_of_words():
    tokenizer = Fts5Tokenizer(remembered=3)
    index = MemoryBm25Index(tokenizer)
    for word in ["charging", "maps", "docks", "batteries", "充电"]:
        assert len(index.query_tokens([word])) == 1
    assert index.query_tokens(["charging", "don't"]) is None
    assert index.query_tokens(["charging", "maps"]) == ["charg", "map"]
    assert tokenizer.tokens(["don't", "3.5", "Café", "charging"]) == {
        "don't": ("don", "t"), "3.5": ("3", "5"), "Café": ("cafe",), "charging": ("charg",)}
    assert len(tokenizer._known) == 3
