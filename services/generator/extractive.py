"""Extractive generator: the answer is the source sentences that best match the question.

Runs offline with no model. Each picked sentence keeps the [n] of the source it
came from, so every claim is literally supported by its cited chunk. When no
sentence shares a content word with the question, it refuses instead of
guessing.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

from services.generator.evidence import stem as _stem
from services.generator.evidence import terms as _terms
from shared import registry
from shared.config import GeneratorConfig
from shared.contracts import chunk_pb2
from shared.text import detect_language, query_terms, split_sentences

_TABLE_RULE = re.compile(r"^\|?[\s:|-]+\|?$")
FOREIGN_LANGUAGE_FACTOR = 0.4


@dataclass
class Draft:
    answer: str
    refused: bool
    generator: str


def source_sentences(chunk: chunk_pb2.KnowledgeChunk) -> list[str]:
    """Sentences of a chunk; table rows and list items count as sentences of their own."""
    sentences = []
    for line in chunk.raw_content.split("\n"):
        line = line.strip()
        if not line or _TABLE_RULE.match(line):
            continue
        sentences.extend(split_sentences(line))
    return sentences


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

    def stream(self, query: str, sources: list[chunk_pb2.Candidate], *, kb: str = "",
               intent: str = "concept") -> Iterator[str]:
        """The answer sentence by sentence (it is computed at once; streaming keeps one interface)."""
        draft = self.generate(query, sources)
        pieces = re.split(r"(?<=[.!?。！？])", draft.answer)
        yield from (piece for piece in pieces if piece)

    def is_refusal(self, answer: str) -> bool:
        return answer.strip() in (self._config.refusal_en, self._config.refusal_zh)

    def generate(self, query: str, sources: list[chunk_pb2.Candidate], *, kb: str = "",
                 intent: str = "concept") -> Draft:
        wanted = {_stem(t) for t in query_terms(query)}
        language = detect_language(query)
        refusal = self._config.refusal_zh if language == "zh" else self._config.refusal_en
        if not sources or not wanted:
            return Draft(refusal, True, self.name)
        scored: list[tuple[float, int, int, str]] = []
        per_sentence_terms: list[tuple[int, int, str, set[str], set[str]]] = []
        document_frequency: Counter[str] = Counter()
        for number, candidate in enumerate(sources, start=1):
            heading_terms = _terms(" ".join(candidate.chunk.heading_path))
            for order, sentence in enumerate(source_sentences(candidate.chunk)):
                terms = _terms(sentence)
                document_frequency.update(terms & wanted)
                per_sentence_terms.append((number, order, sentence, terms, heading_terms))
        total = max(1, len(per_sentence_terms))
        for number, order, sentence, terms, heading_terms in per_sentence_terms:
            idf = lambda t: math.log(1 + total / (1 + document_frequency[t]))  # noqa: E731
            overlap = sum(idf(t) for t in terms & wanted)
            if overlap <= 0 or sentence.rstrip().endswith(("?", "？")):  # a question is not an answer
                continue
            score = overlap + 0.3 * sum(idf(t) for t in (heading_terms & wanted) - terms) + 0.5 / number
            if detect_language(sentence) not in (language, "und"):
                score *= FOREIGN_LANGUAGE_FACTOR  # answer in the asker's language when the sources allow
            scored.append((score, number, order, sentence))
        if not scored:
            return Draft(refusal, True, self.name)
        best = sorted(scored, key=lambda s: (-s[0], s[1], s[2]))
        picked: list[tuple[int, int, str]] = []
        seen_text: set[str] = set()
        top_score = best[0][0]
        for score, number, order, sentence in best:
            if len(picked) >= self._config.max_sentences or score < 0.5 * top_score:
                break
            key = sentence.lower()
            if key in seen_text:
                continue
            seen_text.add(key)
            picked.append((number, order, sentence))
        # present in source order so the answer reads like the documents
        picked.sort(key=lambda p: (p[0], p[1]))
        separator = "" if language == "zh" else " "
        answer = separator.join(cite(sentence, number, language) for number, _, sentence in picked)
        return Draft(answer, False, self.name)


@registry.register("generator", "extractive")
def _extractive(config: GeneratorConfig) -> ExtractiveGenerator:
    return ExtractiveGenerator(config)
