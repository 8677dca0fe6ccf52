"""The parser's domain entry point: file bytes -> KnowledgeChunks (no gRPC here).

`doc_id` is the caller's stable business id; without one it is derived from the
file name as uploaded (for `ragkb ingest DIR`, the path relative to DIR). An
e-mail's attachments become documents `<doc_id>/<attachment name>`.

Reading runs through a `reader` callable: in process by default, or in a
killable worker process (`isolation.ParseWorkers`) so that a per-file timeout
or a crashing library never takes the service down.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone

from services.parser import chunking, errors, formats
from services.parser.formats import ParsedDocument, ReadOptions
from shared.config import ChunkerConfig, ParserConfig
from shared.contracts import chunk_pb2
from shared.ids import bounded_doc_id, default_doc_id, validate_doc_id
from shared.text import detect_language

log = logging.getLogger("ragkb.parser")

MAX_FILE_BYTES = 60 * 1024 * 1024  # hard cap under the 64 MB gRPC message limit, whatever a KB allows
Reader = Callable[[str, bytes, ReadOptions, float], ParsedDocument]


@dataclass
class ParseResult:
    doc_id: str
    content_hash: str
    chunks: list[chunk_pb2.KnowledgeChunk]
    doc_type: str
    encoding: str
    page_count: int = 0
    filename: str = ""
    attachments: list[ParseResult] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def read_in_process(filename: str, data: bytes, options: ReadOptions, timeout_s: float) -> ParsedDocument:
    """Read in the calling thread; the timeout cannot be enforced here (the worker pool does that)."""
    return formats.read(filename, data, options)


def parse_document(*, kb: str, namespace: str, filename: str, data: bytes, doc_id: str = "",
                   chunker: ChunkerConfig | None = None, metadata: dict[str, str] | None = None,
                   parser: ParserConfig | None = None, tokenizer_model: str = "",
                   reader: Reader = read_in_process) -> ParseResult:
    limits = parser or ParserConfig()
    max_bytes = min(MAX_FILE_BYTES, int(limits.max_file_mb * 1024 * 1024))
    if len(data) > max_bytes:
        raise errors.ParseError(errors.TOO_LARGE, f"{filename!r} is {len(data)} bytes; the limit is {max_bytes}")
    config = chunker or ChunkerConfig()
    options = ReadOptions(ocr=limits.ocr, ocr_languages=tuple(limits.ocr_languages), max_pages=limits.max_pages,
                          allow_copy_protected=limits.allow_copy_protected,
                          max_unzipped_bytes=int(limits.max_unzipped_mb * 1024 * 1024),
                          max_zip_entries=limits.max_zip_entries, max_elements=limits.max_elements,
                          max_memory_mb=limits.max_memory_mb)
    document = reader(filename, data, options, limits.timeout_s)
    doc_id = validate_doc_id(doc_id) if doc_id else default_doc_id(filename)
    result = _chunk(document, kb=kb, namespace=namespace, filename=filename, data=data, doc_id=doc_id,
                    config=config, metadata={**(metadata or {}), **document.metadata},
                    budget=_budget(config, tokenizer_model))
    if len(result.chunks) > limits.max_chunks:
        raise errors.ParseError(errors.TOO_MANY_CHUNKS, f"{filename!r} makes {len(result.chunks)} chunks; "
                                                        f"the limit is {limits.max_chunks}")
    for attachment in document.attachments:
        name = f"{filename}/{attachment.filename}"
        try:
            child = parse_document(kb=kb, namespace=namespace, filename=attachment.filename, data=attachment.data,
                                   doc_id=bounded_doc_id(f"{doc_id}/{attachment.filename}"), chunker=config,
                                   metadata={**(metadata or {}), "attachment_of": doc_id}, parser=parser,
                                   tokenizer_model=tokenizer_model, reader=reader)
        except errors.RagkbError as error:  # a bad attachment must not lose the e-mail itself
            log.warning("attachment %r skipped: %s", name, error)
            result.warnings.append(f"attachment {name!r} skipped: {error}")
            continue
        child.filename = attachment.filename
        result.attachments.append(child)
        result.warnings.extend(child.warnings)
    return result


def _budget(config: ChunkerConfig, tokenizer_model: str) -> chunking.Budget:
    if not tokenizer_model:
        return chunking.Budget(config.max_chars)
    from services.parser.tokens import counter_for

    counter = counter_for(tokenizer_model)
    limit = min(config.max_tokens or counter.limit, counter.limit)
    max_tokens = limit - config.token_margin
    if max_tokens < 16:
        raise errors.InvalidArgument(f"chunker token budget too small: limit {limit} - margin "
                                     f"{config.token_margin} leaves {max_tokens} tokens")
    return chunking.Budget(config.max_chars, max_tokens=max_tokens, count_tokens=counter.count)


def _chunk(document: ParsedDocument, *, kb: str, namespace: str, filename: str, data: bytes, doc_id: str,
           config: ChunkerConfig, metadata: dict[str, str], budget: chunking.Budget) -> ParseResult:
    source = chunk_pb2.SourceInfo(uri=filename, mime_type=formats.mime_type(document.doc_type, filename), title=document.title,
                                  updated_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    if config.name == "fixed":
        pieces = chunking.fixed_pieces(document.blocks, config, budget)
    else:
        pieces = chunking.structure_pieces(document.blocks, config, budget)
    chunks = chunking.to_chunks(pieces, kb=kb, namespace=namespace, doc_id=doc_id, source=source, metadata=metadata)
    for chunk in chunks:
        chunk.metadata["language"] = detect_language(chunk.content)
    return ParseResult(doc_id=doc_id, content_hash=hashlib.sha256(data).hexdigest(), chunks=chunks,
                       doc_type=document.doc_type, encoding=document.encoding, page_count=document.page_count,
                       filename=filename)
