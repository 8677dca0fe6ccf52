"""`ragkb mcp` over stdio and streamable HTTP, driven by the mcp SDK's own client against the embedded stack."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from tests.integration.conftest import samples_and_reader_keys

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
KB = "handbook"
CHARGING = "How long does it take to charge the AMR-7 from 20% to 80%?"


@pytest.fixture(scope="module")
def keys(stack, client):
    """The samples, a reader key of their namespace and one of an empty namespace."""
    yield from samples_and_reader_keys(stack, client, KB, "mcp", description="robot manuals")


@pytest.fixture(scope="module")
def http_server(stack):
    """`ragkb mcp --transport http` with no key of its own: every request brings its caller's."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("RAGKB_API_KEY", None)
    process = subprocess.Popen([sys.executable, "-m", "ragkb", "--url", stack.http_url, "mcp", "--transport", "http",
                                "--port", str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while socket.socket().connect_ex(("127.0.0.1", port)) != 0:
        assert process.poll() is None and time.monotonic() < deadline, "the MCP HTTP server did not start"
        time.sleep(0.1)
    yield f"http://127.0.0.1:{port}/mcp"
    process.terminate()
    process.wait(timeout=10)


@asynccontextmanager
async def stdio_session(stack, key: str):
    env = {"PYTHONPATH": str(ROOT), "RAGKB_URL": stack.http_url, "RAGKB_API_KEY": key}
    params = StdioServerParameters(command=sys.executable, args=["-m", "ragkb", "mcp"], env=env)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


@asynccontextmanager
async def http_session(url: str, key: str):
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=120) as http, \
            streamable_http_client(url, http_client=http) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


def session_for(transport: str, stack, http_url: str | None, key: str):
    return stdio_session(stack, key) if transport == "stdio" else http_session(http_url, key)


TRANSPORTS = ["stdio", "http"]


@pytest.fixture(params=TRANSPORTS)
def transport(request):
    return request.param


@pytest.fixture()
def http_url(transport, request):
    return request.getfixturevalue("http_server") if transport == "http" else None


def test_tools_and_their_schemas(stack, keys, transport, http_url):
    async def listed():
        async with session_for(transport, stack, http_url, keys["reader"]) as session:
            return (await session.list_tools()).tools

    tools = {tool.name: tool for tool in anyio.run(listed)}
    assert set(tools) == {"list_kbs", "search", "ask"}
    assert tools["search"].input_schema["required"] == ["kb", "query"]
    assert tools["ask"].input_schema["required"] == ["kb", "question"]
    assert "refusal_reason" in tools["ask"].output_schema["properties"]
    assert all(tool.annotations.read_only_hint for tool in tools.values())


def test_list_search_and_ask_in_english_and_chinese(stack, keys, transport, http_url):
    async def calls():
        async with session_for(transport, stack, http_url, keys["reader"]) as session:
            return (await session.call_tool("list_kbs", {}),
                    await session.call_tool("search", {"kb": KB, "query": CHARGING, "top_k": 3}),
                    await session.call_tool("ask", {"kb": KB, "question": CHARGING}),
                    await session.call_tool("ask", {"kb": KB, "question": "AMR-7 的最大载重是多少？"}))

    listing, search, ask_en, ask_zh = anyio.run(calls)
    assert not any(r.is_error for r in (listing, search, ask_en, ask_zh))
    (kb,) = [k for k in listing.structured_content["knowledge_bases"] if k["name"] == KB]
    assert kb["description"] == "robot manuals" and kb["document_count"] > 0
    passages = search.structured_content["passages"]
    assert 1 <= len(passages) <= 3 and [p["number"] for p in passages] == list(range(1, len(passages) + 1))
    holding = [p for p in passages if "45 minutes" in p["text"]]
    assert holding and holding[0]["doc_id"] == "en/amr7-user-guide.md"
    assert holding[0]["citation"].startswith("en/amr7-user-guide.md") and holding[0]["score"] > 0
    for result, answer, doc_id in ((ask_en, "45 minutes", "en/amr7-user-guide.md"),
                                   (ask_zh, "300公斤", "zh/amr7-使用手册.md")):
        body = result.structured_content
        assert not body["refused"] and answer in body["answer"] and body["refusal_reason"] == ""
        assert any(c["doc_id"] == doc_id and answer in c["quote"] for c in body["citations"])
        assert answer in result.content[0].text  # the same answer as text, for clients without structured output


def test_a_key_sees_only_its_namespaces(stack, keys, transport, http_url):
    async def calls():
        async with session_for(transport, stack, http_url, keys["elsewhere"]) as session:
            return (await session.call_tool("search", {"kb": KB, "query": CHARGING}),
                    await session.call_tool("ask", {"kb": KB, "question": CHARGING}),
                    await session.call_tool("ask", {"kb": KB, "question": CHARGING, "namespaces": ["default"]}))

    search, ask, outside = anyio.run(calls)
    assert search.structured_content["passages"] == []
    assert ask.structured_content["refused"] and ask.structured_content["refusal_reason"]
    assert "45 minutes" not in ask.structured_content["answer"]
    assert outside.is_error and "403 PermissionDenied" in outside.content[0].text
    assert "default" in outside.content[0].text


def test_failures_are_tool_errors_naming_the_problem(stack, keys, transport, http_url):
    async def calls():
        async with session_for(transport, stack, http_url, keys["reader"]) as session:
            unknown = await session.call_tool("ask", {"kb": "no-such-kb", "question": "anything"})
            bad_top_k = await session.call_tool("search", {"kb": KB, "query": "x", "top_k": 500})
        async with session_for(transport, stack, http_url, "rk_not-a-key") as session:
            stranger = await session.call_tool("list_kbs", {})
        return unknown, bad_top_k, stranger

    unknown, bad_top_k, stranger = anyio.run(calls)
    assert unknown.is_error and "404 NotFound" in unknown.content[0].text and "no-such-kb" in unknown.content[0].text
    assert bad_top_k.is_error and "top_k" in bad_top_k.content[0].text
    assert stranger.is_error and "401 Unauthenticated" in stranger.content[0].text
