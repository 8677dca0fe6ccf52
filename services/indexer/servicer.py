"""gRPC servicer for the indexer: translates protobuf <-> `Indexer`."""

from __future__ import annotations

from services.indexer.indexer import IndexReport, Indexer, model_key
from services.indexer.reconciler import Reconciler
from services.indexer.registry import DocumentRegistry
from services.indexer.versions import VersionManager
from shared import tenancy
from shared.contracts import chunk_pb2, indexer_pb2, indexer_pb2_grpc
from shared.embedders import model_slug
from shared.errors import InvalidArgument, PermissionDenied
from shared.kb import KnowledgeBaseCatalog
from shared.kb_settings import SettingsResolver, canonical_json
from shared.kb_versions import KBVersion

SERVICE_NAME = "ragkb.v1.IndexerService"


class IndexerServicer(indexer_pb2_grpc.IndexerServiceServicer):
    """Document writes, deletes, listings and reconciliations act on the KB settings the request carries;
    the catalog is read only for the knowledge-base lifecycle calls (create, get, list)."""

    def __init__(self, indexer: Indexer, catalog: KnowledgeBaseCatalog, registry: DocumentRegistry,
                 reconciler: Reconciler, kbs: SettingsResolver, versions: VersionManager):
        self._indexer = indexer
        self._versions = versions
        self._catalog = catalog
        self._kbs = kbs
        self._registry = registry
        self._reconciler = reconciler

    def _describe(self, name: str) -> indexer_pb2.KnowledgeBase:
        """A KB as the caller may see it: document/chunk counts of its namespaces only, and the config
        (as its tenant wrote it, no operator settings) for those who may change configs (kb_admin)."""
        config = self._catalog.tenant_config(name)
        documents, chunks = self._registry.counts(name, tenancy.check_namespaces(()))
        model = self._registry.model_of(model_key(config))
        return indexer_pb2.KnowledgeBase(
            name=name, description=config.description,
            config_yaml=config.to_tenant_yaml() if tenancy.has_role("kb_admin") else "",
            document_count=documents, chunk_count=chunks,
            embedding_model=model[0] if model else model_slug(self._catalog.profiles.model_path(config.embedder.model)),
            embedding_dimension=model[1] if model else 0,
        )

    def CreateKnowledgeBase(self, request, context):
        tenancy.check_role("kb_admin")
        kb = self._indexer.create_kb(request.name, description=request.description, config_yaml=request.config_yaml)
        return self._describe(kb.name)

    def GetKnowledgeBase(self, request, context):
        return self._describe(request.name)

    def ListKnowledgeBases(self, request, context):
        return indexer_pb2.ListKnowledgeBasesResponse(
            knowledge_bases=[self._describe(name) for name in self._catalog.names()]
        )

    @staticmethod
    def _writable(namespace: str) -> None:
        tenancy.check_role("writer")
        if not namespace:
            raise InvalidArgument("a write must name its namespace")
        tenancy.check_namespaces([namespace])

    def IndexDocument(self, request: indexer_pb2.IndexDocumentRequest, context):
        self._writable(request.namespace)
        report = self._indexer.index_document(self._kbs.config(request), request.namespace, request.doc_id,
                                              request.content_hash, list(request.chunks), request.source_uri)
        return _response(report)

    def IndexDocumentStream(self, request: indexer_pb2.IndexDocumentRequest, context):
        # When the caller cancels or goes away, grpc closes this generator, which closes `steps`
        # and so rolls the document back.
        self._writable(request.namespace)
        steps = self._indexer.index_steps(self._kbs.config(request), request.namespace, request.doc_id,
                                          request.content_hash, list(request.chunks), request.source_uri)
        try:
            for step in steps:
                if not context.is_active():
                    return
                if isinstance(step, IndexReport):
                    yield indexer_pb2.IndexProgress(chunks_done=len(request.chunks),
                                                    chunks_total=len(request.chunks), result=_response(step))
                else:
                    yield indexer_pb2.IndexProgress(chunks_done=step.chunks_done, chunks_total=step.chunks_total)
        finally:
            steps.close()

    def Reconcile(self, request: indexer_pb2.ReconcileRequest, context):
        tenancy.check_role("writer")
        if not request.namespace and not tenancy.require().all_namespaces:
            raise PermissionDenied("reconciling every namespace needs an operator key; name a namespace")
        tenancy.check_namespaces([request.namespace])
        report = self._reconciler.reconcile(self._kbs.config(request), request.namespace, dry_run=request.dry_run)
        return indexer_pb2.ReconcileReport(
            kb=report.kb, documents_checked=report.documents_checked, chunks_checked=report.chunks_checked,
            skipped=report.skipped, keyword_chunks=report.keyword_chunks, vector_chunks=report.vector_chunks,
            repairs=[indexer_pb2.DocumentRepair(**vars(repair)) for repair in report.repairs],
        )

    def DeleteDocument(self, request, context):
        self._writable(request.namespace)
        deleted = self._indexer.delete_document(self._kbs.config(request), request.namespace, request.doc_id)
        return indexer_pb2.DeleteDocumentResponse(chunks_deleted=deleted)

    def ListDocuments(self, request, context):
        self._kbs.config(request)  # a KB the gateway resolved: it exists and is servable
        namespaces = tenancy.check_namespaces([request.namespace]) or [""]  # [""] = every namespace
        return indexer_pb2.ListDocumentsResponse(documents=[
            indexer_pb2.DocumentRecord(doc_id=d.doc_id, namespace=d.namespace, version=d.version,
                                       content_hash=d.content_hash, chunk_count=len(d.chunk_ids),
                                       source_uri=d.source_uri, updated_at=d.updated_at, status=d.status)
            for namespace in namespaces for d in self._registry.list(request.kb, namespace)
        ])

    # --- versions: reads for every reader, changes for a kb_admin over every namespace (a version is the whole KB)

    @staticmethod
    def _version_admin() -> None:
        tenancy.check_role("kb_admin")
        if not tenancy.require().all_namespaces:
            raise PermissionDenied("a knowledge-base version holds every namespace; changing versions needs a key "
                                   "that may access all of them")

    def ListVersions(self, request, context):
        return indexer_pb2.ListVersionsResponse(versions=[_version(v) for v in self._versions.list(request.kb)])

    def GetVersion(self, request, context):
        return _version(self._versions.get(request.kb, request.version))

    def CreateVersion(self, request, context):
        self._version_admin()
        version = self._versions.create(request.kb, request.config_yaml)
        self._versions.start_build(request.kb, version.version)
        return _version(version)

    def SwitchVersion(self, request, context):
        self._version_admin()
        namespaces = [ns for ns in request.namespaces if ns]
        return _version(self._versions.switch(request.kb, request.version, force=request.force,
                                              namespaces=namespaces or None))

    def RollbackVersion(self, request, context):
        self._version_admin()
        return _version(self._versions.rollback(request.kb, request.to or None))

    def DropVersion(self, request, context):
        self._version_admin()
        return _version(self._versions.drop(request.kb, request.version))

    def BuildVersionBatch(self, request, context):
        self._version_admin()
        return _version(self._versions.run_batch(request.kb, request.version, request.batch))


def _version(version: KBVersion) -> indexer_pb2.KnowledgeBaseVersion:
    return indexer_pb2.KnowledgeBaseVersion(
        kb=version.kb, version=version.version, state=version.state, docs_done=version.docs_done,
        docs_total=version.docs_total, error=version.error,
        decision_json=canonical_json(version.decision) if version.decision else "",
        config_yaml=version.config_yaml if tenancy.has_role("kb_admin") else "",
        created_at=version.created_at, updated_at=version.updated_at)


def _response(report: IndexReport) -> indexer_pb2.IndexDocumentResponse:
    return indexer_pb2.IndexDocumentResponse(
        outcome=report.outcome, doc_version=report.doc_version, chunks_written=report.chunks_written,
        chunks_deleted=report.chunks_deleted,
        stages=[chunk_pb2.StageReport(name=name, ms=ms) for name, ms in report.stages.items()],
    )


def add_to(server, indexer: Indexer, catalog: KnowledgeBaseCatalog, registry: DocumentRegistry,
           reconciler: Reconciler, kbs: SettingsResolver, versions: VersionManager) -> None:
    server.add(indexer_pb2_grpc.add_IndexerServiceServicer_to_server,
               IndexerServicer(indexer, catalog, registry, reconciler, kbs, versions), SERVICE_NAME)
