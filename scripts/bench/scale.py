"""Scale: knowledge bases of 10k, 100k and 1M chunks on the embedded engines and on the server engines.

    python scripts/bench/scale.py --engines embedded --sizes 10000,100000,1000000
    python scripts/bench/scale.py --engines server --sizes 10000,100000,1000000 --sweep-at 100000

One KB grows through the sizes: the chunks of each step are added to the chunks of the step
before, batch by batch, through the stores' own bulk `upsert` or their bulk-load path (SQLite FTS5 + Milvus Lite, or
Elasticsearch + a Milvus 2.3.5 server started the way the tests start them, scripts/engines.py).
At every size it measures

- ingest chunks/s of the step, per store (the server engines' flush, refresh and index build
  counted in the store's time: chunks are searchable when the step's clock stops);
- query p50/p95 of the BM25 route (`KeywordStore.search`), of the dense route
  (`VectorStore.search`, the query vector given), and of `Retriever.retrieve` end to end
  (query embedding by the KB's model, both routes, fusion), one query at a time;
- recall@10 of the dense route against exact search (numpy over the same vectors); on the server engines
  also as loaded (`recall10_at_load`), before the query nodes search the sealed, indexed segments
  (`vector_handoff_s` after the index is built), and the other metrics after that;
- resident memory of the engine processes (the embedded keyword store: the bytes of its in-memory BM25
  index, which lives in this process; the bytes of the dense route's in-process vector mirror apart), of the
  bench process, and their data on disk, and both per million chunks.

`--vector-mirror-rows 0` makes Milvus Lite answer the embedded dense route itself, as it does above the limit.

The text comes from a seeded generator: words drawn from the word frequencies of the SciFact
corpus (English) and of CMRC 2018 (Chinese, jieba words), whose rank/frequency curves are
Zipfian, plus a Zipfian tail of rare made-up words so the vocabulary keeps growing with the
corpus as a real one does; `--chinese` of the chunks are Chinese. Vectors are synthetic unit
vectors (`--dim`), clustered around topic centres the way document embeddings are, not
uniform noise (on which no ANN index is meaningful); queries are drawn the same way.

`--bulk-above N` writes the steps to sizes above N through the stores' bulk-load path (Elasticsearch
`bulk_loading`, Milvus `bulk_insert`) instead of `upsert`; each result row names its `write_path`.
`--upsert-probe N` writes the last N chunks of every size again, unchanged, through the stores' own `upsert`
after that size's measurements, so both paths' rates are measured at every size of one run. `--search-sweep`
measures the index as built over its search knob (HNSW ef, IVF nprobe) at the last size, without a rebuild.

`--sweep-at N` (server engines) rebuilds the Milvus index at size N over a sweep of HNSW
(M, efConstruction) x ef and IVF_FLAT nlist x nprobe and prints recall@10 against exact search
and the dense p50/p95 of each, to choose the index settings. `--real N` adds a KB of N chunks
embedded by the real model (all-MiniLM-L6-v2) and reports the chosen index's recall on it.

Results are printed as tables with the growth exponent of each metric (the slope of log metric
against log chunks) and appended, one JSON object per measurement, to `--out`.
"""

import _setup  # noqa: F401  (thread environment and sys.path first)

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from contextlib import nullcontext
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from pymilvus import utility

import _common as common
from procmem import status_mb
from services.retriever.retriever import Retriever
from shared import components
from shared.config import Settings
from shared.contracts import chunk_pb2
from shared.kb import KnowledgeBaseCatalog
from shared.text import analyze

DATA = common.DEFAULT_DATA.parent
NAMESPACE = "scale"
SEARCH_FILTER = chunk_pb2.SearchFilter(namespaces=[NAMESPACE])
BLOCK = 1000  # chunks per generator block: block b is the same whatever size is asked for
TOPICS = 2000
TOPIC_NOISE = 1.0  # noise norm relative to a topic centre's: cosine to the centre ≈ 0.7
RARE_WORD_SHARE = 0.03
RARE_WORDS = 2_000_000
ZIPF_EXPONENT = 1.1
DEPTH = 40  # the retriever's default candidate depth
RECALL_TARGET = 0.95
SWEEP_HNSW = ({"M": 16, "efConstruction": 128}, {"M": 32, "efConstruction": 256})
SWEEP_EF = (40, 64, 128, 256)
SWEEP_IVF = ({"nlist": 1024},)
SWEEP_NPROBE = (16, 32, 64, 128)


def word_frequencies(path: Path, field_chars: int, chinese: bool) -> tuple[list[str], np.ndarray]:
    """Words of a BEIR corpus by falling frequency, and their cumulative probabilities."""
    counts: Counter = Counter()
    read = 0
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            record = json.loads(line)
            text = f"{record.get('title', '')} {record.get('text', '')}"
            read += len(text)
            words = analyze(text) if chinese else text.split()
            counts.update(w for w in words if w.strip() and (not chinese or not w.isascii()))
            if read >= field_chars:
                break
    words, frequencies = zip(*counts.most_common())
    cumulative = np.cumsum(np.asarray(frequencies, dtype=float))
    return list(words), cumulative / cumulative[-1]


class SyntheticCorpus:
    """Chunks and vectors from a seed: block b (chunks b*BLOCK ... ) never depends on the sizes built."""

    def __init__(self, seed: int, dim: int, chinese_share: float, kb: str, vocabulary_chars: int = 8_000_000):
        self.seed, self.dim, self.chinese_share, self.kb = seed, dim, chinese_share, kb
        self.english = word_frequencies(DATA / "scifact" / "corpus.jsonl", vocabulary_chars, chinese=False)
        self.chinese = word_frequencies(DATA / "cmrc2018_beir" / "corpus.jsonl", vocabulary_chars // 4, chinese=True)
        centres = np.random.default_rng([seed, 0]).standard_normal((TOPICS, dim)).astype(np.float32)
        self.centres = centres / np.linalg.norm(centres, axis=1, keepdims=True)

    def _vectors(self, rng: np.random.Generator, count: int) -> np.ndarray:
        topics = rng.integers(0, TOPICS, count)
        noise = rng.standard_normal((count, self.dim)).astype(np.float32)
        noise *= TOPIC_NOISE / np.linalg.norm(noise, axis=1, keepdims=True)
        vectors = self.centres[topics] + noise
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)

    def _words(self, rng: np.random.Generator, chinese: bool, count: int) -> list[str]:
        words, cumulative = self.chinese if chinese else self.english
        drawn = [words[i] for i in np.minimum(np.searchsorted(cumulative, rng.random(count)), len(words) - 1)]
        rare = np.flatnonzero(rng.random(count) < RARE_WORD_SHARE)
        ranks = np.minimum(rng.zipf(ZIPF_EXPONENT, len(rare)), RARE_WORDS)
        for position, rank in zip(rare, ranks):
            drawn[position] = rare_word(int(rank), chinese)
        return drawn

    def block(self, index: int) -> tuple[list[chunk_pb2.KnowledgeChunk], np.ndarray]:
        rng = np.random.default_rng([self.seed, 1, index])
        chunks = []
        for offset in range(BLOCK):
            number = index * BLOCK + offset
            chinese = rng.random() < self.chinese_share
            length = int(np.clip(rng.lognormal(np.log(110), 0.4), 20, 400))
            words = self._words(rng, chinese, length)
            text = "".join(words) if chinese else " ".join(words)
            chunks.append(chunk_pb2.KnowledgeChunk(
                chunk_id=chunk_id(number), doc_id=f"d{number // 8:07d}", kb=self.kb, namespace=NAMESPACE,
                content=text, position=number % 8, block_type=chunk_pb2.BLOCK_TYPE_PARAGRAPH))
        return chunks, self._vectors(rng, BLOCK)

    def queries(self, count: int) -> tuple[list[str], np.ndarray]:
        """Query texts of 2-6 words (mostly frequent ones, as people type) and query vectors."""
        rng = np.random.default_rng([self.seed, 2])
        texts = []
        for _ in range(count):
            chinese = rng.random() < self.chinese_share
            words = self._words(rng, chinese, int(rng.integers(2, 7)))
            texts.append("".join(words) if chinese else " ".join(words))
        return texts, self._vectors(rng, count)


def chunk_id(number: int) -> str:
    """The id of the generator's chunk number `number`."""
    return f"c{number:08d}"


def rare_word(rank: int, chinese: bool) -> str:
    """A made-up word for a rank: Latin letters, or CJK characters from a common block."""
    letters = []
    while True:
        rank, digit = divmod(rank, 20 if chinese else 26)
        letters.append(chr((0x4E00 + 37 * digit) if chinese else (ord("a") + digit)))
        if rank == 0:
            break
    return "".join(letters) if chinese else "x" + "".join(letters)


def exponent(sizes: list[int], values: list[float]) -> float:
    """The slope of log(value) against log(size): 1 = linear growth, 0 = flat."""
    points = [(s, v) for s, v in zip(sizes, values) if v and v > 0]
    if len(points) < 2:
        return float("nan")
    x, y = np.log([p[0] for p in points]), np.log([p[1] for p in points])
    return float(np.polyfit(x, y, 1)[0])


def exact_top(vectors: np.ndarray, queries: np.ndarray, chunk_ids: list[str], k: int) -> list[set[str]]:
    """The ids of each query's k nearest vectors by exact search; `chunk_ids[i]` names vector i."""
    scores = queries @ vectors.T
    top = np.argpartition(-scores, k, axis=1)[:, :k]
    return [{chunk_ids[i] for i in row.tolist()} for row in top]


def recall_at(found: list[list[str]], exact: list[set[str]]) -> float:
    return float(np.mean([len(set(ids) & truth) / len(truth) for ids, truth in zip(found, exact)]))


def disk_mb(*paths: Path) -> float:
    total = 0
    for path in paths:
        path = Path(path)
        if path.is_file():
            total += path.stat().st_size
        elif path.is_dir():
            total += sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    return total / 2 ** 20


def process_tree_rss_mb(pid: int) -> float:
    """VmRSS of a process and all its descendants."""
    children = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout.split()
    return status_mb(pid, "VmRSS") + sum(process_tree_rss_mb(int(child)) for child in children)


class Engines:
    """The two stores of one KB, where their data lives and which processes hold them."""

    def __init__(self, kind: str, root: Path, index_yaml: str, es_heap: str = "2g",
                 vector_mirror_rows: int = Settings.vector_mirror_rows):
        self.kind, self.root = kind, root
        self.settings = Settings(data_dir=root / "data", vector_mirror_rows=vector_mirror_rows)
        self.settings.data_dir.mkdir(parents=True, exist_ok=True)
        self._es = self._milvus = None
        if kind == "server":
            sys.path.insert(0, str(common.REPO_ROOT / "scripts"))
            import engines

            print("starting an Elasticsearch node and a Milvus server ...", file=sys.stderr)
            self._es = engines.start_elasticsearch(root / "es", heap=es_heap, optimizing_jit=True)
            self._milvus = engines.start_milvus(root / "milvus")
            (self.settings.data_dir / "profiles.yaml").write_text(
                f"keyword_store: {{default: {{hosts: ['{self._es.url}']}}}}\n"
                f"vector_store: {{default: {{uri: '{self._milvus.uri}'}}}}\n", encoding="utf-8")
            # bulk loading: no refresh per bulk request (one refresh when a size step is done)
            self.kb_yaml = ("keyword_store: {name: elasticsearch, refresh: 'false', request_timeout_s: 120}\n"
                            f"vector_store: {{name: milvus, timeout_s: 120, {index_yaml}}}\n")
        else:
            # a generous deadline per call: a bulk batch on a loaded machine takes longer than a search
            self.kb_yaml = ("keyword_store: {name: sqlite-fts5}\n"
                            f"vector_store: {{name: milvus, timeout_s: 120{', ' + index_yaml if index_yaml else ''}}}\n")
        self.catalog = KnowledgeBaseCatalog.for_settings(self.settings)

    def create_kb(self, name: str):
        self.catalog.create(name, config_yaml=self.kb_yaml)
        kb = self.catalog.get(name)
        return kb, components.keyword_store_for(kb, self.settings), components.vector_store_for(kb, self.settings)

    def make_searchable(self, keyword, vector) -> tuple[float, float]:
        """Seconds until the step's chunks are searchable: ES refresh; Milvus flush and index build."""
        started = time.perf_counter()
        if self.kind == "server":
            keyword._client.indices.refresh(index=keyword.index)
        keyword_s = time.perf_counter() - started
        started = time.perf_counter()
        if self.kind == "server":
            wait_for_index(vector)
        return keyword_s, time.perf_counter() - started

    def rss_mb(self, keyword, vector) -> dict[str, float]:
        if self.kind == "server":
            return {"keyword": process_tree_rss_mb(self._es.pid), "vector": process_tree_rss_mb(self._milvus.pid),
                    "vector_mirror": 0.0,
                    "process": status_mb(os.getpid(), "VmRSS")}
        # SQLite runs inside this process (its page cache is the OS's): its share is the in-memory BM25
        # index the store keeps; Milvus Lite is a child process, and the dense route's in-process vector
        # mirror is counted apart
        children = subprocess.run(["ps", "-o", "pid=,args=", "--ppid", str(os.getpid())], capture_output=True,
                                  text=True).stdout.splitlines()
        lite = [int(line.split()[0]) for line in children if "milvus" in line]
        return {"keyword": getattr(keyword, "index_bytes", lambda: float("nan"))() / 2**20,
                "vector": sum(process_tree_rss_mb(pid) for pid in lite),
                "vector_mirror": vector.mirror_bytes() / 2**20,
                "process": status_mb(os.getpid(), "VmRSS")}

    def disk_mb(self) -> dict[str, float]:
        if self.kind == "server":
            return {"keyword": disk_mb(self.root / "es" / "data"), "vector": disk_mb(self.root / "milvus")}
        data = self.settings.data_dir
        return {"keyword": disk_mb(*data.glob("kbs/*/keyword.sqlite*")),
                "vector": disk_mb(*[p for p in data.glob("milvus.db*")])}

    def stop(self) -> None:
        for engine in (self._milvus, self._es):
            if engine is not None:
                engine.stop()


def upsert_probe(engines: Engines, corpus: SyntheticCorpus, keyword, vector, writers, start: int, end: int) -> dict:
    """Chunks/s of the stores' own `upsert` at this size: chunks start..end written again, unchanged, both stores
    at once, until searchable (the rate a re-ingest sees; beside a bulk-loaded step's rate, the paths compared).

    The vector store's chunks are searchable once a query at the searches' consistency returns them (the wait
    the indexer does, `await_visible`): Milvus searches its growing segments without an index. The wait for the
    server's index to cover every row again is reported apart (`upsert_probe_index_catchup_s`): it also waits
    for whatever compaction the size's load left running."""
    keyword_s = vector_s = 0.0
    started = time.perf_counter()
    ids = []
    for block in range(start // BLOCK, end // BLOCK):
        chunks, vectors = corpus.block(block)
        ids.extend(c.chunk_id for c in chunks)
        keyword_write = writers.submit(timed, keyword.upsert, chunks)
        vector_write = writers.submit(timed, vector.upsert, chunks, vectors)
        keyword_s += keyword_write.result()[0] / 1000
        vector_s += vector_write.result()[0] / 1000
    visible_s = timed(vector.await_visible, ids)[0] / 1000
    searchable_s = time.perf_counter() - started
    refresh_s, index_s = engines.make_searchable(keyword, vector)
    count = end - start
    return {"upsert_probe_chunks": count, "upsert_probe_keyword_chunks_s": count / (keyword_s + refresh_s),
            "upsert_probe_vector_chunks_s": count / (vector_s + visible_s),
            "upsert_probe_vector_write_s": round(vector_s, 2), "upsert_probe_visible_s": round(visible_s, 2),
            "upsert_probe_index_catchup_s": round(index_s, 1),
            "upsert_probe_chunks_s": count / (searchable_s + refresh_s)}


def wait_for_index(vector, timeout_s: float = 7200) -> None:
    """Flush the collection and wait until the server's index covers every row.

    Not until `pending_index_rows` is 0: that also counts the segments compaction is merging in the
    background (their old segments stay indexed and searched meanwhile), and it rarely stays 0."""
    client = vector._client
    client.flush(vector.collection, timeout=600)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        described = client.describe_index(vector.collection, "vector")
        if described.get("state") == "Finished" and described.get("indexed_rows", 0) >= described.get("total_rows", 0):
            return
        time.sleep(1.0)
    raise TimeoutError(f"index of {vector.collection} still building after {timeout_s} s")


def wait_for_handoff(vector, timeout_s: float = 1800) -> None:
    """Wait until the query nodes search every indexed row in a sealed segment through the collection's index.

    Rows written by inserts are searchable at once in growing segments, which Milvus searches through a coarse
    interim index (IVF, 16 of 128 lists probed); after the flush and the index build the query nodes swap in
    the sealed, indexed segments some seconds later. Until then recall is the interim index's: measured
    right after a 10k-chunk load, recall@10 0.59, then 0.92 once the sealed segments serve."""
    client = vector._client
    indexed = client.describe_index(vector.collection, "vector").get("indexed_rows", 0)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        segments = utility.get_query_segment_info(vector.collection, using=client._using)
        if sum(s.num_rows for s in segments if s.index_name) >= indexed:
            return
        time.sleep(1.0)
    raise TimeoutError(f"sealed segments of {vector.collection} still not served after {timeout_s} s")


def rebuild_index(vector, index_type: str, params: dict) -> float:
    """Replace the collection's vector index; seconds until it covers every row and is loaded."""
    client = vector._client
    started = time.perf_counter()
    client.release_collection(vector.collection, timeout=600)
    client.drop_index(vector.collection, "vector", timeout=600)
    index = client.prepare_index_params()
    index.add_index(field_name="vector", index_type=index_type, metric_type=vector.metric, params=params)
    client.create_index(vector.collection, index, timeout=600)
    wait_for_index(vector)
    client.load_collection(vector.collection, timeout=3600)
    return time.perf_counter() - started


def timed(function, *args) -> tuple[float, object]:
    started = time.perf_counter()
    result = function(*args)
    return (time.perf_counter() - started) * 1000, result


def dense_latency_and_recall(vector, queries: np.ndarray, exact: list[set[str]], search_filter, warmup: int):
    for query in queries[:warmup]:
        vector.search(query, search_filter, 10)
    latencies, found = [], []
    for query in queries:
        ms, hits = timed(vector.search, query, search_filter, 10)
        latencies.append(ms)
        found.append([c.chunk.chunk_id for c in hits])
    return common.p50_p95(latencies), recall_at(found, exact)


def measure_queries(engines: Engines, kb, keyword, vector, retriever, texts, query_vectors, exact, warmup):
    for text, query in zip(texts[:warmup], query_vectors[:warmup]):
        keyword.search(text, SEARCH_FILTER, DEPTH)
        vector.search(query, SEARCH_FILTER, DEPTH)
        retriever.retrieve(kb, text, SEARCH_FILTER)
    bm25, dense, end_to_end, found = [], [], [], []
    for text, query in zip(texts, query_vectors):
        bm25.append(timed(keyword.search, text, SEARCH_FILTER, DEPTH)[0])
        ms, hits = timed(vector.search, query, SEARCH_FILTER, DEPTH)
        dense.append(ms)
        found.append([c.chunk.chunk_id for c in hits[:10]])
        end_to_end.append(timed(retriever.retrieve, kb, text, SEARCH_FILTER)[0])
    return {"bm25": common.p50_p95(bm25), "dense": common.p50_p95(dense), "retrieve": common.p50_p95(end_to_end),
            "recall10": recall_at(found, exact)}


def sweep_plans() -> list[tuple[str, dict, str, tuple]]:
    """(index type, build parameters, search knob, its values) of the index sweep."""
    return ([("HNSW", params, "ef", SWEEP_EF) for params in SWEEP_HNSW]
            + [("IVF_FLAT", params, "nprobe", SWEEP_NPROBE) for params in SWEEP_IVF])


SEARCH_KNOBS = {"HNSW": ("ef", SWEEP_EF), "IVF_FLAT": ("nprobe", SWEEP_NPROBE)}


def search_sweep(engines: Engines, kb, queries: np.ndarray, exact, warmup: int, record) -> None:
    """Recall@10 and dense latency of the KB's index as built, over its search knob (no rebuild: cheap at 1M)."""
    settings = kb.vector_store
    if settings.index_type not in SEARCH_KNOBS:
        print(f"  {settings.index_type} has no search knob to sweep", flush=True)
        return
    knob, values = SEARCH_KNOBS[settings.index_type]
    for value in values:
        searcher = store_with(engines, kb, settings.index_type, settings.index_params, {knob: value})
        (p50, p95), recall = dense_latency_and_recall(searcher, queries, exact, SEARCH_FILTER, warmup)
        record({"kind": "search_sweep", "engines": engines.kind, "chunks": searcher.count(),
                "index_type": settings.index_type, "index_params": settings.index_params,
                "search_params": {knob: value}, "queries": len(queries), "recall10": round(recall, 4),
                "dense_p50_ms": round(p50, 2), "dense_p95_ms": round(p95, 2)})
        print(f"  {settings.index_type} {settings.index_params} {knob}={value}: recall@10 {recall:.3f} "
              f"({len(queries)} queries), dense p50 {p50:.1f} / p95 {p95:.1f} ms", flush=True)


def store_with(engines: Engines, kb, index_type: str, index_params: dict, search_params: dict):
    """The KB's vector store as an operator would configure it with these index settings."""
    settings = kb.vector_store.model_copy(update={"index_type": index_type, "index_params": index_params,
                                                  "search_params": search_params})
    return components.vector_store_for(kb.model_copy(update={"vector_store": settings}), engines.settings)


def sweep(engines: Engines, kb, vector, queries: np.ndarray, exact, warmup: int, record) -> None:
    """Recall@10 and dense latency over index build and search parameters, on the collection as it is."""
    rows = []
    for index_type, params, knob, values in sweep_plans():
        build_s = rebuild_index(vector, index_type, params)
        for value in values:
            searcher = store_with(engines, kb, index_type, params, {knob: value})
            (p50, p95), recall = dense_latency_and_recall(searcher, queries, exact, SEARCH_FILTER, warmup)
            record({"kind": "sweep", "engines": engines.kind, "chunks": vector.count(),
                    "index_type": index_type, "index_params": params, "search_params": {knob: value},
                    "build_s": round(build_s, 1), "recall10": round(recall, 4), "dense_p50_ms": round(p50, 2),
                    "dense_p95_ms": round(p95, 2)})
            rows.append({"index_type": index_type, "index_params": params,
                                       "search_params": {knob: value}, "recall10": recall, "dense_p95_ms": p95})
            print(f"  {index_type} {params} {knob}={value}: build {build_s:.0f} s, recall@10 {recall:.3f}, "
                  f"dense p50 {p50:.1f} / p95 {p95:.1f} ms", flush=True)
    return rows


def choose(rows: list[dict]) -> dict:
    """The fastest (dense p95) settings with recall@10 >= RECALL_TARGET whose search width covers the
    route's depth (Milvus refuses an HNSW ef below the limit); the most accurate when none reaches it."""
    usable = [r for r in rows if r["search_params"].get("ef", DEPTH) >= DEPTH]
    good = [r for r in usable if r["recall10"] >= RECALL_TARGET]
    best = min(good, key=lambda r: r["dense_p95_ms"]) if good else max(usable, key=lambda r: r["recall10"])
    return {key: best[key] for key in ("index_type", "index_params", "search_params")}


def print_growth(rows: list[dict]) -> None:
    sizes = [r["chunks"] for r in rows]
    metrics = [("ingest chunks/s (both)", "ingest_chunks_s"), ("ingest keyword chunks/s", "keyword_chunks_s"), ("ingest vector chunks/s", "vector_chunks_s"),
               ("BM25 p50 ms", "bm25_p50_ms"), ("BM25 p95 ms", "bm25_p95_ms"),
               ("dense p50 ms", "dense_p50_ms"), ("dense p95 ms", "dense_p95_ms"),
               ("retrieve p50 ms", "retrieve_p50_ms"), ("retrieve p95 ms", "retrieve_p95_ms"),
               ("dense recall@10", "recall10"),
               ("keyword RSS MB", "keyword_rss_mb"), ("vector RSS MB", "vector_rss_mb"),
               ("vector mirror MB", "vector_mirror_mb"), ("bench process RSS MB", "process_rss_mb"),
               ("keyword disk MB", "keyword_disk_mb"), ("vector disk MB", "vector_disk_mb")]
    header = f"{'metric':<26}" + "".join(f"{s:>12,}" for s in sizes) + f"{'exponent':>10}"
    print(header)
    print("-" * len(header))
    for name, key in metrics:
        values = [r[key] for r in rows]
        print(f"{name:<26}" + "".join(f"{v:>12.4g}" for v in values) + f"{exponent(sizes, values):>10.2f}")
    if len(rows) > 1:
        # marginal cost: what the last size added over the first, per million chunks (fixed overheads cancel)
        first, last = rows[0], rows[-1]
        per_million = 1e6 / (last["chunks"] - first["chunks"])
        print(f"per million chunks ({first['chunks']:,} -> {last['chunks']:,}): " + ", ".join(
            f"{name} {(last[key] - first[key]) * per_million:.0f} MB" for name, key in (
                ("keyword RSS", "keyword_rss_mb"), ("vector RSS", "vector_rss_mb"),
                ("vector mirror", "vector_mirror_mb"), ("keyword disk", "keyword_disk_mb"), ("vector disk", "vector_disk_mb"))))
        for key in ("dense_p95_ms", "retrieve_p95_ms", "bm25_p95_ms"):
            print(f"{key} at {sizes[-1]:,} / at {sizes[0]:,}: {rows[-1][key] / rows[0][key]:.2f}")


def real_model_recall(engines: Engines, queries: int, warmup: int, record) -> None:
    """SciFact (5,183 abstracts, its test queries) embedded by the KB's real model (all-MiniLM-L6-v2; vectors
    cached as `ragkb eval` caches them): recall@10 of the index settings against exact search on real vectors."""
    from ragkb.eval import NAMESPACE as EVAL_NAMESPACE
    from ragkb.eval import VectorCache, document_chunks, embed_with_cache, load_beir

    data = load_beir(DATA / "scifact", "test")
    kb, keyword, vector = engines.create_kb("scale_real")
    embedder = components.embedder_for(kb)
    chunks = document_chunks(kb.name, data.corpus)
    cache = VectorCache(Path.home() / ".cache" / "ragkb" / "eval-vectors.sqlite")
    try:
        vectors = embed_with_cache(embedder, [c.content for c in chunks], cache)
    finally:
        cache.close()
    for start in range(0, len(chunks), 2000):
        vector.upsert(chunks[start:start + 2000], vectors[start:start + 2000])
    engines.make_searchable(keyword, vector)
    texts = list(data.queries.values())[:queries]
    query_vectors = np.stack([embedder.embed_query(t) for t in texts]).astype(np.float32)
    exact = exact_top(vectors, query_vectors, [c.chunk_id for c in chunks], 10)
    search_filter = chunk_pb2.SearchFilter(namespaces=[EVAL_NAMESPACE])
    print(f"real model, SciFact {len(chunks):,} abstracts, {len(texts)} queries:", flush=True)
    # Milvus Lite refuses HNSW (local mode offers FLAT, IVF_FLAT, AUTOINDEX): its default is what is measured there
    plans = [("AUTOINDEX", {}, "", (None,))] + (sweep_plans() if engines.kind == "server" else [])
    for index_type, params, knob, values in plans:
        build_s = rebuild_index(vector, index_type, params) if engines.kind == "server" else 0.0
        for value in values:
            searcher = store_with(engines, kb, index_type, params, {knob: value} if knob else {})
            (p50, p95), recall = dense_latency_and_recall(searcher, query_vectors, exact, search_filter, warmup)
            record({"kind": "real", "engines": engines.kind, "chunks": len(chunks), "index_type": index_type,
                    "index_params": params, "search_params": {knob: value} if knob else {},
                    "build_s": round(build_s, 1), "recall10": round(recall, 4), "dense_p50_ms": round(p50, 2),
                    "dense_p95_ms": round(p95, 2)})
            print(f"  {index_type} {params} {knob}={value}: recall@10 {recall:.3f}, dense p50 {p50:.1f} / "
                  f"p95 {p95:.1f} ms", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engines", choices=("embedded", "server"), default="embedded")
    parser.add_argument("--sizes", default="10000,100000", help="comma-separated chunk counts, growing")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--batch", type=int, default=2000, help="chunks per write call")
    parser.add_argument("--bulk-above", type=int, default=sys.maxsize, metavar="N",
                        help="steps to sizes above N write through the stores' bulk-load path (Elasticsearch "
                             "`bulk_loading`, Milvus `bulk_insert`) instead of `upsert`")
    parser.add_argument("--upsert-probe", type=int, default=0, metavar="N",
                        help="after each size's measurements, write its last N chunks again (same content) through "
                             "the stores' own `upsert` and report that rate beside the step's")
    parser.add_argument("--es-heap", default="2g", help="Elasticsearch heap (server engines)")
    parser.add_argument("--vector-mirror-rows", type=int, default=Settings.vector_mirror_rows,
                        help="embedded engines: the dense route's in-process mirror row limit (0: Milvus Lite searches)")
    parser.add_argument("--search-sweep", action="store_true",
                        help="at the last size, recall and dense latency of the index as built over the search "
                             "knob's values (HNSW ef, IVF nprobe), without rebuilding it")
    parser.add_argument("--dim", type=int, default=384, help="vector dimension (the KB's model's: MiniLM 384)")
    parser.add_argument("--chinese", type=float, default=0.1, help="share of Chinese chunks and queries")
    parser.add_argument("--seed", type=int, default=20)
    parser.add_argument("--vocabulary-chars", type=int, default=8_000_000,
                        help="characters of SciFact read for the English word frequencies (a quarter of that of CMRC)")
    parser.add_argument("--index", default="", help="vector_store index settings as YAML flow items, e.g. "
                        "\"index_type: HNSW, index_params: {M: 16, efConstruction: 128}, search_params: {ef: 64}\"")
    parser.add_argument("--sweep-at", type=int, default=0, help="run the index sweep at this size (server)")
    parser.add_argument("--real", action="store_true", help="also measure the index settings' recall on SciFact "
                        "embedded by the real model (server: over the sweep)")
    parser.add_argument("--out", type=Path, help="append every measurement as a JSON line")
    parser.add_argument("--root", type=Path, help="keep the engines' data here (default: a temporary folder)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    if sizes != sorted(sizes) or any(s % BLOCK for s in sizes + [args.upsert_probe]) or args.batch % BLOCK:
        sys.exit(f"--sizes must grow and, like --batch and --upsert-probe, be multiples of {BLOCK}")
    if sizes and args.upsert_probe > sizes[0]:
        sys.exit("--upsert-probe must not exceed the first size")

    def record(row: dict) -> None:
        row = {**row, "load_avg": [round(x, 2) for x in os.getloadavg()], "time": time.strftime("%H:%M:%S")}
        if args.out:
            with open(args.out, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(row) + "\n")

    with tempfile.TemporaryDirectory(prefix="ragkb-scale-", dir=args.root) as root:
        engines = Engines(args.engines, Path(root), args.index, args.es_heap, args.vector_mirror_rows)
        retriever = Retriever(engines.settings)
        writers = ThreadPoolExecutor(2, thread_name_prefix="write")
        try:
            corpus = SyntheticCorpus(args.seed, args.dim, args.chinese, "scale", args.vocabulary_chars)
            kb, keyword, vector = engines.create_kb("scale")
            components.embedder_for(kb).embed_query("warm up")
            texts, query_vectors = corpus.queries(args.queries)
            all_vectors = np.empty((sizes[-1] if sizes else 0, args.dim), dtype=np.float32)
            print(common.machine_line(), flush=True)
            print(f"{args.engines} engines, {kb.keyword_store.name} + milvus ({vector.uri}), vector index "
                  f"{kb.vector_store.index_type} {kb.vector_store.index_params} {kb.vector_store.search_params}",
                  flush=True)
            rows, built = [], 0
            step_started = time.perf_counter()
            for size in sizes:
                bulk = size > args.bulk_above
                keyword_s = vector_s = 0.0
                loading = keyword.bulk_loading() if bulk and hasattr(keyword, "bulk_loading") else nullcontext()
                write_vectors = vector.bulk_insert if bulk else vector.upsert
                loading_s, _ = timed(loading.__enter__)
                keyword_s += loading_s / 1000
                pending = None  # the batch being written while the next one is generated
                for start in range(built, size, args.batch):
                    chunks, vectors = [], []
                    for block in range(start // BLOCK, min(size, start + args.batch) // BLOCK):
                        block_chunks, block_vectors = corpus.block(block)
                        chunks.extend(block_chunks)
                        vectors.append(block_vectors)
                    vectors = np.concatenate(vectors)
                    all_vectors[start:start + len(chunks)] = vectors
                    if pending:
                        keyword_s += pending[0].result()[0] / 1000
                        vector_s += pending[1].result()[0] / 1000
                    # both stores at once, as the indexer writes them: each store's clock runs while it works
                    pending = (writers.submit(timed, keyword.upsert, chunks),
                               writers.submit(timed, write_vectors, chunks, vectors))
                    if (start // args.batch) % 25 == 0:
                        print(f"  {start + len(chunks):,} chunks written", file=sys.stderr, flush=True)
                if pending:
                    keyword_s += pending[0].result()[0] / 1000
                    vector_s += pending[1].result()[0] / 1000
                # leaving the bulk load refreshes the index: counted in the keyword store's time
                keyword_s += timed(loading.__exit__, None, None, None)[0] / 1000
                refresh_s, index_s = engines.make_searchable(keyword, vector)
                step_s = time.perf_counter() - step_started
                step = size - built
                built = size
                exact = exact_top(all_vectors[:size], query_vectors, [chunk_id(i) for i in range(size)], 10)
                vector.await_mirror()  # embedded: built once (the first size), then kept in step by the writes
                handoff = {}
                if engines.kind == "server":  # recall as loaded, then measured on the sealed, indexed segments
                    at_load = dense_latency_and_recall(vector, query_vectors, exact, SEARCH_FILTER, 0)[1]
                    handoff = {"recall10_at_load": at_load,
                               "vector_handoff_s": round(timed(wait_for_handoff, vector)[0] / 1000, 1)}
                queries = measure_queries(engines, kb, keyword, vector, retriever, texts, query_vectors, exact,
                                          args.warmup)
                rss, disk = engines.rss_mb(keyword, vector), engines.disk_mb()
                probe = (upsert_probe(engines, corpus, keyword, vector, writers, size - args.upsert_probe, size)
                         if args.upsert_probe else {})
                row = {"kind": "size", "engines": args.engines, "chunks": size, "write_path": "bulk" if bulk else "upsert",
                       "ingest_chunks_s": step / step_s,
                       "keyword_chunks_s": step / (keyword_s + refresh_s), "vector_chunks_s": step / (vector_s + index_s),
                       "vector_index_wait_s": round(index_s, 1),
                       "bm25_p50_ms": queries["bm25"][0], "bm25_p95_ms": queries["bm25"][1],
                       "dense_p50_ms": queries["dense"][0], "dense_p95_ms": queries["dense"][1],
                       "retrieve_p50_ms": queries["retrieve"][0], "retrieve_p95_ms": queries["retrieve"][1],
                       "recall10": queries["recall10"], **handoff,
                       "keyword_rss_mb": rss["keyword"], "vector_rss_mb": rss["vector"],
                       "vector_mirror_mb": rss["vector_mirror"], "process_rss_mb": rss["process"],
                       "keyword_disk_mb": disk["keyword"], "vector_disk_mb": disk["vector"], **probe}
                record(row)
                rows.append(row)
                print(f"{size:,} chunks: " + ", ".join(f"{k} {v:.4g}" for k, v in row.items()
                                                       if isinstance(v, float)), flush=True)
                if size == args.sweep_at and args.engines == "server":
                    print(f"index sweep at {size:,} chunks:", flush=True)
                    chosen = choose(sweep(engines, kb, vector, query_vectors, exact, args.warmup, record))
                    print(f"chosen for the next sizes: {chosen}", flush=True)
                    record({"kind": "chosen", "engines": args.engines, "chunks": size, **chosen})
                    rebuild_index(vector, chosen["index_type"], chosen["index_params"])
                    kb = kb.model_copy(update={"vector_store": kb.vector_store.model_copy(update=chosen)})
                    vector = components.vector_store_for(kb, engines.settings)
                step_started = time.perf_counter()
            if args.search_sweep and rows:
                print(f"search sweep at {sizes[-1]:,} chunks:", flush=True)
                search_sweep(engines, kb, query_vectors, exact, args.warmup, record)
            if rows:
                print(f"\n{args.engines} engines, {args.queries} queries, depth {DEPTH}; " + common.machine_line())
                print_growth(rows)
            if args.real:
                real_model_recall(engines, args.queries, args.warmup, record)
        finally:
            writers.shutdown()
            retriever.close()
            components_close()
            engines.stop()


def components_close() -> None:
    from shared.stores.milvus import close_clients

    close_clients()


if __name__ == "__main__":
    main()
