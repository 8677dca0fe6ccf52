"""Blocks -> KnowledgeChunks: structure-aware (follow the heading tree) or fixed windows.

Structure chunker: one chunk per section with its heading path; a subsection
shorter than `min_section_chars` merges into its parent; text before the first
heading is an orphan block; tables are chunks of their own under their heading.
Any chunk longer than `max_chars` is split at paragraph, then sentence
boundaries with a small overlap, and every piece records part i of n and a
shared group id so retrieval can restore its siblings.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from services.parser.formats import Block
from shared.config import ChunkerConfig
from shared.contracts import chunk_pb2
from shared.text import split_sentences

BT = chunk_pb2


@dataclass
class Section:
    heading_path: list[str]
    level: int
    block_type: int
    parts: list[str] = field(default_factory=list)
    tables: list[str] = field(default_factory=list)

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
                              block_type=BT.BLOCK_TYPE_SECTION if depth <= 2 else BT.BLOCK_TYPE_SUBSECTION)
        elif block.kind == "table":
            current.tables.append(block.text)
        else:
            current.parts.append(block.text)
    sections.append(current)
    return sections


def merge_short_subsections(sections: list[Section], min_chars: int) -> list[Section]:
    """Fold a short subsection (and its tables) into the nearest preceding ancestor section."""
    kept: list[Section] = []
    for section in sections:
        parent = next((s for s in reversed(kept)
                       if len(s.heading_path) < len(section.heading_path)
                       and section.heading_path[:len(s.heading_path)] == s.heading_path), None)
        if parent is not None and section.level >= 3 and len(section.text) < min_chars:
            title = section.heading_path[-1]
            if section.text:
                parent.parts.append(f"{title}\n{section.text}")
            parent.tables.extend(section.tables)
            parent.block_type = BT.BLOCK_TYPE_MERGED
            continue
        kept.append(section)
    return kept


def structure_pieces(blocks: list[Block], config: ChunkerConfig) -> list[Piece]:
    pieces: list[Piece] = []
    for section in merge_short_subsections(sections_from_blocks(blocks), config.min_section_chars):
        if section.text:
            pieces.extend(_fit(section.heading_path, section.block_type, section.text, config))
        for table in section.tables:
            pieces.extend(_fit(section.heading_path, BT.BLOCK_TYPE_TABLE, table, config, table=True))
    return pieces


def fixed_pieces(blocks: list[Block], config: ChunkerConfig) -> list[Piece]:
    text = "\n\n".join(b.text for b in blocks if b.text.strip())
    step = max(1, config.max_chars - config.overlap_chars)
    windows = [text[start:start + config.max_chars] for start in range(0, len(text), step)]
    windows = [w for w in windows if w.strip()]
    return [Piece(heading_path=[], block_type=BT.BLOCK_TYPE_PARAGRAPH, text=w, part_index=i, part_count=len(windows),
                  group_key="fixed") for i, w in enumerate(windows, start=1)]


def _fit(heading_path: list[str], block_type: int, text: str, config: ChunkerConfig, *,
         table: bool = False) -> list[Piece]:
    budget = config.max_chars - sum(len(h) + 3 for h in heading_path)
    budget = max(budget, config.max_chars // 2)
    parts = split_rows(text, budget) if table else split_text(text, budget, config.overlap_chars)
    group_key = hashlib.sha256(text.encode()).hexdigest()[:16] if len(parts) > 1 else ""
    return [Piece(heading_path=list(heading_path), block_type=block_type, text=part, part_index=i,
                  part_count=len(parts), group_key=group_key) for i, part in enumerate(parts, start=1)]


def split_text(text: str, max_chars: int, overlap_chars: int) -> list[str]:
    """Greedy packing of paragraphs, then sentences, then hard cuts; adjacent pieces overlap."""
    if len(text) <= max_chars:
        return [text]
    units: list[str] = []
    for paragraph in text.split("\n\n"):
        if len(paragraph) <= max_chars:
            units.append(paragraph)
            continue
        for sentence in split_sentences(paragraph):
            units.extend(sentence[i:i + max_chars] for i in range(0, len(sentence), max_chars))
    pieces: list[str] = []
    current = ""
    for unit in units:
        candidate = f"{current}\n\n{unit}" if current else unit
        if len(candidate) <= max_chars:
            current = candidate
            continue
        pieces.append(current)
        tail = _overlap_tail(current, overlap_chars)
        current = f"{tail} {unit}".strip() if tail and len(tail) + len(unit) < max_chars else unit
    if current:
        pieces.append(current)
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


def split_rows(table: str, max_chars: int) -> list[str]:
    """Split a Markdown table by rows, repeating the header (and separator) row in each piece."""
    lines = table.split("\n")
    if len(table) <= max_chars or len(lines) < 4:
        return [table]
    header = lines[:2] if set(lines[1].replace("|", "").strip()) <= set("-: ") else lines[:1]
    body = lines[len(header):]
    pieces, current = [], list(header)
    for row in body:
        if len("\n".join(current + [row])) > max_chars and len(current) > len(header):
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
        prefix = " > ".join(piece.heading_path)
        content = f"{prefix}\n{piece.text}" if prefix else piece.text
        group_id = f"{doc_id}:{piece.group_key}" if piece.group_key else ""
        parent_id = section_ids.get(tuple(piece.heading_path[:-1]), "") if piece.heading_path else ""
        chunk = chunk_pb2.KnowledgeChunk(
            chunk_id=chunk_id, doc_id=doc_id, kb=kb, namespace=namespace, raw_content=piece.text, content=content,
            heading_path=piece.heading_path, block_type=piece.block_type, content_hash=content_hash(content),
            part_index=piece.part_index, part_count=piece.part_count, group_id=group_id, parent_id=parent_id,
            source=source, position=position, metadata=metadata,
        )
        section_ids.setdefault(tuple(piece.heading_path), chunk_id)
        chunks.append(chunk)
    return chunks
