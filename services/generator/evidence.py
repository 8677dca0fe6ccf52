"""Evidence strength: how much of the question the best source covers, and the refusal decision.

The score is the share of the question's content terms (stopwords removed,
lightly stemmed; jieba words for Chinese) that appear in a source's text or
heading path, maximised over the sources: 0 = no source mentions anything the
question asks about, 1 = one source mentions all of it. Below
`GeneratorConfig.min_evidence_score` the generator answers with the configured
"no relevant knowledge" text and never calls the model. The default threshold
is calibrated by `scripts/bench/refusal.py` (bundled samples + SciFact).
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.contracts import chunk_pb2
from shared.text import analyze, query_terms


def stem(token: str) -> str:
    """A light English stemmer, enough to match 'charging' with 'charge' inside one answer."""
    for suffix in ("ing", "ed", "es", "s"):
        if len(token) > len(suffix) + 3 and token.endswith(suffix):
            return token[: -len(suffix)]
    return token


def terms(text: str) -> set[str]:
    return {stem(t) for t in analyze(text)}


def evidence_score(query: str, sources: list[chunk_pb2.Candidate]) -> float:
    wanted = {stem(t) for t in query_terms(query)}
    if not wanted:
        return 0.0
    best = 0.0
    for candidate in sources:
        chunk = candidate.chunk
        present = terms(" ".join(chunk.heading_path) + "\n" + (chunk.raw_content or chunk.content))
        best = max(best, len(wanted & present) / len(wanted))
    return round(best, 4)


@dataclass(frozen=True)
class EvidenceVerdict:
    score: float
    refuse: bool
    reason: str


def judge_evidence(query: str, sources: list[chunk_pb2.Candidate], threshold: float) -> EvidenceVerdict:
    if not sources:
        return EvidenceVerdict(0.0, True, "no sources survived retrieval and reranking")
    score = evidence_score(query, sources)
    if score < threshold:
        return EvidenceVerdict(score, True,
                               f"best evidence {score:.2f} is below the threshold {threshold:.2f}: "
                               "no source covers enough of the question")
    return EvidenceVerdict(score, False, "")
