"""ragkb.AsyncClient against the embedded stack, and the runnable examples of docs/clients.md."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import ragkb
from ragkb.types import CitationsEvent, DoneEvent, TokenEvent
from tests.chat_standin import send_json
from tests.integration.conftest import QUESTIONS, create_samples_kb

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
KB = "samples"


def python_blocks(markdown: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", markdown.read_text(encoding="utf-8"), flags=re.S)


@pytest.fixture(scope="module")
def samples_kb(client):
    create_samples_kb(client, KB)
    return KB


def run(coroutine):
    return asyncio.run(coroutine)


def test_every_python_example_in_the_docs_runs(stack, samples_kb):
    """The blocks run in order (the first creates the `handbook` knowledge base the others use)."""
    blocks = python_blocks(ROOT / "docs" / "clients.md")
    assert len(blocks) >= 5
    env = {**os.environ, "RAGKB_URL": stack.http_url, "PYTHONPATH": str(ROOT)}
    env.pop("RAGKB_API_KEY", None)
    outputs = []
    for number, code in enumerate(blocks, start=1):
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"example {number} failed:\n{code}\n{done.stderr}"
        outputs.append(done.stdout)
    assert "done created" in outputs[0] and "handbook 1" in outputs[0]
    assert "45 minutes" in outputs[1] and "[1] amr7.md" in outputs[1] and "True " in outputs[1]
    assert "45" in outputs[2] and "cited: ['amr7.md'" in outputs[2] and "trace:" in outputs[2]
    assert outputs[3].startswith("404 NotFound")
    assert "45 minutes" in outputs[4] and "Sources:" in outputs[4]


@pytest.mark.parametrize(("question", "answer", "doc_id"), QUESTIONS)
def test_query_is_typed_and_cited(stack, samples_kb, question, answer, doc_id):
    async def ask():
        async with ragkb.AsyncClient(stack.http_url) as client:
            return await client.query(KB, question)

    result = run(ask())
    assert not result.refused and answer in result.answer and result.refusal_reason == ""
    supporting = [c for c in result.citations if answer in c.quote]
    assert supporting and {c.doc_id for c in supporting} == {doc_id}
    chunk = result.chunks[supporting[0].number - 1].chunk
    assert chunk.chunk_id == supporting[0].chunk_id and answer in chunk.text
    assert result.stages["generation"].ms >= 0 and result.trace_id


@pytest.mark.parametrize(("question", "answer", "doc_id"), QUESTIONS[:1] + QUESTIONS[3:4])
def test_stream_yields_tokens_then_citations_then_done(stack, samples_kb, question, answer, doc_id):
    async def stream():
        async with ragkb.AsyncClient(stack.http_url) as client:
            return [event async for event in client.stream(KB, question)]

    events = run(stream())
    kinds = [event.kind for event in events]
    assert kinds[-2:] == ["citations", "done"] and set(kinds[:-2]) == {"token"}
    assert all(isinstance(e, TokenEvent) for e in events[:-2])
    citations, done = events[-2], events[-1]
    assert isinstance(citations, CitationsEvent) and isinstance(done, DoneEvent)
    assert answer in "".join(e.text for e in events[:-2]) and answer in citations.answer
    assert any(c.doc_id == doc_id and answer in c.quote for c in citations.citations)
    assert done.response.answer == citations.answer and done.response.trace_id


def test_errors_name_the_problem(stack, samples_kb):
    async def failures():
        async with ragkb.AsyncClient(stack.http_url) as client:
            with pytest.raises(ragkb.RagkbApiError) as unknown:
                await client.get_kb("no-such-kb")
            with pytest.raises(ragkb.RagkbApiError) as empty:
                await client.query(KB, "   ")
            with pytest.raises(ragkb.RagkbApiError) as stream_unknown:
                async for _ in client.stream("no-such-kb", "anything"):
                    pass
            return unknown.value, empty.value, stream_unknown.value

    unknown, empty, stream_unknown = run(failures())
    assert (unknown.status, unknown.kind) == (404, "NotFound") and "no-such-kb" in unknown.message
    assert (empty.status, empty.kind) == (400, "InvalidArgument")
    assert stream_unknown.kind == "NotFound" and "no-such-kb" in stream_unknown.message
    with pytest.raises(ValueError, match="max_retries"):
        ragkb.AsyncClient(stack.http_url, max_retries=-1)


class BusyGateway(ThreadingHTTPServer):
    """Answers 503 to the first `busy` requests, then a list of one knowledge base; counts requests per method."""

    def __init__(self, busy: int):
        self.busy = busy
        self.seen: list[str] = []

        class Handler(BaseHTTPRequestHandler):
            def _answer(handler):
                handler.rfile.read(int(handler.headers.get("content-length") or 0))
                self.seen.append(handler.command)
                status, body = ((503, {"error": {"type": "Unavailable", "message": "busy", "stage": None}})
                                if len(self.seen) <= self.busy else
                                (200, {"knowledge_bases": [{"name": "kb", "document_count": "3"}]}))
                send_json(handler, status, body)

            do_GET = do_POST = _answer

            def log_message(handler, *args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


def test_reads_are_retried_when_busy_and_writes_are_not():
    busy = BusyGateway(busy=2)
    try:
        async def calls():
            async with ragkb.AsyncClient(busy.url, max_retries=3, backoff_s=0) as client:
                kbs = await client.list_kbs()
                reads = list(busy.seen)
                busy.seen.clear()
                busy.busy = 1
                with pytest.raises(ragkb.RagkbApiError) as write:
                    await client.create_kb("kb")
                return kbs, reads, write.value

        kbs, reads, write = run(calls())
        assert [kb.document_count for kb in kbs] == [3]  # a protobuf int64 string, typed as int
        assert reads == ["GET", "GET", "GET"]  # two busy answers, then the list
        assert write.status == 503 and busy.seen == ["POST"]
    finally:
        busy.shutdown()
        busy.server_close()

