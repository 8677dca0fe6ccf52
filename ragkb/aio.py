"""Asynchronous Python client for the gateway's REST API (httpx), with typed answers and retries.

    async with ragkb.AsyncClient(api_key="rk_...") as client:
        result = await client.query("handbook", "How do I reset a robot?")
        async for event in client.stream("handbook", "How do I reset a robot?"):
            ...

Retries: a request that could not be sent (connection refused or reset before
the request went out) is retried whatever it is; a read (GET, a query) is also
retried on 429/502/503/504 and on read timeouts, with exponential backoff.
Writes are not retried once sent, so nothing is done twice. A stream is not
retried once its first event arrived.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterable

import httpx

from ragkb.client import FINAL_STATES, RagkbApiError, api_error, auth_headers, default_url
from ragkb.types import CitationsEvent, DoneEvent, Job, KnowledgeBase, QueryResult, StreamEvent, TokenEvent

RETRY_STATUSES = frozenset({429, 502, 503, 504})


class AsyncClient:
    def __init__(self, base_url: str | None = None, *, api_key: str | None = None, timeout_s: float = 120.0,
                 max_retries: int = 3, backoff_s: float = 0.25, transport: httpx.AsyncBaseTransport | None = None):
        if max_retries < 0 or backoff_s < 0:
            raise ValueError(f"max_retries and backoff_s must be >= 0, got {max_retries} and {backoff_s}")
        self.base_url = base_url or default_url()
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self._http = httpx.AsyncClient(base_url=self.base_url, timeout=timeout_s, headers=auth_headers(api_key),
                                       transport=transport)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def health(self) -> dict:
        response = await self._send("GET", "/healthz", read=True)
        return response.json()

    async def list_kbs(self) -> list[KnowledgeBase]:
        body = await self._json("GET", "/v1/knowledge-bases")
        return [KnowledgeBase.model_validate(kb) for kb in body["knowledge_bases"]]

    async def get_kb(self, name: str) -> KnowledgeBase:
        return KnowledgeBase.model_validate(await self._json("GET", f"/v1/knowledge-bases/{name}"))

    async def create_kb(self, name: str, *, description: str = "", config_yaml: str = "") -> KnowledgeBase:
        body = {"name": name, "description": description, "config_yaml": config_yaml}
        return KnowledgeBase.model_validate(await self._json("POST", "/v1/knowledge-bases", json=body, read=False))

    async def upload(self, kb: str, filename: str, content: bytes, *, namespace: str = "", doc_id: str = "",
                     acl: str = "") -> Job:
        """Queue a document; `acl`: groups allowed to read it, comma separated (empty = the whole namespace)."""
        data = {"namespace": namespace, "doc_id": doc_id, **({"acl": acl} if acl else {})}
        body = await self._json("POST", f"/v1/knowledge-bases/{kb}/documents", files={"file": (filename, content)},
                                data=data, read=False)
        return Job.model_validate(body)

    async def job(self, job_id: str) -> Job:
        return Job.model_validate(await self._json("GET", f"/v1/jobs/{job_id}"))

    async def wait(self, job_ids: Iterable[str], *, poll_s: float = 0.2, timeout_s: float = 3600) -> list[Job]:
        """Poll until every job is final (done, failed or cancelled), in the order given."""
        async def until_final(job_id: str) -> Job:
            while (job := await self.job(job_id)).state not in FINAL_STATES:
                await asyncio.sleep(poll_s)
            return job

        return list(await asyncio.wait_for(asyncio.gather(*map(until_final, job_ids)), timeout_s))

    async def query(self, kb: str, query: str, *, namespaces: list[str] | None = None, top_k: int = 0) -> QueryResult:
        """A cited answer (or a refusal, see `refusal_reason`) with the chunks it was given."""
        body = {"query": query, "namespaces": namespaces or [], "top_k": top_k}
        return QueryResult.model_validate(await self._json("POST", f"/v1/knowledge-bases/{kb}/query", json=body))

    async def stream(self, kb: str, query: str, *, namespaces: list[str] | None = None,
                     top_k: int = 0) -> AsyncIterator[StreamEvent]:
        """The answer as it is generated: TokenEvent*, then CitationsEvent, then DoneEvent.

        An `error` event from the server is raised as RagkbApiError (status 200: the stream had started).
        """
        body = {"kb": kb, "query": query, "namespaces": namespaces or [], "top_k": top_k}
        conversation = await self._json("POST", "/v1/conversations", json=body)
        async with self._http.stream("GET", conversation["stream_url"]) as response:
            if response.status_code >= 400:
                await response.aread()
                raise api_error(response)
            async for name, data in _sse(response):
                if name == "token":
                    yield TokenEvent(text=data["text"])
                elif name == "citations":
                    yield CitationsEvent.model_validate(data)
                elif name == "done":
                    yield DoneEvent.model_validate(data)
                    return
                elif name == "error":
                    error = data["error"]
                    raise RagkbApiError(response.status_code, error["type"], error["message"], error.get("stage"))

    async def trace(self, trace_id: str) -> dict:
        return await self._json("GET", f"/v1/traces/{trace_id}")

    async def _json(self, method: str, path: str, *, read: bool | None = None, **kwargs) -> dict:
        response = await self._send(method, path, read=method == "GET" if read is None else read, **kwargs)
        if response.status_code >= 400:
            raise api_error(response)
        return response.json()

    async def _send(self, method: str, path: str, *, read: bool, **kwargs) -> httpx.Response:
        """Send with retries: any request that never left, and reads on busy answers or read timeouts."""
        for attempt in range(self.max_retries):
            try:
                response = await self._http.request(method, path, **kwargs)
            except (httpx.ConnectError, httpx.ConnectTimeout):
                pass  # nothing was sent
            except httpx.ReadTimeout:
                if not read:
                    raise
            else:
                if not read or response.status_code not in RETRY_STATUSES:
                    return response
            await asyncio.sleep(self.backoff_s * 2 ** attempt)
        return await self._http.request(method, path, **kwargs)

async def _sse(response: httpx.Response) -> AsyncIterator[tuple[str, dict]]:
    """(event name, decoded data) of each Server-Sent Event."""
    name, data = "message", []
    async for line in response.aiter_lines():
        if not line:
            if data:
                yield name, json.loads("\n".join(data))
            name, data = "message", []
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip())
