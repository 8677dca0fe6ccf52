from shared.contracts.ragkb.v1 import chunk_pb2 as _chunk_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class IndexOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    INDEX_OUTCOME_UNSPECIFIED: _ClassVar[IndexOutcome]
    INDEX_OUTCOME_CREATED: _ClassVar[IndexOutcome]
    INDEX_OUTCOME_UPDATED: _ClassVar[IndexOutcome]
    INDEX_OUTCOME_UNCHANGED: _ClassVar[IndexOutcome]
INDEX_OUTCOME_UNSPECIFIED: IndexOutcome
INDEX_OUTCOME_CREATED: IndexOutcome
INDEX_OUTCOME_UPDATED: IndexOutcome
INDEX_OUTCOME_UNCHANGED: IndexOutcome

class KnowledgeBase(_message.Message):
    __slots__ = ("name", "description", "config_yaml", "document_count", "chunk_count", "embedding_model", "embedding_dimension")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    CONFIG_YAML_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_COUNT_FIELD_NUMBER: _ClassVar[int]
    CHUNK_COUNT_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_MODEL_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_DIMENSION_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    config_yaml: str
    document_count: int
    chunk_count: int
    embedding_model: str
    embedding_dimension: int
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., config_yaml: _Optional[str] = ..., document_count: _Optional[int] = ..., chunk_count: _Optional[int] = ..., embedding_model: _Optional[str] = ..., embedding_dimension: _Optional[int] = ...) -> None: ...

class CreateKnowledgeBaseRequest(_message.Message):
    __slots__ = ("name", "description", "config_yaml", "context")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    CONFIG_YAML_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    config_yaml: str
    context: _chunk_pb2.CallContext
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., config_yaml: _Optional[str] = ..., context: _Optional[_Union[_chunk_pb2.CallContext, _Mapping]] = ...) -> None: ...

class GetKnowledgeBaseRequest(_message.Message):
    __slots__ = ("name", "context")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    name: str
    context: _chunk_pb2.CallContext
    def __init__(self, name: _Optional[str] = ..., context: _Optional[_Union[_chunk_pb2.CallContext, _Mapping]] = ...) -> None: ...

class ListKnowledgeBasesRequest(_message.Message):
    __slots__ = ("context",)
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    context: _chunk_pb2.CallContext
    def __init__(self, context: _Optional[_Union[_chunk_pb2.CallContext, _Mapping]] = ...) -> None: ...

class ListKnowledgeBasesResponse(_message.Message):
    __slots__ = ("knowledge_bases",)
    KNOWLEDGE_BASES_FIELD_NUMBER: _ClassVar[int]
    knowledge_bases: _containers.RepeatedCompositeFieldContainer[KnowledgeBase]
    def __init__(self, knowledge_bases: _Optional[_Iterable[_Union[KnowledgeBase, _Mapping]]] = ...) -> None: ...

class IndexDocumentRequest(_message.Message):
    __slots__ = ("kb", "namespace", "doc_id", "content_hash", "chunks", "source_uri", "context")
    KB_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    DOC_ID_FIELD_NUMBER: _ClassVar[int]
    CONTENT_HASH_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    SOURCE_URI_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    kb: str
    namespace: str
    doc_id: str
    content_hash: str
    chunks: _containers.RepeatedCompositeFieldContainer[_chunk_pb2.KnowledgeChunk]
    source_uri: str
    context: _chunk_pb2.CallContext
    def __init__(self, kb: _Optional[str] = ..., namespace: _Optional[str] = ..., doc_id: _Optional[str] = ..., content_hash: _Optional[str] = ..., chunks: _Optional[_Iterable[_Union[_chunk_pb2.KnowledgeChunk, _Mapping]]] = ..., source_uri: _Optional[str] = ..., context: _Optional[_Union[_chunk_pb2.CallContext, _Mapping]] = ...) -> None: ...

class IndexDocumentResponse(_message.Message):
    __slots__ = ("outcome", "doc_version", "chunks_written", "chunks_deleted", "stages")
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    DOC_VERSION_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_WRITTEN_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_DELETED_FIELD_NUMBER: _ClassVar[int]
    STAGES_FIELD_NUMBER: _ClassVar[int]
    outcome: IndexOutcome
    doc_version: int
    chunks_written: int
    chunks_deleted: int
    stages: _containers.RepeatedCompositeFieldContainer[_chunk_pb2.StageReport]
    def __init__(self, outcome: _Optional[_Union[IndexOutcome, str]] = ..., doc_version: _Optional[int] = ..., chunks_written: _Optional[int] = ..., chunks_deleted: _Optional[int] = ..., stages: _Optional[_Iterable[_Union[_chunk_pb2.StageReport, _Mapping]]] = ...) -> None: ...

class DeleteDocumentRequest(_message.Message):
    __slots__ = ("kb", "namespace", "doc_id", "context")
    KB_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    DOC_ID_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    kb: str
    namespace: str
    doc_id: str
    context: _chunk_pb2.CallContext
    def __init__(self, kb: _Optional[str] = ..., namespace: _Optional[str] = ..., doc_id: _Optional[str] = ..., context: _Optional[_Union[_chunk_pb2.CallContext, _Mapping]] = ...) -> None: ...

class DeleteDocumentResponse(_message.Message):
    __slots__ = ("chunks_deleted",)
    CHUNKS_DELETED_FIELD_NUMBER: _ClassVar[int]
    chunks_deleted: int
    def __init__(self, chunks_deleted: _Optional[int] = ...) -> None: ...

class ListDocumentsRequest(_message.Message):
    __slots__ = ("kb", "namespace", "context")
    KB_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    kb: str
    namespace: str
    context: _chunk_pb2.CallContext
    def __init__(self, kb: _Optional[str] = ..., namespace: _Optional[str] = ..., context: _Optional[_Union[_chunk_pb2.CallContext, _Mapping]] = ...) -> None: ...

class DocumentRecord(_message.Message):
    __slots__ = ("doc_id", "namespace", "version", "content_hash", "chunk_count", "source_uri", "updated_at", "status")
    DOC_ID_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CONTENT_HASH_FIELD_NUMBER: _ClassVar[int]
    CHUNK_COUNT_FIELD_NUMBER: _ClassVar[int]
    SOURCE_URI_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    doc_id: str
    namespace: str
    version: int
    content_hash: str
    chunk_count: int
    source_uri: str
    updated_at: str
    status: str
    def __init__(self, doc_id: _Optional[str] = ..., namespace: _Optional[str] = ..., version: _Optional[int] = ..., content_hash: _Optional[str] = ..., chunk_count: _Optional[int] = ..., source_uri: _Optional[str] = ..., updated_at: _Optional[str] = ..., status: _Optional[str] = ...) -> None: ...

class ListDocumentsResponse(_message.Message):
    __slots__ = ("documents",)
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    documents: _containers.RepeatedCompositeFieldContainer[DocumentRecord]
    def __init__(self, documents: _Optional[_Iterable[_Union[DocumentRecord, _Mapping]]] = ...) -> None: ...

class IndexProgress(_message.Message):
    __slots__ = ("chunks_done", "chunks_total", "result")
    CHUNKS_DONE_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    chunks_done: int
    chunks_total: int
    result: IndexDocumentResponse
    def __init__(self, chunks_done: _Optional[int] = ..., chunks_total: _Optional[int] = ..., result: _Optional[_Union[IndexDocumentResponse, _Mapping]] = ...) -> None: ...

class ReconcileRequest(_message.Message):
    __slots__ = ("kb", "namespace", "dry_run", "context")
    KB_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    kb: str
    namespace: str
    dry_run: bool
    context: _chunk_pb2.CallContext
    def __init__(self, kb: _Optional[str] = ..., namespace: _Optional[str] = ..., dry_run: bool = ..., context: _Optional[_Union[_chunk_pb2.CallContext, _Mapping]] = ...) -> None: ...

class DocumentRepair(_message.Message):
    __slots__ = ("namespace", "doc_id", "restored_keyword", "restored_vector", "strays_deleted", "unrecoverable", "action")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    DOC_ID_FIELD_NUMBER: _ClassVar[int]
    RESTORED_KEYWORD_FIELD_NUMBER: _ClassVar[int]
    RESTORED_VECTOR_FIELD_NUMBER: _ClassVar[int]
    STRAYS_DELETED_FIELD_NUMBER: _ClassVar[int]
    UNRECOVERABLE_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    doc_id: str
    restored_keyword: int
    restored_vector: int
    strays_deleted: int
    unrecoverable: int
    action: str
    def __init__(self, namespace: _Optional[str] = ..., doc_id: _Optional[str] = ..., restored_keyword: _Optional[int] = ..., restored_vector: _Optional[int] = ..., strays_deleted: _Optional[int] = ..., unrecoverable: _Optional[int] = ..., action: _Optional[str] = ...) -> None: ...

class ReconcileReport(_message.Message):
    __slots__ = ("kb", "documents_checked", "chunks_checked", "repairs", "skipped", "keyword_chunks", "vector_chunks")
    KB_FIELD_NUMBER: _ClassVar[int]
    DOCUMENTS_CHECKED_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_CHECKED_FIELD_NUMBER: _ClassVar[int]
    REPAIRS_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    KEYWORD_CHUNKS_FIELD_NUMBER: _ClassVar[int]
    VECTOR_CHUNKS_FIELD_NUMBER: _ClassVar[int]
    kb: str
    documents_checked: int
    chunks_checked: int
    repairs: _containers.RepeatedCompositeFieldContainer[DocumentRepair]
    skipped: _containers.RepeatedScalarFieldContainer[str]
    keyword_chunks: int
    vector_chunks: int
    def __init__(self, kb: _Optional[str] = ..., documents_checked: _Optional[int] = ..., chunks_checked: _Optional[int] = ..., repairs: _Optional[_Iterable[_Union[DocumentRepair, _Mapping]]] = ..., skipped: _Optional[_Iterable[str]] = ..., keyword_chunks: _Optional[int] = ..., vector_chunks: _Optional[int] = ...) -> None: ...

class KnowledgeBaseVersion(_message.Message):
    __slots__ = ("kb", "version", "state", "docs_done", "docs_total", "error", "decision_json", "config_yaml", "created_at", "updated_at")
    KB_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    DOCS_DONE_FIELD_NUMBER: _ClassVar[int]
    DOCS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    DECISION_JSON_FIELD_NUMBER: _ClassVar[int]
    CONFIG_YAML_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    kb: str
    version: int
    state: str
    docs_done: int
    docs_total: int
    error: str
    decision_json: str
    config_yaml: str
    created_at: str
    updated_at: str
    def __init__(self, kb: _Optional[str] = ..., version: _Optional[int] = ..., state: _Optional[str] = ..., docs_done: _Optional[int] = ..., docs_total: _Optional[int] = ..., error: _Optional[str] = ..., decision_json: _Optional[str] = ..., config_yaml: _Optional[str] = ..., created_at: _Optional[str] = ..., updated_at: _Optional[str] = ...) -> None: ...

class ListVersionsRequest(_message.Message):
    __slots__ = ("kb", "context")
    KB_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    kb: str
    context: _chunk_pb2.CallContext
    def __init__(self, kb: _Optional[str] = ..., context: _Optional[_Union[_chunk_pb2.CallContext, _Mapping]] = ...) -> None: ...

class ListVersionsResponse(_message.Message):
    __slots__ = ("versions",)
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    versions: _containers.RepeatedCompositeFieldContainer[KnowledgeBaseVersion]
    def __init__(self, versions: _Optional[_Iterable[_Union[KnowledgeBaseVersion, _Mapping]]] = ...) -> None: ...

class VersionRequest(_message.Message):
    __slots__ = ("kb", "version", "context")
    KB_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    kb: str
    version: int
    context: _chunk_pb2.CallContext
    def __init__(self, kb: _Optional[str] = ..., version: _Optional[int] = ..., context: _Optional[_Union[_chunk_pb2.CallContext, _Mapping]] = ...) -> None: ...

class CreateVersionRequest(_message.Message):
    __slots__ = ("kb", "config_yaml", "context")
    KB_FIELD_NUMBER: _ClassVar[int]
    CONFIG_YAML_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    kb: str
    config_yaml: str
    context: _chunk_pb2.CallContext
    def __init__(self, kb: _Optional[str] = ..., config_yaml: _Optional[str] = ..., context: _Optional[_Union[_chunk_pb2.CallContext, _Mapping]] = ...) -> None: ...

class SwitchVersionRequest(_message.Message):
    __slots__ = ("kb", "version", "force", "namespaces", "context")
    KB_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    NAMESPACES_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    kb: str
    version: int
    force: bool
    namespaces: _containers.RepeatedScalarFieldContainer[str]
    context: _chunk_pb2.CallContext
    def __init__(self, kb: _Optional[str] = ..., version: _Optional[int] = ..., force: bool = ..., namespaces: _Optional[_Iterable[str]] = ..., context: _Optional[_Union[_chunk_pb2.CallContext, _Mapping]] = ...) -> None: ...

class VersionBatchRequest(_message.Message):
    __slots__ = ("kb", "version", "batch", "context")
    KB_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    kb: str
    version: int
    batch: int
    context: _chunk_pb2.CallContext
    def __init__(self, kb: _Optional[str] = ..., version: _Optional[int] = ..., batch: _Optional[int] = ..., context: _Optional[_Union[_chunk_pb2.CallContext, _Mapping]] = ...) -> None: ...

class RollbackVersionRequest(_message.Message):
    __slots__ = ("kb", "to", "context")
    KB_FIELD_NUMBER: _ClassVar[int]
    TO_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    kb: str
    to: int
    context: _chunk_pb2.CallContext
    def __init__(self, kb: _Optional[str] = ..., to: _Optional[int] = ..., context: _Optional[_Union[_chunk_pb2.CallContext, _Mapping]] = ...) -> None: ...
