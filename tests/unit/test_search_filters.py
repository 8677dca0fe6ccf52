"""Search filters as each backend receives them, and the retriever's per-route depths (no engines)."""

import pytest

from services.retriever.retriever import route_depths
from shared.config import RetrieverConfig
from shared.contracts import chunk_pb2
from shared.errors import InvalidArgument
from shared.stores.elasticsearch import index_name, query_filters
from shared.stores.filters import metadata_pairs, metadata_terms, milvus_metadata_clauses
from shared.stores.milvus import filter_expression

pytestmark = pytest.mark.unit


def search_filter(**fields) -> chunk_pb2.SearchFilter:
    return chunk_pb2.SearchFilter(namespaces=fields.pop("namespaces", ["a"]), **fields)


def test_metadata_pairs_are_sorted_and_validated():
    assert metadata_pairs(search_filter(metadata={"z": "1", "a": "2"})) == [("a", "2"), ("z", "1")]


@pytest.mark.parametrize("metadata, message", [
    pytest.param({"": "x"}, "key is empty", id="empty-key"),
    pytest.param({" ": "x"}, "key is empty", id="blank-key"),
    pytest.param({"k" * 300: "x"}, "longer than 256", id="long-key"),
    pytest.param({"k": "v" * 5000}, "value for 'k' is longer", id="long-value"),
    pytest.param({f"k{i}": "v" for i in range(33)}, "at most 32", id="too-many"),
])
def test_bad_metadata_filters_are_refused_naming_the_problem(metadata, message):
    with pytest.raises(InvalidArgument, match=message):
        metadata_pairs(search_filter(metadata=metadata))


def test_metadata_terms_cannot_collide_through_an_equals_sign_in_a_key():
    assert metadata_terms({"a=b": "c"}) != metadata_terms({"a": "b=c"})
    assert metadata_terms({"语言": "中文"}) == ['"语言"=中文']


def test_elasticsearch_filters_carry_every_condition():
    filters = query_filters(search_filter(namespaces=["a", "b"], doc_ids=["d1"], block_types=[chunk_pb2.BLOCK_TYPE_TABLE],
                                          metadata={"lang": "en"}, acl_enforced=True, acl_groups=["hr"]))
    assert filters[:4] == [{"terms": {"namespace": ["a", "b"]}}, {"terms": {"doc_id": ["d1"]}},
                           {"terms": {"block_type": [chunk_pb2.BLOCK_TYPE_TABLE]}}, {"term": {"meta": '"lang"=en'}}]
    acl = filters[4]["bool"]
    assert acl["minimum_should_match"] == 1 and {"terms": {"acl": ["hr"]}} in acl["should"]


def test_elasticsearch_filters_require_a_namespace():
    with pytest.raises(InvalidArgument, match="namespace"):
        query_filters(chunk_pb2.SearchFilter(doc_ids=["d1"]))


def test_milvus_expression_quotes_metadata_keys_and_values():
    clauses = milvus_metadata_clauses([('say "hi"', "中文")])
    assert clauses == ['payload["metadata"]["say \\"hi\\""] == "中文"']
    expression = filter_expression(search_filter(metadata={"lang": "en"}, doc_ids=["d1"]))
    assert expression == 'namespace in ["a"] and doc_id in ["d1"] and payload["metadata"]["lang"] == "en"'


@pytest.mark.parametrize("kb, expected", [
    pytest.param("handbook", "ragkb-kb-handbook", id="lower"),
    pytest.param("Handbook", "ragkb-kb-handbook-", id="capitals-get-a-hash"),
])
def test_index_names_are_lower_case_and_distinct(kb, expected):
    assert index_name("ragkb", kb).startswith(expected)
    assert index_name("ragkb", "Handbook") != index_name("ragkb", "handbook")


@pytest.mark.parametrize("config, requested, expected", [
    pytest.param({}, 0, (40, 40), id="kb-default"),
    pytest.param({"bm25_depth": 100, "dense_depth": 20}, 0, (100, 20), id="per-route"),
    pytest.param({"bm25_depth": 100}, 0, (100, 40), id="one-route"),
    pytest.param({"bm25_depth": 100, "dense_depth": 20}, 7, (7, 7), id="request-wins"),
])
def test_route_depths(config, requested, expected):
    assert route_depths(RetrieverConfig(**config), requested) == expected


def test_negative_depth_is_refused():
    with pytest.raises(InvalidArgument, match="candidate_depth"):
        route_depths(RetrieverConfig(), -1)


def test_milvus_acl_clause_matches_prefix_free_on_a_server():
    """A Milvus server allows only prefix LIKE: there the payload's group list is matched instead."""
    groups = search_filter(acl_enforced=True, acl_groups=["hr", 'fi"n'])
    assert 'json_contains_any(payload["_acl_groups"], ["hr", "fi\\"n"])' in filter_expression(groups, server=True)
    assert "like" not in filter_expression(groups, server=True)
    assert 'acl like "%|hr|%"' in filter_expression(groups)
    public_only = search_filter(acl_enforced=True)
    assert filter_expression(public_only, server=True).endswith('and acl == ""')
