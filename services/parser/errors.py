"""Why a file could not be parsed: a stable machine-readable reason plus a message naming the problem.

The reason travels three ways: as the `ParseError.reason` attribute in process,
as the `ragkb-parse-reason` trailing metadata of a failed Parse call, and as the
prefix of the error text ("password_protected: 'a.pdf' is ..."), which is what a
failed ingestion job shows.
"""

from __future__ import annotations

import re

from shared.errors import DeadlineExceeded, InvalidArgument, RagkbError, UnsupportedFileType

REASON_KEY = "ragkb-parse-reason"

EMPTY = "empty_file"
WHITESPACE_ONLY = "whitespace_only"
NO_TEXT = "no_text"                    # markup or structure only, nothing readable
BINARY = "binary_content"              # bytes that are not the text format the name claims
PASSWORD_PROTECTED = "password_protected"
COPY_PROTECTED = "copy_protected"      # the PDF's owner forbids copying its text
CORRUPT = "corrupt_file"
IMAGE_ONLY = "image_only_without_ocr"  # no text layer, and the knowledge base has OCR off
TOO_LARGE = "file_too_large"
TOO_MANY_PAGES = "too_many_pages"
TIMEOUT = "parse_timeout"
UNSUPPORTED_TYPE = "unsupported_type"
PARSER_CRASHED = "parser_crashed"      # the parse worker died (e.g. out of memory)
MEMORY_LIMIT = "memory_limit"          # the parse needed more memory than the knowledge base allows
DECOMPRESSED_TOO_LARGE = "decompressed_too_large"  # a zip-based file (DOCX/PPTX/XLSX) inflates past the limit
TOO_MANY_ZIP_ENTRIES = "too_many_zip_entries"
TOO_MANY_ELEMENTS = "too_many_elements"
TOO_MANY_CHUNKS = "too_many_chunks"
TYPE_MISMATCH = "type_mismatch"        # the bytes are a different format than the file name says

_PREFIX = re.compile(r"^([a-z_]+): ")


def _prefixed(reason: str, message: str) -> str:
    return message if message.startswith(f"{reason}: ") else f"{reason}: {message}"


class ParseError(InvalidArgument):
    """A file the parser refuses; `reason` is one of the constants above."""

    def __init__(self, reason: str, message: str):
        super().__init__(_prefixed(reason, message))
        self.reason = reason


class UnsupportedType(UnsupportedFileType):
    def __init__(self, message: str):
        super().__init__(_prefixed(UNSUPPORTED_TYPE, message))
        self.reason = UNSUPPORTED_TYPE


class ParseTimeout(DeadlineExceeded):
    def __init__(self, message: str):
        super().__init__(_prefixed(TIMEOUT, message))
        self.reason = TIMEOUT


def rebuild(kind: str, reason: str, message: str) -> RagkbError:
    """An error sent across a process boundary as (class name, reason, message), as the same class again."""
    if kind == "UnsupportedType":
        return UnsupportedType(message)
    if kind == "ParseTimeout":
        return ParseTimeout(message)
    if reason:
        return ParseError(reason, message)
    return {cls.__name__: cls for cls in (InvalidArgument, UnsupportedFileType, DeadlineExceeded)}.get(
        kind, RagkbError)(message)


def reason_of(error: BaseException | str) -> str:
    """The reason of a parse error, from the exception or its text (e.g. a job's error field); '' if none."""
    reason = getattr(error, "reason", "")
    if reason:
        return reason
    text = str(error)
    text = text.split("] ", 1)[1] if text.startswith("[") and "] " in text else text
    match = _PREFIX.match(text)
    return match.group(1) if match else ""
