"""Route competence measured with the shipped all-MiniLM-L6-v2 tokenizer (no stores)."""

import pytest

from services.retriever.competence import HitReads, agreement, hit_terms, measure, top_z
from shared.config import RetrieverConfig
from shared.contracts import chunk_pb2
from shared.embedders import SentenceTransformerEmbedder
from shared.hit_reading import HIT_CHARS, mark_readings
from shared.stores.elasticsearch import porter

pytestmark = pytest.mark.unit

ENGLISH = "The charging dock charges the battery from 20% to 80% in 45 minutes."
CHINESE = "充电桩在45分钟内将 AMR-7 的电池从20%充到80%。在充电桩上从电量耗尽充到100%需要90分钟。"


@pytest.fixture(scope="module")
def embedder():
    return SentenceTransformerEmbedder("all-MiniLM-L6-v2")


def hits(*contents: str, scores=None) -> list[chunk_pb2.Candidate]:
    scores = scores or [10.0 - n for n in range(len(contents))]
    return [chunk_pb2.Candidate(chunk=chunk_pb2.KnowledgeChunk(chunk_id=text, content=text), score=score)
            for text, score in zip(contents, scores)]


def test_unknown_token_share_uses_the_models_own_tokenizer(embedder):
    assert embedder.unknown_token_share("How long does charging take?") == 0
    assert embedder.unknown_token_share("范廷颂是什么时候被任为主教的？") > 0.5
    assert embedder.unknown_token_share("") == 0


def test_english_query_on_english_text_trusts_both_routes(embedder):
    measured = measure("charging the battery in minutes", hits(ENGLISH), hits(ENGLISH), embedder, "jieba",
                       RetrieverConfig())
    assert measured.competence == {"bm25": 1.0, "dense": 1.0}
    assert measured.signals["agreement"] == 1.0 and measured.signals["dense.hits_unknown"] == 0


def test_dense_gets_no_competence_when_the_model_cannot_read_the_query(embedder):
    measured = measure("电池从20%充到80%需要多长时间？", hits(CHINESE), hits(CHINESE), embedder, "jieba",
                       RetrieverConfig())
    assert measured.signals["dense.query_unknown"] > 0.25
    assert measured.competence["dense"] == 0 and measured.competence["bm25"] == 1.0


def test_dense_gets_no_competence_when_the_text_it_reaches_is_unreadable(embedder):
    # an English query the model reads, over Chinese chunks it cannot: cosine scores mean nothing
    measured = measure("charging time", hits(CHINESE), hits(CHINESE), embedder, "jieba", RetrieverConfig())
    assert measured.signals["dense.query_unknown"] == 0 and measured.signals["dense.hits_unknown"] > 0.25
    assert measured.competence["dense"] == 0


def test_unreadable_texts_anywhere_in_the_top_ten_lower_dense_competence(embedder):
    # a mixed-language KB: the model ranks Chinese chunks it cannot read 8th to 10th for an English query
    english = [f"{ENGLISH} Section {n}." for n in range(7)]
    chinese = [f"{CHINESE} 第{n}节。" for n in range(3)]
    measured = measure("charging the battery in minutes", hits(*english), hits(*english, *chinese), embedder,
                       "jieba", RetrieverConfig())
    assert 0 < measured.signals["dense.hits_unknown"] < 0.25
    assert 0 < measured.competence["dense"] < 1 and measured.competence["bm25"] == 1.0


def test_bm25_without_matching_terms_gets_no_competence(embedder):
    measured = measure("battery chemistry", [], hits(ENGLISH), embedder, "jieba", RetrieverConfig())
    assert measured.signals["bm25.term_coverage"] == 0 and measured.competence["bm25"] == 0
    partial = measure("battery warranty terms", hits(ENGLISH), hits(ENGLISH), embedder, "jieba",
                      RetrieverConfig(bm25_min_term_coverage=0.5))
    assert partial.signals["bm25.term_coverage"] == pytest.approx(1 / 3, abs=1e-3)
    assert partial.competence["bm25"] == pytest.approx(2 / 3, abs=1e-3)


def test_a_failed_route_has_no_signals_and_no_competence(embedder):
    measured = measure("charging time", None, hits(ENGLISH), embedder, "jieba", RetrieverConfig())
    assert "bm25" not in measured.competence and "agreement" not in measured.signals


def test_score_shape_and_agreement():
    assert top_z(hits("a", "b", "c", scores=[9.0, 1.0, 1.0])) == pytest.approx((9 - 11 / 3) / (8 * 2 ** 0.5 / 3))
    assert top_z(hits("a")) == 0
    assert agreement(hits("a", "b"), hits("b", "c")) == 0.5 and agreement([], hits("a")) == 0


MIXED = [f"{ENGLISH} Section {n}." for n in range(7)] + [f"{CHINESE} 第{n}节。" for n in range(3)]
CASES = [
    pytest.param("charging the battery in minutes", [ENGLISH], [ENGLISH], id="english"),
    pytest.param("电池从20%充到80%需要多长时间？", [CHINESE], [CHINESE], id="chinese-query"),
    pytest.param("charging time", [CHINESE], [CHINESE], id="unreadable-hits"),
    pytest.param("charging the battery in minutes", MIXED[:7], MIXED, id="mixed-top-ten"),
    pytest.param("battery warranty terms", [ENGLISH, CHINESE], [], id="no-dense-hits"),
]


@pytest.mark.parametrize(("query", "bm25", "dense"), CASES)
def test_remembered_hit_reads_give_the_same_signals_as_reading_afresh(embedder, query, bm25, dense):
    reads = HitReads()
    fresh = measure(query, hits(*bm25), hits(*dense), embedder, "jieba", RetrieverConfig())
    first = measure(query, hits(*bm25), hits(*dense), embedder, "jieba", RetrieverConfig(), reads=reads)
    again = measure(query, hits(*bm25), hits(*dense), embedder, "jieba", RetrieverConfig(), reads=reads)
    assert first == fresh and again == fresh
    assert reads.hits > 0 and reads.misses == len(reads)  # the second query read nothing anew


def read_at_ingest(embedder, contents: list[str]) -> list[chunk_pb2.Candidate]:
    candidates = hits(*contents)
    mark_readings(embedder, [c.chunk for c in candidates])
    return candidates


class CountedReads:
    """The embedder, counting the texts it is asked to read at query time."""

    def __init__(self, embedder):
        self.embedder, self.read = embedder, []
        self.model_id, self.dimension = embedder.model_id, embedder.dimension

    def unknown_token_share(self, text: str) -> float:
        self.read.append(text)
        return self.embedder.unknown_token_share(text)


@pytest.mark.parametrize(("query", "bm25", "dense"), CASES)
def test_readings_stored_at_ingest_give_the_same_signals_without_reading_a_hit(embedder, query, bm25, dense):
    fresh = measure(query, hits(*bm25), hits(*dense), embedder, "jieba", RetrieverConfig())
    counted = CountedReads(embedder)
    stored = measure(query, read_at_ingest(embedder, bm25), read_at_ingest(embedder, dense), counted, "jieba",
                     RetrieverConfig())
    assert stored == fresh
    assert counted.read == [query]  # only the query itself was tokenized


def test_a_reading_by_another_model_or_none_is_read_again(embedder):
    dense = read_at_ingest(embedder, [CHINESE, ENGLISH])
    dense[0].chunk.reading.embedder = "another-model/384"
    dense[1].chunk.ClearField("reading")
    counted = CountedReads(embedder)
    measured = measure("charging time", [], dense, counted, "jieba", RetrieverConfig())
    assert counted.read == ["charging time", CHINESE, ENGLISH]
    assert measured == measure("charging time", [], hits(CHINESE, ENGLISH), embedder, "jieba", RetrieverConfig())
    assert measured.competence["dense"] == 0  # the Chinese hit's own share counted, not another model's


def test_marking_a_chunk_replaces_what_it_carried_and_reads_what_competence_reads(embedder):
    long_chinese = CHINESE * 100  # over HIT_CHARS: read as competence reads it, cut
    chunks = [chunk_pb2.KnowledgeChunk(content=ENGLISH), chunk_pb2.KnowledgeChunk(content=long_chinese)]
    chunks[0].reading.embedder, chunks[0].reading.unknown_share = "all-MiniLM-L6-v2/384", 0.9  # a caller's claim
    mark_readings(embedder, chunks)
    assert chunks[0].reading.unknown_share == 0
    assert chunks[1].reading.unknown_share == embedder.unknown_token_share(long_chinese[:HIT_CHARS]) > 0.25
    assert {c.reading.embedder for c in chunks} == {f"{embedder.model_id}/{embedder.dimension}"}


def test_hit_reads_follow_the_text_not_the_chunk_id(embedder):
    reads = HitReads()
    english = [chunk_pb2.Candidate(chunk=chunk_pb2.KnowledgeChunk(chunk_id="c1", content=ENGLISH), score=1.0)]
    edited = [chunk_pb2.Candidate(chunk=chunk_pb2.KnowledgeChunk(chunk_id="c1", content=CHINESE), score=1.0)]
    assert measure("charging time", english, english, embedder, "jieba", RetrieverConfig(),
                   reads=reads).signals["dense.hits_unknown"] == 0
    assert measure("charging time", edited, edited, embedder, "jieba", RetrieverConfig(),
                   reads=reads).signals["dense.hits_unknown"] > 0.25


def test_hit_reads_stay_bounded_and_drop_the_least_recently_used(embedder):
    reads = HitReads(max_entries=2)
    reads.terms("alpha", "jieba")
    reads.terms("beta", "jieba")
    reads.terms("alpha", "jieba")  # alpha is now the most recent
    reads.terms("gamma", "jieba")
    assert len(reads) == 2 and reads.hits == 1
    reads.terms("alpha", "jieba")
    assert reads.hits == 2  # kept
    reads.terms("beta", "jieba")
    assert reads.misses == 4  # beta was dropped and is read again
    with pytest.raises(ValueError, match="max_entries"):
        HitReads(max_entries=0)


def test_hit_reads_keep_the_analyzers_apart():
    reads = HitReads()
    assert reads.terms("充电桩", "char") == hit_terms("充电桩", "char")
    assert reads.terms("充电桩", "jieba") == hit_terms("充电桩", "jieba")
    assert reads.terms("充电桩", "char") != reads.terms("充电桩", "jieba")


def test_remembered_stems_are_the_stemmers_own():
    import snowballstemmer

    stemmer = snowballstemmer.stemmer("porter")
    words = "charging charges generalizations running ran caresses ponies cats 45 充电".split()
    expected = [stemmer.stemWord(w) if w.isascii() and w.isalpha() else w for w in words]
    assert porter(words) == expected and porter(words) == expected


def test_character_shortcut_gives_what_the_tokenizer_gives(embedder):
    import json
    import random
    from pathlib import Path

    from shared.embedders import WordPieceReading, unknown_share

    tokenizer = embedder._model.tokenizer
    reading = WordPieceReading.of(tokenizer)
    assert reading is not None and reading._plain_ascii  # all-MiniLM-L6-v2: WordPiece, BERT pre-tokenizer

    def tokenized(text):
        return unknown_share(tokenizer(text, add_special_tokens=False, truncation=False)["input_ids"],
                             tokenizer.unk_token_id)

    rng = random.Random(7)
    ascii_chars = [chr(c) for c in range(0x20, 0x7f)] + ["\t", "\n", "\r"]
    # Latin-1 and Latin Extended letters (accents stripped), Greek, general punctuation and symbols, CJK,
    # and the whitespace and control characters the normalizer maps, drops or keeps
    other_chars = [chr(c) for c in [*range(0xa0, 0x250), *range(0x370, 0x3ff), *range(0x2000, 0x2070),
                                    *range(0x4e00, 0x4e40), 0x2028, 0x3000, 0xfeff, 0x200b, 0x85, 0x1c, 0x0b, 0x7f]]
    texts = ["", "   ", ENGLISH, "x" * 100, "x" * 101, "a" * 150 + " ok", "ATP-binding cassette (ABC) 5'-UTR ~3%",
             "caf\u00e9", "\u00e9" * 100, "\u00e9" * 101, "na\u00efve \u2013 \u2018quoted\u2019 \u03b1-\u03b2 \u00b1 2",
             "ab\x0bcd", "x" * 60 + "\x0b" + "x" * 60, CHINESE,
             "a [UNK] b", "see [MASK] here", "[unk]",
             "a\u0327\u0301 A\u0301\u0327 \u1e09 \u0130stanbul \u01c5 \u1f88 \ufb01 \u2160"]  # marks to reorder, odd cases
    texts += ["".join(rng.choice(ascii_chars) for _ in range(rng.randint(1, 300))) for _ in range(300)]
    texts += ["".join(rng.choice(ascii_chars + other_chars) for _ in range(rng.randint(1, 300))) for _ in range(600)]
    corpus = Path(__file__).resolve().parents[3] / "shared" / "data" / "scifact" / "corpus.jsonl"
    if corpus.is_file():  # the shared SciFact abstracts, when present (a quarter hold non-ASCII characters)
        with open(corpus, encoding="utf-8") as handle:
            texts += [(lambda d: f"{d['title']}\n{d['text']}"[:2000])(json.loads(line)) for line in handle][:1500]
    assert [embedder.unknown_token_share(t) for t in texts] == [tokenized(t) for t in texts]
    normalize = tokenizer.backend_tokenizer.normalizer.normalize_str
    for text in texts:  # a character at a time, as the reading normalizes: the same characters, the same words
        mapped, whole = text.translate(reading._characters), normalize(text)
        assert sorted(mapped) == sorted(whole) and [len(w) for w in mapped.split(" ")] == [len(w) for w in whole.split(" ")]
    decided = [t for t in texts if reading.cannot_be_unknown(t)]
    assert all(tokenized(t) == 0.0 for t in decided)
    assert any(not t.isascii() for t in decided)  # accented Latin, Greek and typographic punctuation are read too
    assert not reading.cannot_be_unknown("a [UNK] b") and embedder.unknown_token_share("a [UNK] b") == 1 / 3
    assert embedder.unknown_token_share("x" * 101) == 1.0  # an over-long word still counts
