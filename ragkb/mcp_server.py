"""`ragkb mcp`: an MCP server (official `mcp` SDK) over the gateway's REST API, with the caller's key.

Tools: `list_kbs`, `search` (final chunks with scores and a citation label
each) and `ask` (a cited answer, or a refusal with its reason). The server holds
no data and no privileges of its own: every tool call is a REST call to the
gateway with the caller's API key, so a caller sees exactly what its key may
see. Over stdio the key is `--api-key`/$RAGKB_API_KEY; over streamable HTTP it
is each request's own `Authorization: Bearer <key>` header (the configured key
only when a request carries none), so one server can serve many users.
A gateway error becomes a tool error whose text names the problem.
"""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

from ragkb.aio import AsyncClient
from ragkb.client import RagkbApiError
from ragkb.types import QueryResult

# every tool only reads, and only the gateway it was started for
READ_ONLY = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)
INSTRUCTIONS = ("Knowledge bases of documents (English and Chinese). Call list_kbs to see them, search to read "
                "the passages that match a query, ask for an answer that cites its sources or says why it "
                "cannot answer. Cite answers with the [n] markers and the citation labels returned.")


KbName = Annotated[str, Field(description="a knowledge base name, as list_kbs shows it")]
Namespaces = Annotated[list[str] | None, Field(description="namespaces to search; empty = every one the key can read")]


class KnowledgeBaseInfo(BaseModel):
    name: str
    description: str
    document_count: int = Field(description="documents in the namespaces this key can read")
    chunk_count: int


class KnowledgeBases(BaseModel):
    knowledge_bases: list[KnowledgeBaseInfo]


class Passage(BaseModel):
    number: int = Field(description="1-based rank; the [n] an answer would cite")
    text: str
    doc_id: str
    chunk_id: str
    heading_path: list[str]
    source_uri: str
    citation: str = Field(description="label to cite it by: document › headings")
    score: float = Field(description="fused retrieval score")
    rerank_score: float = Field(description="reranker score (0 when the knowledge base does not rerank)")


class SearchResult(BaseModel):
    kb: str
    query: str
    passages: list[Passage]
    trace_id: str


class CitedSource(BaseModel):
    number: int
    doc_id: str
    chunk_id: str
    heading_path: list[str]
    source_uri: str
    quote: str = Field(description="the answer sentence that cites this source")


class Answer(BaseModel):
    answer: str
    refused: bool
    refusal_reason: str = Field(description="why there is no answer ('' when answered)")
    citations: list[CitedSource]
    trace_id: str


def build_server(base_url: str | None = None, api_key: str | None = None) -> MCPServer:
    """The MCP server for the gateway at `base_url`; `api_key` is used when a request brings no key."""
    server = MCPServer("ragkb", instructions=INSTRUCTIONS)

    def client_for(ctx: Context) -> AsyncClient:
        return AsyncClient(base_url, api_key=_request_key(ctx) or api_key)

    @server.tool(title="List knowledge bases", annotations=READ_ONLY)
    async def list_kbs(ctx: Context) -> KnowledgeBases:
        """The knowledge bases this API key can see, with document and chunk counts of its namespaces."""
        async with client_for(ctx) as client:
            kbs = await _call(client.list_kbs())
        return KnowledgeBases(knowledge_bases=[
            KnowledgeBaseInfo(name=kb.name, description=kb.description, document_count=kb.document_count,
                              chunk_count=kb.chunk_count) for kb in kbs])

    @server.tool(title="Search a knowledge base", annotations=READ_ONLY)
    async def search(kb: KbName, query: str, ctx: Context,
                     top_k: Annotated[int, Field(ge=1, le=50, description="passages to return")] = 5,
                     namespaces: Namespaces = None) -> SearchResult:
        """The passages of a knowledge base that best match a query (after fusion and reranking), with scores
        and a citation label each."""
        async with client_for(ctx) as client:
            result = await _call(client.query(kb, query, namespaces=namespaces, top_k=top_k))
        return SearchResult(kb=kb, query=query, passages=passages(result)[:top_k], trace_id=result.trace_id)

    @server.tool(title="Ask a knowledge base", annotations=READ_ONLY)
    async def ask(kb: KbName, question: str, ctx: Context, namespaces: Namespaces = None) -> Answer:
        """An answer from a knowledge base citing its sources with [n] markers, or refused=true with the reason
        when its documents do not answer the question."""
        async with client_for(ctx) as client:
            result = await _call(client.query(kb, question, namespaces=namespaces))
        return Answer(answer=result.answer, refused=result.refused, refusal_reason=result.refusal_reason,
                      trace_id=result.trace_id, citations=[
                          CitedSource(number=c.number, doc_id=c.doc_id, chunk_id=c.chunk_id,
                                      heading_path=c.heading_path, source_uri=c.source_uri, quote=c.quote)
                          for c in result.citations])

    return server


def passages(result: QueryResult) -> list[Passage]:
    return [Passage(number=number, text=candidate.chunk.text, doc_id=candidate.chunk.doc_id,
                    chunk_id=candidate.chunk.chunk_id, heading_path=candidate.chunk.heading_path,
                    source_uri=candidate.chunk.source.uri,
                    citation=" › ".join([candidate.chunk.doc_id, *candidate.chunk.heading_path]),
                    score=candidate.score, rerank_score=candidate.rerank_score)
            for number, candidate in enumerate(result.chunks, start=1)]


async def _call(awaitable):
    """The gateway's answer, or a tool error naming what the gateway refused."""
    try:
        return await awaitable
    except RagkbApiError as error:
        raise ToolError(str(error)) from None


def _request_key(ctx: Context) -> str | None:
    """The bearer key of the HTTP request carrying this call (None over stdio)."""
    header = (ctx.headers or {}).get("authorization", "")
    if not header.lower().startswith("bearer "):
        return None
    return header[7:].strip() or None


def serve(*, transport: str, base_url: str | None, api_key: str | None, host: str, port: int) -> None:
    server = build_server(base_url, api_key)
    if transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host=host, port=port)
