"""Streamed answers: `POST /v1/conversations` then `GET /v1/conversations/{id}/stream` (SSE), and gRPC QueryStream.

A streamed query runs through the same runtime as `Query` (auth, namespaces,
steps, traces) with one difference: its generation stage calls the
generator's streaming RPC and forwards each token as it arrives. Events, in
order: `token`* (the model's raw text), `citations` (the validated answer, its
citations, every marker repair/removal and every claim flag/drop), `done` (the
whole response and the recorded trace); or `error` naming the failed stage.

Conversations live in this gateway process's memory for `TTL_S` (a client
streams right after creating one); behind several gateway replicas, route a
conversation's two calls to the same replica (sticky sessions).
"""

from __future__ import annotations

import json
import queue
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse
from google.protobuf import json_format
from pydantic import BaseModel, Field

from services.gateway import auth
from services.gateway.query.runtime import QueryRuntime, RuntimeResult, validate_query
from services.gateway.query.stages import Generated, QueryContext
from shared.clients import GeneratorClient
from shared.contracts import chunk_pb2, gateway_pb2, generator_pb2
from shared.errors import AlreadyExists, NotFound, RagkbError, Unavailable

TTL_S = 900
MAX_CONVERSATIONS = 10_000


class StreamingGenerator:
    """The generation stage for one streamed query: tokens go to `sink`, the final answer is kept."""

    def __init__(self, client: GeneratorClient, sink: Callable[[str], None]):
        self._client = client
        self._sink = sink
        self.final: generator_pb2.GenerateResponse | None = None

    def generate(self, query: str, chunks: list[chunk_pb2.Candidate], context: QueryContext, *,
                 timeout_s: float | None = None) -> Generated:
        for event in self._client.generate_stream(context.kb, query, chunks, timeout_s=timeout_s,
                                                  query_vector=context.query_vector_of(query)):
            if event.WhichOneof("event") == "token":
                self._sink(event.token)
            else:
                self.final = event.final
        if self.final is None:
            raise Unavailable("the generator's stream ended without a final answer")
        final = self.final
        verdicts = [c.verdict for c in final.claim_checks]
        return Generated(answer=final.answer, citations=list(final.citations),
                         citation_issues=list(final.citation_issues), refused=final.refused,
                         answerability=final.answerability, metadata={
                             "generator": final.generator, "streamed": "true", "intent": final.intent,
                             "evidence": f"{final.evidence_score:.2f}", "refusal_reason": final.refusal_reason,
                             "citation_issues": str(len(final.citation_issues)),
                             "claims_flagged": str(verdicts.count("flagged")),
                             "claims_dropped": str(verdicts.count("dropped")),
                             "refused": str(final.refused).lower()})


@dataclass
class StreamEvent:
    kind: str  # token | citations | done
    token: str = ""
    citations: gateway_pb2.AnswerCitations | None = None
    result: RuntimeResult | None = None


def stream_query(runtime: QueryRuntime, generator: GeneratorClient, request: gateway_pb2.QueryRequest,
                 principal: auth.Principal) -> Iterator[StreamEvent]:
    """Run the query on a worker thread and yield its events as they happen; errors are re-raised here."""
    events: queue.Queue = queue.Queue()
    streaming = StreamingGenerator(generator, lambda token: events.put(("token", token)))
    # the gateway's own stages and stores, with the streaming generation stage in place of the unary one
    run = QueryRuntime(retriever=runtime.retriever, generator=streaming, preprocessor=runtime.preprocessor,
                       postprocessor=runtime.postprocessor, steps=runtime.steps, traces=runtime.traces,
                       metrics=runtime.metrics, knowledge_bases=runtime.knowledge_bases)

    def work() -> None:
        with auth.acting_as(principal):
            try:
                events.put(("done", run.run(request, principal=principal)))
            except BaseException as error:  # handed to the consuming thread, which raises it
                events.put(("error", error))

    threading.Thread(target=work, name="ragkb-stream", daemon=True).start()
    while True:
        kind, value = events.get()
        if kind == "token":
            yield StreamEvent("token", token=value)
        elif kind == "error":
            raise value
        else:
            yield StreamEvent("citations", citations=_citations(value, streaming.final))
            yield StreamEvent("done", result=value)
            return


def _citations(result: RuntimeResult, final: generator_pb2.GenerateResponse | None) -> gateway_pb2.AnswerCitations:
    return gateway_pb2.AnswerCitations(answer=result.answer, citations=result.citations,
                                       citation_issues=result.citation_issues, refused=result.refused,
                                       answerability=result.answerability, claim_checks=final.claim_checks if final is not None else [])


def grpc_events(runtime: QueryRuntime, generator: GeneratorClient,
                request: gateway_pb2.QueryRequest) -> Iterator[gateway_pb2.QueryEvent]:
    """The gRPC QueryStream: the same events as QueryEvent messages."""
    for event in stream_query(runtime, generator, request, auth.current()):
        if event.kind == "token":
            yield gateway_pb2.QueryEvent(token=event.token)
        elif event.kind == "citations":
            yield gateway_pb2.QueryEvent(citations=event.citations)
        else:
            yield gateway_pb2.QueryEvent(done=event.result.to_response())


# --- REST -----------------------------------------------------------------------------------------

class ConversationBody(BaseModel):
    kb: str
    query: str
    namespaces: list[str] = Field(default_factory=list, description="empty = the caller's namespaces")
    top_k: int = Field(0, ge=0, le=200)


@dataclass
class _Conversation:
    request: gateway_pb2.QueryRequest
    principal: auth.Principal
    created: float
    streamed: bool = False


class ConversationStore:
    """Pending conversations in memory, oldest evicted first beyond `limit` or after `ttl_s`."""

    def __init__(self, *, ttl_s: float = TTL_S, limit: int = MAX_CONVERSATIONS):
        if ttl_s <= 0 or limit < 1:
            raise ValueError(f"conversation ttl_s must be > 0 and limit >= 1, got {ttl_s} and {limit}")
        self._ttl_s = ttl_s
        self._limit = limit
        self._items: OrderedDict[str, _Conversation] = OrderedDict()
        self._lock = threading.Lock()

    def create(self, request: gateway_pb2.QueryRequest, principal: auth.Principal) -> str:
        conversation_id = uuid.uuid4().hex
        with self._lock:
            self._expire()
            self._items[conversation_id] = _Conversation(request, principal, time.monotonic())
            while len(self._items) > self._limit:
                self._items.popitem(last=False)
        return conversation_id

    def take(self, conversation_id: str, principal: auth.Principal) -> _Conversation:
        """The conversation to stream; each is streamed once, and only by the key that created it."""
        with self._lock:
            self._expire()
            conversation = self._items.get(conversation_id)
            if conversation is None or conversation.principal.name != principal.name:
                raise NotFound(f"conversation {conversation_id!r} not found (unknown, expired or not yours)")
            if conversation.streamed:
                raise AlreadyExists(f"conversation {conversation_id!r} was already streamed; create a new one")
            conversation.streamed = True
            return conversation

    def _expire(self) -> None:
        deadline = time.monotonic() - self._ttl_s
        while self._items and next(iter(self._items.values())).created < deadline:
            self._items.popitem(last=False)


router = APIRouter()


def _store(request: Request) -> ConversationStore:
    state = request.app.state
    if getattr(state, "conversations", None) is None:
        state.conversations = ConversationStore()
    return state.conversations


@router.post("/v1/conversations", status_code=201)
def create_conversation(body: ConversationBody, request: Request):
    """Register a question; stream its answer from `stream_url`."""
    validate_query(body.query)  # a bad question fails here, not half-way through a stream
    auth.current().read_namespaces(body.namespaces)  # and so does a namespace the key may not read
    query = gateway_pb2.QueryRequest(kb=body.kb, query=body.query, namespaces=body.namespaces, top_k=body.top_k)
    conversation_id = _store(request).create(query, auth.current())
    return {"conversation_id": conversation_id, "stream_url": f"/v1/conversations/{conversation_id}/stream"}


@router.get("/v1/conversations/{conversation_id}/stream")
def stream_conversation(conversation_id: str, request: Request):
    """Server-Sent Events: token*, citations, done (or error)."""
    conversation = _store(request).take(conversation_id, auth.current())
    gateway = request.app.state.gateway
    events = stream_query(gateway.runtime, gateway.downstream.generator, conversation.request,
                          conversation.principal)
    return StreamingResponse(_sse(events), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


def _sse(events: Iterator[StreamEvent]) -> Iterator[str]:
    try:
        for event in events:
            if event.kind == "token":
                yield _frame("token", {"text": event.token})
            elif event.kind == "citations":
                yield _frame("citations", _message(event.citations))
            else:
                response = _message(event.result.to_response())
                response["stages"] = {s.name: {"ms": s.ms, "metadata": dict(s.metadata)}
                                      for s in event.result.stages}
                yield _frame("done", {"response": response, "trace": event.result.trace})
    except RagkbError as error:
        yield _frame("error", {"error": {"type": type(error).__name__, "message": error.message,
                                         "stage": error.stage}})


def _frame(event: str, data: dict) -> str:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False, default=str)}\n\n"


def _message(message) -> dict:
    return json_format.MessageToDict(message, preserving_proto_field_name=True,
                                     always_print_fields_with_no_presence=True)
