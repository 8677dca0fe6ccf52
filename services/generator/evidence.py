"""Evidence selection: which sentences of which passages carry the answer, and the signals of how strongly.

Every sentence of the sources is scored against the question: lexical (share of
the question's idf-weighted content terms it holds, its passage heading helping
a little) plus, when the KB's embedder understands the question's language, the
embedding cosine of question and sentence (only for sentences that share a
term with the question: the others cannot be in the span). The answer span is a
run of contiguous sentences of the best passage, and no other passage is quoted
(weaker passages mixed into the answer are what made citations imprecise).
Table rows count only when no sentence does as well or the question asks for a
table; infobox-like fragments and sentences that address the assistant are
never evidence.

The same pass yields the answerability signals (see `answerability.py`):
coverage of the question by the best source and by the span, sentence-level
lexical and dense scores, the retrieval routes' strength, margin and agreement,
the reranker score when one ran, and three cues of a question the passage only
seems to answer: a negation the answer sentence lacks, no new phrase of the asked
kind in the span (`answer_type.py`), a presupposition the passage contradicts.
The cues fire only for a query worded as a question; `claim_form` marks a statement
(a claim to check), whose evidence looks different from a question's.
"""

from __future__ import annotations

import functools
import math
import re
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from services.generator.answer_type import holds_answer_type, is_question_form
from shared.contracts import chunk_pb2
from shared.sentences import chunk_body, is_question, is_table_row, quotable_sentences
from shared.text import analyze, detect_language, query_terms

Embed = Callable[[list[str]], np.ndarray]

_NUMBER_ASK = re.compile(r"\bhow (?:many|much|long|far|old|often|fast|big|large|heavy|high|tall)\b|\bwhen\b"
                         r"|\bwhat (?:year|date|percentage|number)\b|多久|多少|几|多长|多大|多重|多高|何时|哪一?年|什么时候",
                         re.IGNORECASE)
_NUMBER = re.compile(r"\d|[一二三四五六七八九十百千万两]")
_TABLE_ASK = re.compile(r"\b(?:table|list|specification|specs?|compare|comparison)\b|表格?|列表|参数|规格", re.IGNORECASE)
LEXICAL_WEIGHT_WITH_DENSE = 0.5  # share of the lexical score when a dense score exists
HEADING_BONUS = 0.15  # question terms found only in the passage heading count this much
FOREIGN_LANGUAGE_FACTOR = 0.6  # a sentence in another language than the question's
NO_NUMBER_FACTOR = 0.8  # a question asking for a number, date or duration, and a sentence holding none
TABLE_ROW_FACTOR = 0.75  # a table row, unless the question asks for a table or list
NEIGHBOUR_RATIO = 0.85  # a neighbour sentence joins the span at this share of the span's best sentence
CHUNK_READINGS = 4096  # chunk texts whose sentences and terms are kept (bounded LRU)
# the n-th retrieved source's sentences compete for the answer at PASSAGE_RANK_DECAY ** (n - 1) of their score: a
# sentence of a lower-ranked passage must be clearly better to be cited (fitted on the tune parts: most
# wrong citations quoted the second or third passage over a first one that held the answer)
PASSAGE_RANK_DECAY = 0.85


class CachedEmbed:
    """An embed function that remembers the vectors of recent texts: the passages a KB's questions hit
    repeat, so their sentences are embedded once, not for every question."""

    def __init__(self, embed: Embed, capacity: int = 50_000):
        self._embed = embed
        self._capacity = capacity
        self._vectors: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def __call__(self, texts: list[str]) -> np.ndarray:
        with self._lock:
            missing = list(dict.fromkeys(t for t in texts if t not in self._vectors))
        if missing:
            fresh = self._embed(missing)
            with self._lock:
                for text, vector in zip(missing, fresh):
                    self._vectors[text] = vector
                while len(self._vectors) > self._capacity:
                    self._vectors.popitem(last=False)
        with self._lock:
            found = {t: self._vectors[t] for t in texts if t in self._vectors}
        # a text evicted between the two steps by another thread is embedded again
        absent = [t for t in dict.fromkeys(texts) if t not in found]
        if absent:
            found.update(zip(absent, self._embed(absent)))
        return np.stack([found[t] for t in texts])


def stem(token: str) -> str:
    """A light English stemmer, enough to match 'charging' with 'charge' and "Emma's" with 'Emma' inside one
    answer."""
    if token.endswith(("'s", "’s")):
        return token[:-2]
    for suffix in ("ing", "ed", "es", "s"):
        if len(token) > len(suffix) + 3 and token.endswith(suffix):
            return token[: -len(suffix)]
    return token


def terms(text: str) -> set[str]:
    return {stem(t) for t in analyze(text)}


# words that frame a question rather than name what it is about ("What does E310 mean?")
QUESTION_FRAME = frozenset("mean means meaning call called name named refer describe explain tell know happen happens "
                           "意思 含义 是否".split())


def question_terms(query: str) -> set[str]:
    wanted = {stem(t) for t in query_terms(query)}
    return (wanted - QUESTION_FRAME) or wanted


@dataclass(frozen=True)
class SentenceReading:
    """What scoring reads from one quotable sentence, whatever the question."""
    order: int  # position among the chunk's quotable sentences
    text: str
    terms: frozenset[str]
    language: str
    has_number: bool
    table_row: bool


@dataclass(frozen=True)
class ChunkReading:
    """What evidence selection and the claim check read from a chunk, whatever the question: its sentences
    (questions left out, they are not answers), their terms, and the terms of the whole chunk."""
    sentences: tuple[SentenceReading, ...]
    heading_terms: frozenset[str]
    terms: frozenset[str]  # of heading and body: the coverage signals
    content_terms: frozenset[str]  # stemmed content terms of heading and body: the claims' lexical support


def read_chunk(chunk: chunk_pb2.KnowledgeChunk) -> ChunkReading:
    """The chunk's reading, computed once per text: passages recur across questions."""
    return _read(tuple(chunk.heading_path), chunk_body(chunk))


@functools.lru_cache(maxsize=CHUNK_READINGS)
def _read(heading_path: tuple[str, ...], body: str) -> ChunkReading:
    sentences = tuple(
        SentenceReading(order, sentence, frozenset(terms(sentence)), detect_language(sentence),
                        bool(_NUMBER.search(sentence)), is_table_row(sentence))
        for order, sentence in enumerate(quotable_sentences(body)) if not is_question(sentence))
    text = " ".join(heading_path) + "\n" + body
    return ChunkReading(sentences, frozenset(terms(" ".join(heading_path))), frozenset(terms(text)),
                        frozenset(stem(t) for t in query_terms(text.strip())))


@dataclass
class ScoredSentence:
    number: int  # the source's [n]
    order: int  # position inside the source
    text: str
    lexical: float
    dense: float | None
    score: float


@dataclass
class Evidence:
    language: str
    sentences: list[ScoredSentence]  # every quotable sentence, scored
    span: list[ScoredSentence]  # the answer: contiguous sentences of the best passage, in order
    signals: dict[str, float] = field(default_factory=dict)

    @property
    def cited(self) -> list[int]:
        return sorted({s.number for s in self.span})


def coverage(wanted: set[str], text: str) -> float:
    return _share(wanted, terms(text))


def _share(wanted: set[str], held: set[str] | frozenset[str]) -> float:
    return len(wanted & held) / len(wanted) if wanted else 0.0


def select_evidence(query: str, sources: Sequence[chunk_pb2.Candidate], *, embed: Embed | None = None,
                    embed_languages: Sequence[str] = (), max_sentences: int = 3, vectors=None) -> Evidence:
    """`vectors` (services/generator/vectors.AnswerVectors) gives the question's and sentences' vectors, carried
    with the request or computed; `embed` alone computes them all."""
    language = detect_language(query)
    wanted = question_terms(query)
    tables_wanted = bool(_TABLE_ASK.search(query))
    number_wanted = bool(_NUMBER_ASK.search(query))
    readings = [read_chunk(candidate.chunk) for candidate in sources]
    rows = [(number, sentence, reading.heading_terms)
            for number, reading in enumerate(readings, start=1) for sentence in reading.sentences]
    frequency: Counter[str] = Counter(t for row in rows for t in row[1].terms & wanted)
    total = max(1, len(rows))
    idf = {t: math.log(1 + total / (1 + frequency[t])) for t in wanted}
    weight = sum(idf.values()) or 1.0
    dense_scores: list[float | None] = [None] * len(rows)
    # only sentences sharing a term with the question can be in the span: the others are not embedded
    sharing = [i for i, (_, sentence, heading) in enumerate(rows) if wanted & (sentence.terms | heading)]
    if (vectors is not None or embed is not None) and sharing and language in embed_languages:
        if vectors is None:
            from services.generator.vectors import AnswerVectors  # it reads chunks with this module

            vectors = AnswerVectors(embed, sources)
        question, found = vectors.evidence(query, [(rows[i][0], rows[i][1]) for i in sharing])
        for i, vector in zip(sharing, found):
            dense_scores[i] = float(np.dot(question, vector))
    scored = []
    for (number, sentence, heading), dense in zip(rows, dense_scores):
        lexical = sum(idf[t] for t in wanted & sentence.terms) / weight
        lexical = min(1.0, lexical + HEADING_BONUS * sum(idf[t] for t in (wanted & heading) - sentence.terms) / weight)
        score = lexical if dense is None else (LEXICAL_WEIGHT_WITH_DENSE * lexical
                                               + (1 - LEXICAL_WEIGHT_WITH_DENSE) * max(0.0, dense))
        if sentence.language not in (language, "und"):
            score *= FOREIGN_LANGUAGE_FACTOR  # answer in the asker's language when the sources allow
        if number_wanted and not sentence.has_number:
            score *= NO_NUMBER_FACTOR  # "how long?" is answered by a sentence that states a duration
        if not tables_wanted and sentence.table_row:
            score *= TABLE_ROW_FACTOR  # a row answers only when no sentence does as well
        scored.append(ScoredSentence(number, sentence.order, sentence.text, round(lexical, 4),
                                     None if dense is None else round(dense, 4), round(score, 4)))
    # chunks handed over without retrieval ranks come in no particular order: their place says nothing
    ranked = any(c.bm25_rank or c.dense_rank or c.rerank_score for c in sources)
    span = _span(scored, max_sentences, tables_wanted=tables_wanted,
                 rank_decay=PASSAGE_RANK_DECAY if ranked else 1.0)
    evidence = Evidence(language, scored, span)
    evidence.signals = _signals(query, wanted, sources, readings, evidence)
    return evidence


def _span(scored: list[ScoredSentence], max_sentences: int, *, tables_wanted: bool,
          rank_decay: float = 1.0) -> list[ScoredSentence]:
    """The best sentence (its passage's retrieval rank counting), grown with strong contiguous neighbours of
    the same passage (with every neighbouring row of its table when the question asks for a table)."""
    useful = [s for s in scored if s.lexical > 0]
    if not useful:
        return []
    best = max(useful, key=lambda s: (s.score * rank_decay ** (s.number - 1), -s.number, -s.order))
    passage = {s.order: s for s in scored if s.number == best.number}
    span = [best]
    while len(span) < max_sentences:
        before, after = passage.get(span[0].order - 1), passage.get(span[-1].order + 1)
        options = [s for s in (before, after) if s is not None and (
            s.lexical > 0 and s.score >= NEIGHBOUR_RATIO * best.score
            or tables_wanted and is_table_row(best.text) and is_table_row(s.text))]
        if not options:
            break
        chosen = max(options, key=lambda s: s.score)
        span = [chosen, *span] if chosen is before else [*span, chosen]
    return span


SIGNALS = ("coverage", "span_coverage", "sentence_lexical", "sentence_dense", "dense_top", "dense_margin",
           "bm25_top", "route_agreement", "rerank_top", "negation_mismatch", "answer_type_missing", "question_conflict",
           "claim_form")
# a question that says "not", "never", "least"... where its answer sentence does not: SQuAD 2.0 writes
# unanswerable questions by adding one of these to a question the paragraph answers
_NEGATION_CUE = re.compile(r"\b(?:not|no|never|none|nor|neither|without|cannot|least|fewest|lack|lacks|lacked|fail|"
                           r"failed|unable)\b|n't\b|不|没|未|无|非|别", re.IGNORECASE)
# the offline claim rules' verdicts that also mean "this passage does not answer this question" (a swapped
# name or another unit is common between a question and the sentence that does answer it)
QUESTION_CONFLICTS = ("number mismatch", "negation flip", "antonym")


def question_conflict(query: str, passage: Sequence[str]) -> str:
    """Why the passage contradicts what the question presupposes ("after" where it says "before", a year it
    does not state, a "not" it lacks), or ''."""
    from services.generator.verifiers import ContradictionRules  # verifiers imports this module's stemmer

    reason = ContradictionRules().find(query, list(passage)) if passage else ""
    return reason if reason.startswith(QUESTION_CONFLICTS) else ""


def _signals(query: str, wanted: set[str], sources: Sequence[chunk_pb2.Candidate], readings: Sequence[ChunkReading],
             evidence: Evidence) -> dict[str, float]:
    """The answerability features; each is in a comparable range across knowledge bases (0..1 or log-scaled)."""
    dense = sorted((c.dense_score for c in sources if c.dense_rank), reverse=True)
    bm25 = sorted((c.bm25_score for c in sources if c.bm25_rank), reverse=True)
    reranked = [c.rerank_score for c in sources if c.rerank_score]
    span_text = " ".join(s.text for s in evidence.span)
    best = max(evidence.span, key=lambda s: s.score) if evidence.span else None
    passage = [s.text for s in evidence.sentences if best and s.number == best.number]
    # the question cues read a question's form; a statement to check (a claim) states its negations and
    # numbers itself, whether or not a source holds it
    asked = is_question_form(query)
    agreement = any(c.bm25_rank == 1 and 0 < c.dense_rank <= 2 or c.dense_rank == 1 and 0 < c.bm25_rank <= 2
                    for c in sources)
    return {
        "coverage": round(max((_share(wanted, r.terms) for r in readings), default=0.0), 4),
        "span_coverage": round(coverage(wanted, span_text), 4),
        "sentence_lexical": best.lexical if best else 0.0,
        "sentence_dense": (best.dense or 0.0) if best else 0.0,
        "dense_top": round(dense[0], 4) if dense else 0.0,
        "dense_margin": round(dense[0] - dense[1], 4) if len(dense) > 1 else 0.0,
        "bm25_top": round(math.log1p(max(0.0, bm25[0])) / math.log1p(max(1, len(wanted)) * 4), 4) if bm25 else 0.0,
        "route_agreement": 1.0 if agreement else 0.0,
        "rerank_top": round(max(reranked), 4) if reranked else 0.0,
        "negation_mismatch": 1.0 if asked and _NEGATION_CUE.search(query) and not _NEGATION_CUE.search(span_text)
        else 0.0,
        "answer_type_missing": 1.0 if asked and span_text and holds_answer_type(query, span_text) is False else 0.0,
        "question_conflict": 1.0 if asked and question_conflict(query, passage) else 0.0,
        "claim_form": 0.0 if asked else 1.0,
    }
