"""gRPC servicer for the parser: translates protobuf <-> `parse_document`.

A refused file fails the call with INVALID_ARGUMENT (DEADLINE_EXCEEDED for a
timeout) and the machine-readable reason in the `ragkb-parse-reason` trailing
metadata; the message starts with the same reason.
"""

from __future__ import annotations

from services.parser import errors, formats
from services.parser.parser import ParseResult, Reader, parse_document, read_in_process
from shared.config import ChunkerConfig, ParserConfig
from shared.contracts import parser_pb2, parser_pb2_grpc
from shared.errors import ERROR_KIND_KEY, InvalidArgument

SERVICE_NAME = "ragkb.v1.ParserService"


class ParserServicer(parser_pb2_grpc.ParserServiceServicer):
    def __init__(self, reader: Reader = read_in_process):
        self._reader = reader

    def Parse(self, request: parser_pb2.ParseRequest, context) -> parser_pb2.ParseResponse:
        if not request.kb or not request.namespace:
            raise InvalidArgument("kb and namespace are required")
        chunker = _chunker(request) if request.HasField("chunker") else None
        parser = _parser_config(request.options) if request.HasField("options") else None
        try:
            result = parse_document(kb=request.kb, namespace=request.namespace, filename=request.filename,
                                    data=request.content, doc_id=request.doc_id, chunker=chunker,
                                    metadata=dict(request.metadata), parser=parser,
                                    tokenizer_model=request.tokenizer_model, reader=self._reader)
        except errors.RagkbError as error:
            reason = errors.reason_of(error)
            if not reason:
                raise
            context.set_trailing_metadata(((ERROR_KIND_KEY, _kind(error)), (errors.REASON_KEY, reason)))
            context.abort(error.code, str(error))
        response = _response(result)
        response.warnings.extend(result.warnings)
        response.attachments.extend(
            parser_pb2.ParsedAttachment(doc_id=a.doc_id, filename=a.filename, content_hash=a.content_hash,
                                        chunks=a.chunks, detected_type=a.doc_type) for a in result.attachments)
        return response

    def SupportedTypes(self, request, context) -> parser_pb2.SupportedTypesResponse:
        return parser_pb2.SupportedTypesResponse(extensions=sorted(formats.EXTENSIONS))


def _kind(error: errors.RagkbError) -> str:
    """The shared error class a client should restore (the parser's own subclasses are not known there)."""
    for name in ("UnsupportedFileType", "DeadlineExceeded", "InvalidArgument"):
        if any(cls.__name__ == name for cls in type(error).__mro__):
            return name
    return type(error).__name__


def _response(result: ParseResult) -> parser_pb2.ParseResponse:
    return parser_pb2.ParseResponse(doc_id=result.doc_id, content_hash=result.content_hash, chunks=result.chunks,
                                    detected_type=result.doc_type, detected_encoding=result.encoding,
                                    page_count=result.page_count)


def _chunker(request: parser_pb2.ParseRequest) -> ChunkerConfig:
    """Chunker settings from the request; anything not sent keeps the KB default."""
    chunker = request.chunker
    options = {k: v for k, v in {"name": chunker.name, "max_chars": chunker.max_chars,
                                 "max_tokens": chunker.max_tokens}.items() if v}
    # these are `optional` in the proto because zero is a meaningful value for them
    options.update({k: getattr(chunker, k) for k in ("overlap_chars", "min_section_chars", "token_margin")
                    if chunker.HasField(k)})
    try:
        return ChunkerConfig(**options)
    except ValueError as error:
        raise InvalidArgument(f"invalid chunker options: {error}") from None


def _parser_config(options: parser_pb2.ParseOptions) -> ParserConfig:
    values = {k: v for k, v in {
        "ocr_languages": tuple(options.ocr_languages), "max_file_mb": options.max_file_mb,
        "max_pages": options.max_pages, "timeout_s": options.timeout_s, "max_unzipped_mb": options.max_unzipped_mb,
        "max_zip_entries": options.max_zip_entries, "max_elements": options.max_elements,
        "max_chunks": options.max_chunks, "max_memory_mb": options.max_memory_mb}.items() if v}
    try:
        return ParserConfig(ocr=options.ocr, allow_copy_protected=options.allow_copy_protected, **values)
    except ValueError as error:
        raise InvalidArgument(f"invalid parser options: {error}") from None


def add_to(server, reader: Reader = read_in_process) -> None:
    server.add(parser_pb2_grpc.add_ParserServiceServicer_to_server, ParserServicer(reader), SERVICE_NAME)
