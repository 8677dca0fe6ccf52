"""Ingestion of one job: parser -> indexer over gRPC, with the job record kept current.

This is the domain code behind the ingestion task; in embedded mode it runs on
an in-process thread pool, under Celery it runs inside a worker task. Either way
the task passes only the job id.
"""

from __future__ import annotations

import json
import logging

from shared.clients import IndexerClient, ParserClient
from shared.contracts import gateway_pb2, indexer_pb2, parser_pb2
from shared.errors import RagkbError
from shared.jobs import JobStore
from shared.kb import KnowledgeBaseCatalog

log = logging.getLogger("ragkb.worker")


def run_ingest_job(job_id: str, *, jobs: JobStore, catalog: KnowledgeBaseCatalog, parser: ParserClient,
                   indexer: IndexerClient) -> gateway_pb2.IngestJob:
    job = jobs.get(job_id)
    if job.state in (gateway_pb2.JOB_STATE_DONE, gateway_pb2.JOB_STATE_CANCELLED):
        return job
    upload, metadata_json = jobs.upload_of(job_id)
    try:
        kb = catalog.get(job.kb)
        jobs.update(job_id, state=gateway_pb2.JOB_STATE_PARSING)
        chunker = parser_pb2.ChunkerOptions(**kb.chunker.model_dump())
        parsed = parser.parse(parser_pb2.ParseRequest(
            kb=job.kb, namespace=job.namespace, doc_id=job.doc_id, filename=job.filename,
            content=upload.read_bytes(), chunker=chunker, metadata=json.loads(metadata_json),
        ))
        jobs.update(job_id, state=gateway_pb2.JOB_STATE_INDEXING, chunks_total=len(parsed.chunks),
                    doc_id=parsed.doc_id)
        indexed = indexer.index_document(indexer_pb2.IndexDocumentRequest(
            kb=job.kb, namespace=job.namespace, doc_id=parsed.doc_id, content_hash=parsed.content_hash,
            chunks=parsed.chunks, source_uri=job.filename,
        ))
        jobs.update(job_id, state=gateway_pb2.JOB_STATE_DONE, chunks_done=len(parsed.chunks), outcome=indexed.outcome)
        upload.unlink(missing_ok=True)
    except RagkbError as error:
        jobs.update(job_id, state=gateway_pb2.JOB_STATE_FAILED, error=str(error))
    except Exception as error:  # a job must end in a state, whatever went wrong
        log.exception("job %s failed", job_id)
        jobs.update(job_id, state=gateway_pb2.JOB_STATE_FAILED, error=f"{type(error).__name__}: {error}")
    return jobs.get(job_id)
