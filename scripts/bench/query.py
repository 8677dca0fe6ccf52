"""Query latency over REST, per stage, with a retrieval-quality sanity check and a model baseline.

What it measures
  A knowledge base is built the same way as in ingest.py (SciFact abstracts as .txt over
  REST into an embedded stack). The corpus subset (--docs N) holds every relevant
  document of M SciFact test queries (qrels/test.tsv, taken in file order, skipping a
  query whose documents would not fit) plus other corpus documents in file order, so
  every measured query can be answered inside the subset. The KB keeps 10 chunks after
  fusion and reranking (retriever.top_k = reranker.top_n = 10), so @10 metrics are
  possible. After --warmup unmeasured queries (other test queries), the M queries run
  one at a time; printed: client-measured total latency p50/p95/mean, p50/p95 of each
  stage in the response `stages` (and the retrieval routes from its metadata),
  Recall@10, Hit@10 and MRR@10 at document level over `chunks[*].chunk.doc_id`.
  The generation stage is broken down by the generator's own steps (evidence selection,
  answer, citation validation, claim check, and the time it spent embedding) when its
  metadata carries them, with the mean number of vectors per query it computed and the
  number that came with the chunks (stored at ingest) and the query (the retriever's).
  Baseline, same process: a bare `SentenceTransformer.encode` of each query, run right
  before its REST call (so both see the same load), and the ratios total p50 / embed p50
  and total p95 / embed p50.
  --save FILE writes every measured query's response as JSON lines, so two versions
  can be compared answer by answer.

Run from the repository root (the SciFact data lives in ../shared/data/scifact):
    python scripts/bench/query.py
    python scripts/bench/query.py --docs 300 --queries 30
    python scripts/bench/query.py --save /tmp/responses.jsonl
"""

import _setup  # noqa: F401  (thread environment and sys.path first)

import argparse
import csv
import json
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import httpx
from tqdm import tqdm

import _common as common
from shared.config import KBConfig
from shared.embedders import resolve_model_dir

KB = "bench"
CONFIG_YAML = "retriever:\n  top_k: 10\nreranker:\n  top_n: 10\n"
# the generator's own steps, in the generation stage's metadata
GENERATOR_STEPS = ("select_evidence_ms", "generate_ms", "validate_citations_ms", "check_claims_ms", "embed_ms")
VECTOR_KINDS = ("question", "sentences", "claims", "chunks")  # the generator's vectors_{carried,computed}_<kind>


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=1000, help="corpus subset size (default 1000)")
    parser.add_argument("--queries", type=int, default=100, help="measured test queries (default 100)")
    parser.add_argument("--warmup", type=int, default=5, help="unmeasured queries first (default 5)")
    parser.add_argument("--data", type=Path, default=common.DEFAULT_DATA,
                        help=f"SciFact folder in BEIR layout (default {common.DEFAULT_DATA})")
    parser.add_argument("--save", type=Path, help="write each measured query and its response here (JSON lines)")
    return parser.parse_args()


def select(data: Path, n_docs: int, n_queries: int, n_warmup: int):
    """-> (docs to ingest, measured [(query text, relevant ids)], warm-up query texts)."""
    with open(data / "queries.jsonl", encoding="utf-8") as handle:
        texts = {q["_id"]: q["text"] for q in (json.loads(line) for line in handle if line.strip())}
    qrels: dict[str, set[str]] = defaultdict(set)
    with open(data / "qrels" / "test.tsv", encoding="utf-8") as handle:
        for row in csv.DictReader(handle, delimiter="\t"):
            if int(row["score"]) > 0:
                qrels[row["query-id"]].add(row["corpus-id"])
    corpus = common.read_corpus(data)
    subset: set[str] = set()
    measured, spare = [], []
    for qid, relevant in qrels.items():
        if len(measured) < n_queries and len(subset | relevant) <= n_docs:
            subset |= relevant
            measured.append((texts[qid], relevant))
        else:
            spare.append(texts[qid])
    for doc in corpus:
        if len(subset) >= n_docs:
            break
        subset.add(doc["_id"])
    if len(measured) < n_queries:
        print(f"warning: only {len(measured)} test queries fit in {n_docs} documents", file=sys.stderr)
    return [d for d in corpus if d["_id"] in subset], measured, spare[:n_warmup]


def run_queries(client: httpx.Client, queries: list[str], desc: str,
                model=None) -> tuple[list[tuple[float, dict]], list[float]]:
    """-> ([(ms, response)], [ms of a bare embedding of each query]). With `model`, each query is first
    embedded bare, right before its REST call, so both see the same machine load."""
    results, embeds = [], []
    for query in tqdm(queries, desc=desc, unit="q", file=sys.stderr):
        if model is not None:
            started = time.perf_counter()
            model.encode([query], normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)
            embeds.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        response = client.post(f"/v1/knowledge-bases/{KB}/query", json={"query": query})
        elapsed_ms = (time.perf_counter() - started) * 1000
        if response.status_code != 200:
            sys.exit(f"query {query!r} failed: HTTP {response.status_code} {response.text}")
        results.append((elapsed_ms, response.json()))
    return results, embeds


def save_responses(path: Path, queries: list[str], results: list[tuple[float, dict]]) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        for query, (_, body) in zip(queries, results):
            handle.write(json.dumps({"query": query, "response": body}, ensure_ascii=False) + "\n")
    print(f"responses written to {path}", file=sys.stderr)


def quality(results, measured) -> tuple[float, float, float]:
    """Document-level Recall@10, Hit@10 and MRR@10 over the returned chunks (first 10)."""
    recall = hit = mrr = 0.0
    for (_, body), (_, relevant) in zip(results, measured):
        doc_ids = [c["chunk"]["doc_id"] for c in body["chunks"][:10]]
        found = relevant & set(doc_ids)
        recall += len(found) / len(relevant)
        hit += bool(found)
        mrr += next((1 / rank for rank, d in enumerate(doc_ids, 1) if d in relevant), 0.0)
    n = len(results) or 1
    return recall / n, hit / n, mrr / n


def bare_model():
    """The KB's embedding model loaded on its own, as a user of sentence-transformers would."""
    from sentence_transformers import SentenceTransformer

    kb = KBConfig.from_yaml(CONFIG_YAML, name=KB)
    return SentenceTransformer(str(resolve_model_dir(kb.embedder.model)), device=kb.embedder.device,
                               local_files_only=True)


def main() -> None:
    args = parse_args()
    common.require_scifact(args.data, need_qrels=True)
    docs, measured, warmup = select(args.data, args.docs, args.queries, args.warmup)
    queries = [text for text, _ in measured]

    with common.temp_root() as tmp:
        root = Path(tmp)
        files = common.write_documents(docs, root / "files")
        stack = common.start_stack(root)
        try:
            with httpx.Client(base_url=stack.http_url, timeout=120) as client:
                common.create_kb(client, KB, CONFIG_YAML)
                jobs, wall = common.ingest(client, KB, files)
                common.report_failures(jobs)
                chunks = sum(int(j["chunks_total"]) for j in jobs if j["state"] == "done")
                print(f"ingested {len(jobs)} docs / {chunks} chunks in {wall:.1f} s", file=sys.stderr)
                model = bare_model()
                run_queries(client, warmup, "warm-up", model)
                results, embeds = run_queries(client, queries, "queries", model)
            if args.save:
                save_responses(args.save, queries, results)
        finally:
            stack.stop()

    totals = [ms for ms, _ in results]
    stage_ms, route_ms, step_ms, vectors = defaultdict(list), defaultdict(list), defaultdict(list), defaultdict(list)
    for _, body in results:
        for name, stage in body["stages"].items():
            stage_ms[name].append(stage["ms"])
        for key in (*common.ROUTES, "chunk_vectors_ms"):
            if key in body["stages"].get("retrieval", {}).get("metadata", {}):
                route_ms[key].append(float(body["stages"]["retrieval"]["metadata"][key]))
        for key in GENERATOR_STEPS:
            if key in body["stages"].get("generation", {}).get("metadata", {}):
                step_ms[key].append(float(body["stages"]["generation"]["metadata"][key]))
        for key, value in body["stages"].get("generation", {}).get("metadata", {}).items():
            if key.startswith("vectors_"):
                vectors[key.removeprefix("vectors_")].append(int(value))
    total_p50, total_p95 = common.p50_p95(totals)
    embed_p50, embed_p95 = common.p50_p95(embeds)
    recall, hit, mrr = quality(results, measured)
    rows = [("docs / chunks", f"{len(jobs)} / {chunks}"), ("queries (warm-up)", f"{len(results)} ({len(warmup)})"),
            ("total p50 ms", f"{total_p50:.1f}"), ("total p95 ms", f"{total_p95:.1f}"),
            ("total mean ms", f"{statistics.fmean(totals):.1f}"), ("total max ms", f"{max(totals):.1f}")]
    for name in common.STAGES:
        p50, p95 = common.p50_p95(stage_ms.get(name, []))
        rows.append((f"{name} p50 / p95 ms", f"{p50:.2f} / {p95:.2f}"))
    for key in (*common.ROUTES, "chunk_vectors_ms"):
        p50, p95 = common.p50_p95(route_ms.get(key, []))
        rows.append((f"  retrieval {key.removesuffix('_ms')} p50 / p95 ms", f"{p50:.2f} / {p95:.2f}"))
    for key in GENERATOR_STEPS:
        p50, p95 = common.p50_p95(step_ms.get(key, []))
        rows.append((f"  generation {key.removesuffix('_ms')} p50 / p95 ms", f"{p50:.2f} / {p95:.2f}"))
    for kind in VECTOR_KINDS:
        carried, computed = vectors.get(f"carried_{kind}", []), vectors.get(f"computed_{kind}", [])
        if carried or computed:
            rows.append((f"  generator {kind} vectors / query: carried, computed",
                         f"{statistics.fmean(carried or [0]):.1f}, {statistics.fmean(computed or [0]):.1f}"))
    rows += [("Recall@10 (doc level)", f"{recall:.3f}"), ("Hit@10", f"{hit:.3f}"), ("MRR@10", f"{mrr:.3f}"),
             ("bare embed 1 query p50 / p95 ms", f"{embed_p50:.1f} / {embed_p95:.1f}"),
             ("ratio total p50 / embed p50", f"{total_p50 / embed_p50:.2f}"),
             ("ratio total p95 / embed p50", f"{total_p95 / embed_p50:.2f}")]
    print()
    print(f"KB config: retriever.top_k=10, reranker.top_n=10 (passthrough); {common.machine_line()}")
    common.print_table("query benchmark (SciFact test queries over REST, sequential)", rows)


if __name__ == "__main__":
    main()
