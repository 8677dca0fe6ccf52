from shared.contracts.ragkb.v1 import chunk_pb2 as _chunk_pb2
from shared.contracts.ragkb.v1 import generator_pb2 as _generator_pb2
from shared.contracts.ragkb.v1 import indexer_pb2 as _indexer_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class JobState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_STATE_UNSPECIFIED: _ClassVar[JobState]
    JOB_STATE_QUEUED: _ClassVar[JobState]
    JOB_STATE_PARSING: _ClassVar[JobState]
    JOB_STATE_EMBEDDING: _ClassVar[JobState]
    JOB_STATE_INDEXING: _ClassVar[JobState]
    JOB_STATE_DONE: _ClassVar[JobState]
    JOB_STATE_FAILED: _ClassVar[JobState]
    JOB_STATE_CANCELLED: _ClassVar[JobState]
JOB_STATE_UNSPECIFIED: JobState
JOB_STATE_QUEUED: JobState
JOB_STATE_PARSING: JobState
JOB_STATE_EMBEDDING: JobState
JOB_STATE_INDEXING: JobState
JOB_STATE_DONE: JobState
JOB_STATE_FAILED: JobState
JOB_STATE_CANCELLED: JobState

class IngestDocumentRequest(_message.Message):
    __slots__ = ("kb", "namespace", "filename", "content", "doc_id", "metadata")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    KB_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    FILENAME_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    DOC_ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    kb: str
    namespace: str
    filename: str
    content: bytes
    doc_id: str
    metadata: _containers.ScalarMap[str, str]
    def __init__(self, kb: _Optional[str] = ..., namespace: _Optional[str] = ..., filename: _Optional[str] = ..., content: _Optional[bytes] = ..., doc_id: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ...) -> None: ...

class IngestJob(_message.Message):
    __slots__ = ("job_id", "kb", "namespace", "doc_id", "filename", "state", "error", "chunks_total", "chunks_done", "outcome", "created_at", "updated_at", "attempts", "started_at")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    KB_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    DOC_ID_FIELD_NUMBER: _ClassVar[int]
    FILENAME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_DONE_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    kb: str
    namespace: str
    doc_id: str
    filename: str
    state: JobState
    error: str
    chunks_total: int
    chunks_done: int
    outcome: _indexer_pb2.IndexOutcome
    created_at: str
    updated_at: str
    attempts: int
    started_at: str
    def __init__(self, job_id: _Optional[str] = ..., kb: _Optional[str] = ..., namespace: _Optional[str] = ..., doc_id: _Optional[str] = ..., filename: _Optional[str] = ..., state: _Optional[_Union[JobState, str]] = ..., error: _Optional[str] = ..., chunks_total: _Optional[int] = ..., chunks_done: _Optional[int] = ..., outcome: _Optional[_Union[_indexer_pb2.IndexOutcome, str]] = ..., created_at: _Optional[str] = ..., updated_at: _Optional[str] = ..., attempts: _Optional[int] = ..., started_at: _Optional[str] = ...) -> None: ...

class GetJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ("kb", "namespace", "limit")
    KB_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    kb: str
    namespace: str
    limit: int
    def __init__(self, kb: _Optional[str] = ..., namespace: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class ListJobsResponse(_message.Message):
    __slots__ = ("jobs",)
    JOBS_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[IngestJob]
    def __init__(self, jobs: _Optional[_Iterable[_Union[IngestJob, _Mapping]]] = ...) -> None: ...

class CancelJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class RetryJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class SyncEntry(_message.Message):
    __slots__ = ("doc_id", "source_uri", "content_hash")
    DOC_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_URI_FIELD_NUMBER: _ClassVar[int]
    CONTENT_HASH_FIELD_NUMBER: _ClassVar[int]
    doc_id: str
    source_uri: str
    content_hash: str
    def __init__(self, doc_id: _Optional[str] = ..., source_uri: _Optional[str] = ..., content_hash: _Optional[str] = ...) -> None: ...

class SyncFolderRequest(_message.Message):
    __slots__ = ("kb", "namespace", "entries", "dry_run")
    KB_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    kb: str
    namespace: str
    entries: _containers.RepeatedCompositeFieldContainer[SyncEntry]
    dry_run: bool
    def __init__(self, kb: _Optional[str] = ..., namespace: _Optional[str] = ..., entries: _Optional[_Iterable[_Union[SyncEntry, _Mapping]]] = ..., dry_run: bool = ...) -> None: ...

class SyncFolderResponse(_message.Message):
    __slots__ = ("upload", "unchanged", "moved", "deleted")
    UPLOAD_FIELD_NUMBER: _ClassVar[int]
    UNCHANGED_FIELD_NUMBER: _ClassVar[int]
    MOVED_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    upload: _containers.RepeatedScalarFieldContainer[str]
    unchanged: _containers.RepeatedScalarFieldContainer[str]
    moved: _containers.RepeatedScalarFieldContainer[str]
    deleted: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, upload: _Optional[_Iterable[str]] = ..., unchanged: _Optional[_Iterable[str]] = ..., moved: _Optional[_Iterable[str]] = ..., deleted: _Optional[_Iterable[str]] = ...) -> None: ...

class QueryRequest(_message.Message):
    __slots__ = ("kb", "query", "namespaces", "top_k")
    KB_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    NAMESPACES_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    kb: str
    query: str
    namespaces: _containers.RepeatedScalarFieldContainer[str]
    top_k: int
    def __init__(self, kb: _Optional[str] = ..., query: _Optional[str] = ..., namespaces: _Optional[_Iterable[str]] = ..., top_k: _Optional[int] = ...) -> None: ...

class QueryResponse(_message.Message):
    __slots__ = ("answer", "citations", "chunks", "original_query", "effective_query", "stages", "degraded", "citation_issues", "refused", "trace_id", "answerability")
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    CITATIONS_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    ORIGINAL_QUERY_FIELD_NUMBER: _ClassVar[int]
    EFFECTIVE_QUERY_FIELD_NUMBER: _ClassVar[int]
    STAGES_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_FIELD_NUMBER: _ClassVar[int]
    CITATION_ISSUES_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    ANSWERABILITY_FIELD_NUMBER: _ClassVar[int]
    answer: str
    citations: _containers.RepeatedCompositeFieldContainer[_generator_pb2.Citation]
    chunks: _containers.RepeatedCompositeFieldContainer[_chunk_pb2.Candidate]
    original_query: str
    effective_query: str
    stages: _containers.RepeatedCompositeFieldContainer[_chunk_pb2.StageReport]
    degraded: _containers.RepeatedScalarFieldContainer[str]
    citation_issues: _containers.RepeatedCompositeFieldContainer[_generator_pb2.CitationIssue]
    refused: bool
    trace_id: str
    answerability: _generator_pb2.Answerability
    def __init__(self, answer: _Optional[str] = ..., citations: _Optional[_Iterable[_Union[_generator_pb2.Citation, _Mapping]]] = ..., chunks: _Optional[_Iterable[_Union[_chunk_pb2.Candidate, _Mapping]]] = ..., original_query: _Optional[str] = ..., effective_query: _Optional[str] = ..., stages: _Optional[_Iterable[_Union[_chunk_pb2.StageReport, _Mapping]]] = ..., degraded: _Optional[_Iterable[str]] = ..., citation_issues: _Optional[_Iterable[_Union[_generator_pb2.CitationIssue, _Mapping]]] = ..., refused: bool = ..., trace_id: _Optional[str] = ..., answerability: _Optional[_Union[_generator_pb2.Answerability, _Mapping]] = ...) -> None: ...

class QueryEvent(_message.Message):
    __slots__ = ("token", "citations", "done")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    CITATIONS_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    token: str
    citations: AnswerCitations
    done: QueryResponse
    def __init__(self, token: _Optional[str] = ..., citations: _Optional[_Union[AnswerCitations, _Mapping]] = ..., done: _Optional[_Union[QueryResponse, _Mapping]] = ...) -> None: ...

class AnswerCitations(_message.Message):
    __slots__ = ("answer", "citations", "citation_issues", "claim_checks", "refused", "answerability")
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    CITATIONS_FIELD_NUMBER: _ClassVar[int]
    CITATION_ISSUES_FIELD_NUMBER: _ClassVar[int]
    CLAIM_CHECKS_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    ANSWERABILITY_FIELD_NUMBER: _ClassVar[int]
    answer: str
    citations: _containers.RepeatedCompositeFieldContainer[_generator_pb2.Citation]
    citation_issues: _containers.RepeatedCompositeFieldContainer[_generator_pb2.CitationIssue]
    claim_checks: _containers.RepeatedCompositeFieldContainer[_generator_pb2.ClaimCheck]
    refused: bool
    answerability: _generator_pb2.Answerability
    def __init__(self, answer: _Optional[str] = ..., citations: _Optional[_Iterable[_Union[_generator_pb2.Citation, _Mapping]]] = ..., citation_issues: _Optional[_Iterable[_Union[_generator_pb2.CitationIssue, _Mapping]]] = ..., claim_checks: _Optional[_Iterable[_Union[_generator_pb2.ClaimCheck, _Mapping]]] = ..., refused: bool = ..., answerability: _Optional[_Union[_generator_pb2.Answerability, _Mapping]] = ...) -> None: ...
