from shared.contracts.ragkb.v1 import chunk_pb2 as _chunk_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ChunksByGroupRequest(_message.Message):
    __slots__ = ("kb", "namespaces", "group_ids", "chunk_vectors", "context")
    KB_FIELD_NUMBER: _ClassVar[int]
    NAMESPACES_FIELD_NUMBER: _ClassVar[int]
    GROUP_IDS_FIELD_NUMBER: _ClassVar[int]
    CHUNK_VECTORS_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    kb: str
    namespaces: _containers.RepeatedScalarFieldContainer[str]
    group_ids: _containers.RepeatedScalarFieldContainer[str]
    chunk_vectors: bool
    context: _chunk_pb2.CallContext
    def __init__(self, kb: _Optional[str] = ..., namespaces: _Optional[_Iterable[str]] = ..., group_ids: _Optional[_Iterable[str]] = ..., chunk_vectors: bool = ..., context: _Optional[_Union[_chunk_pb2.CallContext, _Mapping]] = ...) -> None: ...

class ChunksByGroupResponse(_message.Message):
    __slots__ = ("chunks",)
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    chunks: _containers.RepeatedCompositeFieldContainer[_chunk_pb2.KnowledgeChunk]
    def __init__(self, chunks: _Optional[_Iterable[_Union[_chunk_pb2.KnowledgeChunk, _Mapping]]] = ...) -> None: ...

class RetrieveRequest(_message.Message):
    __slots__ = ("kb", "query", "filter", "top_k", "candidate_depth", "chunk_vectors", "split_parts", "context")
    KB_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_DEPTH_FIELD_NUMBER: _ClassVar[int]
    CHUNK_VECTORS_FIELD_NUMBER: _ClassVar[int]
    SPLIT_PARTS_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    kb: str
    query: str
    filter: _chunk_pb2.SearchFilter
    top_k: int
    candidate_depth: int
    chunk_vectors: bool
    split_parts: bool
    context: _chunk_pb2.CallContext
    def __init__(self, kb: _Optional[str] = ..., query: _Optional[str] = ..., filter: _Optional[_Union[_chunk_pb2.SearchFilter, _Mapping]] = ..., top_k: _Optional[int] = ..., candidate_depth: _Optional[int] = ..., chunk_vectors: bool = ..., split_parts: bool = ..., context: _Optional[_Union[_chunk_pb2.CallContext, _Mapping]] = ...) -> None: ...

class RetrieveResponse(_message.Message):
    __slots__ = ("candidates", "bm25", "dense", "degraded", "weights", "query_language", "stages", "route_signals", "competence", "fusion", "sparse", "query_vector", "split_parts")
    class WeightsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class RouteSignalsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class CompetenceEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    BM25_FIELD_NUMBER: _ClassVar[int]
    DENSE_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_FIELD_NUMBER: _ClassVar[int]
    WEIGHTS_FIELD_NUMBER: _ClassVar[int]
    QUERY_LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    STAGES_FIELD_NUMBER: _ClassVar[int]
    ROUTE_SIGNALS_FIELD_NUMBER: _ClassVar[int]
    COMPETENCE_FIELD_NUMBER: _ClassVar[int]
    FUSION_FIELD_NUMBER: _ClassVar[int]
    SPARSE_FIELD_NUMBER: _ClassVar[int]
    QUERY_VECTOR_FIELD_NUMBER: _ClassVar[int]
    SPLIT_PARTS_FIELD_NUMBER: _ClassVar[int]
    candidates: _containers.RepeatedCompositeFieldContainer[_chunk_pb2.Candidate]
    bm25: _containers.RepeatedCompositeFieldContainer[_chunk_pb2.Candidate]
    dense: _containers.RepeatedCompositeFieldContainer[_chunk_pb2.Candidate]
    degraded: _containers.RepeatedScalarFieldContainer[str]
    weights: _containers.ScalarMap[str, float]
    query_language: str
    stages: _containers.RepeatedCompositeFieldContainer[_chunk_pb2.StageReport]
    route_signals: _containers.ScalarMap[str, float]
    competence: _containers.ScalarMap[str, float]
    fusion: str
    sparse: _containers.RepeatedCompositeFieldContainer[_chunk_pb2.Candidate]
    query_vector: _chunk_pb2.QueryVector
    split_parts: _chunk_pb2.SplitParts
    def __init__(self, candidates: _Optional[_Iterable[_Union[_chunk_pb2.Candidate, _Mapping]]] = ..., bm25: _Optional[_Iterable[_Union[_chunk_pb2.Candidate, _Mapping]]] = ..., dense: _Optional[_Iterable[_Union[_chunk_pb2.Candidate, _Mapping]]] = ..., degraded: _Optional[_Iterable[str]] = ..., weights: _Optional[_Mapping[str, float]] = ..., query_language: _Optional[str] = ..., stages: _Optional[_Iterable[_Union[_chunk_pb2.StageReport, _Mapping]]] = ..., route_signals: _Optional[_Mapping[str, float]] = ..., competence: _Optional[_Mapping[str, float]] = ..., fusion: _Optional[str] = ..., sparse: _Optional[_Iterable[_Union[_chunk_pb2.Candidate, _Mapping]]] = ..., query_vector: _Optional[_Union[_chunk_pb2.QueryVector, _Mapping]] = ..., split_parts: _Optional[_Union[_chunk_pb2.SplitParts, _Mapping]] = ...) -> None: ...
