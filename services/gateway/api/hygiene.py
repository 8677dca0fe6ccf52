"""Request hygiene for the REST front door: bounded bodies and clean strings, one error format.

An ASGI middleware, so it runs before FastAPI parses anything: a JSON body over
the limit is answered 413 as soon as its declared length (or its streamed bytes)
says so, without reading the rest; a body or a path/query string that is not
valid text (invalid UTF-8, lone surrogates, NUL or other control characters) is
answered 400. Multipart uploads are bounded by the upload route itself.
"""

from __future__ import annotations

import json
from urllib.parse import parse_qsl, unquote

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from services.gateway.api.error_body import error_body
from shared.text import text_problem


def json_problem(value, where: str = "body") -> str | None:
    """The first unacceptable string anywhere in a decoded JSON value (keys included)."""
    if isinstance(value, str):
        problem = text_problem(value)
        return f"{where} contains {problem}" if problem else None
    if isinstance(value, dict):
        for key, item in value.items():
            problem = json_problem(key, f"{where} key") or json_problem(item, f"{where}.{key}")
            if problem:
                return problem
    if isinstance(value, list):
        for index, item in enumerate(value):
            problem = json_problem(item, f"{where}[{index}]")
            if problem:
                return problem
    return None


class RequestHygiene:
    def __init__(self, app: ASGIApp, *, max_json_bytes: int):
        self.app = app
        self.max_json_bytes = max_json_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        problem = _url_problem(scope)
        if problem:
            await _error(scope, send, 400, "InvalidArgument", problem)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", ())}
        content_type = headers.get("content-type", "")
        if scope["method"] not in ("POST", "PUT", "PATCH") or content_type.startswith("multipart/form-data"):
            await self.app(scope, receive, send)
            return
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_json_bytes:
            await _error(scope, send, 413, "PayloadTooLarge", self._too_large(int(declared)))
            return
        body, more = bytearray(), True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body.extend(message.get("body", b""))
            more = message.get("more_body", False)
            if len(body) > self.max_json_bytes:
                await _error(scope, send, 413, "PayloadTooLarge", self._too_large(len(body)))
                return
        problem = _body_problem(bytes(body), content_type)
        if problem:
            await _error(scope, send, 400, "InvalidArgument", problem)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": bytes(body), "more_body": False}

        await self.app(scope, replay, send)

    def _too_large(self, size: int) -> str:
        return f"the request body is {size} bytes or more; the limit is {self.max_json_bytes} bytes"


def _url_problem(scope: Scope) -> str | None:
    raw_path = scope.get("raw_path") or scope["path"].encode("utf-8", "surrogatepass")
    try:
        path = unquote(raw_path.decode("ascii", "strict"), errors="strict")
        query = scope.get("query_string", b"").decode("ascii", "strict")
        pairs = parse_qsl(query, keep_blank_values=True, errors="strict")
    except (UnicodeDecodeError, ValueError):
        return "the URL is not valid percent-encoded UTF-8"
    problem = text_problem(path)
    if problem:
        return f"the path contains {problem}"
    for key, value in pairs:
        problem = text_problem(key) or text_problem(value)
        if problem:
            return f"query parameter {key!r} contains {problem}"
    return None


def _body_problem(body: bytes, content_type: str) -> str | None:
    if not body:
        return None
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        return f"the request body is not valid UTF-8 (byte {error.start})"
    if "json" not in content_type and not text.lstrip().startswith(("{", "[")):
        problem = text_problem(text)
        return f"the request body contains {problem}" if problem else None
    try:
        value = json.loads(text)
    except ValueError as error:
        return f"the request body is not valid JSON: {error}"
    return json_problem(value)


async def _error(scope: Scope, send: Send, status: int, kind: str, message: str) -> None:
    payload = json.dumps(error_body(scope["path"], status, kind, message)).encode("utf-8")
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": payload})
