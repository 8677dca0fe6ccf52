"""gRPC servicer for the reranker: picks the KB's reranker by config and applies it."""

from __future__ import annotations

import time

from services.reranker import rerankers  # noqa: F401  (registers the built-in rerankers)
from shared import registry
from shared.contracts import chunk_pb2, reranker_pb2, reranker_pb2_grpc
from shared.kb import KnowledgeBaseCatalog

SERVICE_NAME = "ragkb.v1.RerankerService"


class RerankerServicer(reranker_pb2_grpc.RerankerServiceServicer):
    def __init__(self, catalog: KnowledgeBaseCatalog):
        self._catalog = catalog

    def Rerank(self, request: reranker_pb2.RerankRequest, context) -> reranker_pb2.RerankResponse:
        config = self._catalog.get(request.kb).reranker
        reranker = registry.create("reranker", config.name, config, cache_key=(config.model_dump_json(),))
        started = time.perf_counter()
        outcome = reranker.rerank(request.query, list(request.candidates), request.top_n or config.top_n)
        ms = round((time.perf_counter() - started) * 1000, 2)
        return reranker_pb2.RerankResponse(
            candidates=outcome.kept, dropped=outcome.dropped, model=outcome.model,
            stages=[chunk_pb2.StageReport(name="rerank", ms=ms, metadata={"model": outcome.model})],
        )


def add_to(server, catalog: KnowledgeBaseCatalog) -> None:
    server.add(reranker_pb2_grpc.add_RerankerServiceServicer_to_server, RerankerServicer(catalog), SERVICE_NAME)
