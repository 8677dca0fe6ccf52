import pytest

import math

from services.retriever.competence import effective_weights
from services.retriever.fusion import FusionSpec, fuse, fused_scores, normalize_scores
from services.retriever.retriever import base_weights, fusion_spec
from shared.config import RetrieverConfig
from shared.contracts import chunk_pb2

pytestmark = pytest.mark.unit


def ranked(*ids: str) -> list[chunk_pb2.Candidate]:
    return [chunk_pb2.Candidate(chunk=chunk_pb2.KnowledgeChunk(chunk_id=i), score=10.0 - n) for n, i in enumerate(ids)]


def rrf_fuse(routes, weights, *, k=60, top_k=None):
    return fuse(routes, weights, FusionSpec(method="rrf", rrf_k=k), top_k=top_k)


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
        FusionSpec(method="rrf", rrf_k=0)


@pytest.mark.parametrize("normalization, expected, absent", [
    pytest.param("minmax", [1.0, 0.5, 0.0], 0.0, id="minmax"),
    pytest.param("theoretical_min", [1.0, 0.75, 0.5], 0.0, id="theoretical-min-floor--1"),
    pytest.param("zscore", [math.sqrt(1.5), 0.0, -math.sqrt(1.5)], -math.sqrt(1.5), id="zscore"),
])
def test_normalizations(normalization, expected, absent):
    normalised, missing = normalize_scores([0.6, 0.2, -0.2], normalization, floor=-1.0)
    assert normalised.tolist() == pytest.approx(expected)
    assert missing == pytest.approx(absent)


@pytest.mark.parametrize("normalization", ["minmax", "zscore", "theoretical_min"])
def test_a_list_without_spread_still_ranks_its_hits_above_what_it_did_not_return(normalization):
    # bm25 found one document; dense scores two alike: without the fix, zscore tied "b" with "a" (id order wins)
    routes = {"bm25": [("b", 2.0)], "dense": [("a", 0.6), ("b", 0.6)]}
    scores = fused_scores(routes, {"bm25": 1.0, "dense": 1.0}, FusionSpec("convex", normalization))
    assert scores["b"] > scores["a"]
    normalised, absent = normalize_scores([2.0], normalization)
    assert normalised[0] > absent


def test_convex_combination_matches_hand_computed_scores():
    # bm25 a=10 b=5 c=0 -> minmax 1, .5, 0; dense c=.9 a=.5 -> 1, 0; weights .25/.75 (sum 1)
    routes = {"bm25": [("a", 10.0), ("b", 5.0), ("c", 0.0)], "dense": [("c", 0.9), ("a", 0.5)]}
    scores = fused_scores(routes, {"bm25": 1.0, "dense": 3.0}, FusionSpec("convex", "minmax"))
    assert scores == pytest.approx({"a": 0.25, "b": 0.125, "c": 0.75})


def test_convex_gives_absent_documents_the_lowest_normalised_value():
    routes = {"bm25": [("a", 3.0), ("b", 1.0)], "dense": [("c", 0.9), ("a", 0.1), ("d", 0.5)]}
    scores = fused_scores(routes, {"bm25": 1.0, "dense": 1.0}, FusionSpec("convex", "zscore"))
    dense_z, dense_absent = normalize_scores([0.9, 0.1, 0.5], "zscore")
    assert scores["b"] == pytest.approx(0.5 * -1.0 + 0.5 * dense_absent)
    assert scores["c"] == pytest.approx(0.5 * -1.0 + 0.5 * dense_z[0])


def test_convex_fuse_keeps_route_ranks_and_a_zero_weight_route_changes_nothing():
    fused = fuse({"bm25": ranked("a", "b"), "dense": ranked("b", "c")}, {"bm25": 1.0, "dense": 0.0},
                 FusionSpec("convex", "minmax"))
    assert [c.chunk.chunk_id for c in fused[:2]] == ["a", "b"]
    assert (fused[1].bm25_rank, fused[1].dense_rank) == (2, 1)
    with pytest.raises(ValueError, match="positive weight"):
        fuse({"bm25": ranked("a")}, {"bm25": 0.0}, FusionSpec("convex"))


@pytest.mark.parametrize("competence, expected", [
    pytest.param({"bm25": 1.0, "dense": 0.0}, {"bm25": 1.0, "dense": 0.0}, id="dense-cannot-read"),
    pytest.param({"bm25": 0.5, "dense": 1.0}, {"bm25": 0.5, "dense": 2.0}, id="scaled"),
    pytest.param({"bm25": 0.0, "dense": 0.0}, {"bm25": 1.0, "dense": 1.0}, id="none-competent-counts-all-alike"),
])
def test_effective_weights_scale_the_base_by_competence(competence, expected):
    assert effective_weights({"bm25": 1.0, "dense": 2.0}, competence) == expected


def test_the_default_is_convex_zscore_with_bm25_weighted_0_6_and_dense_0_4():
    # measured in README (Hybrid retrieval): >= the best single route on every development set, >= 0.73 on SciFact
    config = RetrieverConfig()
    assert fusion_spec(config).describe() == "convex(zscore)"
    weights = base_weights(config)
    assert (weights["bm25"], weights["dense"]) == (1.2, 0.8)
    assert weights["bm25"] / (weights["bm25"] + weights["dense"]) == pytest.approx(0.6)


def test_the_default_fusion_by_hand():
    # bm25 a=3 b=1 -> z 1, -1; dense b=.9 c=.5 a=.1 -> z 1.2247, 0, -1.2247 (absent -1 / -1.2247); weights .6/.4
    routes = {"bm25": [("a", 3.0), ("b", 1.0)], "dense": [("b", 0.9), ("c", 0.5), ("a", 0.1)]}
    config = RetrieverConfig()
    scores = fused_scores(routes, base_weights(config), fusion_spec(config))
    z = math.sqrt(1.5)
    assert scores == pytest.approx({"a": 0.6 * 1 + 0.4 * -z, "b": 0.6 * -1 + 0.4 * z, "c": 0.6 * -1 + 0.4 * 0.0})


@pytest.mark.parametrize("normalization", ["minmax", "zscore", "theoretical_min"])
def test_candidate_scores_keep_the_order_and_start_at_what_no_route_returned(normalization):
    # zscore gives below-mean hits negative values; clients read a candidate's score as relevance
    routes = {"bm25": ranked("a", "b", "c", "d"), "dense": ranked("c", "e", "a")}
    spec, weights = FusionSpec("convex", normalization), {"bm25": 1.2, "dense": 0.8}
    raw = fused_scores({r: [(c.chunk.chunk_id, c.score) for c in cs] for r, cs in routes.items()}, weights, spec)
    fused = fuse(routes, weights, spec)
    assert [c.chunk.chunk_id for c in fused] == sorted(raw, key=lambda i: (-raw[i], i))
    assert min(c.score for c in fused) >= 0
    shifts = {round(raw[c.chunk.chunk_id] - c.score, 9) for c in fused}
    assert len(shifts) == 1 and (normalization == "zscore" or shifts == {0.0})
