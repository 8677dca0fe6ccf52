"""The dense route's payload reader (the chunk `json_format.ParseDict` gives) and search width; no Milvus needed."""

import pytest
from google.protobuf import json_format

from shared.contracts import chunk_pb2
from shared.stores.milvus import chunk_from_payload, search_params_for

pytestmark = pytest.mark.unit

FULL = chunk_pb2.KnowledgeChunk(
    chunk_id="c-1", doc_id="d-1", kb="kb", namespace="team-a", raw_content="Raw  text", content="Title\nText ✓",
    heading_path=["Title", "Sub"], block_type=chunk_pb2.BLOCK_TYPE_TABLE, content_hash="ab" * 32, part_index=2,
    part_count=3, group_id="g-1", parent_id="p-1", doc_version=2 ** 40, position=7,
    source=chunk_pb2.SourceInfo(uri="docs/a.pdf", page=4, updated_at="2026-01-01T00:00:00Z",
                                mime_type="application/pdf", title="A"),
    metadata={"language": "zh", "acl": "g1,g2"},
)


def payload_of(chunk: chunk_pb2.KnowledgeChunk) -> dict:
    return json_format.MessageToDict(chunk, preserving_proto_field_name=True)  # what upsert stores


@pytest.mark.parametrize("chunk", [
    pytest.param(FULL, id="every-field"),
    pytest.param(chunk_pb2.KnowledgeChunk(chunk_id="c-2", content="只有内容"), id="defaults"),
    pytest.param(chunk_pb2.KnowledgeChunk(chunk_id="c-3", block_type=12, source=chunk_pb2.SourceInfo()),
                 id="unknown-enum-value-empty-source"),
])
def test_payload_reads_back_as_parse_dict_reads_it(chunk):
    payload = payload_of(chunk)
    assert chunk_from_payload(payload) == json_format.ParseDict(payload, chunk_pb2.KnowledgeChunk()) == chunk


def test_payload_shapes_the_store_does_not_write_take_parse_dict():
    odd = payload_of(FULL) | {"position": "7", "block_type": 5, "doc_version": 3}
    assert chunk_from_payload(odd) == json_format.ParseDict(odd, chunk_pb2.KnowledgeChunk())
    with pytest.raises(json_format.ParseError):
        chunk_from_payload({"chunk_id": "c", "no_such_field": 1})


def test_hnsw_search_width_is_never_below_the_hits_asked_for():
    configured = {"metric_type": "COSINE", "params": {"ef": 64}}
    assert search_params_for(configured, 40) is configured
    assert search_params_for(configured, 100) == {"metric_type": "COSINE", "params": {"ef": 100}}
    assert configured["params"]["ef"] == 64  # the store's own settings are not changed
    ivf = {"metric_type": "COSINE", "params": {"nprobe": 16}}
    assert search_params_for(ivf, 500) is ivf
