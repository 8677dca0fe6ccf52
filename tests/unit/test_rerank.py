"""Reranker and assembly on real chunks (the bundled samples, parsed by the real parser).

The cross-encoder is a tiny BERT the test builds and loads through FlagEmbedding's
FlagReranker; split parts are fetched from a real SQLite FTS5 keyword store.
"""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from services.generator.claims import ClaimChecker
from services.parser.parser import parse_document
from services.reranker.assembly import Budget, assemble, lexical_similarity, term_vector
from services.reranker.bge import BgeReranker
from shared.cross_encoder import CrossEncoder
from shared.config import ChunkerConfig, KBConfig, RerankerConfig
from shared.contracts import chunk_pb2
from shared.embedders import resolve_model_dir
from shared.errors import FailedPrecondition, InvalidArgument
from shared.stores.sqlite_fts import SCHEMA, SqliteFtsKeywordStore
from tests.conftest import SAMPLES
from tests.tiny_cross_encoder import build_tiny_cross_encoder

pytestmark = pytest.mark.unit

SPLIT = ChunkerConfig(max_chars=300, overlap_chars=0)


@pytest.fixture(scope="module")
def encoder(tmp_path_factory) -> CrossEncoder:
    return CrossEncoder(str(build_tiny_cross_encoder(tmp_path_factory.mktemp("tiny-reranker"))), device="cpu",
                        batch_size=4, max_length=128)


@pytest.fixture(scope="module")
def chunks() -> dict[str, list[chunk_pb2.KnowledgeChunk]]:
    parsed = {}
    for path in (SAMPLES / "en" / "amr7-user-guide.md", SAMPLES / "zh" / "amr7-使用手册.md",
                 SAMPLES / "en" / "beacon-admin-faq.txt"):
        parsed[path.stem] = parse_document(kb="kb", namespace="default", filename=path.name,
                                           data=path.read_bytes(), chunker=SPLIT).chunks
    guide = SAMPLES / "en" / "amr7-user-guide.md"
    parsed["guide-unsplit"] = parse_document(kb="kb", namespace="default", filename=guide.name, doc_id="guide-unsplit",
                                             data=guide.read_bytes()).chunks
    return parsed


@pytest.fixture(scope="module")
def store(tmp_path_factory, chunks) -> SqliteFtsKeywordStore:
    keyword = SqliteFtsKeywordStore(tmp_path_factory.mktemp("kw") / "keyword.sqlite")
    for doc in chunks.values():
        keyword.upsert(doc)
    yield keyword
    keyword.close()


@pytest.fixture(scope="module")
def count_tokens():
    tokenizer = AutoTokenizer.from_pretrained(str(resolve_model_dir("all-MiniLM-L6-v2")))
    return lambda text: len(tokenizer(text, add_special_tokens=True, truncation=False)["input_ids"])


def as_candidates(chunks: list[chunk_pb2.KnowledgeChunk]) -> list[chunk_pb2.Candidate]:
    return [chunk_pb2.Candidate(chunk=c, score=1.0 / (rank + 60), route=chunk_pb2.ROUTE_FUSED)
            for rank, c in enumerate(chunks, start=1)]


def unsplit(chunks: list[chunk_pb2.KnowledgeChunk]) -> list[chunk_pb2.KnowledgeChunk]:
    return [c for c in chunks if c.part_count == 1]


# --- cross-encoder -----------------------------------------------------------------------------

def test_tiny_model_loads_through_flag_reranker_and_scores_in_0_1(encoder, chunks):
    passages = [c.content for c in chunks["amr7-user-guide"][:5]]
    scores = encoder.score("How long does charging take?", passages)
    assert len(scores) == 5 and all(0.0 < s < 1.0 for s in scores)
    assert encoder.score("How long does charging take?", passages) == scores  # deterministic
    assert encoder.score("q", []) == []


@pytest.mark.parametrize("min_quantile, relative", [
    pytest.param(None, 0.0, id="no-thresholds"),
    pytest.param(0.5, 0.0, id="absolute-median"),
    pytest.param(None, "second-lowest", id="relative-cuts-the-lowest"),
    pytest.param(0.25, "second-lowest", id="both"),
])
def test_absolute_and_relative_thresholds(encoder, chunks, min_quantile, relative):
    candidates = as_candidates(chunks["amr7-user-guide"][:12])
    query = "How long does the AMR-7 take to charge?"
    scores = sorted(encoder.score(query, [c.chunk.content for c in candidates]))
    min_score = scores[int(min_quantile * len(scores))] if min_quantile is not None else 0.0
    ratio = (scores[1] / scores[-1]) if relative == "second-lowest" else relative
    config = RerankerConfig(name="bge", min_score=min_score, relative_threshold=ratio, candidate_cap=50)
    outcome = BgeReranker(config, encoder=encoder).rerank(query, candidates, top_n=5)
    kept = [c.rerank_score for c in outcome.kept]
    assert kept == sorted(kept, reverse=True) and kept[0] == pytest.approx(scores[-1])
    assert all(s >= min_score and s >= ratio * scores[-1] for s in kept)
    reasons = {d.reason for d in outcome.dropped}
    for dropped in outcome.dropped:
        if dropped.reason == "below_min_score":
            assert dropped.score < min_score
        else:
            assert dropped.reason == "below_relative_threshold" and dropped.score < ratio * scores[-1]
    assert len(kept) + len(outcome.dropped) == len(candidates)
    if min_quantile:
        assert "below_min_score" in reasons
    if relative == "second-lowest":
        assert outcome.dropped and all(c.route == chunk_pb2.ROUTE_RERANKED for c in outcome.kept)


def test_candidate_cap_limits_what_is_scored(encoder, chunks):
    candidates = as_candidates(chunks["amr7-user-guide"][:10])
    config = RerankerConfig(name="bge", candidate_cap=4, relative_threshold=0.0)
    outcome = BgeReranker(config, encoder=encoder).rerank("charging", candidates, top_n=5)
    assert len(outcome.kept) == 4
    assert [d.chunk_id for d in outcome.dropped if d.reason == "beyond_candidate_cap"] == [
        c.chunk.chunk_id for c in candidates[4:]]


def test_switched_off_reranker_keeps_recall_order_without_loading_a_model(chunks):
    candidates = as_candidates(chunks["amr7-user-guide"][:6])
    reranker = BgeReranker(RerankerConfig(name="bge", enabled=False, model="/nonexistent/model"))
    outcome = reranker.rerank("charging", candidates, top_n=3)
    assert reranker.encoder is None
    assert [c.chunk.chunk_id for c in outcome.kept] == [c.chunk.chunk_id for c in candidates]
    assert outcome.model == "bge(disabled)"


@pytest.mark.parametrize("model, message", [
    pytest.param("/nonexistent/reranker-dir", "has no config.json", id="missing-dir"),
    pytest.param("BAAI/bge-reranker-base", "cannot load reranker model 'BAAI/bge-reranker-base'", id="hub-offline"),
])
def test_unloadable_model_is_a_clear_error(model, message):
    with pytest.raises(FailedPrecondition, match=message):
        CrossEncoder(model, device="cpu")


@pytest.mark.parametrize("yaml_text, field", [
    pytest.param("reranker: {relative_threshold: 1.5}", "reranker.relative_threshold", id="relative>1"),
    pytest.param("reranker: {candidate_cap: 0}", "reranker.candidate_cap", id="cap-0"),
    pytest.param("reranker: {mmr_threshold: 0}", "reranker.mmr_threshold", id="mmr-0"),
    pytest.param("reranker: {min_score: -1}", "reranker.min_score", id="negative-min"),
])
def test_bad_reranker_config_names_the_field(yaml_text, field):
    with pytest.raises(InvalidArgument, match=field.replace(".", r"\.")):
        KBConfig.from_yaml(yaml_text, name="kb")


def test_claims_can_be_checked_with_the_cross_encoder(encoder, chunks):
    sources = as_candidates(chunks["guide-unsplit"])
    number = next(i for i, c in enumerate(sources, 1) if "45 minutes" in c.chunk.raw_content)
    checker = ClaimChecker("cross-encoder", min_support=0.0, cross_score=encoder.score)
    check = checker.check(f"Charging takes 45 minutes [{number}].", sources).checks[0]
    expected = encoder.score("Charging takes 45 minutes.", [" ".join(sources[number - 1].chunk.heading_path) + "\n"
                                                           + sources[number - 1].chunk.raw_content])[0]
    assert check.method == "cross-encoder" and check.semantic == pytest.approx(expected, abs=1e-4)
    assert check.verdict == "supported"


# --- assembly ----------------------------------------------------------------------------------

def test_exact_duplicates_are_dropped_by_hash(chunks, count_tokens):
    first = unsplit(chunks["amr7-使用手册"])[:2]
    twin = chunk_pb2.KnowledgeChunk()
    twin.CopyFrom(first[0])
    twin.chunk_id = "another-id-same-content"
    result = assemble(as_candidates([first[0], twin, first[1]]), Budget(top_n=5), count_tokens=count_tokens)
    assert [c.chunk.chunk_id for c in result.kept] == [first[0].chunk_id, first[1].chunk_id]
    assert [(d.chunk_id, d.reason) for d in result.dropped] == [("another-id-same-content", "duplicate_content")]


@pytest.mark.parametrize("doc, edit", [
    pytest.param("guide-unsplit", lambda t: t.replace("AMR-7", "AMR-7 robot", 1), id="en"),
    pytest.param("amr7-使用手册", lambda t: t + "请注意。", id="zh"),
])
def test_mmr_skips_a_near_duplicate_and_keeps_diverse_chunks(chunks, count_tokens, doc, edit):
    base = unsplit(chunks[doc])[:3]
    near = chunk_pb2.KnowledgeChunk()
    near.CopyFrom(base[0])
    near.chunk_id, near.raw_content, near.content_hash = "near-copy", edit(base[0].raw_content), "other-hash"
    similarity = lexical_similarity(*(term_vector(t) for t in (base[0].raw_content, near.raw_content)))
    assert 0.85 <= similarity < 1.0
    candidates = as_candidates([base[0], near, base[1], base[2]])
    result = assemble(candidates, Budget(top_n=10, mmr_threshold=0.85), count_tokens=count_tokens)
    assert [(d.chunk_id, d.reason) for d in result.dropped] == [("near-copy", "too_similar")]
    assert {c.chunk.chunk_id for c in result.kept} == {c.chunk_id for c in base}
    relaxed = assemble(candidates, Budget(top_n=10, mmr_threshold=1.0), count_tokens=count_tokens)
    assert "near-copy" in {c.chunk.chunk_id for c in relaxed.kept}


def test_chunk_budget_keeps_top_n_hits(chunks, count_tokens):
    docs = unsplit(chunks["amr7-使用手册"])
    result = assemble(as_candidates(docs), Budget(top_n=2, mmr_threshold=1.0), count_tokens=count_tokens)
    assert {c.chunk.chunk_id for c in result.kept} == {docs[0].chunk_id, docs[1].chunk_id}
    assert [d.reason for d in result.dropped] == ["beyond_top_n"] * (len(docs) - 2)


def test_token_budget_trims_and_always_keeps_the_best_hit(chunks, count_tokens):
    docs = unsplit(chunks["amr7-使用手册"])
    sizes = [count_tokens(c.raw_content) for c in docs]
    budget = sizes[0] + sizes[1]
    result = assemble(as_candidates(docs), Budget(top_n=10, max_context_tokens=budget, mmr_threshold=1.0),
                      count_tokens=count_tokens)
    assert int(result.facts["tokens"]) <= budget
    assert docs[0].chunk_id in {c.chunk.chunk_id for c in result.kept}
    assert {d.reason for d in result.dropped} == {"over_token_budget"}
    tiny = assemble(as_candidates(docs), Budget(top_n=10, max_context_tokens=1, mmr_threshold=1.0),
                    count_tokens=count_tokens)
    assert [c.chunk.chunk_id for c in tiny.kept] == [docs[0].chunk_id]


@pytest.mark.parametrize("doc, part", [
    pytest.param("amr7-user-guide", 4, id="en-table-part-4-of-6"),
    pytest.param("amr7-使用手册", 2, id="zh-part-2-of-2"),
])
def test_a_kept_part_brings_all_its_siblings_in_order(chunks, store, count_tokens, doc, part):
    hit = next(c for c in chunks[doc] if c.part_count > 1 and c.part_index == part)
    siblings = [c for c in chunks[doc] if c.group_id == hit.group_id]
    result = assemble(as_candidates([hit]), Budget(top_n=3, max_context_tokens=100_000),
                      count_tokens=count_tokens, fetch_siblings=store.chunks_by_group)
    assert [c.chunk.chunk_id for c in result.kept] == [c.chunk_id for c in sorted(siblings, key=lambda c: c.part_index)]
    assert [c.chunk.metadata["part"] for c in result.kept] == [
        f"part {i} of {hit.part_count}" for i in range(1, hit.part_count + 1)]
    assert [c.chunk.metadata.get("restored_part") for c in result.kept].count("true") == hit.part_count - 1
    assert result.facts["restored_parts"] == str(hit.part_count - 1)
    assert [list(g.chunk_ids) for g in result.groups] == [[c.chunk.chunk_id for c in result.kept]]


def test_two_parts_of_one_group_count_as_one_hit(chunks, store, count_tokens):
    group = [c for c in chunks["amr7-user-guide"] if c.part_count == 6]
    other = chunks["beacon-admin-faq"][0]
    result = assemble(as_candidates([group[2], group[0], other]), Budget(top_n=2, max_context_tokens=100_000),
                      count_tokens=count_tokens, fetch_siblings=store.chunks_by_group)
    kept_ids = [c.chunk.chunk_id for c in result.kept]
    assert kept_ids[:6] == [c.chunk_id for c in group] and other.chunk_id in kept_ids
    assert not result.dropped


def test_context_is_ordered_by_document_then_position_with_one_header_per_source(chunks, count_tokens):
    en = unsplit(chunks["guide-unsplit"])
    zh = unsplit(chunks["amr7-使用手册"])
    ranked = [zh[3], en[0], zh[0], zh[2]]
    result = assemble(as_candidates(ranked), Budget(top_n=10, restore_parts=False, mmr_threshold=1.0),
                      count_tokens=count_tokens)
    assert [c.chunk.chunk_id for c in result.kept] == [zh[0].chunk_id, zh[2].chunk_id, zh[3].chunk_id, en[0].chunk_id]
    assert [g.doc_id for g in result.groups] == [zh[0].doc_id, en[0].doc_id]
    assert result.groups[0].header.startswith("Lumen AMR-7 使用手册")
    assert all(c.chunk.metadata["source_header"] for c in result.kept)


@pytest.mark.parametrize("kwargs, message", [
    pytest.param({"top_n": 0}, "top_n", id="top_n"),
    pytest.param({"max_context_tokens": 0}, "max_context_tokens", id="tokens"),
    pytest.param({"mmr_threshold": 1.5}, "mmr_threshold", id="mmr"),
])
def test_budget_validates_its_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Budget(**kwargs)


# --- sibling fetch in the keyword store --------------------------------------------------------

def test_sibling_fetch_is_scoped_by_namespace_and_ordered(chunks, store):
    group = [c for c in chunks["amr7-user-guide"] if c.part_count == 6]
    fetched = store.chunks_by_group(["default"], [group[0].group_id])
    assert [c.part_index for c in fetched] == [1, 2, 3, 4, 5, 6]
    assert store.chunks_by_group(["other-tenant"], [group[0].group_id]) == []
    assert store.chunks_by_group(["default"], []) == []
    with pytest.raises(InvalidArgument, match="namespace"):
        store.chunks_by_group([], [group[0].group_id])


def test_database_from_before_group_ids_is_backfilled(tmp_path, chunks):
    part = next(c for c in chunks["amr7-使用手册"] if c.part_count > 1)
    path = tmp_path / "old.sqlite"
    old = sqlite3.connect(path)
    old.executescript(SCHEMA)
    old.execute("INSERT INTO chunks(chunk_id, namespace, doc_id, block_type, payload) VALUES (?, ?, ?, ?, ?)",
                (part.chunk_id, part.namespace, part.doc_id, int(part.block_type), part.SerializeToString()))
    old.commit()
    old.close()
    reopened = SqliteFtsKeywordStore(Path(path))
    try:
        assert [c.chunk_id for c in reopened.chunks_by_group(["default"], [part.group_id])] == [part.chunk_id]
    finally:
        reopened.close()


def test_mmr_similarity_is_the_cosine_of_term_counts_either_way_round():
    texts = ["The AMR-7 battery takes 90 minutes to charge.", "The battery of the AMR-7 charges in 90 minutes.",
             "电池充满需要九十分钟。", "电池 电池 充电", ""]
    for a in texts:
        for b in texts:
            ta, tb = term_vector(a), term_vector(b)
            dot = sum(n * tb.counts[t] for t, n in ta.counts.items())
            norms = math.sqrt(sum(n * n for n in ta.counts.values())) * math.sqrt(sum(n * n for n in tb.counts.values()))
            expected = dot / norms if norms else 0.0
            assert lexical_similarity(ta, tb) == lexical_similarity(tb, ta) == expected
    assert lexical_similarity(term_vector(texts[0]), term_vector(texts[0])) == pytest.approx(1.0)
