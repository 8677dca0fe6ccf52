from shared.contracts.ragkb.v1 import chunk_pb2 as _chunk_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GenerateEvent(_message.Message):
    __slots__ = ("token", "final")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    FINAL_FIELD_NUMBER: _ClassVar[int]
    token: str
    final: GenerateResponse
    def __init__(self, token: _Optional[str] = ..., final: _Optional[_Union[GenerateResponse, _Mapping]] = ...) -> None: ...

class ClaimCheck(_message.Message):
    __slots__ = ("sentence", "numbers", "support", "lexical", "semantic", "verdict", "method", "reason")
    SENTENCE_FIELD_NUMBER: _ClassVar[int]
    NUMBERS_FIELD_NUMBER: _ClassVar[int]
    SUPPORT_FIELD_NUMBER: _ClassVar[int]
    LEXICAL_FIELD_NUMBER: _ClassVar[int]
    SEMANTIC_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    sentence: str
    numbers: _containers.RepeatedScalarFieldContainer[int]
    support: float
    lexical: float
    semantic: float
    verdict: str
    method: str
    reason: str
    def __init__(self, sentence: _Optional[str] = ..., numbers: _Optional[_Iterable[int]] = ..., support: _Optional[float] = ..., lexical: _Optional[float] = ..., semantic: _Optional[float] = ..., verdict: _Optional[str] = ..., method: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class Answerability(_message.Message):
    __slots__ = ("evidence_score", "threshold", "decision", "reason", "signals")
    class SignalsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    EVIDENCE_SCORE_FIELD_NUMBER: _ClassVar[int]
    THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    SIGNALS_FIELD_NUMBER: _ClassVar[int]
    evidence_score: float
    threshold: float
    decision: str
    reason: str
    signals: _containers.ScalarMap[str, float]
    def __init__(self, evidence_score: _Optional[float] = ..., threshold: _Optional[float] = ..., decision: _Optional[str] = ..., reason: _Optional[str] = ..., signals: _Optional[_Mapping[str, float]] = ...) -> None: ...

class GenerateRequest(_message.Message):
    __slots__ = ("kb", "query", "sources", "query_vector", "context")
    KB_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    QUERY_VECTOR_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    kb: str
    query: str
    sources: _containers.RepeatedCompositeFieldContainer[_chunk_pb2.Candidate]
    query_vector: _chunk_pb2.QueryVector
    context: _chunk_pb2.CallContext
    def __init__(self, kb: _Optional[str] = ..., query: _Optional[str] = ..., sources: _Optional[_Iterable[_Union[_chunk_pb2.Candidate, _Mapping]]] = ..., query_vector: _Optional[_Union[_chunk_pb2.QueryVector, _Mapping]] = ..., context: _Optional[_Union[_chunk_pb2.CallContext, _Mapping]] = ...) -> None: ...

class Citation(_message.Message):
    __slots__ = ("number", "chunk_id", "doc_id", "heading_path", "source_uri", "quote")
    NUMBER_FIELD_NUMBER: _ClassVar[int]
    CHUNK_ID_FIELD_NUMBER: _ClassVar[int]
    DOC_ID_FIELD_NUMBER: _ClassVar[int]
    HEADING_PATH_FIELD_NUMBER: _ClassVar[int]
    SOURCE_URI_FIELD_NUMBER: _ClassVar[int]
    QUOTE_FIELD_NUMBER: _ClassVar[int]
    number: int
    chunk_id: str
    doc_id: str
    heading_path: _containers.RepeatedScalarFieldContainer[str]
    source_uri: str
    quote: str
    def __init__(self, number: _Optional[int] = ..., chunk_id: _Optional[str] = ..., doc_id: _Optional[str] = ..., heading_path: _Optional[_Iterable[str]] = ..., source_uri: _Optional[str] = ..., quote: _Optional[str] = ...) -> None: ...

class CitationIssue(_message.Message):
    __slots__ = ("marker", "reason", "action")
    MARKER_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    marker: str
    reason: str
    action: str
    def __init__(self, marker: _Optional[str] = ..., reason: _Optional[str] = ..., action: _Optional[str] = ...) -> None: ...

class GenerateResponse(_message.Message):
    __slots__ = ("answer", "citations", "citation_issues", "refused", "generator", "stages", "claim_checks", "intent", "evidence_score", "refusal_reason", "answerability")
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    CITATIONS_FIELD_NUMBER: _ClassVar[int]
    CITATION_ISSUES_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    GENERATOR_FIELD_NUMBER: _ClassVar[int]
    STAGES_FIELD_NUMBER: _ClassVar[int]
    CLAIM_CHECKS_FIELD_NUMBER: _ClassVar[int]
    INTENT_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_SCORE_FIELD_NUMBER: _ClassVar[int]
    REFUSAL_REASON_FIELD_NUMBER: _ClassVar[int]
    ANSWERABILITY_FIELD_NUMBER: _ClassVar[int]
    answer: str
    citations: _containers.RepeatedCompositeFieldContainer[Citation]
    citation_issues: _containers.RepeatedCompositeFieldContainer[CitationIssue]
    refused: bool
    generator: str
    stages: _containers.RepeatedCompositeFieldContainer[_chunk_pb2.StageReport]
    claim_checks: _containers.RepeatedCompositeFieldContainer[ClaimCheck]
    intent: str
    evidence_score: float
    refusal_reason: str
    answerability: Answerability
    def __init__(self, answer: _Optional[str] = ..., citations: _Optional[_Iterable[_Union[Citation, _Mapping]]] = ..., citation_issues: _Optional[_Iterable[_Union[CitationIssue, _Mapping]]] = ..., refused: bool = ..., generator: _Optional[str] = ..., stages: _Optional[_Iterable[_Union[_chunk_pb2.StageReport, _Mapping]]] = ..., claim_checks: _Optional[_Iterable[_Union[ClaimCheck, _Mapping]]] = ..., intent: _Optional[str] = ..., evidence_score: _Optional[float] = ..., refusal_reason: _Optional[str] = ..., answerability: _Optional[_Union[Answerability, _Mapping]] = ...) -> None: ...
