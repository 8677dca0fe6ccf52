from shared.contracts.ragkb.v1 import chunk_pb2 as _chunk_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ParseRequest(_message.Message):
    __slots__ = ("kb", "namespace", "doc_id", "filename", "content", "chunker", "metadata")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    KB_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    DOC_ID_FIELD_NUMBER: _ClassVar[int]
    FILENAME_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    CHUNKER_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    kb: str
    namespace: str
    doc_id: str
    filename: str
    content: bytes
    chunker: ChunkerOptions
    metadata: _containers.ScalarMap[str, str]
    def __init__(self, kb: _Optional[str] = ..., namespace: _Optional[str] = ..., doc_id: _Optional[str] = ..., filename: _Optional[str] = ..., content: _Optional[bytes] = ..., chunker: _Optional[_Union[ChunkerOptions, _Mapping]] = ..., metadata: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ChunkerOptions(_message.Message):
    __slots__ = ("name", "max_chars", "overlap_chars", "min_section_chars")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MAX_CHARS_FIELD_NUMBER: _ClassVar[int]
    OVERLAP_CHARS_FIELD_NUMBER: _ClassVar[int]
    MIN_SECTION_CHARS_FIELD_NUMBER: _ClassVar[int]
    name: str
    max_chars: int
    overlap_chars: int
    min_section_chars: int
    def __init__(self, name: _Optional[str] = ..., max_chars: _Optional[int] = ..., overlap_chars: _Optional[int] = ..., min_section_chars: _Optional[int] = ...) -> None: ...

class ParseResponse(_message.Message):
    __slots__ = ("doc_id", "content_hash", "chunks", "detected_type", "detected_encoding")
    DOC_ID_FIELD_NUMBER: _ClassVar[int]
    CONTENT_HASH_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    DETECTED_TYPE_FIELD_NUMBER: _ClassVar[int]
    DETECTED_ENCODING_FIELD_NUMBER: _ClassVar[int]
    doc_id: str
    content_hash: str
    chunks: _containers.RepeatedCompositeFieldContainer[_chunk_pb2.KnowledgeChunk]
    detected_type: str
    detected_encoding: str
    def __init__(self, doc_id: _Optional[str] = ..., content_hash: _Optional[str] = ..., chunks: _Optional[_Iterable[_Union[_chunk_pb2.KnowledgeChunk, _Mapping]]] = ..., detected_type: _Optional[str] = ..., detected_encoding: _Optional[str] = ...) -> None: ...

class SupportedTypesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SupportedTypesResponse(_message.Message):
    __slots__ = ("extensions",)
    EXTENSIONS_FIELD_NUMBER: _ClassVar[int]
    extensions: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, extensions: _Optional[_Iterable[str]] = ...) -> None: ...
