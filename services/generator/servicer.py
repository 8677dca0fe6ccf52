"""gRPC servicer for the generator: draft an answer, then validate and resolve its citations."""

from __future__ import annotations

import time

from services.generator import extractive  # noqa: F401  (registers the built-in generators)
from services.generator.citations import resolve_citations, validate_markers
from shared import registry
from shared.contracts import chunk_pb2, generator_pb2, generator_pb2_grpc
from shared.kb import KnowledgeBaseCatalog

SERVICE_NAME = "ragkb.v1.GeneratorService"


class GeneratorServicer(generator_pb2_grpc.GeneratorServiceServicer):
    def __init__(self, catalog: KnowledgeBaseCatalog):
        self._catalog = catalog

    def Generate(self, request: generator_pb2.GenerateRequest, context) -> generator_pb2.GenerateResponse:
        config = self._catalog.get(request.kb).generator
        generator = registry.create("generator", config.name, config, cache_key=(config.model_dump_json(),))
        sources = list(request.sources)
        started = time.perf_counter()
        draft = generator.generate(request.query, sources)
        generate_ms = round((time.perf_counter() - started) * 1000, 2)
        started = time.perf_counter()
        validated = validate_markers(draft.answer, len(sources))
        citations = [] if draft.refused else resolve_citations(validated.text, sources)
        validate_ms = round((time.perf_counter() - started) * 1000, 2)
        return generator_pb2.GenerateResponse(
            answer=validated.text, citations=citations, citation_issues=validated.issues, refused=draft.refused,
            generator=draft.generator,
            stages=[
                chunk_pb2.StageReport(name="generate", ms=generate_ms, metadata={"generator": draft.generator}),
                chunk_pb2.StageReport(name="validate_citations", ms=validate_ms,
                                      metadata={"issues": str(len(validated.issues))}),
            ],
        )


def add_to(server, catalog: KnowledgeBaseCatalog) -> None:
    server.add(generator_pb2_grpc.add_GeneratorServiceServicer_to_server, GeneratorServicer(catalog), SERVICE_NAME)
