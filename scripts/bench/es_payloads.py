"""Elasticsearch BM25 searches: chunk payloads read from `_source` (schema 1) vs from doc values (schema 2).

    python scripts/bench/es_payloads.py [--docs 5183] [--queries 300] [--depth 100]

SciFact's abstracts (BEIR layout, ../shared/data/scifact), one chunk each (`ragkb.eval.document_chunks`),
go into two indices on one Elasticsearch node (scripts/engines.py): one laid out as schema 1 kept
its payloads (each in the `_source` of its document), one as `ElasticsearchKeywordStore` creates
them now (schema 2: the payload in binary doc values, left out of `_source`). Then every test query
runs through `ElasticsearchKeywordStore.search` at `--depth` on each index in turn, query by query,
after 30 warm-up queries. Printed per layout: the node's CPU per search (its process's CPU time,
summed over that layout's searches), this process's CPU per search (the client's JSON and payload
decoding), wall p50 / p95 and the index's size on disk; and whether both returned the same chunks
with the same scores.
"""

import _setup  # noqa: F401  (thread environment and sys.path first)

import argparse
import sys
import tempfile
import time
from pathlib import Path

from elasticsearch import Elasticsearch

import _common as common
from ragkb.eval import document_chunks, load_beir
from shared.contracts import chunk_pb2
from shared.stores.elasticsearch import MAPPINGS, ElasticsearchKeywordStore, index_name

sys.path.insert(0, str(common.REPO_ROOT / "scripts"))
import engines  # noqa: E402

WARMUP = 30
NAMESPACE = "eval"  # the namespace `ragkb.eval.document_chunks` gives its chunks


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=0, help="abstracts indexed (default 0: all)")
    parser.add_argument("--queries", type=int, default=300, help="test queries run on each index (default 300)")
    parser.add_argument("--depth", type=int, default=100, help="hits per search (default 100, the BM25 route's)")
    parser.add_argument("--data", type=Path, default=common.DEFAULT_DATA,
                        help=f"SciFact folder in BEIR layout (default {common.DEFAULT_DATA})")
    return parser.parse_args()


def schema_1_store(url: str, kb: str) -> ElasticsearchKeywordStore:
    """A store on an index laid out as schema 1 created it: the payload in `_source`, no doc values."""
    mappings = {key: value for key, value in MAPPINGS.items() if key != "_source"}
    mappings["properties"] = {**MAPPINGS["properties"], "payload": {"type": "binary"}}
    mappings["_meta"] = {"analyzer": "jieba", "stemmer": "porter", "schema_version": 1}
    with Elasticsearch([url]) as client:
        client.indices.create(index=index_name("ragkb", kb), mappings=mappings)
    return ElasticsearchKeywordStore([url], kb=kb, request_timeout_s=30)


def main() -> None:
    args = parse_args()
    data = load_beir(common.require_scifact(args.data, need_qrels=True), "test")
    corpus = dict(list(data.corpus.items())[:args.docs]) if args.docs else data.corpus
    chunks = document_chunks("scifact", corpus)
    queries = list(data.queries.values())[:args.queries]
    search_filter = chunk_pb2.SearchFilter(namespaces=[NAMESPACE])
    with tempfile.TemporaryDirectory(prefix="ragkb-bench-") as tmp:
        node = engines.ElasticsearchNode(Path(tmp) / "es").start()
        try:
            stores = {"schema 1 (_source)": schema_1_store(node.url, "source"),
                      "schema 2 (doc values)": ElasticsearchKeywordStore([node.url], kb="docvalues",
                                                                          request_timeout_s=30)}
            for store in stores.values():
                with store.bulk_loading():
                    store.upsert(chunks)
            print(f"{len(chunks)} chunks in each index; {len(queries)} queries at depth {args.depth}; "
                  + common.machine_line(), file=sys.stderr)
            results = {name: [] for name in stores}
            wall = {name: [] for name in stores}
            node_cpu = dict.fromkeys(stores, 0.0)
            own_cpu = dict.fromkeys(stores, 0.0)
            for n, query in enumerate(queries[:WARMUP] + queries):
                for name, store in stores.items():
                    cpu, own, started = common.process_tree_cpu(node.pid), time.process_time(), time.perf_counter()
                    found = store.search(query, search_filter, args.depth)
                    elapsed, own = time.perf_counter() - started, time.process_time() - own
                    if n < WARMUP:
                        continue
                    wall[name].append(elapsed * 1000)
                    own_cpu[name] += own
                    node_cpu[name] += common.process_tree_cpu(node.pid) - cpu
                    results[name].append([(c.chunk.SerializeToString(), round(c.score, 4)) for c in found])
            print("| payloads read from | node CPU per search | client CPU per search | wall p50 / p95 | index on disk |")
            print("|---|---|---|---|---|")
            for name, store in stores.items():
                p50, p95 = common.p50_p95(wall[name])
                store._client.indices.flush(index=store.index)
                size = store._client.indices.stats(index=store.index, metric="store")["_all"]["primaries"]["store"]
                print(f"| {name} | {node_cpu[name] * 1000 / len(queries):.2f} ms | "
                      f"{own_cpu[name] * 1000 / len(queries):.2f} ms | {p50:.2f} / {p95:.2f} ms | "
                      f"{size['size_in_bytes'] / 2**20:.1f} MiB |")
            first, second = results.values()
            print(f"\nsame chunks and scores on every query: {first == second}")
            for store in stores.values():
                store.drop()
                store.close()
        finally:
            node.stop()


if __name__ == "__main__":
    main()
