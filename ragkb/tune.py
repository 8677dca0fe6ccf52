"""Fit a knowledge base's fusion (function, normalisation, route weights) on judged questions.

Every question runs once through the retriever; its BM25 and dense lists, with the
competence measured for it, are kept. Fusion is then recomputed offline for every
candidate setting (the same `fused_scores` the retriever runs), so the grid costs no
further searches. The setting with the best mean nDCG@10 on the tuning part wins; the
unseen part is only measured, never fitted on.

Question file (JSON lines): {"query": "...", "relevant": ["doc-id", ...]} or
{"query": "...", "relevant": {"doc-id": 2, ...}}, optionally "id" and "answers": ["text", ...].
Without answers a question is judged by document; with answers by chunk: a chunk of a
relevant document is relevant when it contains one of the answers (judged over the pool of
chunks the routes returned, so chunk ids need not be stable across re-ingestion).
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from services.retriever.competence import effective_weights
from services.retriever.fusion import FusionSpec, fused_scores, ranked_ids
from shared.config import RetrieverConfig
from shared.errors import InvalidArgument

ROUTES = ("bm25", "dense")
DENSE_SHARES = tuple(round(0.1 * step, 1) for step in range(11))  # dense weight; bm25 gets 1 - share
SPECS = (FusionSpec("rrf", rrf_k=10), FusionSpec("rrf", rrf_k=30), FusionSpec("rrf", rrf_k=60),
         FusionSpec("convex", "minmax"), FusionSpec("convex", "zscore"), FusionSpec("convex", "theoretical_min"))
UNSEEN_SHARE = 0.3
JUDGED_DEPTH = 10


@dataclass
class Question:
    qid: str
    text: str
    judged: dict[str, int]  # doc id -> relevance
    answers: tuple[str, ...] = ()


@dataclass
class QueryRun:
    """One question's route lists (chunk id, score) and what the retriever made of them."""

    question: Question
    routes: dict[str, list[tuple[str, float]]]
    unit_of: dict[str, str]  # chunk id -> what is judged: its doc id, or itself for questions with answers
    judged: dict[str, int]  # unit -> relevance
    competence: dict[str, float]
    hybrid: list[str]  # units, best first, as the retriever fused them
    latency_ms: dict[str, float]
    degraded: list[str]

    def units(self, chunk_ids: Iterable[str]) -> list[str]:
        return list(dict.fromkeys(self.unit_of[c] for c in chunk_ids))


@dataclass(frozen=True)
class Fitted:
    spec: FusionSpec
    weights: dict[str, float]
    ndcg10: float
    grid: dict[str, list[float]]  # fusion -> mean nDCG@10 per dense share (DENSE_SHARES), on the fitted runs

    def apply(self, config: RetrieverConfig) -> RetrieverConfig:
        return config.model_copy(update={"fusion": self.spec.method, "normalization": self.spec.normalization,
                                         "rrf_k": self.spec.rrf_k, "bm25_weight": self.weights["bm25"],
                                         "dense_weight": self.weights["dense"]})


def read_questions(path: Path) -> list[Question]:
    from ragkb.eval import jsonl_records

    questions = []
    for number, record in jsonl_records(path, "question file not found"):
        query = record.get("query")
        relevant = record.get("relevant")
        if not isinstance(query, str) or not query.strip():
            raise InvalidArgument(f"{path}:{number} needs a non-empty \"query\" string")
        if isinstance(relevant, list) and relevant and all(isinstance(d, str) for d in relevant):
            judged = {d: 1 for d in relevant}
        elif isinstance(relevant, dict) and relevant and all(isinstance(v, int) for v in relevant.values()):
            judged = {str(d): v for d, v in relevant.items()}
        else:
            raise InvalidArgument(f"{path}:{number} needs \"relevant\": a list of doc ids or a {{doc id: grade}} map")
        answers = record.get("answers", [])
        if not isinstance(answers, list) or not all(isinstance(a, str) and a.strip() for a in answers):
            raise InvalidArgument(f"{path}:{number} \"answers\" must be a list of non-empty strings")
        questions.append(Question(str(record.get("id", number)), query, judged, tuple(answers)))
    if not questions:
        raise InvalidArgument(f"{path} holds no questions")
    return questions


def split_unseen(questions: list[Question], unseen_share: float = UNSEEN_SHARE) -> tuple[list[Question], list[Question]]:
    """(tuning, unseen), decided by a hash of the query text: stable across runs and file order."""
    def unseen(question: Question) -> bool:
        digest = hashlib.sha256(question.text.encode("utf-8")).digest()
        return int.from_bytes(digest[:4], "big") / 2 ** 32 < unseen_share

    tuning = [q for q in questions if not unseen(q)]
    held_out = [q for q in questions if unseen(q)]
    if not tuning or not held_out:
        raise InvalidArgument(f"{len(questions)} questions are too few to keep an unseen part; add more")
    return tuning, held_out


def collect_runs(retriever, kb, questions: list[Question], search_filter, *, depth: int = 0,
                 progress: str = "query") -> list[QueryRun]:
    """Run every question through `retriever.retrieve` once and keep its route lists."""
    runs = []
    for question in tqdm(questions, desc=progress, unit="q"):
        started = time.perf_counter()
        # at least 10 fused hits, so nDCG@10 of the hybrid list is measured on as many as the routes'
        result = retriever.retrieve(kb, question.text, search_filter, top_k=depth or JUDGED_DEPTH,
                                    candidate_depth=depth)
        total_ms = (time.perf_counter() - started) * 1000
        lists = {"bm25": result.bm25, "dense": result.dense} | ({"sparse": result.sparse} if result.sparse else {})
        pool = {c.chunk.chunk_id: c.chunk for cs in (*lists.values(), result.candidates) for c in cs}
        unit_of, judged = judgements(question, pool)
        runs.append(QueryRun(
            question=question, routes={r: [(c.chunk.chunk_id, c.score) for c in cs] for r, cs in lists.items()},
            unit_of=unit_of, judged=judged, competence=result.competence,
            hybrid=list(dict.fromkeys(unit_of[c.chunk.chunk_id] for c in result.candidates)),
            latency_ms={"bm25": result.stages.get("bm25", 0.0), "dense": result.stages.get("dense", 0.0),
                        "hybrid": total_ms}, degraded=list(result.degraded)))
    return runs


def save_runs(path: Path, parts: Mapping[str, list[QueryRun]]) -> None:
    """Write runs as JSON lines, each with the name of its part (e.g. the split), gzip when the name ends .gz;
    `scripts/bench/fusion_replay.py` re-fuses them offline."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wt", encoding="utf-8") as handle:
        for part, runs in parts.items():
            for run in runs:
                handle.write(json.dumps({"part": part} | dataclasses.asdict(run), ensure_ascii=False) + "\n")


def load_runs(path: Path) -> dict[str, list[QueryRun]]:
    """The runs `save_runs` wrote, by part, in file order."""
    opener = gzip.open if path.suffix == ".gz" else open
    parts: dict[str, list[QueryRun]] = {}
    with opener(path, "rt", encoding="utf-8") as handle:
        for line in handle:
            record = json.loads(line)
            question = record.pop("question")
            record["question"] = Question(question["qid"], question["text"], question["judged"],
                                          tuple(question["answers"]))
            record["routes"] = {r: [(c, s) for c, s in ranked] for r, ranked in record["routes"].items()}
            parts.setdefault(record.pop("part"), []).append(QueryRun(**record))
    return parts


def judgements(question: Question, pool: Mapping) -> tuple[dict[str, str], dict[str, int]]:
    """(chunk id -> judged unit, unit -> relevance) over the pooled chunks of one question."""
    if not question.answers:
        return {chunk_id: chunk.doc_id for chunk_id, chunk in pool.items()}, question.judged
    judged = {chunk_id: question.judged[chunk.doc_id] for chunk_id, chunk in pool.items()
              if chunk.doc_id in question.judged and any(a in chunk.content for a in question.answers)}
    return {chunk_id: chunk_id for chunk_id in pool}, judged


def fuse_run(run: QueryRun, spec: FusionSpec, weights: Mapping[str, float]) -> list[str]:
    """The run's documents re-fused with another setting, exactly as the retriever would fuse them."""
    routes = {r: ranked for r, ranked in run.routes.items() if ranked}
    if not routes:
        return []
    effective = effective_weights({r: weights[r] for r in routes}, run.competence)
    return run.units(ranked_ids(fused_scores(routes, effective, spec)))


def ndcg10(ranked: list[str], judged: dict[str, int]) -> float:
    from ragkb.eval import ndcg_at

    return ndcg_at(ranked, judged, 10)


def mean_ndcg(runs: list[QueryRun], spec: FusionSpec, weights: Mapping[str, float]) -> float:
    return float(np.mean([ndcg10(fuse_run(run, spec, weights), run.judged) for run in runs]))


def route_ndcg(runs: list[QueryRun]) -> dict[str, float]:
    """nDCG@10 of each route alone and of the hybrid list the retriever returned."""
    rows = {r: float(np.mean([ndcg10(run.units(c for c, _ in run.routes[r]), run.judged) for run in runs]))
            for r in ROUTES}
    rows["hybrid"] = float(np.mean([ndcg10(run.hybrid, run.judged) for run in runs]))
    return {k: round(v, 4) for k, v in rows.items()}


def grid(runs: list[QueryRun], sparse_weight: float = 1.0) -> dict[str, list[float]]:
    """Mean nDCG@10 of every fusion (SPECS) at every dense share (DENSE_SHARES)."""
    return {spec.describe(): [mean_ndcg(runs, spec, share_weights(share, sparse_weight)) for share in DENSE_SHARES]
            for spec in SPECS}


def share_weights(share: float, sparse_weight: float = 1.0) -> dict[str, float]:
    """BM25 and dense split one unit of weight; the sparse route (bge-m3) keeps the KB's weight, not fitted."""
    return {"bm25": round(1 - share, 1), "dense": share, "sparse": sparse_weight}


def fit(runs: list[QueryRun], sparse_weight: float = 1.0) -> Fitted:
    """The setting (fusion spec x dense share) with the best mean nDCG@10; ties keep the earlier one."""
    if not runs:
        raise InvalidArgument("no tuning questions to fit on")
    scores = grid(runs, sparse_weight)
    best_score, best_spec, best_share = max(
        ((score, spec, share) for spec in SPECS for share, score in zip(DENSE_SHARES, scores[spec.describe()])),
        key=lambda item: item[0])  # max keeps the first of equal scores
    rounded = {name: [round(score, 4) for score in row] for name, row in scores.items()}
    return Fitted(best_spec, share_weights(best_share, sparse_weight), best_score, rounded)


def tune_kb(settings, kb_name: str, questions_path: Path, namespaces: list[str], *, force: bool = False) -> dict:
    """Fit the KB's fusion on the tuning part of the questions and store it with its measurements.

    The fitted setting is stored only when its unseen-part nDCG@10 is not below the current
    setting's (`force` stores it anyway); the report says which happened.
    """
    from datetime import datetime, timezone

    from services.retriever.retriever import Retriever, base_weights, fusion_spec
    from shared.config import FusionTuning
    from shared.contracts import chunk_pb2
    from shared.kb import KnowledgeBaseCatalog

    catalog = KnowledgeBaseCatalog.for_settings(settings)
    kb = catalog.get(kb_name)
    tuning, unseen = split_unseen(read_questions(questions_path))
    retriever = Retriever(settings)
    try:
        search_filter = chunk_pb2.SearchFilter(namespaces=namespaces)
        tuning_runs = collect_runs(retriever, kb, tuning, search_filter, progress="tuning part")
        unseen_runs = collect_runs(retriever, kb, unseen, search_filter, progress="unseen part")
    finally:
        retriever.close()
    fitted = fit(tuning_runs, kb.retriever.sparse_weight)
    current = (fusion_spec(kb.retriever), base_weights(kb.retriever))
    ndcg = {"tuning": route_ndcg(tuning_runs) | {"hybrid_before": round(mean_ndcg(tuning_runs, *current), 4),
                                                 "hybrid": round(fitted.ndcg10, 4)},
            "unseen": route_ndcg(unseen_runs) | {"hybrid_before": round(mean_ndcg(unseen_runs, *current), 4),
                                                 "hybrid": round(mean_ndcg(unseen_runs, fitted.spec, fitted.weights), 4)}}
    stored = force or ndcg["unseen"]["hybrid"] >= ndcg["unseen"]["hybrid_before"]
    if stored:
        record = FusionTuning(questions=str(questions_path), tuned_at=datetime.now(timezone.utc).isoformat(),
                              tuning_queries=len(tuning), unseen_queries=len(unseen), ndcg10=ndcg)
        catalog.replace(catalog.tenant_config(kb_name).model_copy(update={"retriever": fitted.apply(
            kb.retriever).model_copy(update={"tuning": record})}))
    return {"kb": kb_name, "fusion": fitted.spec.describe(), "weights": fitted.weights, "ndcg@10": ndcg,
            "stored": stored}
