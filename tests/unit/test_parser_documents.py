"""Acceptance over ../shared/data/docs: every real document parses into structure-aware, token-safe chunks."""

from __future__ import annotations

import pytest

from services.parser import errors
from services.parser.parser import parse_document
from services.parser.tokens import counter_for
from shared.config import ChunkerConfig, ParserConfig
from shared.contracts import chunk_pb2
from tests.conftest import shared_data

pytestmark = pytest.mark.unit

MODEL = "all-MiniLM-L6-v2"
TABLE = chunk_pb2.BLOCK_TYPE_TABLE


def _parse(folder: str, name: str, **kwargs):
    path = shared_data("docs", folder, name)
    return parse_document(kb="kb", namespace="ns", filename=name, data=path.read_bytes(), tokenizer_model=MODEL,
                          **kwargs)


@pytest.fixture(scope="module")
def parsed():
    """Every file in en/ and zh/, parsed once for the module."""
    results, failures = {}, {}
    for folder in ("en", "zh"):
        for path in sorted(shared_data("docs", folder).iterdir()):
            try:
                results[path.name] = _parse(folder, path.name)
            except Exception as error:  # collected so one assertion names every failing file
                failures[path.name] = f"{type(error).__name__}: {error}"
    return results, failures


def test_every_english_and_chinese_document_parses(parsed):
    results, failures = parsed
    assert not failures
    assert len(results) >= 27
    empty = [name for name, result in results.items() if not result.chunks]
    assert not empty


def test_every_chunk_fits_the_embedders_token_window(parsed):
    counter = counter_for(MODEL)
    limit = counter.limit - ChunkerConfig().token_margin
    assert counter.limit == 256
    over = [(name, c.position, counter.count(c.content)) for name, result in parsed[0].items()
            for c in result.chunks if counter.count(c.content) > limit]
    assert not over


def _paths(result) -> list[tuple[str, ...]]:
    return list(dict.fromkeys(tuple(c.heading_path) for c in result.chunks))


@pytest.mark.parametrize(
    "name, expected",
    [
        pytest.param("category-level.docx", [(), ("A Heading 1",), ("A Heading 1", "A Heading 2"),
                                             ("Another Heading 1",)], id="docx-heading-levels"),
        pytest.param("sample-presentation.pptx", [
            (), ("Title Slide",), ("This is the first content slide", "There’s text here"),
            ("This is the second content slide", "What happens when there’s one here"),
            ("This is the second content slide", "What happens when there’s 2")], id="pptx-slide-titles"),
        pytest.param("codeblock.md", [("HTML Example",), ("XML Example",)], id="markdown"),
        pytest.param("fake-email.eml", [("Test Email",)], id="eml-subject"),
        pytest.param("fake-html-cp1252.html", [("My First Heading",)], id="html"),
        pytest.param("大模型指令对齐训练原理.md", [("大模型指令对齐训练原理",)], id="chinese-markdown"),
    ],
)
def test_heading_paths_follow_the_documents_headings(parsed, name, expected):
    assert _paths(parsed[0][name]) == expected


def test_spreadsheet_sheets_are_sections(parsed):
    paths = _paths(parsed[0]["2023-half-year-analyses-by-segment.xlsx"])
    assert ("OS-Rev.and results 30 06 2023", "Revenue and results") in paths
    assert paths[-1] == ("Reconciliation 30 06 2023",)


def test_chinese_docx_headings_are_recognised(parsed):
    result = parsed[0]["mineru_docx_01_zh.docx"]
    paths = _paths(result)
    for path in [("1. 有序列表构成的章节标题", "1.1. 显式空白字符表示"), ("1. 有序列表构成的章节标题", "1.4. 无序列表"),
                 ("后面是正常的章节标题",), ("1 这是第一章标题", "1.2 Many Tables", "1.2.1 Table with rich cells"),
                 ("2 这是第二章标题", "2.1 混合公式"), ("3 复杂嵌套多级列表",), ("4 参考文献",)]:
        assert path in paths
    body = next(c for c in result.chunks if list(c.heading_path) == ["后面是正常的章节标题"])
    assert body.raw_content.startswith("在这个日新月异") and body.metadata["language"] == "zh"
    # an empty subsection keeps its title in the parent's text instead of vanishing
    # the heading's own equation is part of its text (Office Math as linear text)
    formulas = next(c for c in result.chunks if list(c.heading_path) == ["2. 标题内包含公式 x=-b±b2-4ac2a"])
    assert "2.1. 标题内包含超链接hyperlink" in formulas.raw_content
    assert "这是带公式的页眉" not in "".join(c.raw_content for c in result.chunks)  # page header dropped


def test_tables_survive_as_tables(parsed):
    results = parsed[0]
    md = [c for c in results["simple-table.md"].chunks if c.block_type == TABLE]
    assert md and "| Juicy Apples | 1.99 | 739 |" in md[0].raw_content
    docx = [c for c in results["docx-tables.docx"].chunks if c.block_type == TABLE]
    assert len(docx) == 3 and docx[0].raw_content.startswith("| Header Col 1 | Header Col 2 |\n|---|---|")
    pptx = next(c for c in results["fake-power-point-table.pptx"].chunks if c.block_type == TABLE)
    assert "| Red | Green | Blue |" in pptx.raw_content
    assert sum(c.block_type == TABLE for c in results["example-steelJIS-datasheet.html"].chunks) >= 8
    captioned = next(c for c in results["mineru_docx_01_zh.docx"].chunks
                     if "Table 1: This is an easy table" in c.raw_content)
    assert captioned.block_type == TABLE and list(captioned.heading_path)[-1] == "2.2.2 Table with caption"


def test_a_long_table_is_split_by_rows_with_its_header_repeated(parsed):
    parts = [c for c in parsed[0]["mineru_docx_01_zh.docx"].chunks
             if c.block_type == TABLE and c.part_count > 1]
    assert len(parts) >= 2 and len({c.group_id for c in parts}) == 1
    header = parts[0].raw_content.split("\n")[:2]
    assert all(c.raw_content.split("\n")[:2] == header for c in parts)


def test_pdf_chunks_carry_pages_and_drop_page_chrome(parsed):
    results = parsed[0]
    guide = results["interface-config-guide-p93.pdf"]
    text = "\n".join(c.content for c in guide.chunks)
    assert any(list(c.heading_path) == ["6.4 Internal PXC"] for c in guide.chunks)
    for chrome in ("© 2023 Nokia.", "Interface Configuration Guide Release 23.7.R1", "Use subject to Terms"):
        assert chrome not in text
    paper = results["layout-parser-paper-fast.pdf"]
    assert paper.page_count == 2 and {c.source.page for c in paper.chunks} == {1, 2}
    assert "I Am A Header" not in "".join(c.raw_content for c in results["header-test-doc.pdf"].chunks)


def test_html_navigation_scripts_and_page_chrome_are_dropped(parsed):
    text = "\n".join(c.raw_content for c in parsed[0]["example-with-scripts.html"].chunks)
    assert "Russian forces conducted limited counterattacks" in text
    for dropped in ("Planned Giving", "Who We Are", "function(", "window."):
        assert dropped not in text
    assert [c.raw_content for c in parsed[0]["fake-html-with-footer-and-header.html"].chunks] == ["My first paragraph."]


HOSTILE = [
    pytest.param("copy-protected.pdf", errors.COPY_PROTECTED, id="copy-protected"),
    pytest.param("empty.txt", errors.EMPTY, id="empty"),
    pytest.param("fake-text-all-whitespace.txt", errors.WHITESPACE_ONLY, id="whitespace"),
    pytest.param("loremipsum-flat.pdf", errors.IMAGE_ONLY, id="scan-without-ocr"),
    pytest.param("password.pdf", errors.PASSWORD_PROTECTED, id="password-pdf"),
    pytest.param("password_protected.xlsx", errors.PASSWORD_PROTECTED, id="password-xlsx"),
]


@pytest.mark.parametrize("name, reason", HOSTILE)
def test_hostile_files_get_their_specific_reason(name, reason):
    with pytest.raises(errors.ParseError) as caught:
        _parse("hostile", name)
    assert caught.value.reason == reason
    assert str(caught.value).startswith(f"{reason}: {name!r}")


@pytest.mark.parametrize(
    "name, expected",
    [
        # pdfminer's structure repair reads it
        pytest.param("invalid-pdf-structure-pdfminer-one-page.pdf", "National Cybersecurity Strategy", id="repaired"),
        # unstructured calls its vector drawings "too complex"; its text layer is read page by page
        pytest.param("failure-after-repair.pdf", "A guide for people with cancer", id="text-layer-fallback"),
        # a placeholder python-pptx cannot resolve; the slide's text is still there
        pytest.param("fake-power-point-malformed.pptx", "Test Slide", id="malformed-pptx"),
    ],
)
def test_damaged_but_readable_hostile_files_are_read(name, expected):
    result = _parse("hostile", name)
    assert expected in "\n".join(c.content for c in result.chunks)


def test_copy_protected_pdf_is_read_when_the_kb_allows_it():
    result = _parse("hostile", "copy-protected.pdf", parser=ParserConfig(allow_copy_protected=True))
    assert any("LayoutParser" in c.content for c in result.chunks)


def test_page_limit_names_the_counts():
    with pytest.raises(errors.ParseError, match=r"too_many_pages: 'failure-after-repair.pdf' has 76 pages; .* 10"):
        _parse("hostile", "failure-after-repair.pdf", parser=ParserConfig(max_pages=10))


def test_file_size_limit_names_the_sizes():
    with pytest.raises(errors.ParseError, match=r"file_too_large: 'big.txt' is 2097152 bytes; the limit is 1048576"):
        parse_document(kb="kb", namespace="ns", filename="big.txt", data=b"a" * 2 * 1024 * 1024,
                       parser=ParserConfig(max_file_mb=1))
