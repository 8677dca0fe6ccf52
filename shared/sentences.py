"""The sentences an answer can quote from a chunk: one reading for ingest and for the generator.

The generator's evidence selection scores each quotable sentence of its sources (no table rules or
infobox-like debris, no sentence addressing the assistant, no question); the indexer embeds exactly
those sentences at ingest (`shared/sentence_vectors.py`), so both sides must split a chunk the same
way. `SPLITTER_VERSION` names this reading in the stored vectors: change it whenever anything here
(or `split_sentences`, `detect_language`, `is_instruction`) changes which sentences a chunk yields,
and vectors stored by the old reading are no longer used (the generator computes them instead).
"""

from __future__ import annotations

import functools
import re

from shared.contracts import chunk_pb2
from shared.sources_guard import is_instruction
from shared.text import detect_language, split_sentences

SPLITTER_VERSION = 1
READINGS = 4096  # chunk texts whose quotable sentences are kept (bounded LRU)

_TABLE_RULE = re.compile(r"^\|?[\s:|-]+\|?$")
_WORD = re.compile(r"[\u3400-\u9fff]|[^\W\d_\u3400-\u9fff]{2,}", re.UNICODE)  # a Chinese character, or a word
_KEY_VALUE = re.compile(r"^[^.:：。]{1,40}[:：]\s*\S")


def is_table_row(line: str) -> bool:
    stripped = line.strip()
    return stripped.startswith("|") or stripped.count("|") >= 2 or stripped.count("\t") >= 2


def is_debris(line: str) -> bool:
    """Table rules and infobox-like fragments (labels, bare values): nothing a reader can quote as an answer."""
    stripped = line.strip()
    if not stripped or _TABLE_RULE.match(stripped):
        return True
    if is_table_row(stripped):
        return sum(1 for cell in re.split(r"[|\t]", stripped) if cell.strip()) < 2
    words = _WORD.findall(stripped)
    if len(words) < 4 and detect_language(stripped) != "zh":
        return True  # a label, a value, a heading: no claim of its own
    if detect_language(stripped) == "zh" and len(stripped) < 8:
        return True
    return bool(_KEY_VALUE.match(stripped)) and len(words) < 8


def is_question(sentence: str) -> bool:
    return sentence.rstrip().endswith(("?", "？"))


def chunk_body(chunk: chunk_pb2.KnowledgeChunk) -> str:
    """The text answers quote: as extracted from the source, without the heading prefix."""
    return chunk.raw_content or chunk.content


@functools.lru_cache(maxsize=READINGS)
def quotable_sentences(text: str) -> tuple[str, ...]:
    """Quotable sentences of a chunk's text, in order: no debris, no instructions aimed at the assistant.
    A table row counts as one sentence."""
    sentences = []
    for line in text.split("\n"):
        pieces = [line.strip()] if is_table_row(line) else split_sentences(line.strip())
        sentences.extend(p for p in pieces if not is_debris(p) and not is_instruction(p))
    return tuple(sentences)


def source_sentences(chunk: chunk_pb2.KnowledgeChunk) -> list[str]:
    """Quotable sentences of a chunk, in order (questions included)."""
    return list(quotable_sentences(chunk_body(chunk)))


def scored_sentences(chunk: chunk_pb2.KnowledgeChunk) -> list[str]:
    """The sentences evidence selection scores, in its order: the quotable ones that are not questions (a
    question is not an answer). These are the sentences whose vectors are stored at ingest."""
    return [s for s in quotable_sentences(chunk_body(chunk)) if not is_question(s)]
