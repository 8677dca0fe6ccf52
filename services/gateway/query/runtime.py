"""The query runtime: pre-retrieval -> retrieval -> post-retrieval -> generation.

The gateway orchestrates; each stage is a replaceable object (see `stages`),
by default backed by another service's gRPC client. Every run records per-stage
milliseconds and metadata, the outcome of each named step, and a replayable
trace; a failure carries the name of the stage it happened in.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from opentelemetry import trace as otel

from services.gateway import auth
from services.gateway.metrics import GatewayMetrics
from services.gateway.query.preprocess import StepPreprocessor
from services.gateway.query.stages import (
    GENERATION,
    POST_RETRIEVAL,
    PRE_RETRIEVAL,
    RETRIEVAL,
    Generated,
    Generator,
    GrpcGenerator,
    GrpcPostProcessor,
    GrpcRetriever,
    NoopPreprocessor,
    PassthroughPostProcessor,
    PostProcessor,
    QueryContext,
    QueryPreprocessor,
    Refined,
    Retriever,
    elapsed_ms,
)
from services.gateway.query.steps import StepRegistry
from services.gateway.traces.spans import tracer_for
from services.gateway.traces.store import (
    TraceStore,
    candidate_list,
    dropped_list,
    message_dicts,
    now,
    stage_entries,
)
from shared import kb_settings
from shared.clients import GeneratorClient, RerankerClient, RetrieverClient
from shared.config import Settings
from shared.contracts import chunk_pb2, gateway_pb2, generator_pb2
from shared.errors import InvalidArgument, RagkbError
from shared.jobs import JobStore
from shared.sentence_vectors import without_vectors
from shared.text import detect_language, normalize, text_problem

log = logging.getLogger("ragkb.gateway.runtime")

MAX_QUERY_CHARS = 2000
__all__ = ["PRE_RETRIEVAL", "RETRIEVAL", "POST_RETRIEVAL", "GENERATION", "QueryRuntime", "RuntimeResult",
           "StageFailed", "create_runtime", "validate_query"]


class StageFailed(RagkbError):
    """An unexpected error inside a stage (a bug or a custom stage's own exception)."""


@dataclass
class RuntimeResult:
    trace_id: str
    original_query: str
    effective_query: str = ""
    answer: str = ""
    chunks: list[chunk_pb2.Candidate] = field(default_factory=list)
    citations: list = field(default_factory=list)
    citation_issues: list = field(default_factory=list)
    refused: bool = False
    answerability: generator_pb2.Answerability | None = None
    degraded: list[str] = field(default_factory=list)
    stages: list[chunk_pb2.StageReport] = field(default_factory=list)
    trace: dict = field(default_factory=dict)

    def stage(self, name: str) -> chunk_pb2.StageReport:
        return next(s for s in self.stages if s.name == name)

    def to_response(self) -> gateway_pb2.QueryResponse:
        return gateway_pb2.QueryResponse(
            answer=self.answer, citations=self.citations, chunks=self.chunks, original_query=self.original_query,
            effective_query=self.effective_query, stages=self.stages, degraded=self.degraded,
            citation_issues=self.citation_issues, refused=self.refused, trace_id=self.trace_id,
            answerability=self.answerability,
        )


class QueryRuntime:
    """Runs one query through the four stages; stateless apart from the shared stores it records into."""

    def __init__(self, *, retriever: Retriever, generator: Generator, preprocessor: QueryPreprocessor | None = None,
                 postprocessor: PostProcessor | None = None, steps: StepRegistry | None = None,
                 traces: TraceStore | None = None, metrics: GatewayMetrics | None = None,
                 tracer: otel.Tracer | None = None,
                 knowledge_bases: Callable[[str], chunk_pb2.KnowledgeBaseSettings] | None = None):
        """`knowledge_bases` resolves a KB's settings (shared/kb_settings.py), once per query, for the inner
        services; None = the stages need none (stages that are not other services)."""
        for name, stage, method in (("retriever", retriever, "retrieve"), ("generator", generator, "generate"),
                                    ("preprocessor", preprocessor, "preprocess"),
                                    ("postprocessor", postprocessor, "postprocess")):
            if stage is not None and not callable(getattr(stage, method, None)):
                raise ValueError(f"{name} {type(stage).__name__} has no {method}() method")
        self.retriever = retriever
        self.generator = generator
        self.preprocessor = preprocessor or NoopPreprocessor()
        self.postprocessor = postprocessor or PassthroughPostProcessor()
        self.steps = steps or StepRegistry(None)
        self.traces = traces
        self.metrics = metrics
        self._tracer = tracer or otel.NoOpTracer()
        self.knowledge_bases = knowledge_bases

    def close(self) -> None:
        for part in (self.preprocessor, self.retriever, self.postprocessor, self.generator, self.traces):
            close = getattr(part, "close", None)
            if callable(close):
                close()

    def run(self, request: gateway_pb2.QueryRequest, *, principal: auth.Principal | None = None) -> RuntimeResult:
        principal = principal or auth.current()
        result = RuntimeResult(trace_id=uuid.uuid4().hex, original_query=request.query)
        context = QueryContext(kb=request.kb, namespaces=[], acl_groups=None, top_k=request.top_k,
                               steps=self.steps.current())
        started = time.perf_counter()
        lists: dict = {}
        error: RagkbError | None = None
        with self._tracer.start_as_current_span("ragkb.query") as span:
            span.set_attribute("ragkb.kb", request.kb)
            span.set_attribute("ragkb.trace_id", result.trace_id)
            resolved_kb = None
            try:
                with self._kb_settings(request.kb) as resolved_kb:
                    self._run(request, principal, context, result, lists)
            except RagkbError as failure:
                error = failure
                span.set_status(otel.Status(otel.StatusCode.ERROR, str(failure)))
                raise
            finally:
                lists["kb_version"] = resolved_kb.version if resolved_kb else ""  # the KB config that answered
                total_ms = elapsed_ms(started)
                self._record(request, principal, context, result, lists, error, total_ms)
        return result

    def _kb_settings(self, kb: str):
        if self.knowledge_bases is None:
            return nullcontext()
        return kb_settings.resolving(kb, partial(self.knowledge_bases, kb))

    def _run(self, request, principal, context: QueryContext, result: RuntimeResult, lists: dict) -> None:
        with self._stage(result, PRE_RETRIEVAL) as meta:
            query = validate_query(request.query)
            context.namespaces = principal.read_namespaces(request.namespaces)
            context.acl_groups = None if principal.groups is None else list(principal.groups)
            context.language = detect_language(query)
            prepared = self.preprocessor.preprocess(query, context)
            result.effective_query = prepared.query
            meta.update({"namespaces": ",".join(context.namespaces), "principal": principal.name,
                         **prepared.metadata})
        with self._stage(result, RETRIEVAL) as meta:
            retrieved = self.retriever.retrieve(prepared, context)
            result.degraded.extend(retrieved.degraded)
            meta.update(retrieved.metadata)
            lists.update(bm25=retrieved.bm25, dense=retrieved.dense, fused=retrieved.candidates,
                         variants=retrieved.variants)
        with self._stage(result, POST_RETRIEVAL) as meta:
            refined = self._postprocess(prepared.query, retrieved, context)
            meta.update(refined.metadata)
            lists.update(reranked=refined.candidates, dropped=refined.dropped)
        with self._stage(result, GENERATION) as meta:
            generated = self._generate(prepared.query, refined, context)
            meta.update(generated.metadata)
        result.answer = generated.answer
        result.citations.extend(generated.citations)
        result.citation_issues.extend(generated.citation_issues)
        result.refused = generated.refused
        result.answerability = generated.answerability
        result.chunks.extend(without_vectors(refined.candidates))  # the stored vectors are for the generator only
        lists["extra_queries"] = prepared.extra_queries

    def _postprocess(self, query: str, retrieved, context: QueryContext) -> Refined:
        config = context.steps.rerank
        reason = _off_reason(config, query, context.language)
        if reason:
            context.note("rerank", "skipped" if config.enabled else "disabled", reason)
            return PassthroughPostProcessor().postprocess(query, retrieved, context)
        return self.postprocessor.postprocess(query, retrieved, context, timeout_s=config.timeout_s)

    def _generate(self, query: str, refined: Refined, context: QueryContext) -> Generated:
        config = context.steps.generation
        reason = _off_reason(config, query, context.language)
        if reason:
            context.note("generation", "skipped" if config.enabled else "disabled", reason)
            return Generated(answer="", metadata={"generator": "off"})
        return self.generator.generate(query, refined.candidates, context, timeout_s=config.timeout_s)

    @contextmanager
    def _stage(self, result: RuntimeResult, name: str):
        metadata: dict[str, str] = {}
        started = time.perf_counter()
        with self._tracer.start_as_current_span(f"ragkb.{name}") as span:
            try:
                yield metadata
            except RagkbError as error:
                error.stage = error.stage or name
                span.set_status(otel.Status(otel.StatusCode.ERROR, str(error)))
                raise
            except Exception as error:  # a custom stage's own exception still names its stage
                span.set_status(otel.Status(otel.StatusCode.ERROR, str(error)))
                raise StageFailed(f"{name} failed: {type(error).__name__}: {error}", stage=name) from error
            finally:
                ms = elapsed_ms(started)
                metadata = {k: str(v) for k, v in metadata.items()}
                span.set_attributes({f"ragkb.{k}": v for k, v in metadata.items()})
                result.stages.append(chunk_pb2.StageReport(name=name, ms=ms, metadata=metadata))
                if self.metrics is not None:
                    self.metrics.stage_seconds.labels(name).observe(ms / 1000)

    def _record(self, request, principal, context: QueryContext, result: RuntimeResult, lists: dict,
                error: RagkbError | None, total_ms: float) -> None:
        """Metrics, one JSON log line and the stored trace, for successes and failures alike."""
        if self.metrics is not None:
            self.metrics.query_seconds.observe(total_ms / 1000)
            self.metrics.queries.labels("error" if error else "ok").inc()
            if error is not None:
                self.metrics.stage_errors.labels(error.stage or "unknown", type(error).__name__).inc()
            for note in context.notes:
                self.metrics.steps.labels(note.step, note.status).inc()
        fused = {c.chunk.chunk_id: c for c in lists.get("fused", [])}
        stored: dict[str, dict] = {}  # chunk fields of the stores' chunks, read once for the lists below
        result.trace = {
            "trace_id": result.trace_id, "created_at": now(), "ms": total_ms,
            "request": {"kb": request.kb, "kb_version": lists.get("kb_version", ""), "query": request.query,
                        "namespaces": context.namespaces, "requested_namespaces": list(request.namespaces),
                        "top_k": request.top_k},
            "principal": principal.name, "acl_groups": context.acl_groups,
            "original_query": result.original_query, "effective_query": result.effective_query,
            "extra_queries": lists.get("extra_queries", []), "language": context.language,
            "steps": context.steps.model_dump(mode="json"),
            "step_notes": [vars(note) for note in context.notes],
            "stages": stage_entries(result.stages),
            "lists": {
                "bm25": candidate_list(lists.get("bm25", []), stored),
                "dense": candidate_list(lists.get("dense", []), stored),
                "fused": candidate_list(lists.get("fused", []), stored),
                "variants": {q: candidate_list(v, stored) for q, v in lists.get("variants", {}).items()},
                "reranked": candidate_list(lists.get("reranked", [])),
                "dropped": dropped_list(lists.get("dropped", []), fused),
            },
            "answer": result.answer, "refused": result.refused, "degraded": result.degraded,
            "answerability": None if result.answerability is None else message_dicts([result.answerability])[0],
            "citations": message_dicts(result.citations), "citation_issues": message_dicts(result.citation_issues),
            "error": None if error is None else {"type": type(error).__name__, "message": error.message,
                                                 "stage": error.stage},
        }
        result.trace["counts"] = {name: len(entries) for name, entries in result.trace["lists"].items()
                                  if name != "variants"}
        # queued for the store's writer; a full queue drops the trace rather than slowing the answer
        if self.traces is not None and context.namespaces and not self.traces.put(result.trace) \
                and self.metrics is not None:
            self.metrics.traces_dropped.inc()
        log.info("query", extra={"trace_id": result.trace_id, "kb": request.kb, "ms": total_ms,
                                 "outcome": "error" if error else "ok", "principal": principal.name,
                                 "stages": {s.name: s.ms for s in result.stages},
                                 **({"stage": error.stage, "error": error.message} if error else {})})


def create_runtime(*, retriever: Retriever | RetrieverClient, generator: Generator | GeneratorClient,
                   reranker: RerankerClient | None = None, preprocessor: QueryPreprocessor | None = None,
                   postprocessor: PostProcessor | None = None, steps: StepRegistry | None = None,
                   traces: TraceStore | None = None, metrics: GatewayMetrics | None = None,
                   tracer: otel.Tracer | None = None,
                   knowledge_bases: Callable[[str], chunk_pb2.KnowledgeBaseSettings] | None = None) -> QueryRuntime:
    """Build a runtime from stages or service clients.

    Clients are wrapped in the gRPC-backed stages; with both a retriever and a
    generator client, the default preprocessor runs the optional steps on them.
    """
    retriever_client = retriever if isinstance(retriever, RetrieverClient) else None
    generator_client = generator if isinstance(generator, GeneratorClient) else None
    if retriever_client is not None:
        retriever = GrpcRetriever(retriever_client)
    if generator_client is not None:
        generator = GrpcGenerator(generator_client)
    if preprocessor is None and retriever_client is not None and generator_client is not None:
        preprocessor = StepPreprocessor(retriever_client, generator_client)
    if postprocessor is None and reranker is not None:
        postprocessor = GrpcPostProcessor(reranker)
    return QueryRuntime(retriever=retriever, generator=generator, preprocessor=preprocessor,
                        postprocessor=postprocessor, steps=steps, traces=traces, metrics=metrics, tracer=tracer,
                        knowledge_bases=knowledge_bases)


def runtime_from_settings(settings: Settings, *, retriever: RetrieverClient, reranker: RerankerClient,
                          generator: GeneratorClient, jobs: JobStore | None = None,
                          knowledge_bases: Callable[[str], chunk_pb2.KnowledgeBaseSettings] | None = None,
                          ) -> QueryRuntime:
    """The gateway's runtime: gRPC-backed stages, steps file, trace store, metrics (job counts from `jobs`)
    and spans from settings."""
    data_dir = Path(settings.data_dir)
    return create_runtime(
        retriever=retriever, reranker=reranker, generator=generator,
        steps=StepRegistry(Path(settings.steps_file) if settings.steps_file else data_dir / "steps.yaml"),
        traces=TraceStore.for_settings(settings),
        metrics=GatewayMetrics(jobs=jobs),
        tracer=tracer_for(settings.otel_exporter), knowledge_bases=knowledge_bases,
    )


def validate_query(query: str) -> str:
    if len(query) > MAX_QUERY_CHARS:
        raise InvalidArgument(f"query is {len(query)} characters; the limit is {MAX_QUERY_CHARS}")
    problem = text_problem(query)  # gRPC callers reach here without the REST hygiene layer
    if problem:
        raise InvalidArgument(f"query contains {problem}")
    effective = normalize(query)
    if not effective:
        raise InvalidArgument("query is empty")
    return effective


def _off_reason(config, query: str, language: str) -> str | None:
    if not config.enabled:
        return "disabled in the step settings"
    return config.skip_when.reason(query, language)
