"""unstructured elements -> `Block`s: headings with levels, tables as Markdown, lists with their lead-in.

How much a "Title" element can be trusted depends on the format:
- "structured" (HTML, Markdown, DOCX, PPTX, EML): titles come from markup or
  styles and carry `category_depth`; level = depth + 1. DOCX chapters written
  as numbered Normal paragraphs ("1.2. 带格式正文") are headings too.
- "inferred" (PDF, XLSX): titles are guessed from layout; they are level-1
  headings unless they read like a sentence, are long, or are directly followed
  by another title (cover pages, table headers), which makes them text.
- "none" (plain text): no markup means no headings; every element is text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from services.parser.cleaning import clean_text
from services.parser.formats import Block

DROPPED = {"Header", "Footer", "PageBreak", "PageNumber"}
_NUMBERED_HEADING = re.compile(r"^(\d{1,2}(?:\.\d{1,2}){0,4})\.?\s+\S")
_SENTENCE_END = ("。", "！", "？", "；", ".", "!", "?", ";", ":", "：", ",", "，")
MAX_HEADING_CHARS = 150
_CAPTION = re.compile(r"^(?:table|tab\.|表)\s*[\dA-Za-z一二三四五六七八九十.-]*\s*[:：.]", re.IGNORECASE)


def to_blocks(elements: Iterable, *, headings: str, numbered_headings: bool = False) -> list[Block]:
    blocks: list[Block] = []
    list_run: list[tuple[int, str]] = []
    list_page = 0

    def flush_list():
        nonlocal list_run
        if list_run:
            base = min(depth for depth, _ in list_run)
            text = "\n".join(f"{'  ' * (depth - base)}- {item}" for depth, item in list_run)
            previous = blocks[-1] if blocks else None
            if previous and previous.kind == "paragraph" and previous.text.endswith((":", "：")):
                previous.kind, previous.text = "list", f"{previous.text}\n{text}"  # keep the lead-in
            else:
                blocks.append(Block(kind="list", text=text, page=list_page))
            list_run = []

    for element in elements:
        category = getattr(element, "category", type(element).__name__)
        if category in DROPPED:
            continue
        metadata = element.metadata
        page = metadata.page_number or 0
        if category == "Table":
            flush_list()
            table = html_table_to_markdown(metadata.text_as_html) if metadata.text_as_html else ""
            text = table or clean_text(element.text)
            if text:
                blocks.append(Block(kind="table", text=text, page=page))
            continue
        text = clean_text(element.text or "")
        if not text:
            continue
        if category == "ListItem":
            if not list_run:
                list_page = page
            list_run.append((metadata.category_depth or 0, text))
            continue
        flush_list()
        if category == "Image":
            blocks.append(Block(kind="paragraph", text=f"[image: {text}]", page=page))
        elif category == "CodeSnippet":
            blocks.append(Block(kind="code", text=text, page=page))
        elif category == "Title" and headings == "structured":
            blocks.append(Block(kind="heading", text=text, level=(metadata.category_depth or 0) + 1, page=page))
        elif category == "Title" and headings == "inferred" and _heading_like(text):
            blocks.append(Block(kind="heading", text=text, level=1, page=page))
        elif numbered_headings and category in ("Text", "UncategorizedText") and _numbered_level(text):
            blocks.append(Block(kind="heading", text=text, level=_numbered_level(text), page=page))
        else:
            blocks.append(Block(kind="paragraph", text=text, page=page))
    flush_list()
    blocks = _attach_captions(blocks)
    return _demote_stacked_headings(blocks) if headings == "inferred" else blocks


def _attach_captions(blocks: list[Block]) -> list[Block]:
    """A caption line right before or after a table travels inside the table block."""
    kept: list[Block] = []
    for block in blocks:
        previous = kept[-1] if kept else None
        if previous and block.kind == "table" and previous.kind == "paragraph" and _CAPTION.match(previous.text):
            kept[-1] = Block(kind="table", text=f"{previous.text}\n{block.text}", page=block.page)
        elif previous and previous.kind == "table" and block.kind == "paragraph" and _CAPTION.match(block.text) \
                and not _CAPTION.match(previous.text.split("\n", 1)[0]):
            previous.text = f"{block.text}\n{previous.text}"
        else:
            kept.append(block)
    return kept


def _heading_like(text: str) -> bool:
    return len(text) <= MAX_HEADING_CHARS and "\n" not in text and not text.endswith(_SENTENCE_END)


def _numbered_level(text: str) -> int:
    """'2.1 Title' -> 2 for a short, sentence-less numbered line; 0 otherwise."""
    match = _NUMBERED_HEADING.match(text)
    if not match or not _heading_like(text) or len(text) > 60:
        return 0
    return match.group(1).count(".") + 1


def _demote_stacked_headings(blocks: list[Block]) -> list[Block]:
    """A guessed heading directly followed by another heading is text (cover lines, column headers)."""
    for block, following in zip(blocks, blocks[1:]):
        if block.kind == "heading" and following.kind == "heading":
            block.kind, block.level = "paragraph", 0
    if blocks and blocks[-1].kind == "heading":
        blocks[-1].kind, blocks[-1].level = "paragraph", 0
    return blocks


def html_table_to_markdown(html: str) -> str:
    """An HTML table -> Markdown rows (first row is the header); cell pipes become '/'."""
    import lxml.html

    try:
        root = lxml.html.fragment_fromstring(html, create_parent="div")
    except Exception:
        return ""
    rows = []
    for row in root.iter("tr"):
        cells = [" ".join(cell.text_content().split()).replace("|", "/") for cell in row if cell.tag in ("td", "th")]
        if any(cells):
            rows.append(cells)
    return markdown_table(rows)


def markdown_table(rows: list[list[str]]) -> str:
    """Rows of cell texts -> a Markdown table whose first row is the header; '' for no rows."""
    if not rows:
        return ""
    width = max(len(r) for r in rows)
    lines = ["| " + " | ".join(r + [""] * (width - len(r))) + " |" for r in rows]
    lines.insert(1, "|" + "---|" * width)
    return "\n".join(lines)
