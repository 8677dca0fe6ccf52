"""gRPC servicer for the parser: translates protobuf <-> `parse_document`."""

from __future__ import annotations

from services.parser import formats
from services.parser.parser import parse_document
from shared.config import ChunkerConfig
from shared.contracts import parser_pb2, parser_pb2_grpc
from shared.errors import InvalidArgument

SERVICE_NAME = "ragkb.v1.ParserService"


class ParserServicer(parser_pb2_grpc.ParserServiceServicer):
    def Parse(self, request: parser_pb2.ParseRequest, context) -> parser_pb2.ParseResponse:
        if not request.kb or not request.namespace:
            raise InvalidArgument("kb and namespace are required")
        chunker = None
        if request.HasField("chunker"):
            options = {k: v for k, v in {
                "name": request.chunker.name, "max_chars": request.chunker.max_chars,
                "overlap_chars": request.chunker.overlap_chars,
                "min_section_chars": request.chunker.min_section_chars}.items() if v}
            try:
                chunker = ChunkerConfig(**options)
            except ValueError as error:
                raise InvalidArgument(f"invalid chunker options: {error}") from None
        result = parse_document(kb=request.kb, namespace=request.namespace, filename=request.filename,
                                data=request.content, doc_id=request.doc_id, chunker=chunker,
                                metadata=dict(request.metadata))
        return parser_pb2.ParseResponse(doc_id=result.doc_id, content_hash=result.content_hash, chunks=result.chunks,
                                        detected_type=result.doc_type, detected_encoding=result.encoding)

    def SupportedTypes(self, request, context) -> parser_pb2.SupportedTypesResponse:
        return parser_pb2.SupportedTypesResponse(extensions=sorted(formats.EXTENSIONS))


def add_to(server) -> None:
    server.add(parser_pb2_grpc.add_ParserServiceServicer_to_server, ParserServicer(), SERVICE_NAME)
