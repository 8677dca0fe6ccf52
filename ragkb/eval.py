"""Retrieval quality on a BEIR-layout dataset, measured through the product's own retriever.

    ragkb eval --dataset DIR --split test [--kb-config FILE] [--limit-docs N]

The corpus goes into the stores the KB config names (embedded SQLite FTS5 +
Milvus Lite by default, Elasticsearch + a Milvus server when configured), one
chunk per BEIR document, then every query of the split runs through
`Retriever.retrieve`, whose BM25 list, dense list and fused list give the three
rows. Document vectors are cached on disk keyed by model id + text hash, so a
re-run skips the slow embedding step.
"""

from __future__ import annotations

import hashlib
import json
import math
import sqlite3
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tqdm import tqdm

from shared.contracts import chunk_pb2
from shared.errors import InvalidArgument
from shared.hit_reading import mark_readings

NAMESPACE = "eval"
ROWS = ("bm25", "dense", "hybrid")
DEPTH = 100


@dataclass
class BeirData:
    corpus: dict[str, tuple[str, str]]  # doc id -> (title, text)
    queries: dict[str, str]  # query id -> text, only queries with judgements in the split
    qrels: dict[str, dict[str, int]]  # query id -> {doc id: relevance}


@dataclass
class RowResult:
    ndcg10: list[float] = field(default_factory=list)
    recall10: list[float] = field(default_factory=list)
    recall100: list[float] = field(default_factory=list)
    mrr10: list[float] = field(default_factory=list)
    latency_ms: list[float] = field(default_factory=list)

    def summary(self) -> dict[str, float]:
        lat = np.array(self.latency_ms or [0.0])
        return {"ndcg@10": _mean(self.ndcg10), "recall@10": _mean(self.recall10),
                "recall@100": _mean(self.recall100), "mrr@10": _mean(self.mrr10),
                "p50_ms": float(np.percentile(lat, 50)), "p95_ms": float(np.percentile(lat, 95))}


def jsonl_records(path: Path, missing: str = "no such file") -> Iterator[tuple[int, dict]]:
    """(line number, object) for each non-blank line; a line that is not a JSON object is an error naming it.
    `missing` names the file in the not-found error."""
    if not path.is_file():
        raise InvalidArgument(f"{missing}: {path}")
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise InvalidArgument(f"{path}:{number} is not valid JSON: {error}") from None
            if not isinstance(record, dict):
                raise InvalidArgument(f"{path}:{number} must be a JSON object")
            yield number, record


def _read_jsonl(path: Path) -> list[dict]:
    records = []
    for number, record in jsonl_records(path, "BEIR dataset file missing"):
        if "_id" not in record:
            raise InvalidArgument(f"{path}:{number} has no _id field")
        records.append(record)
    return records


def load_beir(dataset: Path, split: str) -> BeirData:
    """corpus.jsonl, queries.jsonl and qrels/<split>.tsv (query-id, corpus-id, score; header line optional)."""
    qrels_path = dataset / "qrels" / f"{split}.tsv"
    if not qrels_path.is_file():
        raise InvalidArgument(f"no judgements for split {split!r}: {qrels_path} is missing")
    qrels: dict[str, dict[str, int]] = {}
    with open(qrels_path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            parts = line.rstrip("\n").split("\t")
            if not line.strip() or (number == 1 and parts[0] == "query-id"):
                continue
            if len(parts) != 3:
                raise InvalidArgument(f"{qrels_path}:{number} needs 3 tab-separated columns, got {len(parts)}")
            try:
                qrels.setdefault(parts[0], {})[parts[1]] = int(parts[2])
            except ValueError:
                raise InvalidArgument(f"{qrels_path}:{number} score {parts[2]!r} is not an integer") from None
    corpus = {str(r["_id"]): (str(r.get("title") or ""), str(r.get("text") or ""))
              for r in _read_jsonl(dataset / "corpus.jsonl")}
    all_queries = {str(r["_id"]): str(r.get("text") or "") for r in _read_jsonl(dataset / "queries.jsonl")}
    queries = {qid: all_queries[qid] for qid in qrels if all_queries.get(qid, "").strip()}
    if not queries:
        raise InvalidArgument(f"split {split!r} of {dataset} has no query with text and judgements")
    return BeirData(corpus, queries, {qid: qrels[qid] for qid in queries})


def limit_corpus(data: BeirData, limit: int) -> BeirData:
    """Keep `limit` documents: every judged-relevant one first (in corpus order), then the others in order.

    Queries whose relevant documents all fell outside the subset are dropped.
    """
    if limit <= 0 or limit >= len(data.corpus):
        return data
    relevant = {d for judged in data.qrels.values() for d, rel in judged.items() if rel > 0}
    ordered = [d for d in data.corpus if d in relevant] + [d for d in data.corpus if d not in relevant]
    kept = set(ordered[:limit])
    corpus = {d: v for d, v in data.corpus.items() if d in kept}
    qrels = {q: {d: r for d, r in judged.items() if d in kept} for q, judged in data.qrels.items()}
    qrels = {q: judged for q, judged in qrels.items() if any(r > 0 for r in judged.values())}
    return BeirData(corpus, {q: data.queries[q] for q in qrels}, qrels)


class VectorCache:
    """Document vectors on disk, keyed by sha256(model id + text): the same text is never embedded twice."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path)
        self._db.execute("CREATE TABLE IF NOT EXISTS vectors (key TEXT PRIMARY KEY, dim INTEGER, data BLOB)")

    @staticmethod
    def key(model_id: str, text: str) -> str:
        return hashlib.sha256(f"{model_id}\0{text}".encode()).hexdigest()

    def get(self, keys: list[str], dimension: int) -> dict[str, np.ndarray]:
        found: dict[str, np.ndarray] = {}
        for start in range(0, len(keys), 500):
            batch = keys[start:start + 500]
            marks = ",".join("?" for _ in batch)
            for key, dim, data in self._db.execute(
                    f"SELECT key, dim, data FROM vectors WHERE key IN ({marks})", batch):
                if dim == dimension:
                    found[key] = np.frombuffer(data, dtype=np.float32)
        return found

    def put(self, items: list[tuple[str, np.ndarray]]) -> None:
        with self._db:
            self._db.executemany("INSERT OR REPLACE INTO vectors VALUES (?, ?, ?)",
                                 [(k, int(v.shape[0]), v.astype(np.float32).tobytes()) for k, v in items])

    def close(self) -> None:
        self._db.close()


def embed_with_cache(embedder, texts: list[str], cache: VectorCache, *, batch: int = 64) -> np.ndarray:
    keys = [VectorCache.key(embedder.model_id, t) for t in texts]
    cached = cache.get(keys, embedder.dimension)
    missing = [i for i, k in enumerate(keys) if k not in cached]
    print(f"vectors: {len(texts) - len(missing)} cached, {len(missing)} to embed", file=sys.stderr)
    for start in tqdm(range(0, len(missing), batch), desc="embed", unit="batch", disable=not missing):
        index = missing[start:start + batch]
        vectors = embedder.embed_documents([texts[i] for i in index])
        cache.put([(keys[i], v) for i, v in zip(index, vectors)])
        cached.update((keys[i], v) for i, v in zip(index, vectors))
    return np.stack([cached[k] for k in keys]).astype(np.float32)


def document_chunks(kb: str, corpus: dict[str, tuple[str, str]]) -> list[chunk_pb2.KnowledgeChunk]:
    """One chunk per BEIR document: title line + text, as the parser would prefix a heading."""
    chunks = []
    for position, (doc_id, (title, text)) in enumerate(corpus.items()):
        content = f"{title}\n{text}".strip()
        chunks.append(chunk_pb2.KnowledgeChunk(
            chunk_id="beir-" + hashlib.sha256(doc_id.encode()).hexdigest()[:32], doc_id=doc_id, kb=kb,
            namespace=NAMESPACE, raw_content=content, content=content,
            content_hash=hashlib.sha256(content.encode()).hexdigest(), part_index=1, part_count=1,
            position=position, block_type=chunk_pb2.BLOCK_TYPE_PARAGRAPH,
            heading_path=[title] if title else [],
        ))
    return chunks


def ndcg_at(ranked: list[str], judged: dict[str, int], k: int) -> float:
    dcg = sum(judged.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranked[:k]))
    ideal = sorted((r for r in judged.values() if r > 0), reverse=True)[:k]
    idcg = sum(r / math.log2(i + 2) for i, r in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


def recall_at(ranked: list[str], judged: dict[str, int], k: int) -> float:
    relevant = {d for d, r in judged.items() if r > 0}
    return len(relevant & set(ranked[:k])) / len(relevant) if relevant else 0.0


def mrr_at(ranked: list[str], judged: dict[str, int], k: int) -> float:
    for i, d in enumerate(ranked[:k]):
        if judged.get(d, 0) > 0:
            return 1.0 / (i + 1)
    return 0.0


def _mean(values: list[float]) -> float:
    return float(np.mean(values)) if values else 0.0


def _questions(data: BeirData) -> list:
    from ragkb.tune import Question

    return [Question(qid, text, data.qrels[qid]) for qid, text in data.queries.items()]


def sample_queries(data: BeirData, limit: int) -> BeirData:
    """`limit` queries picked by a hash of their id (stable, spread over the whole split); 0 = all."""
    if limit <= 0 or limit >= len(data.queries):
        return data
    kept = sorted(data.queries, key=lambda qid: hashlib.sha256(qid.encode()).hexdigest())[:limit]
    return BeirData(data.corpus, {q: data.queries[q] for q in kept}, {q: data.qrels[q] for q in kept})


def load_splits(dataset: Path, split: str, tune_split: str, limit_docs: int,
                limit_queries: int = 0) -> tuple[BeirData, BeirData | None]:
    """The evaluated split and the optional tuning split over one (limited) corpus; they must not share a query."""
    evaluated = sample_queries(load_beir(dataset, split), limit_queries)
    if not tune_split:
        return limit_corpus(evaluated, limit_docs), None
    if tune_split == split:
        raise InvalidArgument(f"the tuning split must differ from the evaluated split {split!r}")
    tuning = sample_queries(load_beir(dataset, tune_split), limit_queries)
    shared = set(evaluated.queries) & set(tuning.queries)
    if shared:
        raise InvalidArgument(f"splits {split!r} and {tune_split!r} share {len(shared)} queries")
    both = limit_corpus(BeirData(evaluated.corpus, evaluated.queries | tuning.queries,
                                 evaluated.qrels | tuning.qrels), limit_docs)

    def part(source: BeirData) -> BeirData:
        kept = [q for q in source.queries if q in both.qrels]
        return BeirData(both.corpus, {q: both.queries[q] for q in kept}, {q: both.qrels[q] for q in kept})

    return part(evaluated), part(tuning)


def rows_of(runs: list) -> dict[str, dict[str, float]]:
    results = {row: RowResult() for row in ROWS}
    for run in runs:
        judged = run.judged
        lists = {"bm25": run.units(c for c, _ in run.routes["bm25"]),
                 "dense": run.units(c for c, _ in run.routes["dense"]), "hybrid": run.hybrid}
        for row, ranked in lists.items():
            target = results[row]
            target.ndcg10.append(ndcg_at(ranked, judged, 10))
            target.recall10.append(recall_at(ranked, judged, 10))
            target.recall100.append(recall_at(ranked, judged, 100))
            target.mrr10.append(mrr_at(ranked, judged, 10))
            target.latency_ms.append(run.latency_ms[row])
    return {row: r.summary() for row, r in results.items()}


def run_eval(dataset: Path, split: str = "test", *, kb_config_yaml: str = "", limit_docs: int = 0,
             cache_path: Path | None = None, tune_split: str = "", limit_queries: int = 0,
             profiles_file: Path | None = None, runs_path: Path | None = None) -> dict:
    """Index the corpus into the configured stores, run every query, return {row: metrics}.

    With `tune_split`, the fusion is first fitted on that split's queries (ragkb.tune) and the
    evaluated split is run with the fitted settings; the default settings' hybrid score on the
    evaluated split is reported next to it. `profiles_file`: the operator profiles the KB config
    chooses its stores and models from. `runs_path`: also write every query's route lists there
    (`ragkb.tune.save_runs`, parts named by split) for offline re-fusion.
    """
    from ragkb.tune import collect_runs, fit, grid, mean_ndcg, route_ndcg, save_runs
    from services.retriever.retriever import Retriever, base_weights, fusion_spec
    from shared import components
    from shared.config import Settings
    from shared.kb import KnowledgeBaseCatalog

    data, tuning_data = load_splits(dataset, split, tune_split, limit_docs, limit_queries)
    print(f"{dataset.name}/{split}: {len(data.corpus)} documents, {len(data.queries)} queries"
          + (f"; tuning on {tune_split}: {len(tuning_data.queries)} queries" if tuning_data else ""), file=sys.stderr)
    temp = tempfile.TemporaryDirectory(prefix="ragkb-eval-")  # catalog and embedded stores of this run only
    settings = Settings(data_dir=Path(temp.name), profiles_file=str(profiles_file or ""))
    catalog = KnowledgeBaseCatalog.for_settings(settings)
    kb_name = f"eval-{uuid.uuid4().hex[:8]}"  # unique: a shared Elasticsearch or Milvus server may hold others
    kb = catalog.create(kb_name, config_yaml=kb_config_yaml)
    cache = VectorCache(cache_path or Path.home() / ".cache" / "ragkb" / "eval-vectors.sqlite")
    keyword = vector = None
    retriever = Retriever(settings)
    try:
        embedder = components.embedder_for(kb)
        keyword = components.keyword_store_for(kb, settings)
        vector = components.vector_store_for(kb, settings)
        print(f"stores: keyword={kb.keyword_store.name} vector={kb.vector_store.name} "
              f"({kb.vector_store.uri or 'Milvus Lite'}), model {embedder.model_id}", file=sys.stderr)
        chunks = document_chunks(kb_name, data.corpus)
        vectors = embed_with_cache(embedder, [c.content for c in chunks], cache)
        mark_readings(embedder, chunks)  # as the indexer stores them
        for start in tqdm(range(0, len(chunks), 500), desc="index", unit="batch"):
            keyword.upsert(chunks[start:start + 500])
            vector.upsert(chunks[start:start + 500], vectors[start:start + 500])
        search_filter = chunk_pb2.SearchFilter(namespaces=[NAMESPACE])
        tuning = {}
        tuning_runs = []
        if tuning_data:
            tuning_runs = collect_runs(retriever, kb, _questions(tuning_data), search_filter, depth=DEPTH,
                                       progress="tune")
            fitted = fit(tuning_runs, kb.retriever.sparse_weight)
            catalog.replace(catalog.tenant_config(kb_name).model_copy(update={"retriever": fitted.apply(kb.retriever)}))
            tuning = {"split": tune_split, "fusion": fitted.spec.describe(), "weights": fitted.weights,
                      "tuning_ndcg@10": route_ndcg(tuning_runs) | {"hybrid_fitted": round(fitted.ndcg10, 4)},
                      "tuning_grid": fitted.grid}
        # the config as stored now: the fitted fusion when the run tuned one
        runs = collect_runs(retriever, catalog.get(kb_name), _questions(data), search_filter, depth=DEPTH)
        if tuning_data:
            tuning["default_hybrid_ndcg@10"] = round(mean_ndcg(runs, fusion_spec(kb.retriever),
                                                               base_weights(kb.retriever)), 4)
        if runs_path:
            save_runs(runs_path, {split: runs} | ({tune_split: tuning_runs} if tuning_data else {}))
        degraded = sum(1 for run in runs if run.degraded)
        if degraded:
            print(f"warning: {degraded} queries ran with a degraded route", file=sys.stderr)
        return rows_of(runs) | {
            "_run": {"documents": len(data.corpus), "queries": len(data.queries), "degraded_queries": degraded,
                     "keyword_store": kb.keyword_store.name, "vector_store": kb.vector_store.name,
                     "model": embedder.model_id, "fusion": fusion_spec(catalog.get(kb_name).retriever).describe()},
            # reported, never fitted on: how each setting of the tuning grid fares on the evaluated split
            "_grid": {name: [round(v, 4) for v in row] for name, row in grid(runs).items()},
        } | ({"_tuning": tuning} if tuning else {})
    finally:
        retriever.close()
        for store in (keyword, vector):
            if store is not None:
                store.drop()
            close = getattr(store, "close", None)
            if callable(close):
                close()
        cache.close()
        temp.cleanup()


def format_table(results: dict) -> str:
    lines = [f"{'route':<8} {'nDCG@10':>8} {'R@10':>7} {'R@100':>7} {'MRR@10':>7} {'p50 ms':>8} {'p95 ms':>8}"]
    for row in ROWS:
        m = results[row]
        lines.append(f"{row:<8} {m['ndcg@10']:>8.4f} {m['recall@10']:>7.4f} {m['recall@100']:>7.4f} "
                     f"{m['mrr@10']:>7.4f} {m['p50_ms']:>8.1f} {m['p95_ms']:>8.1f}")
    run = results.get("_run", {})
    if run:
        lines.append(f"({run['documents']} documents, {run['queries']} queries; {run['keyword_store']} + "
                     f"{run['vector_store']}, {run['model']}, fusion {run['fusion']}; latency: route time for "
                     f"bm25/dense, whole retrieve for hybrid)")
    tuning = results.get("_tuning")
    if tuning:
        fitted = tuning["tuning_ndcg@10"]
        lines.append(f"fitted on {tuning['split']}: {tuning['fusion']} weights {tuning['weights']}; tuning-split "
                     f"nDCG@10 bm25 {fitted['bm25']:.4f} dense {fitted['dense']:.4f} hybrid (defaults) "
                     f"{fitted['hybrid']:.4f} hybrid (fitted) {fitted['hybrid_fitted']:.4f}; this split with the "
                     f"defaults: hybrid {tuning['default_hybrid_ndcg@10']:.4f}")
    return "\n".join(lines)
