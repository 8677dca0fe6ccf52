import pytest

from services.generator.citations import resolve_citations, validate_markers
from shared.contracts import chunk_pb2

pytestmark = pytest.mark.unit


def test_out_of_range_markers_are_removed_and_reported():
    result = validate_markers("Charging takes 45 minutes [1]. Speed is 1.8 m/s [4]. Zero [0].", source_count=2)
    assert result.text == "Charging takes 45 minutes [1]. Speed is 1.8 m/s. Zero."
    assert [(i.marker, i.reason, i.action) for i in result.issues] == [
        ("[4]", "out_of_range", "removed"), ("[0]", "out_of_range", "removed")]
    assert result.numbers == [1]


@pytest.mark.parametrize(
    "marker", ["[ID:2]", "【2】", "[source 2]", "[^2]", "[ 2 ]", "【ID：2】"],
)
def test_malformed_markers_are_repaired(marker):
    result = validate_markers(f"Payload is 300 kg {marker}.", source_count=3)
    assert result.text == "Payload is 300 kg [2]."
    assert [(i.reason, i.action) for i in result.issues] == [("malformed", "repaired")]


def test_grouped_marker_keeps_valid_numbers_only():
    result = validate_markers("Both [1, 5].", source_count=2)
    assert result.text == "Both [1]."
    assert {i.reason for i in result.issues} == {"out_of_range", "malformed"}


def test_valid_answer_is_untouched():
    answer = "充电需要45分钟。[1] The dock charges to 80% [2]."
    result = validate_markers(answer, source_count=2)
    assert result.text == answer and result.issues == []


def test_citations_resolve_to_the_numbered_chunk():
    sources = [
        chunk_pb2.Candidate(chunk=chunk_pb2.KnowledgeChunk(chunk_id="a", doc_id="d1", heading_path=["Guide"])),
        chunk_pb2.Candidate(chunk=chunk_pb2.KnowledgeChunk(chunk_id="b", doc_id="d2")),
    ]
    citations = resolve_citations("First claim [2]. Second claim [1][2].", sources)
    assert [(c.number, c.chunk_id, c.quote) for c in citations] == [
        (2, "b", "First claim."), (1, "a", "Second claim."), (2, "b", "Second claim.")]
    assert list(citations[1].heading_path) == ["Guide"]


def test_markers_after_the_full_stop_belong_to_that_sentence():
    sources = [chunk_pb2.Candidate(chunk=chunk_pb2.KnowledgeChunk(chunk_id=i)) for i in ("a", "b")]
    citations = resolve_citations("Firmware 3.2.1 adds re-routing. [1] Maps are multi-floor. [2]", sources)
    assert [(c.number, c.quote) for c in citations] == [
        (1, "Firmware 3.2.1 adds re-routing."), (2, "Maps are multi-floor.")]
