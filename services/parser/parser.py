"""The parser's domain entry point: file bytes -> KnowledgeChunks (no gRPC here)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timezone

from services.parser import chunking, formats
from shared.config import ChunkerConfig
from shared.contracts import chunk_pb2
from shared.errors import InvalidArgument
from shared.ids import default_doc_id
from shared.text import detect_language

MAX_FILE_BYTES = 50 * 1024 * 1024


@dataclass
class ParseResult:
    doc_id: str
    content_hash: str
    chunks: list[chunk_pb2.KnowledgeChunk]
    doc_type: str
    encoding: str


def parse_document(*, kb: str, namespace: str, filename: str, data: bytes, doc_id: str = "",
                   chunker: ChunkerConfig | None = None, metadata: dict[str, str] | None = None) -> ParseResult:
    if len(data) > MAX_FILE_BYTES:
        raise InvalidArgument(f"{filename!r} is {len(data)} bytes; the limit is {MAX_FILE_BYTES}")
    config = chunker or ChunkerConfig()
    document = formats.parse(filename, data)
    doc_id = doc_id or default_doc_id(filename)
    source = chunk_pb2.SourceInfo(uri=filename, mime_type=formats.MIME_TYPES[document.doc_type], title=document.title,
                                  updated_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    if config.name == "fixed":
        pieces = chunking.fixed_pieces(document.blocks, config)
    else:
        pieces = chunking.structure_pieces(document.blocks, config)
    chunks = chunking.to_chunks(pieces, kb=kb, namespace=namespace, doc_id=doc_id, source=source,
                                metadata=dict(metadata or {}))
    for chunk in chunks:
        chunk.metadata["language"] = detect_language(chunk.content)
    return ParseResult(doc_id=doc_id, content_hash=hashlib.sha256(data).hexdigest(), chunks=chunks,
                       doc_type=document.doc_type, encoding=document.encoding)
