"""One answer, start to finish: evidence selection, answerability, prompt + model, marker validation, claims.

The unary and streaming RPCs share this, so both refuse, validate and check the
same way. Evidence is selected and the calibrated answerability model decides
before the model is called: on weak evidence the configured "no relevant
knowledge" answer is returned. Every response carries the evidence score, the
decision and its reason.
Streamed tokens are the model's raw text; the final event carries the validated
answer, which may differ (markers repaired, unsupported sentences dropped).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from services.generator.citations import resolve_citations, validate_markers
from services.generator.claims import CheckedAnswer, ClaimChecker
from services.generator.answerability import Decision, decide, incomplete_signals
from services.generator.evidence import Embed, Evidence, select_evidence
from services.generator.extractive import Draft
from services.generator.prompts import Intent, classify_intent
from services.generator.vectors import AnswerVectors
from shared.config import GeneratorConfig
from shared.contracts import chunk_pb2, generator_pb2
from shared.text import detect_language


class Generator(Protocol):
    name: str

    def generate(self, query: str, sources: list[chunk_pb2.Candidate], *, kb: str, intent: str,
                 evidence: Evidence | None = None) -> Draft: ...

    def stream(self, query: str, sources: list[chunk_pb2.Candidate], *, kb: str, intent: str,
               evidence: Evidence | None = None) -> Iterator[str]: ...

    def is_refusal(self, answer: str) -> bool: ...


@dataclass
class _Prepared:
    query: str
    sources: list[chunk_pb2.Candidate]
    refusal: str
    intent: Intent
    evidence: Evidence
    decision: Decision
    evidence_ms: float  # evidence selection, intent and the answerability decision
    vectors: AnswerVectors | None


class Answerer:
    def __init__(self, kb: str, config: GeneratorConfig, generator: Generator, checker: ClaimChecker, *,
                 embed: Embed | None = None, embed_languages: tuple[str, ...] = (), embedder_key: str = "",
                 dimension: int = 0):
        """`embedder_key` and `dimension` name the KB's embedder (shared/sentence_vectors.embedder_key): vectors
        carried with a request are used only when they were made by it ('' = never)."""
        self._kb = kb
        self._config = config
        self._generator = generator
        self._checker = checker
        self._embed = embed
        self._embed_languages = embed_languages
        self._embedder_key = embedder_key
        self._dimension = dimension

    def answer(self, query: str, sources: list[chunk_pb2.Candidate], *,
               query_vector: chunk_pb2.QueryVector | None = None) -> generator_pb2.GenerateResponse:
        prepared = self._prepare(query, sources, query_vector)
        if prepared.decision.refuse:
            return self._finish(prepared, prepared.refusal, True, "none", 0.0)
        started = time.perf_counter()
        draft = self._generator.generate(query, prepared.sources, kb=self._kb, intent=prepared.intent.name,
                                         evidence=prepared.evidence)
        return self._finish(prepared, draft.answer, draft.refused, draft.generator, _ms(started))

    def stream(self, query: str, sources: list[chunk_pb2.Candidate], *,
               query_vector: chunk_pb2.QueryVector | None = None) -> Iterator[generator_pb2.GenerateEvent]:
        prepared = self._prepare(query, sources, query_vector)
        if prepared.decision.refuse:
            yield generator_pb2.GenerateEvent(token=prepared.refusal)
            yield generator_pb2.GenerateEvent(final=self._finish(prepared, prepared.refusal, True, "none", 0.0))
            return
        started = time.perf_counter()
        pieces: list[str] = []
        for token in self._generator.stream(query, prepared.sources, kb=self._kb, intent=prepared.intent.name,
                                            evidence=prepared.evidence):
            pieces.append(token)
            yield generator_pb2.GenerateEvent(token=token)
        text = "".join(pieces).strip()
        final = self._finish(prepared, text, self._generator.is_refusal(text), self._generator.name, _ms(started))
        yield generator_pb2.GenerateEvent(final=final)

    def _prepare(self, query: str, sources: list[chunk_pb2.Candidate],
                 query_vector: chunk_pb2.QueryVector | None) -> _Prepared:
        started = time.perf_counter()
        language = detect_language(query)
        refusal = self._config.refusal_zh if language == "zh" else self._config.refusal_en
        vectors = None if self._embed is None else AnswerVectors(
            self._embed, sources, key=self._embedder_key, dimension=self._dimension, query_vector=query_vector)
        evidence = select_evidence(query, sources, embed_languages=self._embed_languages,
                                   max_sentences=self._config.max_sentences, vectors=vectors)
        decision = decide(self._config, evidence, bool(sources), incomplete=incomplete_signals(sources))
        floor = self._config.min_evidence_score
        if not decision.refuse and evidence.signals["coverage"] < floor:
            decision = Decision(decision.score, decision.threshold, True,
                                f"no source covers enough of the question: coverage "
                                f"{evidence.signals['coverage']:.2f} is below {floor:.2f}", decision.signals)
        return _Prepared(query=query, sources=sources, refusal=refusal, intent=classify_intent(query, sources),
                         evidence=evidence, decision=decision, evidence_ms=_ms(started), vectors=vectors)

    def _finish(self, prepared: _Prepared, text: str, refused: bool, generator: str,
                generate_ms: float) -> generator_pb2.GenerateResponse:
        sources = prepared.sources
        started = time.perf_counter()
        validated = validate_markers(text, len(sources))
        validate_ms = _ms(started)
        started = time.perf_counter()
        checked = CheckedAnswer(validated.text, [], []) if refused else self._checker.check(
            validated.text, sources, prepared.query, vectors=prepared.vectors)
        check_ms = _ms(started)
        citations = [] if refused else resolve_citations(checked.text, sources)
        decision = prepared.decision
        refusal_reason = decision.reason if decision.refuse else ("the model found no answer in the sources"
                                                                  if refused else "")
        answerability = generator_pb2.Answerability(
            evidence_score=decision.score, threshold=decision.threshold,
            decision="refuse" if refused else "answer", reason=refusal_reason or decision.reason,
            signals=dict(decision.signals))
        verdicts = [c.verdict for c in checked.checks]
        return generator_pb2.GenerateResponse(
            answer=checked.text, citations=citations, citation_issues=[*validated.issues, *checked.issues],
            refused=refused, generator=generator, claim_checks=checked.checks, intent=prepared.intent.name,
            evidence_score=decision.score, refusal_reason=refusal_reason, answerability=answerability,
            stages=[
                chunk_pb2.StageReport(name="generate", ms=generate_ms, metadata={
                    "generator": generator, "intent": prepared.intent.name, "intent_reason": prepared.intent.reason,
                    "evidence": f"{decision.score:.2f}", "evidence_threshold": f"{decision.threshold:g}",
                    "decision": answerability.decision, "decision_reason": answerability.reason,
                    "model_called": str(not decision.refuse).lower(), "refusal_reason": refusal_reason}),
                chunk_pb2.StageReport(name="validate_citations", ms=validate_ms,
                                      metadata={"issues": str(len(validated.issues))}),
                chunk_pb2.StageReport(name="check_claims", ms=check_ms, metadata={
                    "method": self._checker.method, "checked": str(len(verdicts)),
                    "flagged": str(verdicts.count("flagged")), "dropped": str(verdicts.count("dropped"))}),
                chunk_pb2.StageReport(name="select_evidence", ms=prepared.evidence_ms,
                                      metadata={"sentences": str(len(prepared.evidence.sentences))}),
                *self._embed_report(prepared.vectors),
            ],
        )


    @staticmethod
    def _embed_report(vectors: AnswerVectors | None) -> list[chunk_pb2.StageReport]:
        """The time the answer spent embedding (in evidence selection and the claim check) and which vectors
        it computed and which came with the request."""
        if vectors is None:
            return []
        return [chunk_pb2.StageReport(name="embed", ms=round(vectors.embed_ms, 2), metadata=vectors.report())]


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 2)
