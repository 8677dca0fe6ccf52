"""File bytes -> a flat list of structural blocks (headings, paragraphs, tables, lists, code).

Every format is read with `unstructured` (see `reading.py`); this module owns
what comes before and after: type detection, text decoding (BOM, UTF-8,
UTF-16, GB18030, cp1252 — detected, never assumed), the empty / whitespace /
binary checks, and the `Block` list that one chunker serves for all formats.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from services.parser import errors

MARKDOWN = "markdown"
TEXT = "text"
HTML = "html"
PDF = "pdf"
DOCX = "docx"
PPTX = "pptx"
XLSX = "xlsx"
EML = "eml"
EXTENSIONS = {".md": MARKDOWN, ".markdown": MARKDOWN, ".txt": TEXT, ".text": TEXT, ".html": HTML, ".htm": HTML,
              ".pdf": PDF, ".docx": DOCX, ".pptx": PPTX, ".xlsx": XLSX, ".eml": EML}
MIME_TYPES = {
    MARKDOWN: "text/markdown", TEXT: "text/plain", HTML: "text/html", PDF: "application/pdf",
    DOCX: "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    PPTX: "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    XLSX: "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    EML: "message/rfc822",
}
# Office files are zip containers; an encrypted one is an OLE compound file instead.
_ZIP_MAGIC = b"PK\x03\x04"
_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"


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


def detect_type(filename: str) -> str:
    suffix = PurePosixPath(filename.lower()).suffix
    if suffix not in EXTENSIONS:
        shown = suffix or "(no extension)"
        raise errors.UnsupportedType(
            f"unsupported file type {shown!r} for {filename!r}; supported: {', '.join(sorted(EXTENSIONS))}"
        )
    return EXTENSIONS[suffix]


def decode(data: bytes) -> tuple[str, str]:
    """Decode bytes, returning (text, encoding). Tries BOMs, UTF-16 heuristics, UTF-8, GB18030, cp1252."""
    for bom, encoding in ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"),
                          (codecs.BOM_UTF16_BE, "utf-16")):
        if data.startswith(bom):
            return data.decode(encoding), encoding
    if data[:200].count(b"\x00") > len(data[:200]) // 4:
        # many NULs without a BOM: UTF-16 with the zero byte telling the order
        encoding = "utf-16-le" if data[1:2] == b"\x00" else "utf-16-be"
        try:
            return data.decode(encoding), encoding
        except UnicodeDecodeError:
            pass
    try:
        return data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        pass
    try:
        text = data.decode("gb18030")
        if _looks_chinese(text):
            return text, "gb18030"
    except UnicodeDecodeError:
        pass
    return data.decode("cp1252", errors="replace"), "cp1252"


def _looks_chinese(text: str) -> bool:
    """GB18030 decodes almost any byte pair, so cp1252 Latin text also "succeeds" as rare Hanzi.

    Real Chinese text stays inside GB2312 (both bytes >= 0xA1); an accented Latin
    letter followed by ASCII never does.
    """
    wide = [c for c in text if ord(c) > 0x7F]
    if not wide:
        return True
    common = 0
    for char in wide:
        try:
            char.encode("gb2312")
            common += 1
        except UnicodeEncodeError:
            pass
    return common >= 0.9 * len(wide)


def check_container(filename: str, doc_type: str, data: bytes) -> None:
    """Refuse Office files that are encrypted or not the zip container they claim to be."""
    if doc_type not in (DOCX, PPTX, XLSX):
        return
    if data.startswith(_OLE_MAGIC):
        raise errors.ParseError(errors.PASSWORD_PROTECTED,
                                f"{filename!r} is password-protected (an encrypted {doc_type.upper()}); "
                                "remove the password and upload it again")
    if not data.startswith(_ZIP_MAGIC):
        raise errors.ParseError(errors.CORRUPT, f"{filename!r} is not a valid {doc_type.upper()} file "
                                                "(not a zip container)")


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

    doc_type = detect_type(filename)
    if not data:
        raise errors.ParseError(errors.EMPTY, f"{filename!r} is empty (0 bytes)")
    check_container(filename, doc_type, data)
    try:
        document = reading.read(filename, doc_type, data, options or ReadOptions())
    except (errors.ParseError, errors.UnsupportedType):
        raise
    except Exception as error:  # a library choking on the bytes means the file is damaged
        raise errors.ParseError(errors.CORRUPT, f"{filename!r} could not be read as {doc_type}: "
                                                f"{type(error).__name__}: {str(error)[:200]}") from None
    document.doc_type = doc_type
    if not any(b.text.strip() for b in document.blocks) and not document.attachments:
        raise errors.ParseError(errors.NO_TEXT, f"{filename!r} has no text (only markup, images or layout)")
    if not document.title:
        document.title = next((b.text for b in document.blocks if b.kind == "heading"), PurePosixPath(filename).stem)
    return document

