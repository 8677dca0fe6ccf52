"""Post-retrieval assembly: turn reranked candidates into the context the generator reads.

Steps, in order: hash dedup; MMR-style diversity (a candidate whose lexical
cosine similarity to an already chosen one reaches `mmr_threshold` is skipped);
budget (at most `top_n` hits and `max_context_tokens` tokens); split-part
restoration (a kept part of a split block brings all its siblings, ordered and
labelled "part i of n"); then ordering by document (best document first) and
position inside it, with one header per source document.

Similarity is lexical (cosine of term counts from `shared.text.analyze`, jieba
words for Chinese): it needs no second model in this service, and it is what
near-duplicate passages share. The first hit is always kept even when it alone
exceeds the token budget: an answer needs at least one source.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache

from services.reranker.rerankers import drop
from shared.contracts import chunk_pb2, reranker_pb2
from shared.text import analyze

FetchSiblings = Callable[[list[str], list[str]], list[chunk_pb2.KnowledgeChunk]]
CountTokens = Callable[[str], int]


@dataclass(frozen=True)
class Budget:
    top_n: int = 5
    max_context_tokens: int = 3000
    mmr_threshold: float = 0.85
    restore_parts: bool = True

    def __post_init__(self):
        if self.top_n < 1:
            raise ValueError(f"top_n must be >= 1, got {self.top_n}")
        if self.max_context_tokens < 1:
            raise ValueError(f"max_context_tokens must be >= 1, got {self.max_context_tokens}")
        if not 0 < self.mmr_threshold <= 1:
            raise ValueError(f"mmr_threshold must be in (0, 1], got {self.mmr_threshold}")


@dataclass
class Assembly:
    kept: list[chunk_pb2.Candidate]
    dropped: list[reranker_pb2.DroppedCandidate]
    groups: list[reranker_pb2.SourceGroup]
    facts: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class TermVector:
    """A text's term counts and their Euclidean norm, as MMR compares them."""
    counts: Counter
    norm: float


def lexical_similarity(a: TermVector, b: TermVector) -> float:
    """Cosine of the term counts (exact: the dot product is a sum of integers, in whatever order)."""
    if not a.norm or not b.norm:
        return 0.0
    small, large = (a.counts, b.counts) if len(a.counts) <= len(b.counts) else (b.counts, a.counts)
    dot = sum(count * large[term] for term, count in small.items() if term in large)
    return dot / (a.norm * b.norm)


def assemble(candidates: list[chunk_pb2.Candidate], budget: Budget, *, count_tokens: CountTokens,
             fetch_siblings: FetchSiblings | None = None) -> Assembly:
    """`candidates` best first; returns the context in reading order plus everything dropped and why."""
    dropped: list[reranker_pb2.DroppedCandidate] = []
    unique = _dedup(candidates, dropped)
    diverse = _diversify(unique, budget.mmr_threshold, dropped)
    siblings = _siblings(diverse, fetch_siblings) if budget.restore_parts else {}

    chosen: list[list[chunk_pb2.Candidate]] = []  # one unit per hit: the chunk, or its whole split group
    included: set[str] = set()
    tokens = 0
    for candidate in diverse:
        chunk = candidate.chunk
        if chunk.chunk_id in included:
            continue  # already in the context as a sibling of an earlier hit
        unit = _unit(candidate, siblings)
        cost = sum(count_tokens(_text(c.chunk)) for c in unit if c.chunk.chunk_id not in included)
        if len(chosen) >= budget.top_n:
            dropped.append(drop(candidate, "beyond_top_n"))
        elif chosen and tokens + cost > budget.max_context_tokens:
            dropped.append(drop(candidate, "over_token_budget"))
        else:
            unit = [c for c in unit if c.chunk.chunk_id not in included]
            chosen.append(unit)
            included.update(c.chunk.chunk_id for c in unit)
            tokens += cost
    kept, groups = _in_reading_order(chosen)
    restored = sum(1 for c in kept if c.chunk.metadata.get("restored_part") == "true")
    facts = {"tokens": str(tokens), "hits": str(len(chosen)), "restored_parts": str(restored),
             "similarity": "lexical-cosine"}
    return Assembly(kept=kept, dropped=dropped, groups=groups, facts=facts)


def _dedup(candidates: list[chunk_pb2.Candidate], dropped: list) -> list[chunk_pb2.Candidate]:
    seen: set[str] = set()
    unique = []
    for candidate in candidates:
        chunk = candidate.chunk
        key = chunk.content_hash or chunk.chunk_id
        if key in seen or chunk.chunk_id in seen:
            dropped.append(drop(candidate, "duplicate_content"))
            continue
        seen.update((key, chunk.chunk_id))
        unique.append(candidate)
    return unique


def _diversify(candidates: list[chunk_pb2.Candidate], threshold: float, dropped: list) -> list[chunk_pb2.Candidate]:
    if threshold >= 1:
        return list(candidates)
    kept: list[tuple[chunk_pb2.Candidate, TermVector]] = []
    for candidate in candidates:
        terms = term_vector(candidate.chunk.raw_content or candidate.chunk.content)
        # parts of one split block are complementary, never redundant
        same_group = {c.chunk.chunk_id for c, _ in kept
                      if candidate.chunk.group_id and c.chunk.group_id == candidate.chunk.group_id}
        if any(lexical_similarity(terms, other) >= threshold for c, other in kept
               if c.chunk.chunk_id not in same_group):
            dropped.append(drop(candidate, "too_similar"))
            continue
        kept.append((candidate, terms))
    return [c for c, _ in kept]


@lru_cache(maxsize=2048)
def term_vector(text: str) -> TermVector:
    """The term counts a chunk is compared by, kept for a knowledge base's most retrieved chunks (jieba's
    reading of a Chinese chunk costs more than the rest of the assembly). Shared: callers only read them."""
    counts = Counter(analyze(text))
    return TermVector(counts, math.sqrt(sum(v * v for v in counts.values())))


def _siblings(candidates: list[chunk_pb2.Candidate],
              fetch: FetchSiblings | None) -> dict[str, list[chunk_pb2.KnowledgeChunk]]:
    split = [c.chunk for c in candidates if c.chunk.part_count > 1 and c.chunk.group_id]
    if not split or fetch is None:
        return {}
    namespaces = sorted({c.namespace for c in split})
    by_group: dict[str, list[chunk_pb2.KnowledgeChunk]] = {}
    for chunk in fetch(namespaces, list(dict.fromkeys(c.group_id for c in split))):
        by_group.setdefault(chunk.group_id, []).append(chunk)
    return {g: sorted(parts, key=lambda c: (c.part_index, c.position)) for g, parts in by_group.items()}


def _unit(candidate: chunk_pb2.Candidate, siblings: dict[str, list[chunk_pb2.KnowledgeChunk]]):
    chunk = candidate.chunk
    parts = siblings.get(chunk.group_id) if chunk.part_count > 1 else None
    if not parts:
        return [_labelled(candidate)]
    unit = []
    for part in parts:
        if part.chunk_id == chunk.chunk_id:
            unit.append(_labelled(candidate))
            continue
        restored = chunk_pb2.Candidate(chunk=part, score=candidate.score, route=candidate.route,
                                       rerank_score=candidate.rerank_score)
        restored.chunk.metadata["restored_part"] = "true"
        unit.append(_labelled(restored))
    return unit


def _labelled(candidate: chunk_pb2.Candidate) -> chunk_pb2.Candidate:
    copy = chunk_pb2.Candidate()
    copy.CopyFrom(candidate)
    chunk = copy.chunk
    if chunk.part_count > 1:
        chunk.metadata["part"] = f"part {chunk.part_index} of {chunk.part_count}"
    chunk.metadata["source_header"] = source_header(chunk)
    return copy


def source_header(chunk: chunk_pb2.KnowledgeChunk) -> str:
    name = chunk.source.title or chunk.source.uri.rsplit("/", 1)[-1] or chunk.doc_id
    return f"{name} ({chunk.source.uri})" if chunk.source.title and chunk.source.uri else name


def _in_reading_order(chosen: list[list[chunk_pb2.Candidate]]):
    """Documents in order of their best hit; chunks inside a document by position."""
    doc_rank: dict[str, int] = {}
    for rank, unit in enumerate(chosen):
        doc_rank.setdefault(unit[0].chunk.doc_id, rank)
    flat = [c for unit in chosen for c in unit]
    flat.sort(key=lambda c: (doc_rank[c.chunk.doc_id], c.chunk.position, c.chunk.part_index))
    groups: list[reranker_pb2.SourceGroup] = []
    for candidate in flat:
        chunk = candidate.chunk
        if not groups or groups[-1].doc_id != chunk.doc_id:
            groups.append(reranker_pb2.SourceGroup(doc_id=chunk.doc_id, header=chunk.metadata["source_header"]))
        groups[-1].chunk_ids.append(chunk.chunk_id)
    return flat, groups


def _text(chunk: chunk_pb2.KnowledgeChunk) -> str:
    return chunk.raw_content or chunk.content
