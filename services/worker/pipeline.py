"""Ingestion of one job: parser -> indexer over gRPC, with the job record kept current.

This is the domain code behind the ingestion task; in embedded mode it runs on
an in-process thread pool, under Celery it runs inside a worker task. Either way
the task passes only the job id; the job carries the KB settings the gateway
resolved when it accepted it (shared/kb_settings.py), which the worker resolves
against its own operator profiles and passes on to the indexer.

States: queued -> parsing -> embedding (chunks_done grows batch by batch) ->
indexing (old version's chunks removed, registry updated) -> done | failed |
cancelled.
"""

from __future__ import annotations

import json
import logging
import time

from services.parser.errors import reason_of
from shared import kb_settings, tenancy
from shared.clients import IndexerClient, ParserClient
from shared.contracts import chunk_pb2, gateway_pb2, indexer_pb2, parser_pb2
from shared.errors import DeadlineExceeded, FailedPrecondition, RagkbError, Unavailable
from shared.jobs import FINAL_STATES, JobStore
from shared.kb_settings import SettingsResolver

log = logging.getLogger("ragkb.worker")
INDEX_ATTEMPTS = 3
INDEX_RETRY_S = 1.0  # waited before the second attempt; twice that before the third


def run_ingest_job(job_id: str, *, jobs: JobStore, kbs: SettingsResolver, parser: ParserClient,
                   indexer: IndexerClient, step_timeout_s: float | None = None) -> gateway_pb2.IngestJob:
    """Run one job to a final state. Safe to run again for the same job (redelivery after a crash).

    `step_timeout_s` is the deadline of each step (parse, index); None = the clients' default.
    A job cancelled meanwhile stops at its next step; a document half-way written is rolled back.
    The parser and indexer calls act for the job's namespace only.
    """
    job = jobs.get(job_id)
    with tenancy.acting_for(tenancy.operator_tenant("worker", namespaces=[job.namespace])):
        return _run(job_id, job, jobs=jobs, kbs=kbs, parser=parser, indexer=indexer,
                    step_timeout_s=step_timeout_s)


def _run(job_id: str, job: gateway_pb2.IngestJob, *, jobs: JobStore, kbs: SettingsResolver,
         parser: ParserClient, indexer: IndexerClient, step_timeout_s: float | None) -> gateway_pb2.IngestJob:
    if job.state in FINAL_STATES or not jobs.start(job_id):
        return jobs.get(job_id)
    try:
        settings = _job_settings(jobs, job)
        kb = kbs.resolve(settings)
        content, metadata_json = jobs.upload_of(job_id)
        with kb_settings.using(settings):  # the indexer calls carry the KB's store and embedder settings
            return _steps(job_id, job, kb, content, metadata_json, jobs=jobs, parser=parser, indexer=indexer,
                          step_timeout_s=step_timeout_s)
    except RagkbError as error:
        jobs.advance(job_id, state=gateway_pb2.JOB_STATE_FAILED, error=str(error))
    return jobs.get(job_id)


def _job_settings(jobs: JobStore, job: gateway_pb2.IngestJob) -> chunk_pb2.KnowledgeBaseSettings:
    settings = chunk_pb2.KnowledgeBaseSettings.FromString(jobs.kb_settings_of(job.job_id))
    if settings.kb != job.kb:
        raise FailedPrecondition(f"job {job.job_id!r} was queued without the settings of knowledge base "
                                 f"{job.kb!r}; retry it")
    return settings


def _steps(job_id: str, job: gateway_pb2.IngestJob, kb, content: bytes, metadata_json: str, *, jobs: JobStore,
           parser: ParserClient, indexer: IndexerClient, step_timeout_s: float | None) -> gateway_pb2.IngestJob:
    step = "parse"
    try:
        chunker = parser_pb2.ChunkerOptions(**kb.chunker_for(job.filename).model_dump())
        parsed = parser.parse(parser_pb2.ParseRequest(
            kb=job.kb, namespace=job.namespace, doc_id=job.doc_id, filename=job.filename,
            content=content, chunker=chunker, metadata=json.loads(metadata_json),
            tokenizer_model=kb.embedder.model, options=parser_pb2.ParseOptions(**kb.parser.model_dump()),
        ), timeout_s=step_timeout_s)
        for attachment in parsed.attachments:  # e-mail attachments are documents of their own
            indexer.index_document(indexer_pb2.IndexDocumentRequest(
                kb=job.kb, namespace=job.namespace, doc_id=attachment.doc_id, content_hash=attachment.content_hash,
                chunks=attachment.chunks, source_uri=f"{job.filename}/{attachment.filename}",
            ), timeout_s=step_timeout_s)
        if not jobs.advance(job_id, state=gateway_pb2.JOB_STATE_EMBEDDING, chunks_total=len(parsed.chunks),
                           chunks_done=0, doc_id=parsed.doc_id):
            return jobs.get(job_id)
        step = "index"
        indexed = _index(job_id, jobs, indexer, indexer_pb2.IndexDocumentRequest(
            kb=job.kb, namespace=job.namespace, doc_id=parsed.doc_id, content_hash=parsed.content_hash,
            chunks=parsed.chunks, source_uri=job.filename,
        ), step_timeout_s)
        if indexed is not None and jobs.advance(job_id, state=gateway_pb2.JOB_STATE_DONE, error="",
                                                chunks_done=len(parsed.chunks), outcome=indexed.outcome):
            jobs.discard_upload(job_id)
    except DeadlineExceeded as error:
        # the parser's own per-file limit names itself; only a step deadline of this caller is described here
        jobs.advance(job_id, state=gateway_pb2.JOB_STATE_FAILED, error=str(error) if reason_of(error) else
                    f"{step} step of {job.filename!r} exceeded its {step_timeout_s or 'default'} s deadline")
    except RagkbError as error:
        jobs.advance(job_id, state=gateway_pb2.JOB_STATE_FAILED, error=str(error))
    except Exception as error:  # a job must end in a state, whatever went wrong
        log.exception("job %s failed in its %s step", job_id, step)
        jobs.advance(job_id, state=gateway_pb2.JOB_STATE_FAILED,
                    error=f"{step} step: {type(error).__name__}: {error}")
    return jobs.get(job_id)


def _index(job_id: str, jobs: JobStore, indexer: IndexerClient, request: indexer_pb2.IndexDocumentRequest,
           timeout_s: float | None) -> indexer_pb2.IndexDocumentResponse | None:
    """Index with progress on the job; None when the job was cancelled (the indexer then rolls back).

    An indexer replica that dies mid-stream leaves the document `indexing`; indexing is idempotent (the
    next attempt trusts only what both stores hold), so the stream is opened again and the channel's
    round robin takes it to a live replica.
    """
    for attempt in range(1, INDEX_ATTEMPTS + 1):
        try:
            return _index_once(job_id, jobs, indexer, request, timeout_s)
        except Unavailable as error:
            if attempt == INDEX_ATTEMPTS:
                raise
            log.warning("job %s: indexer unavailable (%s); attempt %d of %d in %.0f s", job_id, error,
                        attempt + 1, INDEX_ATTEMPTS, INDEX_RETRY_S * attempt)
            time.sleep(INDEX_RETRY_S * attempt)
    raise AssertionError("unreachable")


def _index_once(job_id: str, jobs: JobStore, indexer: IndexerClient, request: indexer_pb2.IndexDocumentRequest,
                timeout_s: float | None) -> indexer_pb2.IndexDocumentResponse | None:
    stream = indexer.index_document_stream(request, timeout_s=timeout_s)
    try:
        for progress in stream:
            if progress.HasField("result"):
                return progress.result
            state = gateway_pb2.JOB_STATE_INDEXING if progress.chunks_done >= progress.chunks_total \
                else gateway_pb2.JOB_STATE_EMBEDDING
            if not jobs.advance(job_id, state=state, chunks_done=progress.chunks_done):
                stream.cancel()
                return None
    except BaseException:
        stream.cancel()  # a time limit or shutdown mid-stream: do not leave half a document behind
        raise
    raise RagkbError(f"indexer ended the stream for {request.doc_id!r} without a result")
