"""In-process hybrid retrieval against the bare floor built from the same vectors, in one process.

    python scripts/bench/retrieval_floor.py [--docs N] [--queries N] [--depth 100]

SciFact (BEIR layout, ../shared/data/scifact) goes into the KB's embedded engines (SQLite
FTS5 and Milvus Lite) the way `ragkb eval` puts it there: one chunk per document
(`ragkb.eval.document_chunks`), embedded by the KB's embedder (vectors cached on disk as
`ragkb eval` caches them), written with the stores' own `upsert` in batches of 500. (Through
`Indexer.index_document`, one document per call with the registry's bookkeeping and a sweep of
both stores each, it took 1.4 s a document on a loaded 2-core machine: two hours for the full
corpus; the chunks and the vectors stored are the same.) Then every test query runs, one at a
time, through

- the floor: bm25s over the same chunk texts (Porter-stemmed, English stopwords), a numpy
  dot product over the vectors read back from Milvus Lite, one bare `model.encode` of the
  query, RRF (k=60, equal weights). The encode runs on the process's model thread, where
  ragkb's own passes run: from a second thread torch would start a second OpenMP team and
  slow both (shared/model_thread.py);
- ragkb: `Retriever.retrieve` with the KB's default settings, both routes `--depth` deep.

After the warm-up queries the process settles its heap as the retriever service does
(`shared.server.settle_heap`). The two alternate query by query, so load from other jobs
falls on both alike. Printed: p50/p95 of each, the ratio, nDCG@10 of both, and where
ragkb's time goes (query embedding, BM25 route, dense route's search, competence signals,
fusion, and the rest: thread hand-off, opening the stores, building the result).
"""

import _setup  # noqa: F401  (thread environment and sys.path first)

import argparse
import json
import sys
import time
from pathlib import Path

import bm25s
import numpy as np
import snowballstemmer
from tqdm import tqdm

import _common as common
import services.retriever.retriever as retriever_module
from ragkb.eval import VectorCache, document_chunks, embed_with_cache, limit_corpus, load_beir, ndcg_at
from services.retriever.retriever import Retriever
from shared import components, model_thread
from shared.config import Settings
from shared.contracts import chunk_pb2
from shared.hit_reading import mark_readings
from shared.kb import KnowledgeBaseCatalog
from shared.server import settle_heap

KB = "scifact"
NAMESPACE = "eval"  # the namespace `ragkb.eval.document_chunks` gives its chunks
RRF_K = 60


class StageClock:
    """Milliseconds spent inside wrapped callables during one query."""

    def __init__(self):
        self.spent: dict[str, float] = {}

    def wrap(self, name: str, function):
        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.spent[name] = self.spent.get(name, 0.0) + (time.perf_counter() - started) * 1000
        return timed


def build_kb(settings: Settings, corpus: dict[str, tuple[str, str]]):
    catalog = KnowledgeBaseCatalog.for_settings(settings)
    kb = catalog.create(KB)
    chunks = document_chunks(KB, corpus)
    started = time.perf_counter()
    cache = VectorCache(Path.home() / ".cache" / "ragkb" / "eval-vectors.sqlite")
    embedder = components.embedder_for(kb)
    try:
        vectors = embed_with_cache(embedder, [c.content for c in chunks], cache)
    finally:
        cache.close()
    mark_readings(embedder, chunks)  # as the indexer stores them
    keyword, vector = components.keyword_store_for(kb, settings), components.vector_store_for(kb, settings)
    for start in tqdm(range(0, len(chunks), 500), desc="index", unit="batch", file=sys.stderr):
        keyword.upsert(chunks[start:start + 500])
        vector.upsert(chunks[start:start + 500], vectors[start:start + 500])
    vector.await_visible([c.chunk_id for c in chunks])
    vector.await_mirror()  # the dense route's in-process mirror, built before the first measured query
    return kb, chunks, time.perf_counter() - started


def stored_vectors(kb, settings: Settings, chunk_ids: list[str]) -> np.ndarray:
    """The vectors Milvus Lite holds, in `chunk_ids` order (the floor must use the very same ones)."""
    vector = components.vector_store_for(kb, settings)
    rows = {}
    for start in range(0, len(chunk_ids), 1000):
        batch = chunk_ids[start:start + 1000]
        expr = "id in [" + ", ".join(f'"{c}"' for c in batch) + "]"
        for row in vector._client.query(vector.collection, filter=expr, output_fields=["id", "vector"]):
            rows[row["id"]] = np.asarray(row["vector"], dtype=np.float32)
    missing = [c for c in chunk_ids if c not in rows]
    if missing:
        sys.exit(f"{len(missing)} chunks have no stored vector")
    return np.stack([rows[c] for c in chunk_ids])


class Floor:
    """bm25s + numpy dot + one bare query embedding + RRF: the least a hybrid search can cost here."""

    def __init__(self, texts: list[str], doc_ids: list[str], matrix: np.ndarray, model, depth: int):
        self._stemmer = snowballstemmer.stemmer("porter")
        self._bm25 = bm25s.BM25()
        self._bm25.index(bm25s.tokenize(texts, stopwords="en", stemmer=self._stemmer, show_progress=False),
                         show_progress=False)
        self._doc_ids, self._matrix, self._model, self._depth = doc_ids, matrix, model, depth

    def search(self, query: str, clock: StageClock) -> list[str]:
        started = time.perf_counter()
        tokens = bm25s.tokenize([query], stopwords="en", stemmer=self._stemmer, show_progress=False,
                                return_ids=False)
        bm25_ranked: list[int] = []
        if tokens[0]:
            found, scores = self._bm25.retrieve(tokens, k=min(self._depth, len(self._doc_ids)), show_progress=False)
            bm25_ranked = [int(i) for i, s in zip(found[0], scores[0]) if s > 0]
        clock.spent["bm25"] = (time.perf_counter() - started) * 1000
        started = time.perf_counter()
        vector = model_thread.run(self._model.encode, query, normalize_embeddings=True, convert_to_numpy=True,
                                  show_progress_bar=False)
        clock.spent["embed"] = (time.perf_counter() - started) * 1000
        started = time.perf_counter()
        scores = self._matrix @ vector.astype(np.float32)
        top = np.argpartition(-scores, min(self._depth, len(scores) - 1))[:self._depth]
        dense_ranked = [int(i) for i in top[np.argsort(-scores[top])]]
        clock.spent["dense"] = (time.perf_counter() - started) * 1000
        started = time.perf_counter()
        fused: dict[int, float] = {}
        for ranked in (bm25_ranked, dense_ranked):
            for rank, index in enumerate(ranked, start=1):
                fused[index] = fused.get(index, 0.0) + 1.0 / (RRF_K + rank)
        ordered = sorted(fused, key=lambda i: -fused[i])[:self._depth]
        clock.spent["fusion"] = (time.perf_counter() - started) * 1000
        return [self._doc_ids[i] for i in ordered]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=common.DEFAULT_DATA)
    parser.add_argument("--docs", type=int, default=0, help="corpus size (0: all 5,183; relevant documents first)")
    parser.add_argument("--queries", type=int, default=0, help="test queries to run (0: all 300)")
    parser.add_argument("--depth", type=int, default=100, help="candidates per route and results kept")
    parser.add_argument("--warmup", type=int, default=10, help="queries run first and not counted")
    parser.add_argument("--results", type=Path, help="write ragkb's ranking, scores and route signals per query "
                                                     "(JSON lines) to compare two versions")
    args = parser.parse_args()
    common.require_scifact(args.data, need_qrels=True)
    data = limit_corpus(load_beir(args.data, "test"), args.docs)
    queries = list(data.queries.items())[:args.queries or None]
    print(f"SciFact test: {len(data.corpus)} documents, {len(queries)} queries, depth {args.depth}", file=sys.stderr)

    with common.temp_root() as root:
        settings = Settings(data_dir=Path(root) / "data")
        kb, chunks, index_s = build_kb(settings, data.corpus)
        print(f"indexed {len(chunks)} documents in {index_s:.0f} s", file=sys.stderr)
        embedder = components.embedder_for(kb)
        floor = Floor([c.content for c in chunks], [c.doc_id for c in chunks],
                      stored_vectors(kb, settings, [c.chunk_id for c in chunks]), embedder._model, args.depth)
        retriever = Retriever(settings)
        search_filter = chunk_pb2.SearchFilter(namespaces=[NAMESPACE])
        clock = StageClock()
        # instrument ragkb's own stages without changing what runs
        embedder.embed_query = clock.wrap("embed", embedder.embed_query)
        retriever_module.measure = clock.wrap("competence", retriever_module.measure)
        floor_ms, ragkb_ms, floor_ndcg, ragkb_ndcg = [], [], [], []
        floor_stages: dict[str, list[float]] = {}
        saved = []
        ragkb_stages: dict[str, list[float]] = {}
        try:
            for warm in queries[:args.warmup]:
                floor.search(warm[1], StageClock())
                retriever.retrieve(kb, warm[1], search_filter, top_k=args.depth, candidate_depth=args.depth)
            settle_heap()  # as the retriever service does once warmed up
            for qid, query in tqdm(queries, desc="queries", unit="q", file=sys.stderr):
                judged = data.qrels[qid]
                clock.spent = {}
                started = time.perf_counter()
                ranked = floor.search(query, clock)
                floor_ms.append((time.perf_counter() - started) * 1000)
                floor_ndcg.append(ndcg_at(ranked, judged, 10))
                for name, value in clock.spent.items():
                    floor_stages.setdefault(name, []).append(value)

                clock.spent = {}
                started = time.perf_counter()
                result = retriever.retrieve(kb, query, search_filter, top_k=args.depth, candidate_depth=args.depth)
                total = (time.perf_counter() - started) * 1000
                ragkb_ms.append(total)
                ragkb_ndcg.append(ndcg_at(list(dict.fromkeys(c.chunk.doc_id for c in result.candidates)), judged, 10))
                saved.append({"qid": qid, "ranking": [[c.chunk.doc_id, c.score] for c in result.candidates],
                              "signals": result.signals, "competence": result.competence, "weights": result.weights})
                embed, competence = clock.spent.get("embed", 0.0), clock.spent.get("competence", 0.0)
                stages = {"embed": embed, "bm25": result.stages.get("bm25", 0.0),
                          "dense search": result.stages.get("dense", 0.0) - embed, "competence": competence,
                          "fusion": result.stages.get("fusion", 0.0) - competence}
                routes = max(result.stages.get("bm25", 0.0), result.stages.get("dense", 0.0))
                stages["rest"] = total - routes - result.stages.get("fusion", 0.0)
                for name, value in stages.items():
                    ragkb_stages.setdefault(name, []).append(value)
        finally:
            retriever.close()

    if args.results:
        args.results.write_text("".join(json.dumps(row, sort_keys=True) + "\n" for row in saved), encoding="utf-8")
    floor_p50, floor_p95 = common.p50_p95(floor_ms)
    ragkb_p50, ragkb_p95 = common.p50_p95(ragkb_ms)
    print(f"SciFact test, {len(data.corpus)} documents, {len(queries)} queries, top-{args.depth}, one at a time")
    print(common.machine_line())
    common.print_table("latency and quality", [
        ("floor p50 / p95 ms", f"{floor_p50:.1f} / {floor_p95:.1f}"),
        ("ragkb p50 / p95 ms", f"{ragkb_p50:.1f} / {ragkb_p95:.1f}"),
        ("ratio p50 / p95", f"{ragkb_p50 / floor_p50:.2f} / {ragkb_p95 / floor_p95:.2f}"),
        ("floor nDCG@10", f"{np.mean(floor_ndcg):.4f}"),
        ("ragkb nDCG@10", f"{np.mean(ragkb_ndcg):.4f}"),
    ])
    print("stage p50 ms (floor: sequential stages; ragkb: the routes run concurrently, `rest` is what is left)")
    for name, values in floor_stages.items():
        print(f"  floor {name:<13} {np.percentile(values, 50):8.2f}")
    for name, values in ragkb_stages.items():
        print(f"  ragkb {name:<13} {np.percentile(values, 50):8.2f}  (mean {np.mean(values):.2f})")
    reads = getattr(retriever, "hit_reads", None)
    if reads is not None:
        print(f"competence reads remembered: {reads.hits} hits, {reads.misses} misses, {len(reads)} kept")


if __name__ == "__main__":
    main()
