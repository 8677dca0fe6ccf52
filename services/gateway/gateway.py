"""The gateway's operations, shared by its REST and gRPC front doors."""

from __future__ import annotations

import json
from dataclasses import dataclass

from services.gateway.runtime import QueryRuntime
from shared.clients import GeneratorClient, IndexerClient, ParserClient, RerankerClient, RetrieverClient
from shared.config import DEFAULT_NAMESPACE
from shared.contracts import gateway_pb2, indexer_pb2
from shared.errors import InvalidArgument, UnsupportedFileType
from services.worker.queue import JobQueue
from shared.ids import default_doc_id
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
    def __init__(self, downstream: Downstream, jobs: JobStore, queue: JobQueue):
        self.downstream = downstream
        self._jobs = jobs
        self._queue = queue
        self._runtime = QueryRuntime(downstream.retriever, downstream.reranker, downstream.generator)
        self._supported_types: list[str] | None = None

    def create_kb(self, name: str, description: str = "", config_yaml: str = "") -> indexer_pb2.KnowledgeBase:
        return self.downstream.indexer.create_kb(name, description=description, config_yaml=config_yaml)

    def list_kbs(self) -> list[indexer_pb2.KnowledgeBase]:
        return self.downstream.indexer.list_kbs()

    def get_kb(self, name: str) -> indexer_pb2.KnowledgeBase:
        return self.downstream.indexer.get_kb(name)

    def ingest(self, kb: str, filename: str, content: bytes, *, namespace: str = "", doc_id: str = "",
               metadata: dict[str, str] | None = None) -> gateway_pb2.IngestJob:
        """Check what can be checked at once (KB exists, type supported, size), then queue the job."""
        self.downstream.indexer.get_kb(kb)
        if not filename:
            raise InvalidArgument("a document upload needs a file name")
        suffix = "." + filename.rsplit(".", 1)[-1].lower() if "." in filename else ""
        if suffix not in self.supported_types():
            raise UnsupportedFileType(
                f"unsupported file type {suffix or '(no extension)'!r} for {filename!r}; "
                f"supported: {', '.join(self.supported_types())}"
            )
        if len(content) > MAX_UPLOAD_BYTES:
            raise InvalidArgument(f"{filename!r} is {len(content)} bytes; the limit is {MAX_UPLOAD_BYTES}")
        job = self._jobs.create(kb=kb, namespace=namespace or DEFAULT_NAMESPACE,
                                doc_id=doc_id or default_doc_id(filename), filename=filename, content=content,
                                metadata_json=json.dumps(metadata or {}))
        self._queue.submit(job.job_id)
        return job

    def supported_types(self) -> list[str]:
        if self._supported_types is None:
            self._supported_types = self.downstream.parser.supported_types()
        return self._supported_types

    def get_job(self, job_id: str) -> gateway_pb2.IngestJob:
        return self._jobs.get(job_id)

    def list_jobs(self, kb: str) -> list[gateway_pb2.IngestJob]:
        return self._jobs.list(kb)

    def delete_document(self, kb: str, doc_id: str, namespace: str = "") -> indexer_pb2.DeleteDocumentResponse:
        return self.downstream.indexer.delete_document(kb, namespace or DEFAULT_NAMESPACE, doc_id)

    def list_documents(self, kb: str, namespace: str = "") -> list[indexer_pb2.DocumentRecord]:
        return self.downstream.indexer.list_documents(kb, namespace)

    def query(self, request: gateway_pb2.QueryRequest) -> gateway_pb2.QueryResponse:
        return self._runtime.run(request)
