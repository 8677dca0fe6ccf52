"""Query embedding under concurrency: dynamic micro-batching against the bare model, in one process.

Measured on SciFact's queries (../shared/data/scifact) with the shipped all-MiniLM-L6-v2:
  1. bare model, batched: `model.encode(queries, batch_size=32)`: the model's limit in queries/s;
  2. bare model, one query per call: what serialised query embedding can reach;
  3. `SentenceTransformerEmbedder.embed_query` (QueryBatcher) from 1, 4, 8 and 16 threads for
     --seconds each: queries/s, latency p50/p95, mean batch size, and queries/s as a ratio of (1);
     next to it the same threads with one forward pass per query (max_batch=1, the baseline).

    python scripts/bench/embed_batching.py
    python scripts/bench/embed_batching.py --seconds 20
"""

import _setup  # noqa: F401  (thread environment and sys.path first)

import argparse
import itertools
import threading
import time

import _common as common
from shared.embedders import QueryBatcher, SentenceTransformerEmbedder
from ragkb.eval import jsonl_records

CLIENTS = (1, 4, 8, 16)


def concurrent_run(batcher: QueryBatcher, queries: list[str], clients: int,
                   seconds: float) -> tuple[float, list[float], float]:
    """(queries/s, latencies in ms, mean batch size) of `clients` threads embedding for `seconds`."""
    latencies: list[float] = []
    feed = itertools.cycle(queries)
    feed_lock = threading.Lock()
    passes_before = batcher.batches
    deadline = time.perf_counter() + seconds

    def client() -> None:
        while time.perf_counter() < deadline:
            with feed_lock:
                text = next(feed)
            started = time.perf_counter()
            batcher.embed(text)
            latencies.append((time.perf_counter() - started) * 1000)

    started = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    passes = max(1, batcher.batches - passes_before)
    return len(latencies) / elapsed, latencies, len(latencies) / passes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=str(common.DEFAULT_DATA))
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    data = common.require_scifact(common.Path(args.data))
    queries = [record["text"] for _line, record in jsonl_records(data / "queries.jsonl")][:1000]
    embedder = SentenceTransformerEmbedder("all-MiniLM-L6-v2")
    model = embedder._model
    model.encode(queries[:64], batch_size=32)  # warm up

    started = time.perf_counter()
    model.encode(queries, batch_size=32, normalize_embeddings=True, show_progress_bar=False)
    batched_qps = len(queries) / (time.perf_counter() - started)
    sample = queries[:200]
    started = time.perf_counter()
    for text in sample:
        model.encode([text], normalize_embeddings=True, show_progress_bar=False)
    single_qps = len(sample) / (time.perf_counter() - started)

    rows = [("bare model, batch 32", f"{batched_qps:8.1f} q/s"),
            ("bare model, one query per call", f"{single_qps:8.1f} q/s  ({single_qps / batched_qps:.2f} x batched)")]
    serialised = QueryBatcher(embedder.embed_documents, max_batch=1)  # one forward pass per query
    for clients in CLIENTS:
        for name, batcher in (("serialised", serialised), ("micro-batched", embedder._queries)):
            qps, latencies, batch = concurrent_run(batcher, queries, clients, args.seconds)
            p50, p95 = common.p50_p95(latencies)
            rows.append((f"{name}, {clients:2d} threads",
                         f"{qps:8.1f} q/s  ({qps / batched_qps:.2f} x batched)  p50 {p50:.1f} ms  "
                         f"p95 {p95:.1f} ms  mean batch {batch:.1f}"))
    print(common.machine_line())
    common.print_table(f"query embedding, {len(queries)} SciFact queries, all-MiniLM-L6-v2", rows)


if __name__ == "__main__":
    main()
