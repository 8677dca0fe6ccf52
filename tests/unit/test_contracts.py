import subprocess
import sys

import pytest
from google.protobuf import json_format

from shared.contracts import chunk_pb2
from tests.conftest import ROOT

pytestmark = pytest.mark.unit


def full_chunk() -> chunk_pb2.KnowledgeChunk:
    """A chunk with every field set to a non-default value (checked below, so new fields cannot be missed)."""
    return chunk_pb2.KnowledgeChunk(
        chunk_id="c1", doc_id="manual.md", kb="kb", namespace="team-a", raw_content="最大载重为300公斤。",
        content="手册 > 载重\n最大载重为300公斤。", heading_path=["手册", "载重"], block_type=chunk_pb2.BLOCK_TYPE_TABLE,
        content_hash="ab" * 32, part_index=2, part_count=3, group_id="manual.md:g1", parent_id="p1",
        doc_version=7, position=4, metadata={"language": "zh", "acl": "ops"},
        source=chunk_pb2.SourceInfo(uri="docs/manual.md", page=3, updated_at="2026-11-30T10:00:00+00:00",
                                    mime_type="text/markdown", title="Manual"),
        vectors=chunk_pb2.ChunkVectors(embedder="all_minilm_l6_v2/384", chunk=b"\x00\x00\x80?", splitter=1,
                                       sentence_count=1, sentences=b"\x00<"),
        reading=chunk_pb2.EmbedderReading(embedder="all_minilm_l6_v2/384", unknown_share=0.25),
    )


def test_every_chunk_field_is_set_in_the_fixture():
    chunk = full_chunk()
    unset = [f.name for f in chunk_pb2.KnowledgeChunk.DESCRIPTOR.fields if not _is_set(chunk, f)]
    assert unset == []


def test_chunk_binary_round_trip_keeps_every_field():
    chunk = full_chunk()
    assert chunk_pb2.KnowledgeChunk.FromString(chunk.SerializeToString()) == chunk


def test_chunk_json_round_trip_keeps_every_field():
    # the vector store keeps chunks as JSON; nothing may be lost on the way
    chunk = full_chunk()
    data = json_format.MessageToDict(chunk, preserving_proto_field_name=True)
    assert json_format.ParseDict(data, chunk_pb2.KnowledgeChunk()) == chunk


def test_candidate_wraps_chunk_with_route_and_ranks():
    candidate = chunk_pb2.Candidate(chunk=full_chunk(), score=0.5, route=chunk_pb2.ROUTE_FUSED, bm25_rank=1,
                                    dense_rank=3)
    again = chunk_pb2.Candidate.FromString(candidate.SerializeToString())
    assert again.chunk.heading_path == ["手册", "载重"]
    assert (again.route, again.bm25_rank, again.dense_rank) == (chunk_pb2.ROUTE_FUSED, 1, 3)


def test_generated_code_matches_protos():
    result = subprocess.run([sys.executable, "scripts/gen_protos.py", "--check"], cwd=ROOT, capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def _is_set(message, field) -> bool:
    value = getattr(message, field.name)
    if field.message_type is not None and not _is_repeated(field):
        return message.HasField(field.name)
    return bool(value)


def _is_repeated(field) -> bool:
    return getattr(field, "is_repeated", None) or field.label == field.LABEL_REPEATED
