"""gRPC servicer for the retriever."""

from __future__ import annotations

from services.retriever.retriever import Retriever
from shared import tenancy
from shared.contracts import chunk_pb2, retriever_pb2, retriever_pb2_grpc
from shared.errors import InvalidArgument
from shared.kb_settings import SettingsResolver

SERVICE_NAME = "ragkb.v1.RetrieverService"


class RetrieverServicer(retriever_pb2_grpc.RetrieverServiceServicer):
    def __init__(self, retriever: Retriever, kbs: SettingsResolver):
        self._retriever = retriever
        self._kbs = kbs

    def Retrieve(self, request: retriever_pb2.RetrieveRequest, context) -> retriever_pb2.RetrieveResponse:
        if not request.query.strip():
            raise InvalidArgument("query is empty")
        result = self._retriever.retrieve(self._kbs.config(request), request.query,
                                          tenancy.scope_filter(request.filter),
                                          top_k=request.top_k,
                                          candidate_depth=request.candidate_depth,
                                          with_vectors=request.chunk_vectors, with_parts=request.split_parts)
        split_parts = None
        if result.split_parts is not None:
            tenant = tenancy.require()
            split_parts = chunk_pb2.SplitParts(chunks=[c for c in result.split_parts if tenancy.readable(c, tenant)])
        return retriever_pb2.RetrieveResponse(
            candidates=result.candidates, bm25=result.bm25, dense=result.dense, degraded=result.degraded,
            weights=result.weights, query_language=result.language, route_signals=result.signals,
            competence=result.competence, fusion=result.fusion, sparse=result.sparse,
            stages=[chunk_pb2.StageReport(name=name, ms=ms) for name, ms in result.stages.items()],
            query_vector=result.query_vector, split_parts=split_parts,
        )

    def ChunksByGroup(self, request: retriever_pb2.ChunksByGroupRequest, context) -> retriever_pb2.ChunksByGroupResponse:
        namespaces = tenancy.check_namespaces(request.namespaces)
        if not namespaces:
            raise InvalidArgument("ChunksByGroup needs at least one namespace")
        tenant = tenancy.require()
        vectors_for = tenancy.scope_filter(chunk_pb2.SearchFilter(namespaces=namespaces)) if request.chunk_vectors \
            else None
        chunks = self._retriever.chunks_by_group(self._kbs.config(request), namespaces, list(request.group_ids),
                                                 vectors_for=vectors_for)
        return retriever_pb2.ChunksByGroupResponse(chunks=[c for c in chunks if tenancy.readable(c, tenant)])


def add_to(server, retriever: Retriever, kbs: SettingsResolver) -> None:
    server.add(retriever_pb2_grpc.add_RetrieverServiceServicer_to_server, RetrieverServicer(retriever, kbs),
               SERVICE_NAME)
