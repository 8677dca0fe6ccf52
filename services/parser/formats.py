"""File bytes -> a flat list of structural blocks (headings, paragraphs, tables, lists, code).

Every format is read with `unstructured` (see `reading.py`); this module owns
what comes before and after: type detection (the bytes are sniffed before the
name is trusted), text decoding (`encodings`: detected, never assumed), the
Office container limits (`containers`), the empty / whitespace / binary checks,
and the `Block` list that one chunker serves for all formats.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from services.parser import containers, errors
from services.parser.encodings import decode

MARKDOWN = "markdown"
TEXT = "text"
HTML = "html"
PDF = "pdf"
DOCX = "docx"
PPTX = "pptx"
XLSX = "xlsx"
EML = "eml"
CSV = "csv"
IMAGE = "image"
DOC = "doc"
PPT = "ppt"
XLS = "xls"
MSG = "msg"
EXTENSIONS = {".md": MARKDOWN, ".markdown": MARKDOWN, ".txt": TEXT, ".text": TEXT, ".html": HTML, ".htm": HTML,
              ".pdf": PDF, ".docx": DOCX, ".pptx": PPTX, ".xlsx": XLSX, ".xlsm": XLSX, ".eml": EML,
              ".csv": CSV, ".tsv": CSV, ".doc": DOC, ".ppt": PPT, ".xls": XLS, ".msg": MSG,
              ".png": IMAGE, ".jpg": IMAGE, ".jpeg": IMAGE, ".tif": IMAGE, ".tiff": IMAGE, ".bmp": IMAGE,
              ".gif": IMAGE, ".webp": IMAGE}
MIME_TYPES = {
    MARKDOWN: "text/markdown", TEXT: "text/plain", HTML: "text/html", PDF: "application/pdf",
    DOCX: "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    PPTX: "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    XLSX: "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    EML: "message/rfc822", CSV: "text/csv", DOC: "application/msword", PPT: "application/vnd.ms-powerpoint",
    XLS: "application/vnd.ms-excel", MSG: "application/vnd.ms-outlook", IMAGE: "image/png",
}
# types named by the extension rather than the parser's type
_EXTENSION_MIME_TYPES = {".tsv": "text/tab-separated-values", ".xlsm": "application/vnd.ms-excel.sheet.macroEnabled.12",
                         ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".tif": "image/tiff", ".tiff": "image/tiff",
                         ".bmp": "image/bmp", ".gif": "image/gif", ".webp": "image/webp"}
# Office files are zip containers; an encrypted one is an OLE compound file instead.
OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_HTML_START = re.compile(rb"<(?:!doctype\s+html|html[\s>])", re.IGNORECASE)
# what other files start with: named as text, they are refused instead of indexed as gibberish
_BINARY_MAGIC = {b"\x89PNG": "a PNG image", b"\xff\xd8\xff": "a JPEG image", b"GIF8": "a GIF image",
                 b"\x1f\x8b": "gzip data", b"PK\x03\x04": "a zip archive", b"7z\xbc\xaf": "a 7-Zip archive",
                 b"Rar!": "a RAR archive", b"\x7fELF": "an executable",
                 OLE_MAGIC: "an OLE compound file (legacy or encrypted Office)"}


@dataclass
class Block:
    kind: str                 # heading | paragraph | table | list | code
    text: str
    level: int = 0            # heading level (1-6) for headings
    page: int = 0


@dataclass
class Attachment:
    filename: str
    data: bytes


@dataclass
class ParsedDocument:
    blocks: list[Block] = field(default_factory=list)
    title: str = ""
    doc_type: str = ""
    encoding: str = ""
    page_count: int = 0
    attachments: list[Attachment] = field(default_factory=list)
    metadata: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ReadOptions:
    """What a knowledge base allows when reading one file (see shared.config.ParserConfig)."""

    ocr: bool = False
    ocr_languages: tuple[str, ...] = ("chi_sim", "eng")
    max_pages: int = 2000
    allow_copy_protected: bool = False
    max_unzipped_bytes: int = 256 * 1024 * 1024
    max_zip_entries: int = 10000
    max_elements: int = 200_000
    max_memory_mb: int = 2048  # enforced by the parse worker process (isolation.py), not in process


def mime_type(doc_type: str, filename: str) -> str:
    return _EXTENSION_MIME_TYPES.get(PurePosixPath(filename.lower()).suffix, MIME_TYPES[doc_type])


def detect_type(filename: str) -> str:
    suffix = PurePosixPath(filename.lower()).suffix
    if suffix not in EXTENSIONS:
        shown = suffix or "(no extension)"
        raise errors.UnsupportedType(
            f"unsupported file type {shown!r} for {filename!r}; supported: {', '.join(sorted(EXTENSIONS))}"
        )
    return EXTENSIONS[suffix]


def sniff_type(filename: str, data: bytes) -> str:
    """The type the bytes are, over the type the name claims: a PDF named .txt is read as a PDF.

    A text-type name whose bytes are an HTML page is read as HTML; one whose bytes
    are an image, archive or executable is refused. A binary-type name otherwise
    keeps its type (its reader names what is wrong with the bytes).
    """
    claimed = detect_type(filename)
    head = data[:1024]
    if b"%PDF-" in head:
        return PDF
    kind = containers.office_kind(data)
    if kind:
        return kind
    if claimed in (TEXT, MARKDOWN, HTML, EML, CSV):
        found = next((name for magic, name in _BINARY_MAGIC.items() if head.startswith(magic)), "")
        if found:
            raise errors.ParseError(errors.TYPE_MISMATCH,
                                    f"{filename!r} is named as {claimed} but its bytes are {found}")
    if claimed == TEXT and _HTML_START.match(head.lstrip(codecs.BOM_UTF8 + b" \t\r\n")):
        return HTML
    return claimed


def check_container(filename: str, doc_type: str, data: bytes, options: ReadOptions) -> None:
    """Refuse Office files that are encrypted, not the zip container they claim to be, or zip bombs."""
    if doc_type not in (DOCX, PPTX, XLSX):
        return
    if data.startswith(OLE_MAGIC):
        raise errors.ParseError(errors.PASSWORD_PROTECTED,
                                f"{filename!r} is password-protected (an encrypted {doc_type.upper()}); "
                                "remove the password and upload it again")
    if not data.startswith(containers.ZIP_MAGIC):
        raise errors.ParseError(errors.CORRUPT, f"{filename!r} is not a valid {doc_type.upper()} file "
                                                "(not a zip container)")
    containers.check_zip_limits(filename, data, max_entries=options.max_zip_entries,
                                max_unzipped_bytes=options.max_unzipped_bytes)
    if doc_type == XLSX:
        containers.check_spreadsheet_cells(filename, data, max_cells=options.max_elements)


def decode_text_file(filename: str, doc_type: str, data: bytes) -> tuple[str, str]:
    text, encoding = decode(data)
    if "\x00" in text:
        raise errors.ParseError(errors.BINARY, f"{filename!r} looks binary (NUL characters after decoding as "
                                               f"{encoding}), not {doc_type}")
    if not text.strip():
        raise errors.ParseError(errors.WHITESPACE_ONLY, f"{filename!r} has no text (only whitespace)")
    return text, encoding


def read(filename: str, data: bytes, options: ReadOptions | None = None) -> ParsedDocument:
    """Read one file into blocks; any failure is a `ParseError` with a specific reason."""
    from services.parser import reading

    if not data:
        detect_type(filename)
        raise errors.ParseError(errors.EMPTY, f"{filename!r} is empty (0 bytes)")
    options = options or ReadOptions()
    doc_type = sniff_type(filename, data)
    check_container(filename, doc_type, data, options)
    try:
        document = reading.read(filename, doc_type, data, options)
    except (errors.ParseError, errors.UnsupportedType, MemoryError):  # the worker reports a memory limit
        raise
    except Exception as error:  # a library choking on the bytes means the file is damaged
        raise errors.ParseError(errors.CORRUPT, f"{filename!r} could not be read as {doc_type}: "
                                                f"{type(error).__name__}: {str(error)[:200]}") from None
    document.doc_type = doc_type
    if len(document.blocks) > options.max_elements:
        raise errors.ParseError(errors.TOO_MANY_ELEMENTS, f"{filename!r} has {len(document.blocks)} elements; "
                                                          f"the limit is {options.max_elements}")
    if not any(b.text.strip() for b in document.blocks) and not document.attachments:
        raise errors.ParseError(errors.NO_TEXT, f"{filename!r} has no text (only markup, images or layout)")
    if not document.title:
        document.title = next((b.text for b in document.blocks if b.kind == "heading"), PurePosixPath(filename).stem)
    return document

