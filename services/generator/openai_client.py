"""A small client for the OpenAI chat-completions protocol (OpenAI, vLLM, Ollama, llama.cpp server).

Plain HTTP with httpx rather than a vendor SDK: the three servers agree on this
one endpoint and its SSE stream (`data: {...}` lines ending with `data: [DONE]`).
Retries with exponential backoff on connection errors, timeouts, 429 and 5xx; a
stream is retried only until its first token arrives, so a caller never sees a
token twice. The API key comes from the operator's LLM profile
(shared/profiles.py), never from a knowledge-base config.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import httpx

from shared.errors import DeadlineExceeded, FailedPrecondition, InvalidArgument, Unavailable

RETRY_STATUSES = {408, 409, 429, 500, 502, 503, 504}
BACKOFF_S = 0.5
MAX_BACKOFF_S = 8.0


class ChatClient:
    def __init__(self, base_url: str, model: str, *, api_key: str = "", timeout_s: float = 60.0,
                 max_retries: int = 2, temperature: float = 0.1, max_tokens: int = 800):
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"generator base_url must start with http:// or https://, got {base_url!r}")
        if not model:
            raise ValueError("generator model is empty: name the model the server serves (e.g. 'qwen2.5:7b')")
        if timeout_s <= 0:
            raise ValueError(f"generator timeout_s must be > 0, got {timeout_s}")
        if max_retries < 0:
            raise ValueError(f"generator max_retries must be >= 0, got {max_retries}")
        headers = {"Content-Type": "application/json"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self.base_url = base_url.rstrip("/")
        self.model = model
        self._max_retries = max_retries
        self._defaults = {"temperature": temperature, "max_tokens": max_tokens}
        self._http = httpx.Client(headers=headers, timeout=httpx.Timeout(timeout_s, connect=min(10.0, timeout_s)))

    def complete(self, messages: list[dict[str, str]], **options) -> str:
        """The whole answer text of one non-streaming completion."""
        body = self._body(messages, stream=False, **options)
        for attempt in self._attempts():
            with attempt:
                response = self._http.post(f"{self.base_url}/chat/completions", json=body)
                _raise_for_status(response, self.model)
                try:
                    return response.json()["choices"][0]["message"]["content"] or ""
                except (ValueError, KeyError, IndexError, TypeError) as error:
                    raise Unavailable(f"the chat server returned an unexpected body ({error!r}): "
                                      f"{response.text[:200]!r}") from None
        raise AssertionError("unreachable")

    def stream(self, messages: list[dict[str, str]], **options) -> Iterator[str]:
        """Text deltas as the server sends them."""
        body = self._body(messages, stream=True, **options)
        for attempt in self._attempts():
            started = False
            with attempt:
                with self._http.stream("POST", f"{self.base_url}/chat/completions", json=body) as response:
                    if response.status_code >= 400:
                        response.read()
                    _raise_for_status(response, self.model)
                    for delta in _sse_deltas(response.iter_lines()):
                        started = True
                        attempt.final = True  # a started stream is never retried
                        yield delta
                return
            if started:
                return
        raise AssertionError("unreachable")

    def close(self) -> None:
        self._http.close()

    def _body(self, messages: list[dict[str, str]], *, stream: bool, **options) -> dict:
        return {"model": self.model, "messages": messages, "stream": stream, **self._defaults, **options}

    def _attempts(self) -> Iterator[_Attempt]:
        for number in range(self._max_retries + 1):
            attempt = _Attempt(final=number == self._max_retries)
            yield attempt
            if attempt.succeeded:
                return
            time.sleep(min(MAX_BACKOFF_S, attempt.retry_after or BACKOFF_S * 2 ** number))


class _Attempt:
    """Context manager for one try: swallows a retryable error unless this is the last try."""

    def __init__(self, *, final: bool):
        self.final = final
        self.succeeded = True
        self.retry_after: float | None = None

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc is None:
            return False
        retryable = isinstance(exc, _Retryable) or isinstance(exc, (httpx.TransportError, httpx.TimeoutException))
        if retryable and not self.final:
            self.succeeded = False
            self.retry_after = getattr(exc, "retry_after", None)
            return True
        if isinstance(exc, _Retryable):
            raise exc.as_error() from None
        if isinstance(exc, httpx.TimeoutException):
            raise DeadlineExceeded(f"the chat server did not answer in time: {exc!r}") from None
        if isinstance(exc, httpx.TransportError):
            raise Unavailable(f"cannot reach the chat server: {exc!r}") from None
        return False


class _Retryable(Exception):
    def __init__(self, status: int, message: str, retry_after: float | None):
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after

    def as_error(self):
        return Unavailable(f"the chat server kept failing (HTTP {self.status}): {self}")


def _raise_for_status(response: httpx.Response, model: str) -> None:
    if response.status_code < 400:
        return
    message = _error_message(response)
    if response.status_code in RETRY_STATUSES:
        raise _Retryable(response.status_code, message, _retry_after(response))
    if response.status_code in (401, 403):
        raise FailedPrecondition(f"the chat server refused the API key (HTTP {response.status_code}): {message}")
    if response.status_code == 404:
        raise FailedPrecondition(f"the chat server has no model {model!r} or no chat endpoint: {message}")
    raise InvalidArgument(f"the chat server rejected the request (HTTP {response.status_code}): {message}")


def _error_message(response: httpx.Response) -> str:
    try:
        error = response.json().get("error")
        return str(error.get("message") if isinstance(error, dict) else error)[:300]
    except ValueError:
        return response.text[:300]


def _retry_after(response: httpx.Response) -> float | None:
    try:
        return float(response.headers.get("retry-after", ""))
    except ValueError:
        return None


def _sse_deltas(lines: Iterator[str]) -> Iterator[str]:
    for line in lines:
        if not line.startswith("data:"):
            continue  # comments, event names, keep-alives
        data = line[5:].strip()
        if data == "[DONE]":
            return
        try:
            event = json.loads(data)
        except ValueError:
            raise Unavailable(f"the chat server sent a malformed stream event: {data[:200]!r}") from None
        if isinstance(event, dict) and event.get("error"):
            raise Unavailable(f"the chat server failed mid-stream: {event['error']}")
        for choice in event.get("choices") or []:
            text = (choice.get("delta") or {}).get("content")
            if text:
                yield text
