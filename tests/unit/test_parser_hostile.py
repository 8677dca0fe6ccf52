"""Hostile files the parser reads in process: each refused with its own reason, or read without losing content.

The files are generated here (scripts/bench/hostile_corpus.py), never committed.
"""

from __future__ import annotations

import sys

import pytest

from services.parser import errors
from services.parser.parser import parse_document
from shared.config import ParserConfig
from tests.conftest import ROOT, shared_data

sys.path.insert(0, str(ROOT / "scripts" / "bench"))
import hostile_corpus  # noqa: E402

pytestmark = pytest.mark.unit


def parse(name: str, data: bytes, **parser):
    return parse_document(kb="kb", namespace="ns", filename=name, data=data,
                          parser=ParserConfig(**parser) if parser else None)


def refused(name: str, data: bytes, **parser) -> errors.ParseError:
    with pytest.raises(errors.ParseError) as caught:
        parse(name, data, **parser)
    return caught.value


@pytest.mark.parametrize("encoding", [pytest.param(e, id=e) for e in hostile_corpus.ENCODED_TEXTS])
def test_each_legacy_encoding_is_stored_as_correct_unicode(encoding):
    data, text = hostile_corpus.encoded_text(encoding)
    result = parse("notes.txt", data)
    assert "".join(c.raw_content for c in result.chunks).replace("\n", "") == text.replace("\n", "")


def test_a_docx_zip_bomb_is_refused_before_it_is_inflated():
    error = refused("bomb.docx", hostile_corpus.docx_zip_bomb(64 * hostile_corpus.MB), max_unzipped_mb=32)
    assert error.reason == errors.DECOMPRESSED_TOO_LARGE and "the limit is 33554432 bytes" in str(error)


def test_too_many_zip_entries_are_refused():
    error = refused("deck.docx", hostile_corpus.docx_zip_bomb(0), max_zip_entries=3)
    assert error.reason == errors.TOO_MANY_ZIP_ENTRIES and "the limit is 3" in str(error)


def test_a_spreadsheet_of_a_million_cells_is_refused_by_its_cell_count():
    error = refused("cells.xlsx", hostile_corpus.xlsx_with_cells(1_000_000))
    assert error.reason == errors.TOO_MANY_ELEMENTS and "200000" in str(error)


def test_element_and_chunk_caps_have_their_own_reasons():
    text = "\n\n".join(f"Paragraph {i} says something about item {i}." for i in range(300)).encode()
    assert refused("many.txt", text, max_elements=100).reason == errors.TOO_MANY_ELEMENTS
    assert refused("many.txt", text, max_chunks=2).reason == errors.TOO_MANY_CHUNKS


def test_sheet_names_and_lone_numbers_are_content_not_page_chrome():
    result = parse("stock.xlsx", hostile_corpus.xlsx_with_page_like_sheets())
    text = "\n".join(c.content for c in result.chunks)
    for kept in ("Sheet1", "Sheet2", "Sheet3", "Page 1", "41", "42", "43", "44"):
        assert kept in text


def test_a_hundred_thousand_nested_divs_keep_their_text():
    result = parse("deep.html", hostile_corpus.nested_divs_html(100_000))
    text = "\n".join(c.content for c in result.chunks)
    assert "Deep inside the nesting." in text and "The paragraph after the nesting is kept." in text


def test_pdf_bytes_named_txt_are_read_as_a_pdf():
    data = shared_data("docs", "en", "layout-parser-paper-fast.pdf").read_bytes()
    result = parse("paper.txt", data)
    text = "\n".join(c.content for c in result.chunks)
    assert result.doc_type == "pdf" and "LayoutParser" in text
    assert "endobj" not in text and "%PDF" not in text


def test_an_html_page_named_txt_is_read_as_html():
    result = parse("page.txt", b"<!DOCTYPE html><html><body><script>x()</script><p>Opening hours: 6 am.</p></body></html>")
    assert result.doc_type == "html" and [c.content for c in result.chunks] == ["Opening hours: 6 am."]


@pytest.mark.parametrize("data, what", [
    pytest.param(b"\x89PNG\r\n\x1a\n" + b"\x00" * 64, "a PNG image", id="png"),
    pytest.param(b"PK\x03\x04" + b"\x00" * 64, "a zip archive", id="zip"),
])
def test_binary_bytes_named_as_text_are_refused_as_a_type_mismatch(data, what):
    error = refused("notes.md", data)
    assert error.reason == errors.TYPE_MISMATCH and what in str(error)
