"""Answer quality on labelled questions, through the product's own retriever, reranker and generator.

    ragkb eval-answers --kb K --questions FILE [--corpus FILE] [--sweep] [--json]
    ragkb calibrate --kb K --questions FILE [--corpus FILE] --target-answer-rate 0.9

Questions are JSONL: `id`, `question`, `answerable`, `gold_doc_ids`, `gold_answers`,
`language`, and optionally `group` (questions on one topic share it and stay in one part).
Without `--corpus` the questions run against knowledge base K as it is in the data
directory (stop a running `ragkb up` first: the embedded stores are single-process).
With `--corpus` (JSONL of `_id` + `title`/`text`, or `_id` + `path` of a file the real
parser reads, relative to the corpus file) a throw-away copy of K's config is filled
with that corpus in a temporary directory, one document per line.

Every question belongs to a fixed part, `tune` or `unseen`, by a hash of its group or else
its id: `calibrate` fits on the tune part only, and the report shows both parts.
"""

from __future__ import annotations

import hashlib
import re
import string
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import yaml
from tqdm import tqdm

from ragkb.eval import jsonl_records
from shared import kb_settings, tenancy
from shared.contracts import chunk_pb2
from shared.errors import InvalidArgument
from shared.hit_reading import mark_readings
from shared.text import detect_language

NAMESPACE = "default"
PARTS = ("tune", "unseen")
_MARKER = re.compile(r"\[\d+\]")
_CJK = re.compile(r"[\u3400-\u9fff]")
_CJK_OR_RUN = re.compile(r"[\u3400-\u9fff]|[^\u3400-\u9fff\s]+")  # a Chinese character, or a run such as 300
_ARTICLES = re.compile(r"\b(a|an|the)\b")


@dataclass(frozen=True)
class Question:
    id: str
    question: str
    answerable: bool
    gold_doc_ids: tuple[str, ...]
    gold_answers: tuple[str, ...]
    language: str
    group: str = ""  # a topic: its questions share passages, so they must not be split between the parts

    @property
    def part(self) -> str:
        """A fixed split: the same question is always in the same part, whichever file it comes from."""
        return PARTS[int(hashlib.sha1((self.group or self.id).encode()).hexdigest()[:8], 16) % 2]


@dataclass
class Outcome:
    id: str
    part: str
    language: str
    answerable: bool
    refused: bool
    evidence_score: float
    reason: str
    gold_in_sources: bool
    cited: list[str]
    cited_gold: int
    f1: float | None
    recall: float | None
    contains_answer: bool | None
    claims: int
    claims_supported: int
    ms: float
    signals: dict[str, float] = field(default_factory=dict)


def load_questions(path: Path) -> list[Question]:
    questions = []
    for number, record in jsonl_records(path):
        missing = [k for k in ("id", "question", "answerable") if k not in record]
        if missing:
            raise InvalidArgument(f"{path}:{number} lacks {', '.join(missing)}")
        if not isinstance(record["answerable"], bool):
            raise InvalidArgument(f"{path}:{number} answerable must be true or false")
        text = str(record["question"]).strip()
        if not text:
            raise InvalidArgument(f"{path}:{number} has an empty question")
        questions.append(Question(
            id=str(record["id"]), question=text, answerable=record["answerable"],
            gold_doc_ids=tuple(str(d) for d in record.get("gold_doc_ids") or ()),
            gold_answers=tuple(str(a) for a in record.get("gold_answers") or ()),
            language=str(record.get("language") or ""), group=str(record.get("group") or "")))
    if not questions:
        raise InvalidArgument(f"{path} holds no questions")
    return questions


# --- answer scoring ------------------------------------------------------------------------------

def answer_tokens(text: str) -> list[str]:
    """SQuAD-style normalisation: no markers, punctuation or articles; Chinese by character."""
    text = _MARKER.sub(" ", text).lower()
    text = "".join(" " if ch in string.punctuation or ch in "，。！？；：、“”‘’（）《》「」" else ch for ch in text)
    text = _ARTICLES.sub(" ", text)
    tokens = []
    for word in text.split():
        tokens.extend(_CJK_OR_RUN.findall(word) if _CJK.search(word) else [word])
    return tokens


def token_scores(answer: str, gold_answers: Sequence[str]) -> tuple[float, float]:
    """Best token F1 and token recall of the answer over the gold answers."""
    predicted = Counter(answer_tokens(answer))
    best_f1 = best_recall = 0.0
    for gold in gold_answers:
        wanted = Counter(answer_tokens(gold))
        common = sum((predicted & wanted).values())
        if not common or not wanted:
            continue
        precision, recall = common / sum(predicted.values()), common / sum(wanted.values())
        best_f1 = max(best_f1, 2 * precision * recall / (precision + recall))
        best_recall = max(best_recall, recall)
    return best_f1, best_recall


def contains_answer(answer: str, gold_answers: Sequence[str]) -> bool:
    normalized = " ".join(answer_tokens(answer))
    return any(" ".join(answer_tokens(g)) in normalized for g in gold_answers if answer_tokens(g))


def roc_auc(scores: Sequence[float], labels: Sequence[bool]) -> float:
    """Probability that an answerable question scores above an unanswerable one (ties count half)."""
    positive = [s for s, y in zip(scores, labels) if y]
    negative = [s for s, y in zip(scores, labels) if not y]
    if not positive or not negative:
        return float("nan")
    ranks = _average_ranks(np.array([*positive, *negative]))
    return float((ranks[: len(positive)].sum() - len(positive) * (len(positive) + 1) / 2)
                 / (len(positive) * len(negative)))


def _average_ranks(values: np.ndarray) -> np.ndarray:
    order = values.argsort(kind="mergesort")
    ranks = np.empty(len(values))
    sorted_values = values[order]
    start = 0
    while start < len(values):
        end = start
        while end + 1 < len(values) and sorted_values[end + 1] == sorted_values[start]:
            end += 1
        ranks[order[start:end + 1]] = (start + end) / 2 + 1
        start = end + 1
    return ranks


# --- the pipeline ----------------------------------------------------------------------------------

class Pipeline:
    """Retriever -> reranker -> generator as the gateway runs them, in this process: the KB is resolved once
    from the catalog and each stage gets its settings in the request, as the inner services do."""

    def __init__(self, settings, kb: str):
        from services.generator.main import components as generator_components
        from services.generator.servicer import GeneratorServicer
        from services.reranker.main import components as reranker_components
        from services.reranker.servicer import RerankerServicer
        from services.retriever.retriever import Retriever
        from shared.kb import KnowledgeBaseCatalog
        from shared.profiles import LiveProfiles

        catalog = KnowledgeBaseCatalog.for_settings(settings)
        self.kb = kb
        self._settings = kb_settings.for_catalog(catalog, kb)  # a missing KB is a clear error before any question
        self._config = catalog.get(kb)
        resolver = kb_settings.SettingsResolver(LiveProfiles.for_settings(settings))
        self._retriever = Retriever(settings)
        self._reranker = RerankerServicer(reranker_components(), resolver, None)
        self._generator = GeneratorServicer(generator_components(), resolver)

    def ask(self, question: Question) -> tuple[object, list[chunk_pb2.Candidate], float]:
        with tenancy.acting_for(tenancy.operator_tenant("eval-answers", namespaces=[NAMESPACE])):
            return self._ask(question)

    def _ask(self, question: Question) -> tuple[object, list[chunk_pb2.Candidate], float]:
        from shared.contracts import generator_pb2, reranker_pb2

        started = time.perf_counter()
        retrieved = self._retriever.retrieve(self._config, question.question,
                                             chunk_pb2.SearchFilter(namespaces=[NAMESPACE]))
        rerank = reranker_pb2.RerankRequest(kb=self.kb, query=question.question, candidates=retrieved.candidates)
        reranked = self._reranker.Rerank(self._with_settings(rerank, "reranker"), None)
        sources = list(reranked.candidates)
        generate = generator_pb2.GenerateRequest(kb=self.kb, query=question.question, sources=sources)
        response = self._generator.Generate(self._with_settings(generate, "generator"), None)
        return response, sources, (time.perf_counter() - started) * 1000

    def _with_settings(self, request, service: str):
        with kb_settings.using(self._settings):
            kb_settings.attach(request, service)
        return request

    def close(self) -> None:
        self._retriever.close()


def evaluate(pipeline: Pipeline, questions: Sequence[Question], *, progress: bool = True) -> list[Outcome]:
    outcomes = []
    for question in tqdm(questions, desc="questions", unit="q", disable=not progress, file=sys.stderr):
        response, sources, ms = pipeline.ask(question)
        gold = set(question.gold_doc_ids)
        cited = list(dict.fromkeys(c.doc_id for c in response.citations))
        scored = question.answerable and question.gold_answers and not response.refused
        f1, recall = token_scores(response.answer, question.gold_answers) if scored else (None, None)
        verdicts = [c.verdict for c in response.claim_checks]
        outcomes.append(Outcome(
            id=question.id, part=question.part, language=question.language or detect_language(question.question),
            answerable=question.answerable, refused=response.refused,
            evidence_score=response.answerability.evidence_score, reason=response.answerability.reason,
            gold_in_sources=bool(gold & {s.chunk.doc_id for s in sources}), cited=cited,
            cited_gold=sum(d in gold for d in cited), f1=f1, recall=recall,
            contains_answer=contains_answer(response.answer, question.gold_answers) if scored else None,
            claims=len(verdicts), claims_supported=verdicts.count("supported"), ms=round(ms, 2),
            signals=dict(response.answerability.signals)))
    return outcomes


def summarize(outcomes: Sequence[Outcome]) -> dict[str, float]:
    answerable = [o for o in outcomes if o.answerable]
    unanswerable = [o for o in outcomes if not o.answerable]
    answered = [o for o in answerable if not o.refused]
    cited = sum(len(o.cited) for o in answered)
    scored = [o for o in answered if o.f1 is not None]
    all_answered = [o for o in outcomes if not o.refused]
    claims = sum(o.claims for o in all_answered)
    latency = np.array([o.ms for o in outcomes] or [0.0])
    return {
        "questions": len(outcomes), "answerable": len(answerable), "unanswerable": len(unanswerable),
        "gold_in_sources": _share(sum(o.gold_in_sources for o in answerable), len(answerable)),
        "answer_rate": _share(len(answered), len(answerable)),
        "refusal_rate": _share(sum(o.refused for o in unanswerable), len(unanswerable)),
        "citation_precision": _share(sum(o.cited_gold for o in answered), cited),
        "citation_hit": _share(sum(o.cited_gold > 0 for o in answered), len(answered)),
        "token_f1": _mean([o.f1 for o in scored]), "token_recall": _mean([o.recall for o in scored]),
        "contains_answer": _mean([float(o.contains_answer) for o in scored]),
        "claim_support": _share(sum(o.claims_supported for o in all_answered), claims),
        "roc_auc": roc_auc([o.evidence_score for o in outcomes], [o.answerable for o in outcomes]),
        "p50_ms": float(np.percentile(latency, 50)), "p95_ms": float(np.percentile(latency, 95)),
    }


def sweep(outcomes: Sequence[Outcome], steps: int = 20) -> list[dict[str, float]]:
    """Answer/refusal trade-off if the evidence-score threshold were each of 0, 1/steps, ..., 1."""
    answerable = np.array([o.evidence_score for o in outcomes if o.answerable])
    unanswerable = np.array([o.evidence_score for o in outcomes if not o.answerable])
    rows = []
    for threshold in np.linspace(0, 1, steps + 1):
        rows.append({"threshold": round(float(threshold), 3),
                     "answer_rate": float(np.mean(answerable >= threshold)) if len(answerable) else float("nan"),
                     "refusal_rate": float(np.mean(unanswerable < threshold)) if len(unanswerable) else float("nan")})
    return rows


def report(outcomes: Sequence[Outcome]) -> dict[str, dict[str, float]]:
    return {part: summarize([o for o in outcomes if o.part == part]) for part in PARTS} | {
        "all": summarize(outcomes)}


def _share(count: float, total: int) -> float:
    return count / total if total else float("nan")


def _mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if values else float("nan")


ROWS = (("answer_rate", "answers on answerable"), ("refusal_rate", "refusals on unanswerable"),
        ("roc_auc", "evidence ROC AUC"), ("citation_precision", "citation precision"),
        ("citation_hit", "citation hit"), ("gold_in_sources", "gold passage in sources"),
        ("token_f1", "token F1"), ("token_recall", "token recall"), ("contains_answer", "contains gold answer"),
        ("claim_support", "claim-support rate"), ("p50_ms", "latency p50 ms"), ("p95_ms", "latency p95 ms"))


def format_report(results: dict[str, dict[str, float]]) -> str:
    parts = list(results)
    lines = [f"{'metric':<26}" + "".join(f"{p:>10}" for p in parts),
             f"{'questions (ans/unans)':<26}" + "".join(
                 f"{results[p]['answerable']:>5}/{results[p]['unanswerable']:<4}" for p in parts)]
    for key, label in ROWS:
        lines.append(f"{label:<26}" + "".join(f"{results[p][key]:>10.3f}" for p in parts))
    return "\n".join(lines)


def format_sweep(rows: list[dict[str, float]]) -> str:
    lines = ["threshold  answers(answerable)  refusals(unanswerable)"]
    lines += [f"{r['threshold']:>9.2f}  {r['answer_rate']:>19.3f}  {r['refusal_rate']:>22.3f}" for r in rows]
    return "\n".join(lines)


# --- corpora and knowledge bases --------------------------------------------------------------------

def corpus_chunks(kb: str, corpus: Path, *, chunker=None) -> list[chunk_pb2.KnowledgeChunk]:
    """One document per corpus line: a passage (title + text) as one chunk, or a file through the real parser."""
    from ragkb.eval import document_chunks
    from services.parser.parser import parse_document

    passages: dict[str, tuple[str, str]] = {}
    chunks: list[chunk_pb2.KnowledgeChunk] = []
    for number, record in jsonl_records(corpus):
        doc_id = str(record.get("_id") or "")
        if not doc_id:
            raise InvalidArgument(f"{corpus}:{number} has no _id")
        if "path" in record:
            path = (corpus.parent / str(record["path"])).resolve()
            if not path.is_file():
                raise InvalidArgument(f"{corpus}:{number}: no such file {path}")
            parsed = parse_document(kb=kb, namespace=NAMESPACE, filename=path.name, data=path.read_bytes(),
                                    doc_id=doc_id, chunker=chunker)
            chunks.extend(parsed.chunks)
        else:
            passages[doc_id] = (str(record.get("title") or ""), str(record.get("text") or ""))
    for chunk in document_chunks(kb, passages):
        chunk.namespace = NAMESPACE
        chunks.append(chunk)
    return chunks


@contextmanager
def knowledge_base(kb: str, corpus: Path | None, *, cache_path: Path | None = None):
    """(settings, kb name): K in the data directory, or a temporary copy of K's config holding `corpus`."""
    from ragkb.eval import VectorCache, embed_with_cache
    from shared import components
    from shared.config import KBConfig, KeywordStoreConfig, Settings
    from shared.kb import KnowledgeBaseCatalog

    settings = Settings.from_env()
    if corpus is None:
        yield settings, kb
        return
    home = KnowledgeBaseCatalog.for_settings(settings)
    tenant = home.tenant_config(kb) if home.exists(kb) else KBConfig(name=kb)
    with tempfile.TemporaryDirectory(prefix="ragkb-answers-") as temp:
        # the operator's models, LLMs and templates, with the built-in store profiles: files under `temp`
        local = home.profiles.model_copy(update={"keyword_store": {}, "vector_store": {}})
        (Path(temp) / "profiles.yaml").write_text(yaml.safe_dump(local.model_dump(mode="json")), encoding="utf-8")
        temp_settings = Settings(data_dir=Path(temp))
        catalog = KnowledgeBaseCatalog.for_settings(temp_settings)
        catalog.create(kb)
        config = catalog.replace(tenant.model_copy(update={
            "keyword_store": KeywordStoreConfig(analyzer=tenant.keyword_store.analyzer),
            "vector_store": tenant.vector_store.model_copy(update={"name": "milvus", "profile": "default"})}))
        chunks = corpus_chunks(kb, corpus, chunker=config.chunker)
        cache = VectorCache(cache_path or Path.home() / ".cache" / "ragkb" / "eval-vectors.sqlite")
        embedder = components.embedder_for(config)
        vectors = embed_with_cache(embedder, [c.content for c in chunks], cache)
        cache.close()
        mark_readings(embedder, chunks)  # as the indexer stores them
        keyword = components.keyword_store_for(config, temp_settings)
        vector = components.vector_store_for(config, temp_settings)
        for start in range(0, len(chunks), 500):
            keyword.upsert(chunks[start:start + 500])
            vector.upsert(chunks[start:start + 500], vectors[start:start + 500])
        print(f"indexed {len(chunks)} chunks of {corpus}", file=sys.stderr)
        yield temp_settings, kb


def run(kb: str, questions_path: Path, corpus: Path | None = None, *, limit: int = 0,
        progress: bool = True) -> list[Outcome]:
    questions = load_questions(questions_path)
    if limit:
        questions = questions[:limit]
    with knowledge_base(kb, corpus) as (settings, name):
        pipeline = Pipeline(settings, name)
        try:
            return evaluate(pipeline, questions, progress=progress)
        finally:
            pipeline.close()


def calibrate(kb: str, questions_path: Path, corpus: Path | None = None, *, target_answer_rate: float = 0.9,
              limit: int = 0) -> dict[str, object]:
    """Fit one answerability model per question language on the tune part; store them in K's config."""
    from services.generator.answerability import fit
    from shared.config import Settings
    from shared.kb import KnowledgeBaseCatalog

    outcomes = [o for o in run(kb, questions_path, corpus, limit=limit) if o.part == "tune"]
    models = {}
    for language in sorted({o.language for o in outcomes}):
        rows = [o for o in outcomes if o.language == language]
        try:
            models[language] = fit([o.signals for o in rows], [o.answerable for o in rows],
                                   target_answer_rate=target_answer_rate)
        except ValueError as error:
            print(f"language {language or '(unset)'}: not calibrated: {error}", file=sys.stderr)
    if not models:
        raise InvalidArgument("no language had enough labelled questions of both kinds to calibrate")
    catalog = KnowledgeBaseCatalog.for_settings(Settings.from_env())
    if not catalog.exists(kb):
        catalog.create(kb)
    config = catalog.tenant_config(kb)
    generator = config.generator.model_copy(update={"answerability": {**config.generator.answerability, **models}})
    catalog.replace(config.model_copy(update={"generator": generator}))
    return {language: model.model_dump() for language, model in models.items()}


def outcomes_json(outcomes: Sequence[Outcome]) -> list[dict]:
    return [asdict(o) for o in outcomes]
