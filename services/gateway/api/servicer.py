"""gRPC front door of the gateway."""

from __future__ import annotations

from services.gateway.gateway import Gateway
from services.gateway.query import conversations
from shared.contracts import gateway_pb2, gateway_pb2_grpc, indexer_pb2

SERVICE_NAME = "ragkb.v1.GatewayService"


class GatewayServicer(gateway_pb2_grpc.GatewayServiceServicer):
    def __init__(self, gateway: Gateway):
        self._gateway = gateway

    def CreateKnowledgeBase(self, request, context):
        return self._gateway.create_kb(request.name, request.description, request.config_yaml)

    def ListKnowledgeBases(self, request, context):
        return indexer_pb2.ListKnowledgeBasesResponse(knowledge_bases=self._gateway.list_kbs())

    def IngestDocument(self, request, context):
        return self._gateway.ingest(request.kb, request.filename, request.content, namespace=request.namespace,
                                    doc_id=request.doc_id, metadata=dict(request.metadata))

    def GetJob(self, request, context):
        return self._gateway.get_job(request.job_id)

    def ListJobs(self, request, context):
        return gateway_pb2.ListJobsResponse(jobs=self._gateway.list_jobs(request.kb, request.namespace,
                                                                         request.limit or 100))

    def CancelJob(self, request, context):
        return self._gateway.cancel_job(request.job_id)

    def RetryJob(self, request, context):
        return self._gateway.retry_job(request.job_id)

    def SyncFolder(self, request, context):
        return self._gateway.sync_folder(request)

    def Reconcile(self, request, context):
        return self._gateway.reconcile(request.kb, request.namespace, request.dry_run)

    def DeleteDocument(self, request, context):
        return self._gateway.delete_document(request.kb, request.doc_id, request.namespace)

    def ListDocuments(self, request, context):
        return indexer_pb2.ListDocumentsResponse(documents=self._gateway.list_documents(request.kb, request.namespace))

    def Query(self, request, context):
        return self._gateway.query(request)

    def QueryStream(self, request, context):
        yield from conversations.grpc_events(self._gateway.runtime, self._gateway.downstream.generator, request)

    # versions: the indexer owns them and checks the caller (a change needs kb_admin over every namespace)

    def ListVersions(self, request, context):
        return indexer_pb2.ListVersionsResponse(versions=self._gateway.downstream.indexer.list_versions(request.kb))

    def GetVersion(self, request, context):
        return self._gateway.downstream.indexer.get_version(request.kb, request.version)

    def CreateVersion(self, request, context):
        return self._gateway.downstream.indexer.create_version(request.kb, request.config_yaml)

    def SwitchVersion(self, request, context):
        return self._gateway.downstream.indexer.switch_version(request.kb, request.version, force=request.force,
                                                               namespaces=list(request.namespaces))

    def RollbackVersion(self, request, context):
        return self._gateway.downstream.indexer.rollback_version(request.kb, request.to)

    def DropVersion(self, request, context):
        return self._gateway.downstream.indexer.drop_version(request.kb, request.version)


def add_to(server, gateway: Gateway) -> None:
    server.add(gateway_pb2_grpc.add_GatewayServiceServicer_to_server, GatewayServicer(gateway), SERVICE_NAME)
