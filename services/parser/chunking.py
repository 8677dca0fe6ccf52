"""Blocks -> KnowledgeChunks: structure-aware (follow the heading tree) or fixed windows.

Structure chunker: one chunk per section with its heading path; a subsection
shorter than `min_section_chars` merges into its parent; text before the first
heading is an orphan block; tables are chunks of their own under their heading.
Any chunk longer than `max_chars`, or (second, token-safe pass) with more
tokens than the embedder's limit minus a margin, counted with its own
tokenizer, is split at paragraph, then sentence boundaries with a small
overlap, and every piece records part i of n and a shared group id so
retrieval can restore its siblings.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from services.parser.formats import Block
from shared.config import ChunkerConfig
from shared.contracts import chunk_pb2
from shared.text import split_sentences

BT = chunk_pb2
_CJK_CHAR = re.compile(r"[\u3000-\u303f\u3400-\u9fff\uff00-\uffef]")  # no space is put before CJK text
PREFIX_MAX_CHARS = 120  # the heading path prefixed to a chunk's text is cut to this (outermost titles first)


@dataclass(frozen=True)
class Budget:
    """How big a chunk may be: `max_chars` of body text and, when a counter is set, `max_tokens` of content."""

    max_chars: int
    max_tokens: int = 0
    count_tokens: Callable[[str], int] | None = None

    def fits(self, text: str, prefix: str = "") -> bool:
        if self.count_tokens is None or self.max_tokens <= 0:
            return True
        return self.count_tokens(with_prefix(prefix, text)) <= self.max_tokens


def heading_prefix(heading_path: list[str]) -> str:
    prefix = " > ".join(heading_path)
    return prefix if len(prefix) <= PREFIX_MAX_CHARS else "…" + prefix[-(PREFIX_MAX_CHARS - 1):]


def with_prefix(prefix: str, text: str) -> str:
    return f"{prefix}\n{text}" if prefix else text


@dataclass
class Section:
    heading_path: list[str]
    level: int
    block_type: int
    parts: list[str] = field(default_factory=list)
    tables: list[str] = field(default_factory=list)
    page: int = 0  # where the section starts, 0 when the format has no pages
    part_pages: list[int] = field(default_factory=list)  # the page of each entry in `parts`

    def add(self, text: str, page: int) -> None:
        self.parts.append(text)
        self.part_pages.append(page or self.page)

    def page_of(self, piece: str) -> int:
        """The page where a piece of this section's text starts."""
        probe = piece.strip()[:40]
        return next((page for part, page in zip(self.parts, self.part_pages) if probe in part), self.page)

    @property
    def text(self) -> str:
        return "\n\n".join(self.parts).strip()


@dataclass
class Piece:
    """A chunk before ids are assigned."""

    heading_path: list[str]
    block_type: int
    text: str
    part_index: int = 1
    part_count: int = 1
    group_key: str = ""
    page: int = 0


def sections_from_blocks(blocks: list[Block]) -> list[Section]:
    sections: list[Section] = []
    stack: list[tuple[int, str]] = []
    current = Section(heading_path=[], level=0, block_type=BT.BLOCK_TYPE_ORPHAN)
    for block in blocks:
        if block.kind == "heading":
            sections.append(current)
            while stack and stack[-1][0] >= block.level:
                stack.pop()
            stack.append((block.level, block.text))
            depth = len(stack)
            current = Section(heading_path=[title for _, title in stack], level=depth,
                              block_type=BT.BLOCK_TYPE_SECTION if depth <= 2 else BT.BLOCK_TYPE_SUBSECTION,
                              page=block.page)
            continue
        current.page = current.page or block.page
        if block.kind == "table":
            current.tables.append(block.text)
        else:
            current.add(block.text, block.page)
    sections.append(current)
    return sections


def merge_short_subsections(sections: list[Section], min_chars: int) -> list[Section]:
    """Fold a short subsection into the nearest preceding ancestor section.

    A subsection holding a table stays, so the table keeps its own heading.
    """
    kept: list[Section] = []
    for section in sections:
        parent = next((s for s in reversed(kept)
                       if len(s.heading_path) < len(section.heading_path)
                       and section.heading_path[:len(s.heading_path)] == s.heading_path), None)
        if parent is not None and not section.text and not section.tables and not _has_children(section, sections):
            parent.add(section.heading_path[-1], section.page)  # an empty leaf heading keeps its title as text
            continue
        if parent is not None and section.level >= 3 and len(section.text) < min_chars and not section.tables:
            title = section.heading_path[-1]
            if section.text:
                parent.add(f"{title}\n{section.text}", section.page)
            parent.tables.extend(section.tables)
            parent.block_type = BT.BLOCK_TYPE_MERGED
            continue
        kept.append(section)
    return kept


def _has_children(section: Section, sections: list[Section]) -> bool:
    depth = len(section.heading_path)
    return any(len(s.heading_path) > depth and s.heading_path[:depth] == section.heading_path for s in sections)


def structure_pieces(blocks: list[Block], config: ChunkerConfig, budget: Budget | None = None) -> list[Piece]:
    budget = budget or Budget(config.max_chars)
    pieces: list[Piece] = []
    for section in merge_short_subsections(sections_from_blocks(blocks), config.min_section_chars):
        if section.text:
            for piece in _fit(section.heading_path, section.block_type, section.text, config, budget):
                piece.page = section.page_of(piece.text)
                pieces.append(piece)
        for table in section.tables:
            pieces.extend(_fit(section.heading_path, BT.BLOCK_TYPE_TABLE, table, config, budget, table=True,
                               page=section.page))
    return pieces


def fixed_pieces(blocks: list[Block], config: ChunkerConfig, budget: Budget | None = None) -> list[Piece]:
    """Windows of `max_chars` overlapping by `overlap_chars`; a window over the token limit is split further."""
    budget = budget or Budget(config.max_chars)
    text = "\n\n".join(b.text for b in blocks if b.text.strip())
    step = max(1, config.max_chars - config.overlap_chars)
    windows = [text[start:start + config.max_chars] for start in range(0, len(text), step)]
    windows = [piece for w in windows if w.strip()
               for piece in split_text(w, config.max_chars, config.overlap_chars, fits=budget.fits)]
    return [Piece(heading_path=[], block_type=BT.BLOCK_TYPE_PARAGRAPH, text=w, part_index=i, part_count=len(windows),
                  group_key="fixed") for i, w in enumerate(windows, start=1)]


def _fit(heading_path: list[str], block_type: int, text: str, config: ChunkerConfig, budget: Budget, *,
         table: bool = False, page: int = 0) -> list[Piece]:
    max_chars = config.max_chars - sum(len(h) + 3 for h in heading_path)
    max_chars = max(max_chars, config.max_chars // 2)
    prefix = heading_prefix(heading_path)

    def fits(candidate: str) -> bool:
        return budget.fits(candidate, prefix)

    if table:
        parts = [piece for rows in split_rows(text, max_chars, fits=fits)
                 for piece in ([rows] if fits(rows) else split_text(rows, max_chars, 0, fits=fits))]
    else:
        parts = split_text(text, max_chars, config.overlap_chars, fits=fits)
    group_key = hashlib.sha256(text.encode()).hexdigest()[:16] if len(parts) > 1 else ""
    return [Piece(heading_path=list(heading_path), block_type=block_type, text=part, part_index=i,
                  part_count=len(parts), group_key=group_key, page=page) for i, part in enumerate(parts, start=1)]


def split_text(text: str, max_chars: int, overlap_chars: int, *,
               fits: Callable[[str], bool] | None = None) -> list[str]:
    """Greedy packing of paragraphs, then sentences, then hard cuts; adjacent pieces overlap.

    A piece is at most `max_chars` long and, when given, satisfies `fits` (the token budget).
    """
    def ok(candidate: str) -> bool:
        return len(candidate) <= max_chars and (fits is None or fits(candidate))

    if ok(text):
        return [text]
    units: list[tuple[str, str]] = []  # (separator before it, text): sentences of one paragraph stay one line
    for paragraph in text.split("\n\n"):
        if ok(paragraph):
            units.append(("\n\n", paragraph))
            continue
        for number, sentence in enumerate(s for sentence in split_sentences(paragraph)
                                          for s in _hard_cut(sentence, ok)):
            units.append(("\n\n" if number == 0 else "" if _CJK_CHAR.search(sentence[:1]) else " ", sentence))
    pieces: list[str] = []
    current = ""
    for separator, unit in units:
        candidate = f"{current}{separator}{unit}" if current else unit
        if ok(candidate):
            current = candidate
            continue
        pieces.append(current)
        tail = _overlap_tail(current, overlap_chars)
        current = f"{tail} {unit}" if tail and ok(f"{tail} {unit}") else unit
    if current:
        pieces.append(current)
    return pieces


def _hard_cut(sentence: str, ok: Callable[[str], bool]) -> list[str]:
    """Cut a sentence that fits nowhere into the longest prefixes that do (binary search on length)."""
    pieces: list[str] = []
    rest = sentence
    while rest and not ok(rest):
        low, high = 1, len(rest)
        while low < high:
            middle = (low + high + 1) // 2
            if ok(rest[:middle]):
                low = middle
            else:
                high = middle - 1
        space = rest.rfind(" ", 0, low + 1)
        low = space if space > low // 2 else low  # prefer a word boundary (Latin text) to a cut inside a word
        pieces.append(rest[:low].rstrip())
        rest = rest[low:].lstrip()
    if rest:
        pieces.append(rest)
    return pieces


def _overlap_tail(text: str, overlap_chars: int) -> str:
    """The last whole sentences of `text` that fit in `overlap_chars`."""
    if overlap_chars <= 0:
        return ""
    tail: list[str] = []
    for sentence in reversed(split_sentences(text)):
        if sum(len(s) for s in tail) + len(sentence) > overlap_chars:
            break
        tail.insert(0, sentence)
    return " ".join(tail)


def split_rows(table: str, max_chars: int, *, fits: Callable[[str], bool] | None = None) -> list[str]:
    """Split a Markdown table by rows, repeating the caption, header and separator rows in each piece."""
    def ok(candidate: str) -> bool:
        return len(candidate) <= max_chars and (fits is None or fits(candidate))

    lines = table.split("\n")
    if len(lines) < 4 or ok(table):
        return [table]
    start = next((i for i, line in enumerate(lines) if line.startswith("|")), 0)  # a caption comes first
    separator = start + 1 < len(lines) and set(lines[start + 1].replace("|", "").strip()) <= set("-: ")
    header = lines[:start + 2] if separator else lines[:start + 1]
    body = lines[len(header):]
    pieces, current = [], list(header)
    for row in body:
        if not ok("\n".join(current + [row])) and len(current) > len(header):
            pieces.append("\n".join(current))
            current = list(header)
        current.append(row)
    pieces.append("\n".join(current))
    return pieces


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def to_chunks(pieces: list[Piece], *, kb: str, namespace: str, doc_id: str,
              source: chunk_pb2.SourceInfo, metadata: dict[str, str]) -> list[chunk_pb2.KnowledgeChunk]:
    """Assign stable ids: the same (kb, namespace, doc, heading path, part, text) always gets the same id."""
    chunks: list[chunk_pb2.KnowledgeChunk] = []
    seen: dict[str, int] = {}
    section_ids: dict[tuple[str, ...], str] = {}
    for position, piece in enumerate(pieces):
        body_hash = content_hash(piece.text)
        key = "\x1f".join([kb, namespace, doc_id, *piece.heading_path, str(piece.part_index), body_hash])
        occurrence = seen.get(key, 0)
        seen[key] = occurrence + 1
        chunk_id = hashlib.sha256(f"{key}\x1f{occurrence}".encode()).hexdigest()[:32]
        content = with_prefix(heading_prefix(piece.heading_path), piece.text)
        group_id = f"{doc_id}:{piece.group_key}" if piece.group_key else ""
        parent_id = section_ids.get(tuple(piece.heading_path[:-1]), "") if piece.heading_path else ""
        chunk = chunk_pb2.KnowledgeChunk(
            chunk_id=chunk_id, doc_id=doc_id, kb=kb, namespace=namespace, raw_content=piece.text, content=content,
            heading_path=piece.heading_path, block_type=piece.block_type, content_hash=content_hash(content),
            part_index=piece.part_index, part_count=piece.part_count, group_id=group_id, parent_id=parent_id,
            source=source, position=position, metadata=metadata,
        )
        chunk.source.page = piece.page
        section_ids.setdefault(tuple(piece.heading_path), chunk_id)
        chunks.append(chunk)
    return chunks
