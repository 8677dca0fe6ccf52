from shared.contracts.ragkb.v1 import chunk_pb2 as _chunk_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ParseRequest(_message.Message):
    __slots__ = ("kb", "namespace", "doc_id", "filename", "content", "chunker", "metadata", "tokenizer_model", "options", "context")
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
    TOKENIZER_MODEL_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    kb: str
    namespace: str
    doc_id: str
    filename: str
    content: bytes
    chunker: ChunkerOptions
    metadata: _containers.ScalarMap[str, str]
    tokenizer_model: str
    options: ParseOptions
    context: _chunk_pb2.CallContext
    def __init__(self, kb: _Optional[str] = ..., namespace: _Optional[str] = ..., doc_id: _Optional[str] = ..., filename: _Optional[str] = ..., content: _Optional[bytes] = ..., chunker: _Optional[_Union[ChunkerOptions, _Mapping]] = ..., metadata: _Optional[_Mapping[str, str]] = ..., tokenizer_model: _Optional[str] = ..., options: _Optional[_Union[ParseOptions, _Mapping]] = ..., context: _Optional[_Union[_chunk_pb2.CallContext, _Mapping]] = ...) -> None: ...

class ParseOptions(_message.Message):
    __slots__ = ("ocr", "ocr_languages", "max_file_mb", "max_pages", "timeout_s", "allow_copy_protected", "max_unzipped_mb", "max_zip_entries", "max_elements", "max_chunks", "max_memory_mb")
    OCR_FIELD_NUMBER: _ClassVar[int]
    OCR_LANGUAGES_FIELD_NUMBER: _ClassVar[int]
    MAX_FILE_MB_FIELD_NUMBER: _ClassVar[int]
    MAX_PAGES_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    ALLOW_COPY_PROTECTED_FIELD_NUMBER: _ClassVar[int]
    MAX_UNZIPPED_MB_FIELD_NUMBER: _ClassVar[int]
    MAX_ZIP_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    MAX_ELEMENTS_FIELD_NUMBER: _ClassVar[int]
    MAX_CHUNKS_FIELD_NUMBER: _ClassVar[int]
    MAX_MEMORY_MB_FIELD_NUMBER: _ClassVar[int]
    ocr: bool
    ocr_languages: _containers.RepeatedScalarFieldContainer[str]
    max_file_mb: float
    max_pages: int
    timeout_s: float
    allow_copy_protected: bool
    max_unzipped_mb: float
    max_zip_entries: int
    max_elements: int
    max_chunks: int
    max_memory_mb: int
    def __init__(self, ocr: bool = ..., ocr_languages: _Optional[_Iterable[str]] = ..., max_file_mb: _Optional[float] = ..., max_pages: _Optional[int] = ..., timeout_s: _Optional[float] = ..., allow_copy_protected: bool = ..., max_unzipped_mb: _Optional[float] = ..., max_zip_entries: _Optional[int] = ..., max_elements: _Optional[int] = ..., max_chunks: _Optional[int] = ..., max_memory_mb: _Optional[int] = ...) -> None: ...

class ChunkerOptions(_message.Message):
    __slots__ = ("name", "max_chars", "overlap_chars", "min_section_chars", "max_tokens", "token_margin")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MAX_CHARS_FIELD_NUMBER: _ClassVar[int]
    OVERLAP_CHARS_FIELD_NUMBER: _ClassVar[int]
    MIN_SECTION_CHARS_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOKEN_MARGIN_FIELD_NUMBER: _ClassVar[int]
    name: str
    max_chars: int
    overlap_chars: int
    min_section_chars: int
    max_tokens: int
    token_margin: int
    def __init__(self, name: _Optional[str] = ..., max_chars: _Optional[int] = ..., overlap_chars: _Optional[int] = ..., min_section_chars: _Optional[int] = ..., max_tokens: _Optional[int] = ..., token_margin: _Optional[int] = ...) -> None: ...

class ParseResponse(_message.Message):
    __slots__ = ("doc_id", "content_hash", "chunks", "detected_type", "detected_encoding", "attachments", "warnings", "page_count")
    DOC_ID_FIELD_NUMBER: _ClassVar[int]
    CONTENT_HASH_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    DETECTED_TYPE_FIELD_NUMBER: _ClassVar[int]
    DETECTED_ENCODING_FIELD_NUMBER: _ClassVar[int]
    ATTACHMENTS_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    PAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    doc_id: str
    content_hash: str
    chunks: _containers.RepeatedCompositeFieldContainer[_chunk_pb2.KnowledgeChunk]
    detected_type: str
    detected_encoding: str
    attachments: _containers.RepeatedCompositeFieldContainer[ParsedAttachment]
    warnings: _containers.RepeatedScalarFieldContainer[str]
    page_count: int
    def __init__(self, doc_id: _Optional[str] = ..., content_hash: _Optional[str] = ..., chunks: _Optional[_Iterable[_Union[_chunk_pb2.KnowledgeChunk, _Mapping]]] = ..., detected_type: _Optional[str] = ..., detected_encoding: _Optional[str] = ..., attachments: _Optional[_Iterable[_Union[ParsedAttachment, _Mapping]]] = ..., warnings: _Optional[_Iterable[str]] = ..., page_count: _Optional[int] = ...) -> None: ...

class ParsedAttachment(_message.Message):
    __slots__ = ("doc_id", "filename", "content_hash", "chunks", "detected_type")
    DOC_ID_FIELD_NUMBER: _ClassVar[int]
    FILENAME_FIELD_NUMBER: _ClassVar[int]
    CONTENT_HASH_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    DETECTED_TYPE_FIELD_NUMBER: _ClassVar[int]
    doc_id: str
    filename: str
    content_hash: str
    chunks: _containers.RepeatedCompositeFieldContainer[_chunk_pb2.KnowledgeChunk]
    detected_type: str
    def __init__(self, doc_id: _Optional[str] = ..., filename: _Optional[str] = ..., content_hash: _Optional[str] = ..., chunks: _Optional[_Iterable[_Union[_chunk_pb2.KnowledgeChunk, _Mapping]]] = ..., detected_type: _Optional[str] = ...) -> None: ...

class SupportedTypesRequest(_message.Message):
    __slots__ = ("context",)
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    context: _chunk_pb2.CallContext
    def __init__(self, context: _Optional[_Union[_chunk_pb2.CallContext, _Mapping]] = ...) -> None: ...

class SupportedTypesResponse(_message.Message):
    __slots__ = ("extensions",)
    EXTENSIONS_FIELD_NUMBER: _ClassVar[int]
    extensions: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, extensions: _Optional[_Iterable[str]] = ...) -> None: ...
