"""gRPC servicer for the indexer: translates protobuf <-> `Indexer`."""

from __future__ import annotations

from services.indexer.indexer import Indexer
from services.indexer.registry import DocumentRegistry
from shared import components
from shared.config import KBConfig
from shared.contracts import chunk_pb2, indexer_pb2, indexer_pb2_grpc
from shared.kb import KnowledgeBaseCatalog

SERVICE_NAME = "ragkb.v1.IndexerService"


class IndexerServicer(indexer_pb2_grpc.IndexerServiceServicer):
    def __init__(self, indexer: Indexer, catalog: KnowledgeBaseCatalog, registry: DocumentRegistry):
        self._indexer = indexer
        self._catalog = catalog
        self._registry = registry

    def _describe(self, kb: KBConfig) -> indexer_pb2.KnowledgeBase:
        documents, chunks = self._registry.counts(kb.name)
        model = self._registry.model_of(kb.name)
        return indexer_pb2.KnowledgeBase(
            name=kb.name, description=kb.description, config_yaml=kb.to_yaml(), document_count=documents,
            chunk_count=chunks, embedding_model=model[0] if model else components.embedder_for(kb).model_id,
            embedding_dimension=model[1] if model else 0,
        )

    def CreateKnowledgeBase(self, request, context):
        kb = self._indexer.create_kb(request.name, description=request.description, config_yaml=request.config_yaml)
        return self._describe(kb)

    def GetKnowledgeBase(self, request, context):
        return self._describe(self._catalog.get(request.name))

    def ListKnowledgeBases(self, request, context):
        return indexer_pb2.ListKnowledgeBasesResponse(
            knowledge_bases=[self._describe(self._catalog.get(name)) for name in self._catalog.names()]
        )

    def IndexDocument(self, request: indexer_pb2.IndexDocumentRequest, context):
        report = self._indexer.index_document(request.kb, request.namespace, request.doc_id, request.content_hash,
                                              list(request.chunks), request.source_uri)
        return indexer_pb2.IndexDocumentResponse(
            outcome=report.outcome, doc_version=report.doc_version, chunks_written=report.chunks_written,
            chunks_deleted=report.chunks_deleted,
            stages=[chunk_pb2.StageReport(name=name, ms=ms) for name, ms in report.stages.items()],
        )

    def DeleteDocument(self, request, context):
        deleted = self._indexer.delete_document(request.kb, request.namespace, request.doc_id)
        return indexer_pb2.DeleteDocumentResponse(chunks_deleted=deleted)

    def ListDocuments(self, request, context):
        self._catalog.get(request.kb)
        return indexer_pb2.ListDocumentsResponse(documents=[
            indexer_pb2.DocumentRecord(doc_id=d.doc_id, namespace=d.namespace, version=d.version,
                                       content_hash=d.content_hash, chunk_count=len(d.chunk_ids),
                                       source_uri=d.source_uri, updated_at=d.updated_at)
            for d in self._registry.list(request.kb, request.namespace)
        ])


def add_to(server, indexer: Indexer, catalog: KnowledgeBaseCatalog, registry: DocumentRegistry) -> None:
    server.add(indexer_pb2_grpc.add_IndexerServiceServicer_to_server, IndexerServicer(indexer, catalog, registry),
               SERVICE_NAME)
