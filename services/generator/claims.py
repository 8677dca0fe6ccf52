"""Claim-level citation check: does the cited chunk actually support the sentence that cites it?

Runs after marker validation. Each sentence with markers is scored against
every chunk it cites and keeps its best score:

- `lexical+embedding`: the mean of lexical support (share of the sentence's
  content terms found in the chunk) and the embedding cosine of sentence and
  chunk (the chunk's own vector, of its `content`, as the index holds it). The
  embedding half is used only when the embedder declares the sentence's
  language (MiniLM is blind on Chinese); otherwise lexical alone. The vectors
  come with the chunks when the indexer stored them (`vectors.AnswerVectors`).
- `lexical`: lexical support alone.
- `cross-encoder`: the reranker's cross-encoder score of (sentence, chunk).
- `nli` / `llm`: a `verifiers.Verifier` judges entailment (a local NLI model, an LLM judge).

Support is not enough: a sentence can share every word with its source and still
say the opposite. With the first three methods the offline contradiction rules
(`verifiers.ContradictionRules`: negation flips, number/unit mismatches, swapped
entities, antonyms) set the support of a contradicted claim to 0. When the
question is given, a claim that shares nothing with it is not "supported"
either: it does not answer what was asked.

Numbers are facts a paraphrase cannot change: the support is multiplied by the
share of the sentence's numbers that also appear in the chunk ("200 km/h"
citing a chunk that never says 200 loses that share).

A sentence below `min_support` is flagged (kept, reported) or dropped (removed
from the answer, reported). Sentences without markers are not claims about a
source and are not checked.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from services.generator.citations import VALID, sentences_with_markers, tidy_spaces
from services.generator.evidence import question_terms, read_chunk, stem, terms
from services.generator.vectors import AnswerVectors
from services.generator.verifiers import ContradictionRules, Verifier
from shared.contracts import chunk_pb2, generator_pb2
from shared.text import detect_language, query_terms

Embed = Callable[[list[str]], np.ndarray]
CrossScore = Callable[[str, list[str]], list[float]]
_CJK = re.compile(r"[\u3400-\u9fff]")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)?")
METHODS = ("lexical+embedding", "lexical", "cross-encoder", "nli", "llm", "off")


@dataclass
class CheckedAnswer:
    text: str
    checks: list[generator_pb2.ClaimCheck]
    issues: list[generator_pb2.CitationIssue]


def lexical_support(sentence: str, chunk_text: str) -> float:
    return _held(_claim_terms(sentence), {stem(t) for t in query_terms(chunk_text)})


def _held(wanted: set[str], present: set[str] | frozenset[str]) -> float:
    return len(wanted & present) / len(wanted) if wanted else 0.0


class ClaimChecker:
    def __init__(self, method: str = "lexical+embedding", *, min_support: float = 0.4, action: str = "flag",
                 embed: Embed | None = None, embed_languages: tuple[str, ...] = ("en",),
                 cross_score: CrossScore | None = None, verifier: Verifier | None = None):
        if method not in METHODS:
            raise ValueError(f"claim_check must be one of {', '.join(METHODS)}, got {method!r}")
        if action not in ("flag", "drop"):
            raise ValueError(f"unsupported_claims must be 'flag' or 'drop', got {action!r}")
        if not 0 <= min_support <= 1:
            raise ValueError(f"min_claim_support must be in [0, 1], got {min_support}")
        if method == "cross-encoder" and cross_score is None:
            raise ValueError("claim_check 'cross-encoder' needs the bge reranker enabled for this knowledge base")
        if method in ("nli", "llm") and verifier is None:
            raise ValueError(f"claim_check {method!r} needs its verifier (generator.nli_model for nli, the "
                             "generator's chat model for llm)")
        self.method = method
        self._min = min_support
        self._action = action
        self._embed = embed if method == "lexical+embedding" else None
        self._languages = embed_languages
        self._cross = cross_score
        self._verifier = verifier
        self._rules = ContradictionRules()

    def check(self, answer: str, sources: list[chunk_pb2.Candidate], query: str = "",
              vectors: AnswerVectors | None = None) -> CheckedAnswer:
        """`vectors`: the answer's carried or computed vectors (the checker's embed computes them without)."""
        if self.method == "off":
            return CheckedAnswer(answer, [], [])
        if self._embed is not None and vectors is None:
            vectors = AnswerVectors(self._embed, sources)
        checks: list[generator_pb2.ClaimCheck] = []
        issues: list[generator_pb2.CitationIssue] = []
        kept_sentences: list[str] = []
        for sentence in sentences_with_markers(answer):
            numbers = [int(n) for n in VALID.findall(sentence) if 1 <= int(n) <= len(sources)]
            if not numbers:
                kept_sentences.append(sentence)
                continue
            claim = tidy_spaces(VALID.sub("", sentence))
            cited = [sources[n - 1].chunk for n in dict.fromkeys(numbers)]
            check = self._score(claim, cited, vectors)
            check.numbers.extend(dict.fromkeys(numbers))
            if query and not check.reason and not _addresses(query, claim, cited):
                check.support, check.reason = 0.0, "does not address the question"
            supported = check.support >= self._min
            check.verdict = "supported" if supported else ("flagged" if self._action == "flag" else "dropped")
            checks.append(check)
            if not supported:
                markers = "".join(f"[{n}]" for n in dict.fromkeys(numbers))
                issues.append(generator_pb2.CitationIssue(
                    marker=markers, reason="unsupported_claim",
                    action="flagged" if self._action == "flag" else "dropped"))
            if supported or self._action == "flag":
                kept_sentences.append(sentence)
        separator = "" if detect_language(answer) == "zh" else " "
        text = answer if not any(c.verdict == "dropped" for c in checks) else _join(kept_sentences, separator)
        return CheckedAnswer(text, checks, issues)

    def _score(self, claim: str, chunks: list[chunk_pb2.KnowledgeChunk],
               vectors: AnswerVectors | None) -> generator_pb2.ClaimCheck:
        texts = [(" ".join(c.heading_path) + "\n" + (c.raw_content or c.content)).strip() for c in chunks]
        wanted = _claim_terms(claim)
        lexical = [_held(wanted, read_chunk(c).content_terms) for c in chunks]
        if self._verifier is not None:
            judgement = self._verifier.judge(claim, texts)
            return generator_pb2.ClaimCheck(
                sentence=claim, support=judgement.support, lexical=round(max(lexical), 4), semantic=-1.0,
                method=self.method, reason="" if judgement.label == "entailment" else judgement.reason)
        semantic = [-1.0] * len(texts)
        method = self.method
        if self.method == "cross-encoder":
            semantic = list(self._cross(claim, texts))
            support = semantic
        elif vectors is not None and self._embed is not None and detect_language(claim) in self._languages:
            claim_vector, chunk_vectors = vectors.claim(claim, chunks)
            semantic = [float(np.dot(claim_vector, v)) for v in chunk_vectors]
            support = [(lx + max(0.0, sm)) / 2 for lx, sm in zip(lexical, semantic)]
        else:
            method = "lexical"
            support = lexical
        numbers = _numbers(claim)
        if numbers:
            support = [s * len(numbers & _numbers(t)) / len(numbers) for s, t in zip(support, texts)]
        best = int(np.argmax(support))
        contradiction = self._rules.find(claim, texts)
        return generator_pb2.ClaimCheck(sentence=claim, support=0.0 if contradiction else round(support[best], 4),
                                        lexical=round(lexical[best], 4), semantic=round(semantic[best], 4),
                                        method=method, reason=contradiction)


def _addresses(query: str, claim: str, chunks: list[chunk_pb2.KnowledgeChunk]) -> bool:
    """Whether a claim (with its cited chunks' headings) shares at least one content term with the question."""
    wanted = question_terms(query)
    held = terms(claim + " " + " ".join(" ".join(c.heading_path) for c in chunks))
    return not wanted or bool(wanted & held)


def _claim_terms(sentence: str) -> set[str]:
    """Content terms of a claim; for Chinese, whole words only (jieba's search mode also emits their parts,
    and single characters such as 用 match almost any chunk)."""
    terms = {stem(t) for t in query_terms(sentence)}
    words = {t for t in terms if not (len(t) == 1 and _CJK.match(t))}
    return {t for t in words if not any(t != other and t in other and _CJK.match(t) for other in words)} or terms


def _numbers(text: str) -> set[str]:
    return set(_NUMBER.findall(text))


def _join(sentences: list[str], separator: str) -> str:
    return re.sub(r"\s{2,}", " ", separator.join(s.strip() for s in sentences)).strip()
