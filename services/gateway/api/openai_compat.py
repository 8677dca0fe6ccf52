"""A knowledge base as an OpenAI chat model: `POST /v1/chat/completions` and `GET /v1/models`.

Any OpenAI client (Open WebUI, LibreChat, the `openai` SDKs) can point its base
URL at `<gateway>/v1` and use a knowledge base's name as the model. The last
user message is the question; earlier turns are not used (each question is
answered from the knowledge base alone). The answer runs through the same
runtime as `/query` (the caller's key, namespaces, ACL groups, steps, traces).

Citations are in the message text, as `[n]` markers plus a "Sources:" list at
the end, and in the extra top-level field `citations`; `ragkb` carries the trace
id, the refusal flag and its reason, and the validated answer (after marker
repair and claim checks, which a streamed text cannot take back). Streaming
follows OpenAI's format: `chat.completion.chunk` events, the last one with
`finish_reason` and the extra fields, then `data: [DONE]`; a failure mid-stream
is an `error` event, which OpenAI clients raise. Errors on these routes have
OpenAI's body (see `error_body`).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Literal

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from services.gateway import auth
from services.gateway.api.error_body import error_body
from services.gateway.query.conversations import stream_query
from services.gateway.query.runtime import validate_query
from shared.contracts import gateway_pb2
from shared.errors import InvalidArgument, NotFound, RagkbError

OWNER = "ragkb"


class ModelNotFound(NotFound):
    """The model named in a chat request is no knowledge base (OpenAI clients expect `model_not_found`)."""


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="allow")  # image_url and the like are accepted and ignored

    type: str
    text: str = ""


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")  # name, tool_calls and the like are accepted and ignored

    role: str
    content: str | list[ContentPart] | None = None


class ChatCompletionBody(BaseModel):
    """OpenAI's request; sampling options (temperature, max_tokens, ...) are accepted and ignored."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(description="the knowledge base to answer from")
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool = False
    namespaces: list[str] = Field(default_factory=list, description="ragkb extra: empty = the caller's namespaces")
    top_k: int = Field(0, ge=0, le=200, description="ragkb extra: 0 = the knowledge base's default")


router = APIRouter(tags=["openai"])


@router.get("/v1/models")
def list_models(request: Request):
    """Every knowledge base the key can see, as OpenAI models."""
    return {"object": "list", "data": [_model(kb.name) for kb in request.app.state.gateway.list_kbs()]}


@router.get("/v1/models/{model}")
def get_model(model: str, request: Request):
    return _model(_knowledge_base(request, model))


@router.post("/v1/chat/completions")
def chat_completions(body: ChatCompletionBody, request: Request):
    gateway = request.app.state.gateway
    kb = _knowledge_base(request, body.model)
    query = question_of(body.messages)
    validate_query(query)
    auth.current().read_namespaces(body.namespaces)  # a namespace the key may not read fails before any stream
    query_request = gateway_pb2.QueryRequest(kb=kb, query=query, namespaces=body.namespaces, top_k=body.top_k)
    created = int(time.time())
    if not body.stream:
        response = gateway.query(query_request)
        return completion(response, kb, created)
    events = stream_query(gateway.runtime, gateway.downstream.generator, query_request, auth.current())
    return StreamingResponse(_chunks(events, kb, created, request.url.path), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


def question_of(messages: list[ChatMessage]) -> str:
    """The text of the last user message (string content, or its text parts joined)."""
    for message in reversed(messages):
        if message.role != "user":
            continue
        if isinstance(message.content, list):
            return "\n".join(part.text for part in message.content if part.type == "text")
        return message.content or ""
    raise InvalidArgument("messages: a chat completion needs at least one message with role 'user'")


def completion(response: gateway_pb2.QueryResponse, kb: str, created: int) -> dict:
    """A non-streamed `chat.completion` from a query response."""
    content = response.answer + sources_text(response.citations)
    return {"id": f"chatcmpl-{response.trace_id}", "object": "chat.completion", "created": created, "model": kb,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content, "refusal": None},
                         "logprobs": None, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
            **_extras(response)}


def sources_text(citations) -> str:
    """The "Sources:" list appended to the answer: one line per cited number, `[n] doc › heading`."""
    lines, seen = [], set()
    for citation in sorted(citations, key=lambda c: c.number):
        if citation.number in seen:
            continue
        seen.add(citation.number)
        place = " › ".join([citation.doc_id, *citation.heading_path])
        lines.append(f"[{citation.number}] {place}")
    return "\n\nSources:\n" + "\n".join(lines) if lines else ""


def _extras(response: gateway_pb2.QueryResponse) -> dict:
    generation = next((s for s in response.stages if s.name == "generation"), None)
    reason = generation.metadata.get("refusal_reason", "") if generation is not None else ""
    return {"citations": [citation_json(c) for c in response.citations],
            "ragkb": {"trace_id": response.trace_id, "refused": response.refused, "refusal_reason": reason,
                      "answer": response.answer, "degraded": list(response.degraded)}}


def citation_json(citation) -> dict:
    return {"number": citation.number, "doc_id": citation.doc_id, "chunk_id": citation.chunk_id,
            "heading_path": list(citation.heading_path), "source_uri": citation.source_uri, "quote": citation.quote}


def _chunks(events, kb: str, created: int, path: str) -> Iterator[str]:
    chunk_id = f"chatcmpl-{uuid.uuid4().hex}"
    streamed = False

    def chunk(delta: dict, finish: Literal["stop"] | None = None, **extra) -> str:
        payload = {"id": chunk_id, "object": "chat.completion.chunk", "created": created, "model": kb,
                   "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}], **extra}
        return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"

    yield chunk({"role": "assistant", "content": ""})
    try:
        for event in events:
            if event.kind == "token" and event.token:
                streamed = True
                yield chunk({"content": event.token})
            elif event.kind == "citations":
                # a refusal (or an answer the generator did not stream) still reaches the client as text
                text = "" if streamed else event.citations.answer
                yield chunk({"content": text + sources_text(event.citations.citations)})
            elif event.kind == "done":
                yield chunk({}, "stop", **_extras(event.result.to_response()))
    except RagkbError as error:
        body = error_body(path, error.http_status, type(error).__name__, error.message, error.stage)
        yield f"data: {json.dumps(body, ensure_ascii=False)}\n\n"
        return
    yield "data: [DONE]\n\n"


def _knowledge_base(request: Request, name: str) -> str:
    try:
        return request.app.state.gateway.get_kb(name).name
    except NotFound:
        raise ModelNotFound(f"the model {name!r} does not exist: no knowledge base has that name "
                            "(GET /v1/models lists them)") from None


def _model(name: str) -> dict:
    return {"id": name, "object": "model", "created": 0, "owned_by": OWNER}
