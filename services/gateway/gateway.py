"""The gateway's operations, shared by its REST and gRPC front doors."""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from functools import partial

from services.gateway import auth
from services.gateway.query.runtime import QueryRuntime, create_runtime
from services.gateway.sync import plan_sync
from services.worker.queue import JobQueue
from shared.clients import (
    GeneratorClient,
    IndexerClient,
    ParserClient,
    RerankerClient,
    RetrieverClient,
)
from shared.config import DEFAULT_NAMESPACE
from shared import kb_settings
from shared.contracts import chunk_pb2, gateway_pb2, indexer_pb2
from shared.errors import NotFound, PayloadTooLarge, UnsupportedFileType
from shared.ids import (
    MAX_DOC_ID_CHARS,
    ORIGINAL_NAME_KEY,
    check_filename,
    default_doc_id,
    validate_doc_id,
)
from shared.jobs import JobStore

MAX_UPLOAD_BYTES = 50 * 1024 * 1024


@dataclass
class Downstream:
    parser: ParserClient
    indexer: IndexerClient
    retriever: RetrieverClient
    reranker: RerankerClient
    generator: GeneratorClient

    def all(self) -> dict[str, object]:
        return {"parser": self.parser, "indexer": self.indexer, "retriever": self.retriever,
                "reranker": self.reranker, "generator": self.generator}


class Gateway:
    """`knowledge_bases` resolves a KB's settings (shared/kb_settings.py): the gateway does it once per request
    and hands each inner service its slice; without it, calls about a KB reach the indexer without settings."""

    def __init__(self, downstream: Downstream, jobs: JobStore, queue: JobQueue, *,
                 runtime: QueryRuntime | None = None, keys: auth.KeyStore | None = None,
                 knowledge_bases: Callable[[str], chunk_pb2.KnowledgeBaseSettings] | None = None):
        self.downstream = downstream
        self._jobs = jobs
        self._queue = queue
        self._knowledge_bases = knowledge_bases
        self._runtime = runtime or create_runtime(retriever=downstream.retriever, reranker=downstream.reranker,
                                                  generator=downstream.generator, knowledge_bases=knowledge_bases)
        self.keys = keys or auth.KeyStore(None)
        self._supported_types: list[str] | None = None

    def create_kb(self, name: str, description: str = "", config_yaml: str = "") -> indexer_pb2.KnowledgeBase:
        return self.downstream.indexer.create_kb(name, description=description, config_yaml=config_yaml)

    def list_kbs(self) -> list[indexer_pb2.KnowledgeBase]:
        return self.downstream.indexer.list_kbs()

    def get_kb(self, name: str) -> indexer_pb2.KnowledgeBase:
        return self.downstream.indexer.get_kb(name)

    def _settings(self, kb: str):
        """Inner calls about `kb` inside the block carry its settings, resolved at most once."""
        if self._knowledge_bases is None:
            return nullcontext()
        return kb_settings.resolving(kb, partial(self._knowledge_bases, kb))

    def _job_settings(self, kb: str) -> bytes:
        """The settings a worker runs an ingestion job of `kb` with (stored with the job; NotFound for no KB)."""
        if self._knowledge_bases is None:
            self.downstream.indexer.get_kb(kb)
            return b""
        return kb_settings.narrow(self._knowledge_bases(kb), "worker").SerializeToString()

    def ingest(self, kb: str, filename: str, content: bytes, *, namespace: str = "", doc_id: str = "",
               metadata: dict[str, str] | None = None) -> gateway_pb2.IngestJob:
        """Check what can be checked at once (KB exists, type supported, size), then queue the job."""
        namespace = auth.current().write_namespace(namespace)
        settings = self._job_settings(kb)
        check_filename(filename)
        if doc_id:
            validate_doc_id(doc_id)
        else:
            doc_id = default_doc_id(filename)
            if len(filename) > MAX_DOC_ID_CHARS:  # the id may be a hashed form: the whole name stays with it
                metadata = {**(metadata or {}), ORIGINAL_NAME_KEY: filename}
        suffix = "." + filename.rsplit(".", 1)[-1].lower() if "." in filename else ""
        if suffix not in self.supported_types():
            raise UnsupportedFileType(
                f"unsupported file type {suffix or '(no extension)'!r} for {filename!r}; "
                f"supported: {', '.join(self.supported_types())}"
            )
        if len(content) > MAX_UPLOAD_BYTES:
            raise PayloadTooLarge(f"{filename!r} is {len(content)} bytes; the limit is {MAX_UPLOAD_BYTES}")
        job = self._jobs.create(kb=kb, namespace=namespace or DEFAULT_NAMESPACE,
                                doc_id=doc_id, filename=filename, content=content,
                                metadata_json=json.dumps(metadata or {}), kb_settings=settings)
        self._queue.submit(job.job_id, job.namespace)
        return job

    def resume_abandoned_jobs(self) -> list[str]:
        """Re-run the jobs a stopped process left unfinished (in-process queue; Celery workers do their own)."""
        return self._queue.resume_abandoned()

    def supported_types(self) -> list[str]:
        if self._supported_types is None:
            self._supported_types = self.downstream.parser.supported_types()
        return self._supported_types

    def get_job(self, job_id: str) -> gateway_pb2.IngestJob:
        job = self._jobs.get(job_id)
        if not auth.current().can_see(job.namespace):
            raise NotFound(f"no job {job_id!r}")  # the same answer as a missing job: ids do not leak across tenants
        return job

    def list_jobs(self, kb: str, namespace: str = "", limit: int = 100) -> list[gateway_pb2.IngestJob]:
        principal = auth.current()
        return [job for job in self._jobs.list(kb, namespace, limit) if principal.can_see(job.namespace)]

    def cancel_job(self, job_id: str) -> gateway_pb2.IngestJob:
        auth.current().write_namespace(self.get_job(job_id).namespace)
        return self._jobs.cancel(job_id)

    def retry_job(self, job_id: str) -> gateway_pb2.IngestJob:
        previous = self.get_job(job_id)
        auth.current().write_namespace(previous.namespace)
        job = self._jobs.retry(job_id, kb_settings=self._job_settings(previous.kb))  # the KB's config as it is now
        self._queue.submit(job.job_id, job.namespace)
        return job

    def sync_folder(self, request: gateway_pb2.SyncFolderRequest) -> gateway_pb2.SyncFolderResponse:
        """Delete what the folder no longer has; say which files to upload (see services.gateway.sync)."""
        namespace = auth.current().write_namespace(request.namespace)
        with self._settings(request.kb):
            plan = plan_sync(list(request.entries), self.downstream.indexer.list_documents(request.kb, namespace))
            if not request.dry_run:
                for doc_id in plan.deleted:
                    self.downstream.indexer.delete_document(request.kb, namespace, doc_id)
        return gateway_pb2.SyncFolderResponse(upload=plan.upload, unchanged=plan.unchanged, moved=plan.moved,
                                              deleted=plan.deleted)

    def reconcile(self, kb: str, namespace: str = "", dry_run: bool = False) -> indexer_pb2.ReconcileReport:
        principal = auth.current()
        if principal.namespaces is not None:
            namespace = principal.write_namespace(namespace)
        with self._settings(kb):
            return self.downstream.indexer.reconcile(kb, namespace, dry_run=dry_run)

    def delete_document(self, kb: str, doc_id: str, namespace: str = "") -> indexer_pb2.DeleteDocumentResponse:
        namespace = auth.current().write_namespace(namespace)
        with self._settings(kb):
            return self.downstream.indexer.delete_document(kb, namespace or DEFAULT_NAMESPACE, doc_id)

    def list_documents(self, kb: str, namespace: str = "") -> list[indexer_pb2.DocumentRecord]:
        principal = auth.current()
        with self._settings(kb):
            if principal.namespaces is None:
                return self.downstream.indexer.list_documents(kb, namespace)
            return [doc for ns in principal.read_namespaces([namespace])
                    for doc in self.downstream.indexer.list_documents(kb, ns)]

    def query(self, request: gateway_pb2.QueryRequest) -> gateway_pb2.QueryResponse:
        return self._runtime.run(request).to_response()

    @property
    def runtime(self) -> QueryRuntime:
        return self._runtime
