"""Extractive reader: the answer is the evidence span, the question's best contiguous source sentences.

Runs offline with no model. `evidence.select_evidence` picks the span (dense +
lexical sentence scores inside the best passage, no debris, no instructions aimed
at the assistant); each sentence keeps the [n] of the source it came from, so
every claim is literally supported by its cited chunk. Without a span it refuses
instead of guessing.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from services.generator.evidence import Evidence, select_evidence
from shared.config import GeneratorConfig
from shared.contracts import chunk_pb2
from shared.text import detect_language


@dataclass
class Draft:
    answer: str
    refused: bool
    generator: str


def cite(sentence: str, number: int, language: str) -> str:
    """Put the marker inside the sentence, before its closing punctuation: 'It takes 45 min [1].'"""
    body = sentence.rstrip()
    end = body[-1] if body and body[-1] in ".!?;。！？；" else ""
    body = body[:-1].rstrip() if end else body
    space = "" if language == "zh" else " "
    return f"{body}{space}[{number}]{end}"


class ExtractiveGenerator:
    name = "extractive"

    def __init__(self, config: GeneratorConfig):
        self._config = config

    def stream(self, query: str, sources: list[chunk_pb2.Candidate], *, kb: str = "", intent: str = "concept",
               evidence: Evidence | None = None) -> Iterator[str]:
        """The answer sentence by sentence (it is computed at once; streaming keeps one interface)."""
        draft = self.generate(query, sources, evidence=evidence)
        pieces = re.split(r"(?<=[.!?。！？])", draft.answer)
        yield from (piece for piece in pieces if piece)

    def is_refusal(self, answer: str) -> bool:
        return answer.strip() in (self._config.refusal_en, self._config.refusal_zh)

    def generate(self, query: str, sources: list[chunk_pb2.Candidate], *, kb: str = "", intent: str = "concept",
                 evidence: Evidence | None = None) -> Draft:
        language = detect_language(query)
        refusal = self._config.refusal_zh if language == "zh" else self._config.refusal_en
        if evidence is None:
            evidence = select_evidence(query, sources, max_sentences=self._config.max_sentences)
        if not evidence.span:
            return Draft(refusal, True, self.name)
        separator = "" if language == "zh" else " "
        answer = separator.join(cite(s.text, s.number, language) for s in evidence.span)
        return Draft(answer, False, self.name)
