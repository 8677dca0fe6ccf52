"""One typed client per service: a deadline on every call, retries only where safe.

Errors come back as the project's exceptions (`shared.errors`), carrying the
server's message, so callers never handle raw `grpc.RpcError`.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from shared.contracts import (
    chunk_pb2,
    gateway_pb2,
    gateway_pb2_grpc,
    generator_pb2,
    generator_pb2_grpc,
    indexer_pb2,
    indexer_pb2_grpc,
    parser_pb2,
    parser_pb2_grpc,
    reranker_pb2,
    reranker_pb2_grpc,
    retriever_pb2,
    retriever_pb2_grpc,
)
from shared import inprocess, kb_settings, tenancy, tls
from shared.errors import from_rpc_error
from shared.server import MAX_MESSAGE_BYTES

CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    # spread calls over every address a target resolves to; a replica that stops answering is skipped
    ("grpc.lb_policy_name", "round_robin"),
]
_IPV4 = re.compile(r"^\d{1,3}(?:\.\d{1,3}){3}:\d+$")
RETRY_ATTEMPTS = 3
RETRY_BACKOFF_S = 0.2
# A blocking unary call is never cancelled by this side (its deadline ends as DEADLINE_EXCEEDED), so
# CANCELLED means the server dropped it: a replica stopping mid-call cancels what it was serving.
RETRYABLE_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED})


def channel_target(address: str) -> str:
    """A gRPC target for one address, a DNS name (all its A records are used) or a replica list.

    `10.0.0.5:50053,10.0.0.6:50053` becomes the `ipv4:` target gRPC balances over;
    a list must use IP addresses (for names, use one DNS name that resolves to every
    replica, e.g. a Kubernetes headless Service as `dns:///retriever:50053`).
    """
    replicas = [part.strip() for part in address.split(",") if part.strip()]
    if len(replicas) <= 1:
        return address.strip()
    not_ip = [r for r in replicas if not _IPV4.match(r)]
    if not_ip:
        raise ValueError(f"replica list {address!r}: {', '.join(not_ip)} is not IPv4:port; "
                         "use IP addresses or a single DNS name that resolves to every replica")
    return "ipv4:" + ",".join(replicas)


class _ServiceClient:
    """Channel + stub + call wrapper shared by the typed clients.

    Every request with a `context` field gets the current tenant (shared/tenancy.py) and, when it names
    the current knowledge base, that KB's settings for this service (shared/kb_settings.py).
    With `tls_dir`, the channel is mutual TLS under the caller's `identity` (its
    service certificate) and is rebuilt when the files are rotated.
    """

    service = ""
    stub_class: type = object
    TLS_RECHECK_S = 5.0

    def __init__(self, target: str, *, timeout_s: float = 30.0, tls_dir: str = "", identity: str = ""):
        if tls_dir and not identity:
            raise ValueError(f"{self.service} client: mTLS needs the caller's service identity")
        self.target = target
        self.timeout_s = timeout_s
        self._tls = tls.ServiceCertificate(Path(tls_dir), identity) if tls_dir else None
        self._tls_stamp: tuple | None = None
        self._tls_checked = 0.0
        self._channel = self._open()
        self._stub = self.stub_class(self._channel)
        self._local: tuple | None = None  # (published service, network channel, stub over a LocalChannel)

    def _open(self) -> grpc.Channel:
        if self._tls is None:
            return grpc.insecure_channel(channel_target(self.target), options=CHANNEL_OPTIONS)
        self._tls_stamp = self._tls.stamp()
        credentials = tls.channel_credentials(self._tls.directory, self._tls.service)
        # the server's certificate is checked against its service name, whichever address was dialled
        options = [*CHANNEL_OPTIONS, ("grpc.ssl_target_name_override", self.service)]
        return grpc.secure_channel(channel_target(self.target), credentials, options=options)

    def _stub_now(self):
        """The stub, on a fresh channel when the TLS files changed since the last check; through the service
        itself when it is published in this process (shared/inprocess.py), server streams still on the channel."""
        if self._tls is not None and time.monotonic() - self._tls_checked > self.TLS_RECHECK_S:
            self._tls_checked = time.monotonic()
            if self._tls.stamp() != self._tls_stamp:
                old, self._channel = self._channel, self._open()
                self._stub = self.stub_class(self._channel)
                old.close()
        local = inprocess.service_at(self.target)
        if local is None:
            return self._stub
        cached = self._local
        if cached is None or cached[0] is not local or cached[1] is not self._channel:
            names = (self._tls.service,) if self._tls is not None else ()
            cached = self._local = (local, self._channel,
                                    self.stub_class(inprocess.LocalChannel(local, self._channel, peer_names=names)))
        return cached[2]

    def _call(self, method: str, request, *, timeout_s: float | None = None, idempotent: bool = False):
        """Call with a deadline; retry with backoff on UNAVAILABLE or a server's CANCELLED when the call is
        idempotent, so a replica that dies takes none of its calls with it."""
        self._attach(request)
        attempts = RETRY_ATTEMPTS if idempotent else 1
        for attempt in range(1, attempts + 1):
            try:
                return getattr(self._stub_now(), method)(request, timeout=timeout_s or self.timeout_s)
            except grpc.RpcError as error:
                if idempotent and error.code() in RETRYABLE_CODES and attempt < attempts:
                    time.sleep(RETRY_BACKOFF_S * 2 ** (attempt - 1))
                    continue
                raise from_rpc_error(error, service=self.service) from None
        raise AssertionError("unreachable")

    def _attach(self, request) -> None:
        tenancy.attach(request)
        kb_settings.attach(request, self.service)

    def health(self, timeout_s: float = 2.0) -> str:
        """The service's health status name over this client's channel (mTLS included), or the error code."""
        try:
            response = health_pb2_grpc.HealthStub(self._channel).Check(health_pb2.HealthCheckRequest(),
                                                                        timeout=timeout_s)
        except grpc.RpcError as error:
            return f"UNREACHABLE ({error.code().name})"
        return health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)

    def close(self) -> None:
        self._channel.close()


class ParserClient(_ServiceClient):
    service = "parser"
    stub_class = parser_pb2_grpc.ParserServiceStub

    def parse(self, request: parser_pb2.ParseRequest, *, timeout_s: float | None = None) -> parser_pb2.ParseResponse:
        return self._call("Parse", request, timeout_s=timeout_s, idempotent=True)

    def supported_types(self) -> list[str]:
        return list(self._call("SupportedTypes", parser_pb2.SupportedTypesRequest(), idempotent=True).extensions)


class IndexerClient(_ServiceClient):
    service = "indexer"
    stub_class = indexer_pb2_grpc.IndexerServiceStub

    def create_kb(self, name: str, *, description: str = "", config_yaml: str = "") -> indexer_pb2.KnowledgeBase:
        request = indexer_pb2.CreateKnowledgeBaseRequest(name=name, description=description, config_yaml=config_yaml)
        return self._call("CreateKnowledgeBase", request)

    def get_kb(self, name: str) -> indexer_pb2.KnowledgeBase:
        return self._call("GetKnowledgeBase", indexer_pb2.GetKnowledgeBaseRequest(name=name), idempotent=True)

    def list_kbs(self) -> list[indexer_pb2.KnowledgeBase]:
        response = self._call("ListKnowledgeBases", indexer_pb2.ListKnowledgeBasesRequest(), idempotent=True)
        return list(response.knowledge_bases)

    def index_document(self, request: indexer_pb2.IndexDocumentRequest, *,
                       timeout_s: float | None = None) -> indexer_pb2.IndexDocumentResponse:
        # Idempotent by design: stable chunk ids and the content-hash check make a replay a no-op.
        return self._call("IndexDocument", request, timeout_s=timeout_s, idempotent=True)

    def delete_document(self, kb: str, namespace: str, doc_id: str) -> indexer_pb2.DeleteDocumentResponse:
        request = indexer_pb2.DeleteDocumentRequest(kb=kb, namespace=namespace, doc_id=doc_id)
        return self._call("DeleteDocument", request, idempotent=True)

    def list_documents(self, kb: str, namespace: str = "") -> list[indexer_pb2.DocumentRecord]:
        request = indexer_pb2.ListDocumentsRequest(kb=kb, namespace=namespace)
        return list(self._call("ListDocuments", request, idempotent=True).documents)

    def index_document_stream(self, request: indexer_pb2.IndexDocumentRequest, *, timeout_s: float | None = None):
        """Progress messages, the last carrying the result. `.cancel()` on the returned call rolls back.

        Iterating raises the project's exceptions, like every other call.
        """
        self._attach(request)
        return _TranslatedStream(self._stub_now().IndexDocumentStream(request, timeout=timeout_s or self.timeout_s),
                                 self.service)

    def reconcile(self, kb: str, namespace: str = "", *, dry_run: bool = False,
                  timeout_s: float | None = None) -> indexer_pb2.ReconcileReport:
        request = indexer_pb2.ReconcileRequest(kb=kb, namespace=namespace, dry_run=dry_run)
        return self._call("Reconcile", request, timeout_s=timeout_s, idempotent=True)

    def list_versions(self, kb: str) -> list[indexer_pb2.KnowledgeBaseVersion]:
        response = self._call("ListVersions", indexer_pb2.ListVersionsRequest(kb=kb), idempotent=True)
        return list(response.versions)

    def get_version(self, kb: str, version: int) -> indexer_pb2.KnowledgeBaseVersion:
        return self._call("GetVersion", indexer_pb2.VersionRequest(kb=kb, version=version), idempotent=True)

    def create_version(self, kb: str, config_yaml: str) -> indexer_pb2.KnowledgeBaseVersion:
        return self._call("CreateVersion", indexer_pb2.CreateVersionRequest(kb=kb, config_yaml=config_yaml))

    def switch_version(self, kb: str, version: int, *, force: bool = False, namespaces: list[str] | None = None,
                       timeout_s: float | None = None) -> indexer_pb2.KnowledgeBaseVersion:
        """`timeout_s`: the gate runs the golden questions on both versions first."""
        request = indexer_pb2.SwitchVersionRequest(kb=kb, version=version, force=force, namespaces=namespaces or [])
        return self._call("SwitchVersion", request, timeout_s=timeout_s)

    def rollback_version(self, kb: str, to: int = 0) -> indexer_pb2.KnowledgeBaseVersion:
        return self._call("RollbackVersion", indexer_pb2.RollbackVersionRequest(kb=kb, to=to))

    def drop_version(self, kb: str, version: int) -> indexer_pb2.KnowledgeBaseVersion:
        return self._call("DropVersion", indexer_pb2.VersionRequest(kb=kb, version=version))

    def build_version_batch(self, kb: str, version: int, batch: int, *,
                            timeout_s: float | None = None) -> indexer_pb2.KnowledgeBaseVersion:
        # idempotent: a batch run twice finds its chunks present and writes nothing
        request = indexer_pb2.VersionBatchRequest(kb=kb, version=version, batch=batch)
        return self._call("BuildVersionBatch", request, timeout_s=timeout_s, idempotent=True)


class _TranslatedStream:
    """A server stream whose errors come out as the project's exceptions."""

    def __init__(self, call, service: str):
        self._call = call
        self._service = service

    def __iter__(self):
        try:
            yield from self._call
        except grpc.RpcError as error:
            raise from_rpc_error(error, service=self._service) from None

    def cancel(self) -> None:
        self._call.cancel()


class RetrieverClient(_ServiceClient):
    service = "retriever"
    stub_class = retriever_pb2_grpc.RetrieverServiceStub

    def retrieve(self, request: retriever_pb2.RetrieveRequest, *,
                 timeout_s: float | None = None) -> retriever_pb2.RetrieveResponse:
        return self._call("Retrieve", request, timeout_s=timeout_s, idempotent=True)

    def chunks_by_group(self, kb: str, namespaces: list[str], group_ids: list[str], *,
                        timeout_s: float | None = None, with_vectors: bool = False) -> list[chunk_pb2.KnowledgeChunk]:
        request = retriever_pb2.ChunksByGroupRequest(kb=kb, namespaces=namespaces, group_ids=group_ids,
                                                     chunk_vectors=with_vectors)
        return list(self._call("ChunksByGroup", request, timeout_s=timeout_s, idempotent=True).chunks)


class RerankerClient(_ServiceClient):
    service = "reranker"
    stub_class = reranker_pb2_grpc.RerankerServiceStub

    def rerank(self, kb: str, query: str, candidates: list[chunk_pb2.Candidate], *, top_n: int = 0,
               timeout_s: float | None = None,
               split_parts: list[chunk_pb2.KnowledgeChunk] | None = None) -> reranker_pb2.RerankResponse:
        """`split_parts`: the split candidates' parts as retrieval read them (None: the reranker reads them)."""
        request = reranker_pb2.RerankRequest(kb=kb, query=query, candidates=candidates, top_n=top_n)
        if split_parts is not None:
            request.split_parts.SetInParent()
            request.split_parts.chunks.extend(split_parts)
        return self._call("Rerank", request, timeout_s=timeout_s, idempotent=True)


class GeneratorClient(_ServiceClient):
    service = "generator"
    stub_class = generator_pb2_grpc.GeneratorServiceStub

    def generate(self, kb: str, query: str, sources: list[chunk_pb2.Candidate], *,
                 timeout_s: float | None = None,
                 query_vector: chunk_pb2.QueryVector | None = None) -> generator_pb2.GenerateResponse:
        request = generator_pb2.GenerateRequest(kb=kb, query=query, sources=sources, query_vector=query_vector)
        return self._call("Generate", request, timeout_s=timeout_s, idempotent=True)

    def generate_stream(self, kb: str, query: str, sources: list[chunk_pb2.Candidate], *,
                        timeout_s: float | None = None, query_vector: chunk_pb2.QueryVector | None = None):
        """GenerateEvents as the model writes (tokens, then one final); errors become the project's exceptions."""
        request = generator_pb2.GenerateRequest(kb=kb, query=query, sources=sources, query_vector=query_vector)
        self._attach(request)
        return _TranslatedStream(self._stub_now().GenerateStream(request, timeout=timeout_s or self.timeout_s),
                                 self.service)


class GatewayClient(_ServiceClient):
    service = "gateway"
    stub_class = gateway_pb2_grpc.GatewayServiceStub

    def create_kb(self, name: str, *, description: str = "", config_yaml: str = "") -> indexer_pb2.KnowledgeBase:
        request = indexer_pb2.CreateKnowledgeBaseRequest(name=name, description=description, config_yaml=config_yaml)
        return self._call("CreateKnowledgeBase", request)

    def list_kbs(self) -> list[indexer_pb2.KnowledgeBase]:
        return list(self._call("ListKnowledgeBases", indexer_pb2.ListKnowledgeBasesRequest(),
                               idempotent=True).knowledge_bases)

    def ingest(self, request: gateway_pb2.IngestDocumentRequest) -> gateway_pb2.IngestJob:
        return self._call("IngestDocument", request)

    def get_job(self, job_id: str) -> gateway_pb2.IngestJob:
        return self._call("GetJob", gateway_pb2.GetJobRequest(job_id=job_id), idempotent=True)

    def delete_document(self, kb: str, namespace: str, doc_id: str) -> indexer_pb2.DeleteDocumentResponse:
        request = indexer_pb2.DeleteDocumentRequest(kb=kb, namespace=namespace, doc_id=doc_id)
        return self._call("DeleteDocument", request, idempotent=True)

    def list_documents(self, kb: str, namespace: str = "") -> list[indexer_pb2.DocumentRecord]:
        request = indexer_pb2.ListDocumentsRequest(kb=kb, namespace=namespace)
        return list(self._call("ListDocuments", request, idempotent=True).documents)

    def query(self, request: gateway_pb2.QueryRequest, *, timeout_s: float | None = None) -> gateway_pb2.QueryResponse:
        return self._call("Query", request, timeout_s=timeout_s, idempotent=True)

    def query_stream(self, request: gateway_pb2.QueryRequest, *, timeout_s: float | None = None):
        """QueryEvents: tokens, then citations, then done (the whole response)."""
        return _TranslatedStream(self._stub_now().QueryStream(request, timeout=timeout_s or self.timeout_s),
                                 self.service)
