"""Citation markers: normalise, validate against the numbered sources, and resolve to chunks.

Sources are numbered [1]..[n]. Malformed markers that still name a number
(`[ID:3]`, `【3】`, `[source 3]`, `[^3]`) are repaired to `[3]`; markers whose
number is out of range are removed. Every repair and removal is reported.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from shared.contracts import chunk_pb2, generator_pb2
from shared.text import split_sentences

VALID = re.compile(r"\[(\d+)\]")
# Anything that looks like an attempt at a numbered citation.
CANDIDATE = re.compile(
    r"\[\s*(?:id|ID|Id|source|Source|ref|Ref|doc|Doc|\^)?\s*[:：#]?\s*(\d+(?:\s*[,，、]\s*\d+)*)\s*\]"
    r"|【\s*(?:id|ID|source)?\s*[:：#]?\s*(\d+(?:\s*[,，、]\s*\d+)*)\s*】"
)


@dataclass
class ValidatedAnswer:
    text: str
    issues: list[generator_pb2.CitationIssue]
    numbers: list[int]


def validate_markers(answer: str, source_count: int) -> ValidatedAnswer:
    issues: list[generator_pb2.CitationIssue] = []
    numbers: list[int] = []

    def replace(match: re.Match) -> str:
        marker = match.group(0)
        raw_numbers = [int(n) for n in re.split(r"[,，、\s]+", (match.group(1) or match.group(2)).strip()) if n]
        kept = []
        for number in raw_numbers:
            if 1 <= number <= source_count:
                kept.append(number)
            else:
                issues.append(generator_pb2.CitationIssue(marker=marker if len(raw_numbers) == 1 else f"{marker}:{number}",
                                                          reason="out_of_range", action="removed"))
        well_formed = VALID.fullmatch(marker) is not None
        if kept and not well_formed:
            issues.append(generator_pb2.CitationIssue(marker=marker, reason="malformed", action="repaired"))
        numbers.extend(kept)
        return "".join(f"[{n}]" for n in kept)

    text = tidy_spaces(CANDIDATE.sub(replace, answer))
    return ValidatedAnswer(text=text, issues=issues, numbers=sorted(set(numbers)))


def resolve_citations(answer: str, sources: list[chunk_pb2.Candidate]) -> list[generator_pb2.Citation]:
    """One citation per (sentence, marker); the quote is the citing sentence without markers."""
    citations: list[generator_pb2.Citation] = []
    seen: set[tuple[int, str]] = set()
    for sentence in sentences_with_markers(answer):
        quote = tidy_spaces(VALID.sub("", sentence))
        for match in VALID.finditer(sentence):
            number = int(match.group(1))
            if not 1 <= number <= len(sources) or (number, quote) in seen:
                continue
            seen.add((number, quote))
            chunk = sources[number - 1].chunk
            citations.append(generator_pb2.Citation(
                number=number, chunk_id=chunk.chunk_id, doc_id=chunk.doc_id, heading_path=chunk.heading_path,
                source_uri=chunk.source.uri, quote=quote,
            ))
    return citations


def tidy_spaces(text: str) -> str:
    """Drop the spaces a removed marker leaves before punctuation or beside other spaces."""
    text = re.sub(r"[ \t]+([。．.,，;；!！?？])", r"\1", text)
    return re.sub(r"[ \t]{2,}", " ", text).strip()


def sentences_with_markers(answer: str) -> list[str]:
    """Sentences, with markers written after a sentence's full stop ("... AMR-7. [1]") kept on that sentence."""
    sentences: list[str] = []
    for sentence in split_sentences(answer):
        leading = re.match(r"^((?:\s*\[\d+\])+)\s*", sentence)
        if leading and sentences:
            sentences[-1] += " " + leading.group(1).strip()
            sentence = sentence[leading.end():]
        if sentence.strip():
            sentences.append(sentence)
    return sentences
