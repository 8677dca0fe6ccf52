from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class BlockType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BLOCK_TYPE_UNSPECIFIED: _ClassVar[BlockType]
    BLOCK_TYPE_SECTION: _ClassVar[BlockType]
    BLOCK_TYPE_SUBSECTION: _ClassVar[BlockType]
    BLOCK_TYPE_MERGED: _ClassVar[BlockType]
    BLOCK_TYPE_ORPHAN: _ClassVar[BlockType]
    BLOCK_TYPE_TABLE: _ClassVar[BlockType]
    BLOCK_TYPE_LIST: _ClassVar[BlockType]
    BLOCK_TYPE_CODE: _ClassVar[BlockType]
    BLOCK_TYPE_UI_FIELD: _ClassVar[BlockType]
    BLOCK_TYPE_PARAGRAPH: _ClassVar[BlockType]

class Route(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ROUTE_UNSPECIFIED: _ClassVar[Route]
    ROUTE_BM25: _ClassVar[Route]
    ROUTE_DENSE: _ClassVar[Route]
    ROUTE_FUSED: _ClassVar[Route]
    ROUTE_RERANKED: _ClassVar[Route]
    ROUTE_SPARSE: _ClassVar[Route]
BLOCK_TYPE_UNSPECIFIED: BlockType
BLOCK_TYPE_SECTION: BlockType
BLOCK_TYPE_SUBSECTION: BlockType
BLOCK_TYPE_MERGED: BlockType
BLOCK_TYPE_ORPHAN: BlockType
BLOCK_TYPE_TABLE: BlockType
BLOCK_TYPE_LIST: BlockType
BLOCK_TYPE_CODE: BlockType
BLOCK_TYPE_UI_FIELD: BlockType
BLOCK_TYPE_PARAGRAPH: BlockType
ROUTE_UNSPECIFIED: Route
ROUTE_BM25: Route
ROUTE_DENSE: Route
ROUTE_FUSED: Route
ROUTE_RERANKED: Route
ROUTE_SPARSE: Route

class KnowledgeChunk(_message.Message):
    __slots__ = ("chunk_id", "doc_id", "kb", "namespace", "raw_content", "content", "heading_path", "block_type", "content_hash", "part_index", "part_count", "group_id", "parent_id", "doc_version", "source", "position", "metadata", "vectors", "reading")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CHUNK_ID_FIELD_NUMBER: _ClassVar[int]
    DOC_ID_FIELD_NUMBER: _ClassVar[int]
    KB_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    RAW_CONTENT_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    HEADING_PATH_FIELD_NUMBER: _ClassVar[int]
    BLOCK_TYPE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_HASH_FIELD_NUMBER: _ClassVar[int]
    PART_INDEX_FIELD_NUMBER: _ClassVar[int]
    PART_COUNT_FIELD_NUMBER: _ClassVar[int]
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    PARENT_ID_FIELD_NUMBER: _ClassVar[int]
    DOC_VERSION_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    VECTORS_FIELD_NUMBER: _ClassVar[int]
    READING_FIELD_NUMBER: _ClassVar[int]
    chunk_id: str
    doc_id: str
    kb: str
    namespace: str
    raw_content: str
    content: str
    heading_path: _containers.RepeatedScalarFieldContainer[str]
    block_type: BlockType
    content_hash: str
    part_index: int
    part_count: int
    group_id: str
    parent_id: str
    doc_version: int
    source: SourceInfo
    position: int
    metadata: _containers.ScalarMap[str, str]
    vectors: ChunkVectors
    reading: EmbedderReading
    def __init__(self, chunk_id: _Optional[str] = ..., doc_id: _Optional[str] = ..., kb: _Optional[str] = ..., namespace: _Optional[str] = ..., raw_content: _Optional[str] = ..., content: _Optional[str] = ..., heading_path: _Optional[_Iterable[str]] = ..., block_type: _Optional[_Union[BlockType, str]] = ..., content_hash: _Optional[str] = ..., part_index: _Optional[int] = ..., part_count: _Optional[int] = ..., group_id: _Optional[str] = ..., parent_id: _Optional[str] = ..., doc_version: _Optional[int] = ..., source: _Optional[_Union[SourceInfo, _Mapping]] = ..., position: _Optional[int] = ..., metadata: _Optional[_Mapping[str, str]] = ..., vectors: _Optional[_Union[ChunkVectors, _Mapping]] = ..., reading: _Optional[_Union[EmbedderReading, _Mapping]] = ...) -> None: ...

class EmbedderReading(_message.Message):
    __slots__ = ("embedder", "unknown_share")
    EMBEDDER_FIELD_NUMBER: _ClassVar[int]
    UNKNOWN_SHARE_FIELD_NUMBER: _ClassVar[int]
    embedder: str
    unknown_share: float
    def __init__(self, embedder: _Optional[str] = ..., unknown_share: _Optional[float] = ...) -> None: ...

class ChunkVectors(_message.Message):
    __slots__ = ("embedder", "chunk", "splitter", "sentence_count", "sentences")
    EMBEDDER_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    SPLITTER_FIELD_NUMBER: _ClassVar[int]
    SENTENCE_COUNT_FIELD_NUMBER: _ClassVar[int]
    SENTENCES_FIELD_NUMBER: _ClassVar[int]
    embedder: str
    chunk: bytes
    splitter: int
    sentence_count: int
    sentences: bytes
    def __init__(self, embedder: _Optional[str] = ..., chunk: _Optional[bytes] = ..., splitter: _Optional[int] = ..., sentence_count: _Optional[int] = ..., sentences: _Optional[bytes] = ...) -> None: ...

class QueryVector(_message.Message):
    __slots__ = ("embedder", "text", "vector")
    EMBEDDER_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    VECTOR_FIELD_NUMBER: _ClassVar[int]
    embedder: str
    text: str
    vector: bytes
    def __init__(self, embedder: _Optional[str] = ..., text: _Optional[str] = ..., vector: _Optional[bytes] = ...) -> None: ...

class SplitParts(_message.Message):
    __slots__ = ("chunks",)
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    chunks: _containers.RepeatedCompositeFieldContainer[KnowledgeChunk]
    def __init__(self, chunks: _Optional[_Iterable[_Union[KnowledgeChunk, _Mapping]]] = ...) -> None: ...

class SourceInfo(_message.Message):
    __slots__ = ("uri", "page", "updated_at", "mime_type", "title")
    URI_FIELD_NUMBER: _ClassVar[int]
    PAGE_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    MIME_TYPE_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    uri: str
    page: int
    updated_at: str
    mime_type: str
    title: str
    def __init__(self, uri: _Optional[str] = ..., page: _Optional[int] = ..., updated_at: _Optional[str] = ..., mime_type: _Optional[str] = ..., title: _Optional[str] = ...) -> None: ...

class Candidate(_message.Message):
    __slots__ = ("chunk", "score", "route", "bm25_rank", "dense_rank", "bm25_score", "dense_score", "rerank_score", "sparse_rank", "sparse_score")
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    BM25_RANK_FIELD_NUMBER: _ClassVar[int]
    DENSE_RANK_FIELD_NUMBER: _ClassVar[int]
    BM25_SCORE_FIELD_NUMBER: _ClassVar[int]
    DENSE_SCORE_FIELD_NUMBER: _ClassVar[int]
    RERANK_SCORE_FIELD_NUMBER: _ClassVar[int]
    SPARSE_RANK_FIELD_NUMBER: _ClassVar[int]
    SPARSE_SCORE_FIELD_NUMBER: _ClassVar[int]
    chunk: KnowledgeChunk
    score: float
    route: Route
    bm25_rank: int
    dense_rank: int
    bm25_score: float
    dense_score: float
    rerank_score: float
    sparse_rank: int
    sparse_score: float
    def __init__(self, chunk: _Optional[_Union[KnowledgeChunk, _Mapping]] = ..., score: _Optional[float] = ..., route: _Optional[_Union[Route, str]] = ..., bm25_rank: _Optional[int] = ..., dense_rank: _Optional[int] = ..., bm25_score: _Optional[float] = ..., dense_score: _Optional[float] = ..., rerank_score: _Optional[float] = ..., sparse_rank: _Optional[int] = ..., sparse_score: _Optional[float] = ...) -> None: ...

class SearchFilter(_message.Message):
    __slots__ = ("namespaces", "doc_ids", "block_types", "metadata", "acl_enforced", "acl_groups")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAMESPACES_FIELD_NUMBER: _ClassVar[int]
    DOC_IDS_FIELD_NUMBER: _ClassVar[int]
    BLOCK_TYPES_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    ACL_ENFORCED_FIELD_NUMBER: _ClassVar[int]
    ACL_GROUPS_FIELD_NUMBER: _ClassVar[int]
    namespaces: _containers.RepeatedScalarFieldContainer[str]
    doc_ids: _containers.RepeatedScalarFieldContainer[str]
    block_types: _containers.RepeatedScalarFieldContainer[BlockType]
    metadata: _containers.ScalarMap[str, str]
    acl_enforced: bool
    acl_groups: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, namespaces: _Optional[_Iterable[str]] = ..., doc_ids: _Optional[_Iterable[str]] = ..., block_types: _Optional[_Iterable[_Union[BlockType, str]]] = ..., metadata: _Optional[_Mapping[str, str]] = ..., acl_enforced: bool = ..., acl_groups: _Optional[_Iterable[str]] = ...) -> None: ...

class StageReport(_message.Message):
    __slots__ = ("name", "ms", "metadata")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    MS_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    name: str
    ms: float
    metadata: _containers.ScalarMap[str, str]
    def __init__(self, name: _Optional[str] = ..., ms: _Optional[float] = ..., metadata: _Optional[_Mapping[str, str]] = ...) -> None: ...

class TenantContext(_message.Message):
    __slots__ = ("principal", "namespaces", "all_namespaces", "acl_enforced", "acl_groups", "role")
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    NAMESPACES_FIELD_NUMBER: _ClassVar[int]
    ALL_NAMESPACES_FIELD_NUMBER: _ClassVar[int]
    ACL_ENFORCED_FIELD_NUMBER: _ClassVar[int]
    ACL_GROUPS_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    principal: str
    namespaces: _containers.RepeatedScalarFieldContainer[str]
    all_namespaces: bool
    acl_enforced: bool
    acl_groups: _containers.RepeatedScalarFieldContainer[str]
    role: str
    def __init__(self, principal: _Optional[str] = ..., namespaces: _Optional[_Iterable[str]] = ..., all_namespaces: bool = ..., acl_enforced: bool = ..., acl_groups: _Optional[_Iterable[str]] = ..., role: _Optional[str] = ...) -> None: ...

class KnowledgeBaseSettings(_message.Message):
    __slots__ = ("kb", "version", "sections_json")
    KB_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SECTIONS_JSON_FIELD_NUMBER: _ClassVar[int]
    kb: str
    version: str
    sections_json: str
    def __init__(self, kb: _Optional[str] = ..., version: _Optional[str] = ..., sections_json: _Optional[str] = ...) -> None: ...

class CallContext(_message.Message):
    __slots__ = ("tenant", "kb")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    KB_FIELD_NUMBER: _ClassVar[int]
    tenant: TenantContext
    kb: KnowledgeBaseSettings
    def __init__(self, tenant: _Optional[_Union[TenantContext, _Mapping]] = ..., kb: _Optional[_Union[KnowledgeBaseSettings, _Mapping]] = ...) -> None: ...
