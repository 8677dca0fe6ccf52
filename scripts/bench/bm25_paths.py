"""The embedded keyword store's two BM25 paths side by side: the in-memory index and SQLite FTS5's MATCH.

    python scripts/bench/bm25_paths.py [--data DIR] [--split test] [--depth 100]

SciFact's documents (one chunk each, as `ragkb eval` makes them) are written once into one SQLite
file; two `SqliteFtsKeywordStore`s open it, one with the in-memory index and one without
(`memory_index=False`), and every query of the split runs through both, alternately. Printed: p50/p95
of each and their ratio, BM25-only nDCG@10 of each, how many queries got the same top-10 and the
same top-`depth` ids, the mean overlap of the top-`depth` sets, the largest score difference, and
the queries the in-memory path handed to FTS5 (a word FTS5 splits into a phrase).
"""

import _setup  # noqa: F401  (thread environment and sys.path first)

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import _common as common
from ragkb.eval import document_chunks, load_beir, ndcg_at
from shared.contracts import chunk_pb2
from shared.stores.sqlite_fts import SqliteFtsKeywordStore
from shared.text import query_terms

NAMESPACE = "eval"


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=common.DEFAULT_DATA)
    parser.add_argument("--split", default="test")
    parser.add_argument("--depth", type=int, default=100)
    args = parser.parse_args()
    data = load_beir(args.data, args.split)
    with tempfile.TemporaryDirectory(prefix="ragkb-bm25-paths-") as root:
        path = Path(root) / "keyword.sqlite"
        writer = SqliteFtsKeywordStore(path, memory_index=False)
        chunks = document_chunks("bm25", data.corpus)
        for start in range(0, len(chunks), 500):
            writer.upsert(chunks[start:start + 500])
        writer.close()
        started = time.perf_counter()
        memory = SqliteFtsKeywordStore(path)
        build_s = time.perf_counter() - started
        fts = SqliteFtsKeywordStore(path, memory_index=False)
        search_filter = chunk_pb2.SearchFilter(namespaces=[NAMESPACE])
        timings = {"memory": [], "fts5": []}
        ndcg = {"memory": [], "fts5": []}
        same_top10 = same_all = handed_over = 0
        overlaps, worst_score_gap = [], 0.0
        for query_id, judged in data.qrels.items():
            text = data.queries[query_id]
            found = {}
            for name, store in (("memory", memory), ("fts5", fts)):
                started = time.perf_counter()
                hits = store.search(text, search_filter, args.depth)
                timings[name].append((time.perf_counter() - started) * 1000)
                found[name] = hits
                ndcg[name].append(ndcg_at([h.chunk.doc_id for h in hits], judged, 10))
            ids = {name: [h.chunk.doc_id for h in hits] for name, hits in found.items()}
            same_top10 += ids["memory"][:10] == ids["fts5"][:10]
            same_all += ids["memory"] == ids["fts5"]
            overlaps.append(len(set(ids["memory"]) & set(ids["fts5"])) / max(1, len(ids["fts5"])))
            for a, b in zip(found["memory"], found["fts5"]):
                worst_score_gap = max(worst_score_gap, abs(a.score - b.score))
            handed_over += memory._index.query_tokens(query_terms(text)) is None
        queries = len(data.qrels)
        print(f"SciFact {args.split}: {len(chunks)} chunks, {queries} queries, depth {args.depth}; "
              + common.machine_line())
        print(f"in-memory index built from the file in {build_s:.1f} s, {memory.index_bytes() / 2**20:.1f} MiB "
              f"({memory.index_bytes() / len(chunks):.0f} bytes a chunk)")
        for name in ("memory", "fts5"):
            print(f"{name:<7} p50 / p95 ms {statistics.median(timings[name]):7.2f} / {percentile(timings[name], 0.95):7.2f}"
                  f"   nDCG@10 {statistics.mean(ndcg[name]):.4f}")
        print(f"ratio memory / fts5 p50 {statistics.median(timings['memory']) / statistics.median(timings['fts5']):.3f}")
        print(f"same top-10: {same_top10}/{queries}, same top-{args.depth}: {same_all}/{queries}, "
              f"mean top-{args.depth} overlap {statistics.mean(overlaps):.4f}, largest score gap {worst_score_gap:.2e}, "
              f"queries answered by FTS5 (phrase words): {handed_over}")
        memory.close()
        fts.close()


if __name__ == "__main__":
    main()
