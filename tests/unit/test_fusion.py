import pytest

from services.retriever.fusion import rrf_fuse
from services.retriever.retriever import route_weights
from shared.config import KBConfig
from shared.contracts import chunk_pb2

pytestmark = pytest.mark.unit


def ranked(*ids: str) -> list[chunk_pb2.Candidate]:
    return [chunk_pb2.Candidate(chunk=chunk_pb2.KnowledgeChunk(chunk_id=i), score=10.0 - n) for n, i in enumerate(ids)]


def test_rrf_matches_hand_computed_scores():
    # bm25: a(1) b(2) c(3); dense: c(1) a(2) d(3); k = 60, equal weights
    fused = rrf_fuse({"bm25": ranked("a", "b", "c"), "dense": ranked("c", "a", "d")}, {"bm25": 1.0, "dense": 1.0},
                     k=60)
    expected = {
        "a": 1 / 61 + 1 / 62,
        "c": 1 / 63 + 1 / 61,
        "b": 1 / 62,
        "d": 1 / 63,
    }
    assert [c.chunk.chunk_id for c in fused] == ["a", "c", "b", "d"]
    for candidate in fused:
        assert candidate.score == pytest.approx(expected[candidate.chunk.chunk_id], abs=1e-12)
        assert candidate.route == chunk_pb2.ROUTE_FUSED
    a = fused[0]
    assert (a.bm25_rank, a.dense_rank) == (1, 2)
    assert fused[3].bm25_rank == 0  # d never appeared in the BM25 list


def test_rrf_weights_scale_each_route():
    fused = rrf_fuse({"bm25": ranked("a"), "dense": ranked("b")}, {"bm25": 1.0, "dense": 0.2}, k=60)
    assert [c.chunk.chunk_id for c in fused] == ["a", "b"]
    assert fused[1].score == pytest.approx(0.2 / 61)


def test_rrf_top_k_and_deterministic_ties():
    fused = rrf_fuse({"bm25": ranked("b"), "dense": ranked("a")}, {}, k=60, top_k=1)
    assert [c.chunk.chunk_id for c in fused] == ["a"]  # equal scores: chunk id breaks the tie


def test_rrf_rejects_non_positive_k():
    with pytest.raises(ValueError, match="k must be positive"):
        rrf_fuse({}, {}, k=0)


@pytest.mark.parametrize(
    "language, languages, expected_dense",
    [
        pytest.param("en", ("en",), 1.0, id="english-query-english-model"),
        pytest.param("zh", ("en",), 0.2, id="chinese-query-english-model"),
        pytest.param("zh", ("en", "zh"), 1.0, id="chinese-query-bilingual-model"),
        pytest.param("zh", ("multilingual",), 1.0, id="multilingual-model"),
    ],
)
def test_dense_weight_follows_query_language(language, languages, expected_dense):
    weights = route_weights(KBConfig(name="kb"), language, languages)
    assert weights == {"bm25": 1.0, "dense": expected_dense}
