import pytest

from services.parser import formats
from services.parser.chunking import split_rows, split_text
from services.parser.parser import parse_document
from shared.config import ChunkerConfig
from shared.contracts import chunk_pb2
from shared.errors import InvalidArgument, UnsupportedFileType
from tests.conftest import SAMPLES, shared_data

pytestmark = pytest.mark.unit

MANUAL = """# Manual

Preface text outside any section.

## Charging

The dock charges the battery from 20% to 80% in 45 minutes.

### Battery

Short.

## Error codes

Codes the robot shows:

| Code | Meaning |
|---|---|
| E101 | Lidar obstruction |
"""


def parse(text: str, filename="manual.md", **kwargs):
    return parse_document(kb="kb", namespace="ns", filename=filename, data=text.encode("utf-8"), **kwargs)


def test_markdown_follows_the_heading_tree():
    chunks = parse(MANUAL).chunks
    by_path = {tuple(c.heading_path): c for c in chunks if c.block_type != chunk_pb2.BLOCK_TYPE_TABLE}
    charging = by_path[("Manual", "Charging")]
    # the short "Battery" subsection merged into its parent
    assert charging.block_type == chunk_pb2.BLOCK_TYPE_MERGED
    assert "Battery\nShort." in charging.raw_content
    assert charging.content.startswith("Manual > Charging\n")
    assert by_path[("Manual",)].raw_content == "Preface text outside any section."
    table = next(c for c in chunks if c.block_type == chunk_pb2.BLOCK_TYPE_TABLE)
    assert list(table.heading_path) == ["Manual", "Error codes"]
    assert "E101 | Lidar obstruction" in table.raw_content
    assert all(c.content_hash and c.source.uri == "manual.md" for c in chunks)


def test_text_before_the_first_heading_is_an_orphan_block():
    chunks = parse("Loose note.\n\n# Title\n\nBody text here.").chunks
    assert chunks[0].block_type == chunk_pb2.BLOCK_TYPE_ORPHAN and not chunks[0].heading_path


def test_same_content_yields_same_ids_and_an_edit_changes_only_its_chunk():
    first = [c.chunk_id for c in parse(MANUAL).chunks]
    assert first == [c.chunk_id for c in parse(MANUAL).chunks]
    edited = [c.chunk_id for c in parse(MANUAL.replace("45 minutes", "50 minutes")).chunks]
    assert len(set(first) - set(edited)) == 1


def test_long_sections_split_into_labelled_parts_with_a_shared_group():
    body = " ".join(f"Sentence number {i} talks about charging." for i in range(200))
    chunks = parse(f"# Long\n\n{body}", chunker=ChunkerConfig(max_chars=400, overlap_chars=60)).chunks
    assert len(chunks) > 3
    assert {c.part_count for c in chunks} == {len(chunks)}
    assert [c.part_index for c in chunks] == list(range(1, len(chunks) + 1))
    assert len({c.group_id for c in chunks}) == 1 and chunks[0].group_id
    assert all(len(c.content) <= 400 for c in chunks)


def test_split_text_breaks_chinese_at_sentence_marks():
    text = "。".join(["充电桩在四十五分钟内充到百分之八十"] * 40) + "。"
    pieces = split_text(text, 100, 0)
    assert all(len(p) <= 100 for p in pieces)
    assert all(p.endswith("。") for p in pieces)


def test_long_tables_repeat_the_header_row():
    table = "| a | b |\n|---|---|\n" + "\n".join(f"| {i} | value {i} |" for i in range(50))
    pieces = split_rows(table, 200)
    assert len(pieces) > 1
    assert all(p.startswith("| a | b |\n|---|---|") for p in pieces)


def test_html_drops_scripts_styles_and_navigation():
    html = ("<html><head><title>T</title><style>p{color:red}</style></head><body><nav>Home | About</nav>"
            "<script>alert('x')</script><h1>Notes</h1><p>Firmware 3.2.1 adds re-routing.</p>"
            "<img src='a.png' alt='map editor'><table><tr><th>k</th><th>v</th></tr><tr><td>1</td><td>2</td></tr>"
            "</table></body></html>")
    chunks = parse(html, filename="notes.html").chunks
    text = "\n".join(c.raw_content for c in chunks)
    assert "Firmware 3.2.1 adds re-routing." in text
    assert "[image: map editor]" in text
    assert "| k | v |" in text
    for dropped in ("alert", "color:red", "Home | About"):
        assert dropped not in text


@pytest.mark.parametrize(
    "encoding",
    [pytest.param(e, id=e) for e in ("utf-8", "utf-8-sig", "utf-16", "gb18030")],
)
def test_text_encodings_are_detected(encoding):
    text = "Beacon 的遥测数据保留30天。"
    result = parse_document(kb="kb", namespace="ns", filename="faq.txt", data=text.encode(encoding))
    assert result.chunks[0].raw_content == text


def test_cp1252_text_is_decoded():
    result = parse_document(kb="kb", namespace="ns", filename="a.txt", data="Café – naïve “quotes”".encode("cp1252"))
    assert result.encoding == "cp1252" and "Café – naïve “quotes”" in result.chunks[0].raw_content


def test_bundled_gb18030_sample_is_read_as_chinese():
    path = SAMPLES / "zh" / "beacon-常见问题.txt"
    result = parse_document(kb="kb", namespace="ns", filename=path.name, data=path.read_bytes())
    assert result.encoding == "gb18030"
    assert any("遥测数据保留30天" in c.raw_content for c in result.chunks)


@pytest.mark.parametrize(
    "name, data, message",
    [
        pytest.param("empty.txt", b"", "is empty", id="empty"),
        pytest.param("blank.md", b"  \n\t\n ", "has no text", id="whitespace"),
        pytest.param("markup.html", b"<html><script>x()</script></html>", "has no text", id="markup-only"),
        pytest.param("bin.txt", b"\x00\x01\x02" * 50 + b"\xff", "looks binary", id="binary"),
    ],
)
def test_bad_documents_get_an_error_naming_the_problem(name, data, message):
    with pytest.raises(InvalidArgument, match=message):
        parse_document(kb="kb", namespace="ns", filename=name, data=data)


def test_unsupported_type_names_the_extension():
    with pytest.raises(UnsupportedFileType, match=r"'\.xyz'"):
        formats.detect_type("report.xyz")


@pytest.mark.parametrize("name", ["empty.txt", "fake-text-all-whitespace.txt"])
def test_hostile_text_files_are_refused(name):
    path = shared_data("docs", "hostile", name)
    with pytest.raises(InvalidArgument, match="empty|no text"):
        parse_document(kb="kb", namespace="ns", filename=name, data=path.read_bytes())


def test_real_utf16_document_parses():
    path = shared_data("docs", "en", "fake-text-utf-16.txt")
    result = parse_document(kb="kb", namespace="ns", filename=path.name, data=path.read_bytes())
    assert result.encoding.startswith("utf-16") and result.chunks


def test_zero_overlap_and_no_merging_survive_the_grpc_request():
    from services.parser.servicer import _chunker
    from shared.contracts import parser_pb2

    wanted = ChunkerConfig(name="fixed", max_chars=300, overlap_chars=0, min_section_chars=0, token_margin=0)
    request = parser_pb2.ParseRequest(chunker=parser_pb2.ChunkerOptions(**wanted.model_dump()))
    assert _chunker(request) == wanted
    assert _chunker(parser_pb2.ParseRequest()) == ChunkerConfig()
