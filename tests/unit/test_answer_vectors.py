"""Vectors stored at ingest and carried to the generator: used when they fit, computed when they do not,
with the same evidence scores, answers and claim checks either way."""

import numpy as np
import pytest

from services.generator.answer import Answerer
from services.generator.claims import ClaimChecker
from services.generator.evidence import read_chunk
from services.generator.extractive import ExtractiveGenerator
from shared import components
from shared.config import GeneratorConfig, KBConfig
from shared.contracts import chunk_pb2
from shared.sentence_vectors import (as_stored, carried, embed_for_index, embedder_key, pack_sentences,
                                     pack_vector, unpack_sentences, without_vectors)
from shared.sentences import SPLITTER_VERSION, scored_sentences

pytestmark = pytest.mark.unit

QUERY = "How long does the AMR-7 battery take to charge?"
PASSAGES = [
    ("Battery", "The AMR-7 battery takes 90 minutes to charge fully. Charging starts when the robot docks. "
                "Is the dock powered? The dock light turns green when charging ends."),
    ("Speed", "The AMR-7 drives at up to 2 m/s on flat floors. Its battery lasts for eight hours of driving."),
    ("Safety", "Do not charge the battery below 0 °C. The charger stops when the battery is too cold."),
]


class CountingEmbed:
    """The KB's real embedder, one text at a time (so a text's vector does not depend on its batch), counting
    every text it is asked for."""

    def __init__(self, embedder):
        self._embedder = embedder
        self._vectors: dict[str, np.ndarray] = {}
        self.texts: list[str] = []
        self.model_id, self.dimension = embedder.model_id, embedder.dimension

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        self.texts.extend(texts)
        for text in texts:
            if text not in self._vectors:
                self._vectors[text] = self._embedder.embed_documents([text])[0]
        return np.stack([self._vectors[t] for t in texts]) if texts else np.zeros((0, self.dimension), np.float32)

    def __call__(self, texts: list[str]) -> np.ndarray:
        return self.embed_documents(texts)


@pytest.fixture(scope="module")
def embedder():
    return components.embedder_for(KBConfig(name="kb"))


@pytest.fixture
def embed(embedder):
    return CountingEmbed(embedder)


def sources() -> list[chunk_pb2.Candidate]:
    found = []
    for rank, (heading, text) in enumerate(PASSAGES, start=1):
        chunk = chunk_pb2.KnowledgeChunk(chunk_id=f"c{rank}", doc_id="manual", kb="kb", namespace="default",
                                         raw_content=text, content=f"{heading}\n{text}", heading_path=[heading])
        found.append(chunk_pb2.Candidate(chunk=chunk, score=1 / rank, bm25_rank=rank, dense_rank=rank,
                                         bm25_score=10.0 / rank, dense_score=0.8 / rank))
    return found


def indexed(candidates, embed, *, key: str | None = None, extra_sentences: int = 0,
            splitter: int = SPLITTER_VERSION) -> list[chunk_pb2.Candidate]:
    """The candidates as the retriever hands them on: carrying what the indexer stored for them."""
    embedded = embed_for_index(embed, [c.chunk for c in candidates], sentences=True)
    carrying = []
    for candidate, vector, sentences in zip(candidates, embedded.chunks, embedded.sentences):
        if extra_sentences:
            sentences = np.vstack([sentences, sentences[:extra_sentences]])
        copy = chunk_pb2.Candidate()
        copy.CopyFrom(candidate)
        copy.chunk.vectors.CopyFrom(carried(key or embedder_key(embed), vector, pack_sentences(sentences),
                                            len(sentences), splitter))
        carrying.append(copy)
    embed.texts.clear()
    return carrying


def query_vector(embed, text: str = QUERY) -> chunk_pb2.QueryVector:
    vector = embed.embed_documents([text])[0]
    embed.texts.clear()
    return chunk_pb2.QueryVector(embedder=embedder_key(embed), text=text, vector=pack_vector(vector))


def answerer(embed) -> Answerer:
    config = GeneratorConfig()
    checker = ClaimChecker("lexical+embedding", embed=embed, embed_languages=("en",))
    return Answerer("kb", config, ExtractiveGenerator(config), checker, embed=embed, embed_languages=("en",),
                    embedder_key=embedder_key(embed), dimension=embed.dimension)


def outcome(response) -> dict:
    """Everything an answer says, without timings and the vector counts."""
    stages = {s.name: dict(s.metadata) for s in response.stages if s.name not in ("embed",)}
    return {"answer": response.answer, "refused": response.refused, "citations": list(response.citations),
            "claims": list(response.claim_checks), "answerability": response.answerability, "stages": stages}


def vector_counts(response) -> dict[str, int]:
    embed_stage = next(s for s in response.stages if s.name == "embed")
    return {key: int(value) for key, value in embed_stage.metadata.items()}


def test_ingest_stores_one_vector_per_scored_sentence_in_reading_order(embed):
    chunks = [c.chunk for c in sources()]
    embedded = embed_for_index(embed, chunks, sentences=True)
    assert [len(group) for group in embedded.sentences] == [len(read_chunk(c).sentences) for c in chunks]
    assert scored_sentences(chunks[0]) == [s.text for s in read_chunk(chunks[0]).sentences]
    assert "Is the dock powered?" not in scored_sentences(chunks[0])  # a question is not scored
    # one model call for the chunk texts and every sentence
    assert embed.texts == [c.content for c in chunks] + [s for c in chunks for s in scored_sentences(c)]
    for chunk, group in zip(chunks, embedded.sentences):
        np.testing.assert_array_equal(group, embed.embed_documents(scored_sentences(chunk)))
    packed = pack_sentences(embedded.sentences[0])
    np.testing.assert_array_equal(unpack_sentences(packed, len(embedded.sentences[0]), embed.dimension),
                                  as_stored(embedded.sentences[0]))
    assert unpack_sentences(packed, len(embedded.sentences[0]) + 1, embed.dimension) is None


def test_ingest_embeds_each_distinct_text_once(embed):
    shared = "Charging starts when the robot docks."
    texts = [f"The AMR-7 battery takes 90 minutes to charge fully. {shared}",  # parts overlapping by a sentence
             f"{shared} The dock light turns green when charging ends.",
             "Do not charge the battery below 0 °C."]  # one sentence: the chunk is its own sentence
    chunks = [chunk_pb2.KnowledgeChunk(chunk_id=f"c{n}", content=text) for n, text in enumerate(texts)]
    assert shared in scored_sentences(chunks[0]) and shared in scored_sentences(chunks[1])
    assert scored_sentences(chunks[2]) == [texts[2]]
    embedded = embed_for_index(embed, chunks, sentences=True)
    assert sorted(embed.texts) == sorted({*texts, *(s for c in chunks for s in scored_sentences(c))})
    np.testing.assert_array_equal(embedded.chunks, embed.embed_documents(texts))
    for chunk, group in zip(chunks, embedded.sentences):
        np.testing.assert_array_equal(group, embed.embed_documents(scored_sentences(chunk)))


def test_carried_vectors_give_the_answer_computed_ones_give_and_embed_nothing(embed):
    computed = answerer(embed).answer(QUERY, sources())
    asked = list(embed.texts)
    assert QUERY in asked and len(asked) > 3  # the question, sentences and the cited chunk
    carrying = indexed(sources(), embed)
    response = answerer(embed).answer(QUERY, carrying, query_vector=query_vector(embed))
    assert not response.refused and response.claim_checks
    assert embed.texts == []  # the extractive answer quotes stored sentences: nothing left to embed
    assert outcome(response) == outcome(computed)
    counts = vector_counts(response)
    assert counts["carried_question"] == 1 and counts["carried_sentences"] > 0 and counts["carried_claims"] > 0
    assert counts["carried_chunks"] > 0
    assert {k: v for k, v in counts.items() if k.startswith("computed_")} == dict.fromkeys(
        ("computed_question", "computed_sentences", "computed_claims", "computed_chunks"), 0)
    assert vector_counts(computed)["computed_sentences"] == counts["carried_sentences"]


def test_evidence_scores_are_the_same_with_carried_and_computed_vectors(embed):
    from services.generator.evidence import select_evidence
    from services.generator.vectors import AnswerVectors

    def scores(candidates, vector=None):
        vectors = AnswerVectors(embed, candidates, key=embedder_key(embed), dimension=embed.dimension,
                                query_vector=vector)
        evidence = select_evidence(QUERY, candidates, embed_languages=("en",), vectors=vectors)
        return [(s.number, s.order, s.lexical, s.dense, s.score) for s in evidence.sentences], evidence.signals

    computed = scores(sources())
    assert any(dense is not None for _, _, _, dense, _ in computed[0])
    assert scores(indexed(sources(), embed), query_vector(embed)) == computed


@pytest.mark.parametrize("mismatch", ["embedder", "sentence count", "splitter"])
def test_vectors_that_do_not_fit_are_computed_instead(embed, mismatch):
    expected = outcome(answerer(embed).answer(QUERY, sources()))
    embed.texts.clear()
    carrying = indexed(sources(), embed, key="other_model/384" if mismatch == "embedder" else None,
                       extra_sentences=1 if mismatch == "sentence count" else 0,
                       splitter=SPLITTER_VERSION + 1 if mismatch == "splitter" else SPLITTER_VERSION)
    response = answerer(embed).answer(QUERY, carrying, query_vector=query_vector(embed))
    assert outcome(response) == expected
    counts = vector_counts(response)
    assert counts["carried_sentences"] == 0 and counts["computed_sentences"] > 0
    assert embed.texts  # the fallback embedded them
    # the chunk's own vector still serves the claim check unless another model made it
    assert (counts["carried_chunks"] > 0) == (mismatch != "embedder")


def test_a_query_vector_of_another_text_or_model_is_not_used(embed):
    carrying = indexed(sources(), embed)
    other_text = query_vector(embed, "How fast does the AMR-7 drive?")
    other_model = query_vector(embed)
    other_model.embedder = "other_model/384"
    for vector in (other_text, other_model, None):
        response = answerer(embed).answer(QUERY, carrying, query_vector=vector)
        assert vector_counts(response)["computed_question"] == 1
        assert embed.texts == [QUERY]
        embed.texts.clear()


def test_vectors_never_leave_for_api_clients(embed):
    carrying = indexed(sources(), embed)
    stripped = without_vectors(carrying)
    assert not any(c.chunk.HasField("vectors") for c in stripped)
    assert all(c.chunk.HasField("vectors") for c in carrying)  # the generator's copies keep them
    assert [c.chunk.chunk_id for c in stripped] == [c.chunk.chunk_id for c in carrying]
