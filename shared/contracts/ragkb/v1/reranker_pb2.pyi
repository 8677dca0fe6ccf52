from shared.contracts.ragkb.v1 import chunk_pb2 as _chunk_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RerankRequest(_message.Message):
    __slots__ = ("kb", "query", "candidates", "top_n", "split_parts", "context")
    KB_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    TOP_N_FIELD_NUMBER: _ClassVar[int]
    SPLIT_PARTS_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    kb: str
    query: str
    candidates: _containers.RepeatedCompositeFieldContainer[_chunk_pb2.Candidate]
    top_n: int
    split_parts: _chunk_pb2.SplitParts
    context: _chunk_pb2.CallContext
    def __init__(self, kb: _Optional[str] = ..., query: _Optional[str] = ..., candidates: _Optional[_Iterable[_Union[_chunk_pb2.Candidate, _Mapping]]] = ..., top_n: _Optional[int] = ..., split_parts: _Optional[_Union[_chunk_pb2.SplitParts, _Mapping]] = ..., context: _Optional[_Union[_chunk_pb2.CallContext, _Mapping]] = ...) -> None: ...

class DroppedCandidate(_message.Message):
    __slots__ = ("chunk_id", "reason", "score")
    CHUNK_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    chunk_id: str
    reason: str
    score: float
    def __init__(self, chunk_id: _Optional[str] = ..., reason: _Optional[str] = ..., score: _Optional[float] = ...) -> None: ...

class RerankResponse(_message.Message):
    __slots__ = ("candidates", "dropped", "model", "stages", "groups")
    CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    STAGES_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    candidates: _containers.RepeatedCompositeFieldContainer[_chunk_pb2.Candidate]
    dropped: _containers.RepeatedCompositeFieldContainer[DroppedCandidate]
    model: str
    stages: _containers.RepeatedCompositeFieldContainer[_chunk_pb2.StageReport]
    groups: _containers.RepeatedCompositeFieldContainer[SourceGroup]
    def __init__(self, candidates: _Optional[_Iterable[_Union[_chunk_pb2.Candidate, _Mapping]]] = ..., dropped: _Optional[_Iterable[_Union[DroppedCandidate, _Mapping]]] = ..., model: _Optional[str] = ..., stages: _Optional[_Iterable[_Union[_chunk_pb2.StageReport, _Mapping]]] = ..., groups: _Optional[_Iterable[_Union[SourceGroup, _Mapping]]] = ...) -> None: ...

class SourceGroup(_message.Message):
    __slots__ = ("doc_id", "header", "chunk_ids")
    DOC_ID_FIELD_NUMBER: _ClassVar[int]
    HEADER_FIELD_NUMBER: _ClassVar[int]
    CHUNK_IDS_FIELD_NUMBER: _ClassVar[int]
    doc_id: str
    header: str
    chunk_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, doc_id: _Optional[str] = ..., header: _Optional[str] = ..., chunk_ids: _Optional[_Iterable[str]] = ...) -> None: ...
