"""How far each route can be trusted for one query, measured rather than assumed per language.

Signals (all reported in the retrieve response and so in every trace):

- dense.query_unknown    share of the query's tokens the embedder's own tokenizer maps to its
                         unknown token (all-MiniLM-L6-v2 on Chinese: about half)
- dense.hits_unknown     the same share over the text of the top hits of both routes: the part
                         of the knowledge base this query reaches, as the embedder sees it
- bm25.term_coverage     share of the query's keyword terms present in the BM25 route's top hits
                         (0 when the keyword engine found nothing: it cannot read this query)
- bm25.top_z, dense.top_z  how far the top score stands above the rest of its list (z-score):
                         the shape of the score distribution
- agreement              share of the two routes' top-10 lists they have in common

Competence is in [0, 1] and multiplies the KB's route weight. Dense (and sparse: the same
model's tokenizer gives its lexical weights) competence falls
linearly with the unknown share and is 0 at `dense_max_unknown_share`: a model that cannot
read the query or the text it would be compared with gets no weight. BM25 competence rises
linearly with term coverage and is 1 from `bm25_min_term_coverage` on.

What a hit contributes (its unknown-token share, its stemmed keyword terms) depends on its text
alone, and tokenizing and stemming ten to twenty hits cost more than both routes' searches
together. The unknown share is measured at ingest and stored with the chunk (shared/hit_reading.py);
for chunks stored without it, and for the terms, `HitReads` keeps them per text in a bounded LRU, so a
chunk is read once however many queries reach it. `measure` gives the same signals either way.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from shared.config import RetrieverConfig
from shared.contracts import chunk_pb2
from shared.embedders import Embedder
from shared.hit_reading import HIT_CHARS, stored_unknown_share
from shared.sentence_vectors import embedder_key
from shared.stores.elasticsearch import porter
from shared.text import Analyzer, analyze, query_terms

TOP_HITS = 10  # hits per route whose text is checked for unknown tokens (the depth of the other signals)
TERM_HITS = 10  # BM25 hits searched for the query's terms
AGREEMENT_DEPTH = 10
HIT_READS = 10_000  # texts whose reads `HitReads` keeps (a SciFact abstract's distinct terms: ~1.5 kB)


@dataclass
class Competence:
    signals: dict[str, float]
    competence: dict[str, float]


def top_z(candidates: Sequence[chunk_pb2.Candidate], depth: int = AGREEMENT_DEPTH) -> float:
    scores = np.array([c.score for c in candidates[:depth]], dtype=np.float64)
    if scores.size < 2 or scores.std() == 0:
        return 0.0
    return float((scores[0] - scores.mean()) / scores.std())


def hit_terms(text: str, analyzer: Analyzer) -> tuple[str, ...]:
    """A hit's distinct keyword terms after the keyword engines' own Porter stemming (a tuple: a third
    of a set's memory in the cache)."""
    return tuple(dict.fromkeys(porter(dict.fromkeys(analyze(text, analyzer)))))  # each distinct word stemmed once


class HitReads:
    """Bounded LRU of what `measure` reads from a hit's text: unknown-token share and stemmed terms.

    Keyed by a digest of the text itself (and the tokenizer's model or the analyzer), never by chunk
    id alone, so an edited chunk cannot be answered from its old text. Thread-safe; a miss is
    computed outside the lock (two threads may compute the same text once each, with one result).
    """

    def __init__(self, max_entries: int = HIT_READS):
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        self.max_entries = max_entries
        self.hits = self.misses = 0
        self._entries: OrderedDict[tuple, object] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def unknown_share(self, embedder: Embedder, text: str) -> float:
        return self._get(("unknown", getattr(embedder, "model_id", id(embedder)), _digest(text)),
                         lambda: embedder.unknown_token_share(text))

    def terms(self, text: str, analyzer: Analyzer) -> tuple[str, ...]:
        return self._get(("terms", analyzer, _digest(text)), lambda: hit_terms(text, analyzer))

    def _get(self, key: tuple, compute):
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                self.hits += 1
                return self._entries[key]
            self.misses += 1
        value = compute()
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
        return value


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def term_coverage(query: str, hits: Sequence[chunk_pb2.Candidate], analyzer: Analyzer,
                  reads: HitReads | None = None) -> float:
    """Compared after the keyword engines' own Porter stemming, so "charging" matches "charges".

    The hits are read best first until every term is found: the top few hits often hold them all."""
    terms = set(porter(query_terms(query, analyzer)))
    if not terms or not hits:
        return 0.0
    seen: set[str] = set()
    for hit in hits[:TERM_HITS]:
        text = hit.chunk.content
        seen.update(reads.terms(text, analyzer) if reads is not None else hit_terms(text, analyzer))
        if terms <= seen:
            return 1.0
    return len(terms & seen) / len(terms)


def agreement(first: Sequence[chunk_pb2.Candidate], second: Sequence[chunk_pb2.Candidate]) -> float:
    if not first or not second:
        return 0.0
    top_first = {c.chunk.chunk_id for c in first[:AGREEMENT_DEPTH]}
    top_second = {c.chunk.chunk_id for c in second[:AGREEMENT_DEPTH]}
    return len(top_first & top_second) / min(AGREEMENT_DEPTH, len(top_first), len(top_second))


def hits_unknown_share(embedder: Embedder, lists: Sequence[Sequence[chunk_pb2.Candidate]],
                       reads: HitReads | None = None) -> float:
    """Mean unknown share over the distinct texts of each list's top hits: stored with the chunk when the
    index read it with this embedder, else read now."""
    key = embedder_key(embedder)
    shares: dict[str, float | None] = {}
    for hits in lists:
        for candidate in hits[:TOP_HITS]:
            text = candidate.chunk.content[:HIT_CHARS]
            if shares.get(text) is None:
                shares[text] = stored_unknown_share(candidate.chunk, key)
    if not shares:
        return 0.0
    share = embedder.unknown_token_share if reads is None else (lambda text: reads.unknown_share(embedder, text))
    return float(np.mean([share(text) if stored is None else stored for text, stored in shares.items()]))


def measure(query: str, bm25: Sequence[chunk_pb2.Candidate] | None, dense: Sequence[chunk_pb2.Candidate] | None,
            embedder: Embedder, analyzer: Analyzer, config: RetrieverConfig,
            sparse: Sequence[chunk_pb2.Candidate] | None = None, reads: HitReads | None = None) -> Competence:
    """Signals and competence of each route that answered (a failed or absent route is None).

    `reads`: where the hits' unknown shares and terms are remembered between queries (None: read
    every hit afresh; the signals are the same)."""
    signals: dict[str, float] = {}
    competence: dict[str, float] = {}
    if bm25 is not None:
        signals["bm25.term_coverage"] = term_coverage(query, bm25, analyzer, reads)
        signals["bm25.top_z"] = top_z(bm25)
        competence["bm25"] = min(1.0, signals["bm25.term_coverage"] / config.bm25_min_term_coverage)
    if dense is not None or sparse is not None:
        signals["dense.query_unknown"] = embedder.unknown_token_share(query)
        signals["dense.hits_unknown"] = hits_unknown_share(embedder, [bm25 or [], dense or [], sparse or []], reads)
        unknown = max(signals["dense.query_unknown"], signals["dense.hits_unknown"])
        readable = max(0.0, 1.0 - unknown / config.dense_max_unknown_share)
        if dense is not None:
            signals["dense.top_z"] = top_z(dense)
            competence["dense"] = readable
        if sparse is not None:
            signals["sparse.top_z"] = top_z(sparse)
            competence["sparse"] = readable
    if bm25 is not None and dense is not None:
        signals["agreement"] = agreement(bm25, dense)
    return Competence(signals={k: round(v, 4) for k, v in signals.items()},
                      competence={k: round(v, 4) for k, v in competence.items()})


def effective_weights(base: dict[str, float], competence: dict[str, float]) -> dict[str, float]:
    """Base weight x competence per route; when that leaves no weight at all, every route counts the same
    (something must rank the candidates, and the signals in the response show why)."""
    weights = {route: base[route] * competence.get(route, 1.0) for route in base}
    return weights if any(weights.values()) else {route: 1.0 for route in base}
