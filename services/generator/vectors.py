"""Where one answer's vectors come from: carried with the request when they fit, computed otherwise.

Evidence selection needs the question's vector and those of the source sentences that share a term
with it; the claim check needs each answer sentence's and each cited chunk's. The retriever hands
on its query vector and, on each source chunk, the vectors the indexer stored
(`shared/sentence_vectors.py`). A carried vector is used only when the embedder that made it is the
KB's (`embedder_key`) and, for sentences, when it was made by this sentence reading
(`SPLITTER_VERSION`) for as many sentences as the chunk has now; otherwise the vector is computed,
and what was computed, carried and how long embedding took are counted for the step report.
Sentence vectors are used at their stored precision whichever way they came (`as_stored`).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np

from services.generator.evidence import SentenceReading, read_chunk
from shared.contracts import chunk_pb2
from shared.sentence_vectors import as_stored, unpack_sentences, unpack_vector
from shared.sentences import SPLITTER_VERSION

Embed = Callable[[list[str]], np.ndarray]


class AnswerVectors:
    """The vectors of one answer. `key` is the KB embedder's `embedder_key` ('' = use nothing carried)."""

    def __init__(self, embed: Embed, sources: Sequence[chunk_pb2.Candidate], *, key: str = "", dimension: int = 0,
                 query_vector: chunk_pb2.QueryVector | None = None):
        self._embed = embed
        self._key = key
        self._dimension = dimension
        self._query_vector = query_vector
        self._sources = [c.chunk for c in sources]
        self._carried_sentences: dict[int, tuple | None] = {}  # source number -> its sentence vectors
        self.carried: Counter[str] = Counter()  # question, sentences, claims, chunks
        self.computed: Counter[str] = Counter()
        self.embed_ms = 0.0

    def report(self) -> dict[str, str]:
        """What was carried and computed, for the generator's step report."""
        kinds = ("question", "sentences", "claims", "chunks")
        return {**{f"carried_{k}": str(self.carried[k]) for k in kinds},
                **{f"computed_{k}": str(self.computed[k]) for k in kinds}}

    def evidence(self, query: str, wanted: Sequence[tuple[int, SentenceReading]]) -> tuple[np.ndarray, list[np.ndarray]]:
        """(question vector, the vector of each (source number, sentence)); whatever is not carried is
        embedded in one call."""
        question = self._carried_question(query)
        found: list[np.ndarray | None] = [self._carried_sentence(number, sentence) for number, sentence in wanted]
        missing = [i for i, vector in enumerate(found) if vector is None]
        texts = ([] if question is not None else [query]) + [wanted[i][1].text for i in missing]
        if question is None:
            self.computed["question"] += 1
        else:
            self.carried["question"] += 1
        if texts:
            vectors = self._compute(texts)
            if question is None:
                question, vectors = vectors[0], vectors[1:]
            for i, vector in zip(missing, as_stored(vectors)):
                found[i] = vector
        self.computed["sentences"] += len(missing)
        self.carried["sentences"] += len(wanted) - len(missing)
        return question, found

    def claim(self, claim: str, chunks: Sequence[chunk_pb2.KnowledgeChunk]) -> tuple[np.ndarray, list[np.ndarray]]:
        """(the claim's vector, each cited chunk's vector). A claim quoting a sentence of a cited chunk (the
        extractive answer does) takes that sentence's carried vector."""
        vector = self._quoted(claim, chunks)
        chunk_vectors: list[np.ndarray | None] = [self._carried_chunk(c) for c in chunks]
        missing = [i for i, v in enumerate(chunk_vectors) if v is None]
        texts = ([claim] if vector is None else []) + [chunks[i].content for i in missing]
        computed = self._compute(texts) if texts else np.zeros((0, 0), dtype=np.float32)
        if vector is None:
            vector, computed = as_stored(computed[:1])[0], computed[1:]
            self.computed["claims"] += 1
        else:
            self.carried["claims"] += 1
        for i, found in zip(missing, computed):
            chunk_vectors[i] = found
        self.computed["chunks"] += len(missing)
        self.carried["chunks"] += len(chunks) - len(missing)
        return vector, chunk_vectors

    def _compute(self, texts: list[str]) -> np.ndarray:
        started = time.perf_counter()
        try:
            return self._embed(texts)
        finally:
            self.embed_ms += (time.perf_counter() - started) * 1000

    def _carried_question(self, query: str) -> np.ndarray | None:
        carried = self._query_vector
        if carried is None or not self._key or carried.embedder != self._key or carried.text != query:
            return None
        return unpack_vector(carried.vector, self._dimension)

    def _carried_chunk(self, chunk: chunk_pb2.KnowledgeChunk) -> np.ndarray | None:
        if not self._key or not chunk.HasField("vectors") or chunk.vectors.embedder != self._key:
            return None
        return unpack_vector(chunk.vectors.chunk, self._dimension)

    def _carried_sentence(self, number: int, sentence: SentenceReading) -> np.ndarray | None:
        if number not in self._carried_sentences:
            self._carried_sentences[number] = self._sentence_vectors(self._sources[number - 1])
        found = self._carried_sentences[number]
        return None if found is None else found[1][sentence.order]

    def _sentence_vectors(self, chunk: chunk_pb2.KnowledgeChunk) -> tuple[np.ndarray, dict[int, np.ndarray]] | None:
        """The chunk's carried sentence vectors, one per scored sentence of its reading, also by the sentence's
        `order`; None when they are not there or do not fit."""
        if not self._key or not chunk.HasField("vectors"):
            return None
        carried, sentences = chunk.vectors, read_chunk(chunk).sentences
        if carried.embedder != self._key or carried.splitter != SPLITTER_VERSION \
                or carried.sentence_count != len(sentences):
            return None
        vectors = unpack_sentences(carried.sentences, carried.sentence_count, self._dimension)
        if vectors is None:
            return None
        return vectors, {sentence.order: vector for sentence, vector in zip(sentences, vectors)}

    def _quoted(self, claim: str, chunks: Sequence[chunk_pb2.KnowledgeChunk]) -> np.ndarray | None:
        for chunk in chunks:
            found = self._sentence_vectors(chunk)
            if found is not None:
                for sentence, vector in zip(read_chunk(chunk).sentences, found[0]):
                    if sentence.text == claim:
                        return vector
        return None
