"""File bytes -> a flat list of structural blocks (headings, paragraphs, tables, lists, code).

Markdown, plain text and HTML are read here; every reader produces the same
`Block` list so one chunker serves all formats. Text encodings are detected
(BOM, UTF-8, UTF-16, GB18030, cp1252), never assumed.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import PurePosixPath

from shared.errors import InvalidArgument, UnsupportedFileType

MARKDOWN = "markdown"
TEXT = "text"
HTML = "html"
EXTENSIONS = {".md": MARKDOWN, ".markdown": MARKDOWN, ".txt": TEXT, ".text": TEXT, ".html": HTML, ".htm": HTML}
MIME_TYPES = {MARKDOWN: "text/markdown", TEXT: "text/plain", HTML: "text/html"}


@dataclass
class Block:
    kind: str                 # heading | paragraph | table | list | code
    text: str
    level: int = 0            # heading level (1-6) for headings
    page: int = 0


@dataclass
class ParsedDocument:
    blocks: list[Block] = field(default_factory=list)
    title: str = ""
    doc_type: str = ""
    encoding: str = ""


def detect_type(filename: str) -> str:
    suffix = PurePosixPath(filename.lower()).suffix
    if suffix not in EXTENSIONS:
        shown = suffix or "(no extension)"
        raise UnsupportedFileType(
            f"unsupported file type {shown!r} for {filename!r}; supported: {', '.join(sorted(EXTENSIONS))}"
        )
    return EXTENSIONS[suffix]


def decode(data: bytes) -> tuple[str, str]:
    """Decode bytes, returning (text, encoding). Tries BOMs, UTF-8, UTF-16 heuristics, GB18030, cp1252."""
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
    for encoding in ("utf-8", "gb18030"):
        try:
            return data.decode(encoding), encoding
        except UnicodeDecodeError:
            continue
    return data.decode("cp1252", errors="replace"), "cp1252"


def parse(filename: str, data: bytes) -> ParsedDocument:
    doc_type = detect_type(filename)
    if not data:
        raise InvalidArgument(f"{filename!r} is empty (0 bytes)")
    text, encoding = decode(data)
    if "\x00" in text:
        raise InvalidArgument(f"{filename!r} looks binary (NUL characters after decoding as {encoding}), not {doc_type}")
    if doc_type == HTML:
        text = html_to_markdown(text)
    blocks = markdown_blocks(text) if doc_type in (MARKDOWN, HTML) else text_blocks(text)
    if not any(b.text.strip() for b in blocks):
        raise InvalidArgument(f"{filename!r} has no text (only whitespace or markup)")
    title = next((b.text for b in blocks if b.kind == "heading"), PurePosixPath(filename).stem)
    return ParsedDocument(blocks=blocks, title=title, doc_type=doc_type, encoding=encoding)


_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
_FENCE = re.compile(r"^\s*(```|~~~)")


def markdown_blocks(text: str) -> list[Block]:
    blocks: list[Block] = []
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    buffer: list[str] = []
    buffer_kind = "paragraph"

    def flush():
        nonlocal buffer, buffer_kind
        content = "\n".join(buffer).strip()
        if content:
            blocks.append(Block(kind=buffer_kind, text=content))
        buffer, buffer_kind = [], "paragraph"

    i = 0
    while i < len(lines):
        line = lines[i]
        if _FENCE.match(line):
            flush()
            fence = _FENCE.match(line).group(1)
            code = [line]
            i += 1
            while i < len(lines) and not lines[i].strip().startswith(fence):
                code.append(lines[i])
                i += 1
            code.append(fence)
            blocks.append(Block(kind="code", text="\n".join(code)))
            i += 1
            continue
        heading = _HEADING.match(line)
        if heading:
            flush()
            blocks.append(Block(kind="heading", text=heading.group(2).strip(), level=len(heading.group(1))))
        elif not line.strip():
            flush()
        else:
            kind = "table" if line.lstrip().startswith("|") else "list" if _LIST_ITEM.match(line) else "paragraph"
            if buffer and kind != buffer_kind and not (buffer_kind == "list" and kind == "paragraph"):
                # a paragraph ending in ":" followed by items is a lead-in: keep them together
                if buffer_kind == "paragraph" and kind == "list" and buffer[-1].rstrip().endswith((":", "：")):
                    buffer_kind = "list"
                else:
                    flush()
            if not buffer:
                buffer_kind = kind
            buffer.append(line.rstrip())
        i += 1
    flush()
    return blocks


def text_blocks(text: str) -> list[Block]:
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return [Block(kind="paragraph", text=p.strip()) for p in re.split(r"\n\s*\n", text) if p.strip()]


class _HtmlToMarkdown(HTMLParser):
    """Keeps headings, paragraphs, lists, tables and image alt text; drops scripts, styles and navigation."""

    SKIP = {"script", "style", "nav", "noscript", "template", "svg", "head", "footer", "aside", "form"}
    BLOCK = {"p", "div", "section", "article", "main", "br", "blockquote", "pre", "dd", "dt", "figcaption", "caption"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self._skip_depth = 0
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self._table_rows = 0

    def handle_starttag(self, tag, attrs):
        if tag in self.SKIP:
            self._skip_depth += 1
            return
        if self._skip_depth:
            return
        if re.fullmatch(r"h[1-6]", tag):
            self.out.append("\n\n" + "#" * int(tag[1]) + " ")
        elif tag == "li":
            self.out.append("\n- ")
        elif tag == "table":
            self._table_rows = 0
            self.out.append("\n\n")
        elif tag == "tr":
            self._row = []
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "img":
            alt = dict(attrs).get("alt")
            if alt:
                self._text(f"[image: {alt}]")
        elif tag in self.BLOCK:
            self.out.append("\n\n")

    def handle_endtag(self, tag):
        if tag in self.SKIP:
            self._skip_depth = max(0, self._skip_depth - 1)
            return
        if self._skip_depth:
            return
        if tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row.append(" ".join("".join(self._cell).split()).replace("|", "/"))
            self._cell = None
        elif tag == "tr" and self._row is not None:
            if any(self._row):
                self.out.append("| " + " | ".join(self._row) + " |\n")
                if self._table_rows == 0:
                    self.out.append("|" + "---|" * len(self._row) + "\n")
                self._table_rows += 1
            self._row = None
        elif tag == "table":
            self.out.append("\n")
        elif re.fullmatch(r"h[1-6]", tag) or tag in self.BLOCK or tag in ("ul", "ol"):
            self.out.append("\n\n")

    def handle_data(self, data):
        if not self._skip_depth:
            self._text(data)

    def _text(self, data: str):
        if self._cell is not None:
            self._cell.append(data)
        else:
            self.out.append(re.sub(r"\s+", " ", data))


def html_to_markdown(html: str) -> str:
    converter = _HtmlToMarkdown()
    converter.feed(html)
    converter.close()
    lines = [line.strip() for line in "".join(converter.out).split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()
