"""gRPC servicer for the indexer: translates protobuf <-> `Indexer`."""

from __future__ import annotations

import grpc

from services.indexer.indexer import IndexReport, Indexer
from services.indexer.reconciler import Reconciler
from services.indexer.registry import DocumentRegistry
from shared import components
from shared.config import KBConfig
from shared.contracts import chunk_pb2, indexer_pb2, indexer_pb2_grpc
from shared.errors import ERROR_KIND_KEY, RagkbError
from shared.kb import KnowledgeBaseCatalog

SERVICE_NAME = "ragkb.v1.IndexerService"


class IndexerServicer(indexer_pb2_grpc.IndexerServiceServicer):
    def __init__(self, indexer: Indexer, catalog: KnowledgeBaseCatalog, registry: DocumentRegistry,
                 reconciler: Reconciler):
        self._indexer = indexer
        self._catalog = catalog
        self._registry = registry
        self._reconciler = reconciler

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
        return _response(report)

    def IndexDocumentStream(self, request: indexer_pb2.IndexDocumentRequest, context):
        # Streams bypass the unary interceptor: errors are translated here. When the caller
        # cancels or goes away, grpc drops this generator, which closes `steps` and so
        # rolls the document back.
        steps = self._indexer.index_steps(request.kb, request.namespace, request.doc_id, request.content_hash,
                                          list(request.chunks), request.source_uri)
        try:
            for step in steps:
                if not context.is_active():
                    return
                if isinstance(step, IndexReport):
                    yield indexer_pb2.IndexProgress(chunks_done=len(request.chunks),
                                                    chunks_total=len(request.chunks), result=_response(step))
                else:
                    yield indexer_pb2.IndexProgress(chunks_done=step.chunks_done, chunks_total=step.chunks_total)
        except RagkbError as error:
            context.set_trailing_metadata(((ERROR_KIND_KEY, type(error).__name__),))
            context.abort(error.code, str(error))
        except Exception as error:
            context.abort(grpc.StatusCode.INTERNAL, f"IndexDocumentStream: {type(error).__name__}: {error}")
        finally:
            steps.close()

    def Reconcile(self, request: indexer_pb2.ReconcileRequest, context):
        report = self._reconciler.reconcile(request.kb, request.namespace, dry_run=request.dry_run)
        return indexer_pb2.ReconcileReport(
            kb=report.kb, documents_checked=report.documents_checked, chunks_checked=report.chunks_checked,
            skipped=report.skipped, keyword_chunks=report.keyword_chunks, vector_chunks=report.vector_chunks,
            repairs=[indexer_pb2.DocumentRepair(**vars(repair)) for repair in report.repairs],
        )

    def DeleteDocument(self, request, context):
        deleted = self._indexer.delete_document(request.kb, request.namespace, request.doc_id)
        return indexer_pb2.DeleteDocumentResponse(chunks_deleted=deleted)

    def ListDocuments(self, request, context):
        self._catalog.get(request.kb)
        return indexer_pb2.ListDocumentsResponse(documents=[
            indexer_pb2.DocumentRecord(doc_id=d.doc_id, namespace=d.namespace, version=d.version,
                                       content_hash=d.content_hash, chunk_count=len(d.chunk_ids),
                                       source_uri=d.source_uri, updated_at=d.updated_at, status=d.status)
            for d in self._registry.list(request.kb, request.namespace)
        ])


def _response(report: IndexReport) -> indexer_pb2.IndexDocumentResponse:
    return indexer_pb2.IndexDocumentResponse(
        outcome=report.outcome, doc_version=report.doc_version, chunks_written=report.chunks_written,
        chunks_deleted=report.chunks_deleted,
        stages=[chunk_pb2.StageReport(name=name, ms=ms) for name, ms in report.stages.items()],
    )


def add_to(server, indexer: Indexer, catalog: KnowledgeBaseCatalog, registry: DocumentRegistry,
           reconciler: Reconciler) -> None:
    server.add(indexer_pb2_grpc.add_IndexerServiceServicer_to_server,
               IndexerServicer(indexer, catalog, registry, reconciler), SERVICE_NAME)
