"""PDF structure from the text layer alone: tables, headings, columns, chrome, ligatures, right-to-left text."""

from __future__ import annotations

import pytest

from services.parser import formats, pdf_layout
from tests.conftest import ROOT, shared_data

pytestmark = pytest.mark.unit
FILES = ROOT / "tests" / "golden" / "parse_reference" / "files"


def read(path) -> formats.ParsedDocument:
    return formats.read(path.name, path.read_bytes())


def test_whitespace_aligned_table_between_rules_is_a_table_with_its_header_row():
    document = read(FILES / "layout-parser-paper-with-table.pdf")
    tables = [b for b in document.blocks if b.kind == "table"]
    assert len(tables) == 1
    rows = tables[0].text.splitlines()
    assert [cell.strip() for cell in rows[0].strip("|").split("|")][0] == "Dataset"
    assert rows[0].rstrip(" |").endswith("Notes") and rows[1].startswith("|---")
    assert "| PubLayNet [38] |" in tables[0].text and "| HJDataset [31] |" in tables[0].text
    assert not any("PubLayNet [38]" in b.text for b in document.blocks if b.kind != "table")


def test_unruled_table_keeps_its_two_line_header_and_numeric_rows():
    document = read(shared_data("docs", "en", "embedded-images-tables.pdf"))
    [table] = [b for b in document.blocks if b.kind == "table"]
    header, rule, first = table.text.splitlines()[:3]
    assert "Inhibitor concentration" in header and "Corrosion rate (mm/year)" in header
    assert first.startswith("| 0 | 0.0335 | 0.0409 |")
    headings = [b.text for b in document.blocks if b.kind == "heading"]
    assert not any(text.strip().isdigit() or text == "C/0" for text in headings)  # axis ticks of Fig. 5


def test_two_columns_read_column_by_column_with_numbered_headings_and_no_margin_stamp():
    document = read(shared_data("docs", "en", "multi-column-2p.pdf"))
    headings = [(b.text, b.level) for b in document.blocks if b.kind == "heading"]
    titles = [text for text, _ in headings]
    for earlier, later in [("Abstract", "1 Introduction"), ("1 Introduction", "2 Background"),
                           ("2 Background", "3 Dense Passage Retriever (DPR)"),
                           ("3 Dense Passage Retriever (DPR)", "3.1 Overview")]:
        assert titles.index(earlier) < titles.index(later)
    levels = dict(headings)
    assert levels["3.1 Overview"] > levels["3 Dense Passage Retriever (DPR)"]
    assert titles[0] == "Dense Passage Retrieval for Open-Domain Question Answering"
    assert not any("arXiv" in b.text for b in document.blocks)
    text = "\n".join(b.text for b in document.blocks)
    # the left column's paragraph goes on in the left column, not in the right one beside it
    assert "Open-domain question answering (QA) (Voorhees,\n1999) is a task" in text


def test_running_heads_and_page_numbers_are_dropped():
    document = read(shared_data("docs", "en", "layout-parser-paper-fast.pdf"))
    assert not any("Z. Shen et al." in b.text for b in document.blocks)
    assert [b.text for b in document.blocks if b.kind == "heading"][:2] == [
        "LayoutParser: A Unified Toolkit for Deep\nLearning Based Document Image Analysis", "1 Introduction"]


def test_outline_entries_are_headings():
    data = shared_data("docs", "en", "embedded-images-tables.pdf").read_bytes()
    blocks = pdf_layout.read(data, {"fig. 4. anodic and cathodic polarization curve of stainless steel in "
                                    "0.5m h 2 so 4 solution in the presence and absence of es.": 2})
    assert blocks[0].kind == "paragraph"  # a sentence is never a heading, outline or not
    blocks = pdf_layout.read(data, {"table 1": 2})
    assert not any(b.kind == "heading" and b.text == "Table 1" for b in blocks)  # "Table 1" heads a paragraph


def test_ligatures_become_letters():
    document = read(FILES / "copy_paste_ligatures.pdf")
    text = " ".join(b.text for b in document.blocks)
    assert "\ufb01" not in text and "\ufb00" not in text
    assert "abcdeffffiflffifflststghijklmno" in text.split()


def test_right_to_left_text_is_in_logical_order_and_searchable():
    document = read(FILES / "ArabicCIDTrueType.pdf")
    lines = [b.text for b in document.blocks]
    assert len(lines) == 4 and all(text == "انواع الخطوط العربية" for text in lines)
    assert "الخطوط" in " ".join(lines).split()


def test_line_end_hyphen_between_lower_case_letters_is_repaired():
    lines = [pdf_layout.Line(top=0, bottom=10, size=10, bold=False, text="the re-"),
             pdf_layout.Line(top=12, bottom=22, size=10, bold=False, text="cent work of Smith-"),
             pdf_layout.Line(top=24, bottom=34, size=10, bold=False, text="Jones")]
    assert pdf_layout._join(lines) == "the recent work of Smith-\nJones"
