"""Optional pre-retrieval steps: query rewrite, multi-query and HyDE.

All three are off by default and fail soft: an error or a timeout leaves the
query as it was and the trace records what happened.

- query_rewrite: deterministic clean-up of conversational filler ("could you
  tell me", "请问", "谢谢") so the keyword route sees the question itself.
- multi_query: deterministic variants (one per sub-question, plus the keyword
  form) retrieved separately and fused by RRF.
- hyde: a hypothetical answer drafted by the configured generator from a first
  retrieval pass; the draft is retrieved with as an extra query. With an LLM
  generator this is classic HyDE; with the extractive one it is pseudo-relevance
  feedback from the best passages.
"""

from __future__ import annotations

import contextvars
import re
import time
from concurrent import futures

from services.gateway.query.stages import Preprocessed, QueryContext, elapsed_ms
from shared.clients import GeneratorClient, RetrieverClient
from shared.contracts import retriever_pb2
from shared.errors import DeadlineExceeded
from shared.text import detect_language, query_terms, split_sentences

MAX_EXTRA_QUERIES = 3
HYDE_SOURCES = 3
HYDE_MAX_CHARS = 600

_FILLER_EN = re.compile(
    r"^\s*(?:(?:hi|hello|hey)[,!.\s]+)?(?:(?:please|kindly)\s+)?"
    r"(?:(?:can|could|would|will)\s+you\s+(?:please\s+)?(?:tell|show|explain\s+to)\s+me|"
    r"i\s+(?:want|would\s+like|need)\s+to\s+know|do\s+you\s+know|tell\s+me)\s*[,:]?\s*",
    re.IGNORECASE,
)
_TRAILING_EN = re.compile(r"[,\s]*(?:please|thanks?(?:\s+you)?|thx)\s*[.!]*\s*$", re.IGNORECASE)
_FILLER_ZH = re.compile(r"^\s*(?:你好[，,！!]?\s*)?(?:请问一下|请问|麻烦问一下|麻烦|我想知道|我想问一下|我想问|想请教一下|请告诉我|告诉我)\s*[，,：:]?\s*")
_TRAILING_ZH = re.compile(r"[，,\s]*(?:谢谢(?:你|您)?|多谢)\s*[。！!]*\s*$")
_CITATION = re.compile(r"\[\d+\]")


def rewrite_query(query: str) -> str:
    """The question without greetings and politeness around it; the query itself when nothing is left."""
    rewritten = query
    for pattern in (_FILLER_EN, _TRAILING_EN, _FILLER_ZH, _TRAILING_ZH):
        rewritten = pattern.sub("", rewritten)
    rewritten = re.sub(r"([?？!！。.])\1+", r"\1", rewritten).strip()
    return rewritten if len(rewritten) >= 2 else query


def query_variants(query: str) -> list[str]:
    """Up to MAX_EXTRA_QUERIES other phrasings: each sub-question, then the keyword-only form."""
    variants: list[str] = []
    sentences = split_sentences(query)
    if len(sentences) > 1:
        variants.extend(sentences)
    terms = query_terms(query)
    keyword_form = " ".join(terms)
    if keyword_form:
        variants.append(keyword_form)
    seen = {query.strip().lower()}
    unique = []
    for variant in variants:
        key = variant.strip().lower()
        if key and key not in seen:
            seen.add(key)
            unique.append(variant.strip())
    return unique[:MAX_EXTRA_QUERIES]


class StepPreprocessor:
    """Runs the enabled optional steps, each under its own timeout, in order rewrite -> multi-query -> HyDE."""

    def __init__(self, retriever: RetrieverClient, generator: GeneratorClient, *, max_workers: int = 4):
        self._retriever = retriever
        self._generator = generator
        self._pool = futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="gateway-step")

    def preprocess(self, query: str, context: QueryContext) -> Preprocessed:
        result = Preprocessed(query=query)
        rewritten = self._run("query_rewrite", context, query, lambda: rewrite_query(query))
        if rewritten is not None:
            result.query = rewritten
            result.metadata["rewritten"] = str(rewritten != query).lower()
        variants = self._run("multi_query", context, result.query, lambda: query_variants(result.query))
        if variants:
            result.extra_queries.extend(variants)
        draft = self._run("hyde", context, result.query, lambda: self._hypothetical_answer(result.query, context))
        if draft:
            result.extra_queries.append(draft)
        if result.extra_queries:
            result.metadata["extra_queries"] = str(len(result.extra_queries))
        return result

    def _run(self, name: str, context: QueryContext, query: str, work):
        config = context.steps.step(name)
        if not config.enabled:
            return None
        reason = config.skip_when.reason(query, detect_language(query))
        if reason:
            context.note(name, "skipped", reason)
            return None
        started = time.perf_counter()
        future = self._pool.submit(contextvars.copy_context().run, work)  # inner calls keep the caller's tenant
        try:
            value = future.result(timeout=config.timeout_s)
        except (futures.TimeoutError, DeadlineExceeded):  # the step's own calls share its deadline
            future.cancel()
            context.note(name, "failed", f"timed out after {config.timeout_s:g}s; continued without it",
                         elapsed_ms(started))
            return None
        except Exception as error:  # optional steps fail soft by contract
            context.note(name, "failed", f"{type(error).__name__}: {error}; continued without it",
                         elapsed_ms(started))
            return None
        context.note(name, "applied", _describe(name, value), elapsed_ms(started))
        return value

    def _hypothetical_answer(self, query: str, context: QueryContext) -> str:
        timeout = context.steps.hyde.timeout_s
        first = self._retriever.retrieve(retriever_pb2.RetrieveRequest(
            kb=context.kb, query=query, filter=context.search_filter(), top_k=HYDE_SOURCES), timeout_s=timeout)
        if not first.candidates:
            raise LookupError("no passages to draft a hypothetical answer from")
        draft = self._generator.generate(context.kb, query, list(first.candidates)[:HYDE_SOURCES], timeout_s=timeout)
        if draft.refused or not draft.answer.strip():
            raise LookupError("the generator declined to draft an answer")
        return _CITATION.sub("", draft.answer).strip()[:HYDE_MAX_CHARS]

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def _describe(name: str, value) -> str:
    if name == "query_rewrite":
        return f"effective query: {value}"
    if name == "multi_query":
        return f"{len(value)} variants: " + " | ".join(value) if value else "no other phrasing"
    return f"hypothetical answer ({len(value)} chars): {value[:120]}"
