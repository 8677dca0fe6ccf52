"""Formats beyond the OOXML/HTML/PDF core: CSV/TSV, images and scans with OCR, legacy Office, Outlook .msg."""

from __future__ import annotations

import io
import shutil

import pytest
from PIL import Image

from services.parser import errors, formats, ocr
from services.parser.parser import parse_document
from shared.config import ParserConfig
from shared.errors import InvalidArgument
from tests.conftest import ROOT, shared_data

pytestmark = pytest.mark.unit
FILES = ROOT / "tests" / "golden" / "parse_reference" / "files"
OCR = ParserConfig(ocr=True)


def parse(name: str, data: bytes, parser: ParserConfig | None = None):
    return parse_document(kb="kb", namespace="ns", filename=name, data=data, parser=parser)


def text_of(result) -> str:
    return "\n".join(c.raw_content for c in result.chunks)


@pytest.mark.parametrize("name", ["stanley-cups.csv", "stanley-cups.tsv"])
def test_csv_and_tsv_are_one_table_with_the_header_row_first(name):
    result = parse(name, (FILES / name).read_bytes())
    [caption, table] = formats.read(name, (FILES / name).read_bytes()).blocks
    assert (caption.kind, caption.text) == ("paragraph", "Stanley Cups")
    assert table.kind == "table" and table.text.splitlines()[0] == "| Team | Location | Stanley Cups |"
    assert "| Maple Leafs | TOR | 13 |" in text_of(result)
    assert result.chunks[0].source.mime_type in ("text/csv", "text/tab-separated-values")


def test_csv_with_semicolons_is_sniffed():
    blocks = formats.read("prices.csv", "Item;Price\nÄpfel;1,99\n香蕉;2,50\n".encode()).blocks
    assert blocks[0].text.splitlines() == ["| Item | Price |", "|---|---|", "| Äpfel | 1,99 |", "| 香蕉 | 2,50 |"]


def test_csv_named_file_holding_an_image_is_refused():
    with pytest.raises(InvalidArgument) as caught:
        parse("table.csv", b"\x89PNG\r\n\x1a\n" + b"\x00" * 32)
    assert errors.reason_of(caught.value) == errors.TYPE_MISMATCH


def test_xlsm_is_read_as_a_workbook():
    result = parse("cups.xlsm", (FILES / "stanley-cups.xlsx").read_bytes())
    assert "Maple Leafs" in text_of(result) and result.doc_type == formats.XLSX
    assert result.chunks[0].source.mime_type == "application/vnd.ms-excel.sheet.macroEnabled.12"


@pytest.mark.parametrize("name, rotation", [("phototest.tif", 0), ("phototest-rotated-180.png", 180),
                                            ("phototest-rotated-L.png", 90), ("phototest-rotated-R.png", 270)])
def test_scans_are_turned_upright_before_recognition(name, rotation):
    result = parse(name, (FILES / name).read_bytes(), OCR)
    text = " ".join(text_of(result).split())
    assert "The quick brown dog jumped over the lazy fox." in text
    assert "This is a lot of 12 point text to test the ocr code" in text


def test_chinese_scan_reads_with_chi_sim_and_keeps_no_spaces_between_characters():
    result = parse("chi_sim_image.jpeg", (FILES / "chi_sim_image.jpeg").read_bytes(), OCR)
    text = text_of(result)
    assert "新鲜甘草黄酮养分" in text and "希望美白的皮肤" in text
    assert result.chunks[0].metadata["language"] == "zh"


def test_rotated_scanned_pdf_page_is_read_with_ocr():
    result = parse("zh-scan-rotated-90.pdf", (FILES / "zh-scan-rotated-90.pdf").read_bytes(), OCR)
    assert "大模型指令对齐训练原理" in text_of(result)
    assert "直接优化语言模型以实现人类的偏好" in text_of(result)


def test_image_without_ocr_is_refused_naming_the_setting():
    with pytest.raises(InvalidArgument, match="parser.ocr") as caught:
        parse("phototest.tif", (FILES / "phototest.tif").read_bytes())
    assert errors.reason_of(caught.value) == errors.IMAGE_ONLY


def test_broken_image_is_refused_as_corrupt():
    with pytest.raises(InvalidArgument) as caught:
        parse("photo.png", b"\x89PNG\r\n\x1a\n" + b"\x00" * 64, OCR)
    assert errors.reason_of(caught.value) == errors.CORRUPT and "'photo.png'" in str(caught.value)


def test_multi_page_tiff_counts_its_pages_against_the_limit():
    frames = [Image.new("L", (64, 64), 255) for _ in range(3)]
    buffer = io.BytesIO()
    frames[0].save(buffer, format="TIFF", save_all=True, append_images=frames[1:])
    with pytest.raises(InvalidArgument, match="3 pages") as caught:
        parse("scan.tiff", buffer.getvalue(), ParserConfig(ocr=True, max_pages=2))
    assert errors.reason_of(caught.value) == errors.TOO_MANY_PAGES


def test_ocr_languages_that_are_not_installed_are_named():
    with pytest.raises(InvalidArgument, match="none of the OCR languages xyz_test is installed"):
        parse("phototest.tif", (FILES / "phototest.tif").read_bytes(),
              ParserConfig(ocr=True, ocr_languages=("xyz_test",)))


def test_pages_run_in_parallel_within_the_cores_this_process_may_use():
    assert 1 <= ocr.parallel_pages() <= 4


needs_libreoffice = pytest.mark.skipif(shutil.which("soffice") is None,
                                       reason="LibreOffice is installed by scripts/test.sh")


@needs_libreoffice
def test_legacy_word_document_keeps_its_heading_and_text():
    result = parse("simple.doc", (FILES / "simple.doc").read_bytes())
    assert result.doc_type == formats.DOC and result.chunks[0].source.mime_type == "application/msword"
    assert any("These are a few of my favorite things:" in c.heading_path for c in result.chunks) \
        or "These are a few of my favorite things" in text_of(result)
    assert "This is my first thought." in text_of(result)


@needs_libreoffice
def test_legacy_spreadsheet_and_presentation_are_read():
    sheet = parse("tests-example.xls", (FILES / "tests-example.xls").read_bytes())
    assert any(list(c.heading_path)[:1] == ["Format Abbr."] for c in sheet.chunks)
    assert "Multiple Fill in the Blank" in text_of(sheet)
    slides = parse("fake-power-point.ppt", (FILES / "fake-power-point.ppt").read_bytes())
    assert "Here is some text in a text box!" in text_of(slides)


@needs_libreoffice
def test_legacy_file_that_is_not_one_is_refused_naming_libreoffice():
    with pytest.raises(InvalidArgument, match="could not be read as a legacy DOC file") as caught:
        parse("notes.doc", b"plain words, not a Word file" * 10)
    assert errors.reason_of(caught.value) == errors.CORRUPT


def test_outlook_message_has_subject_heading_sender_and_attachment():
    result = parse("fake-email-attachment.msg", (FILES / "fake-email-attachment.msg").read_bytes())
    assert result.chunks[0].heading_path[0] == "Fake email with attachment"
    assert "Lots of whitespace" in text_of(result)
    assert result.chunks[0].metadata["email_from"] == '"Mallori Harrell" <mallori@unstructured.io>'
    [attachment] = result.attachments
    assert attachment.doc_id == "fake-email-attachment.msg/fake-attachment.txt"
    assert text_of(attachment) == "Hey this is a fake attachment!"


def test_outlook_named_file_that_is_not_one_is_refused():
    with pytest.raises(InvalidArgument, match="not a readable Outlook message") as caught:
        parse("mail.msg", b"From: a@example.com\n\nhello")
    assert errors.reason_of(caught.value) == errors.CORRUPT


def test_shared_xlsx_still_reads(tmp_path):
    path = shared_data("docs", "en", "2023-half-year-analyses-by-segment.xlsx")
    assert parse(path.name, path.read_bytes()).chunks


@needs_libreoffice
def test_encrypted_legacy_office_file_is_refused_as_password_protected():
    data = shared_data("docs", "hostile", "password_protected.xlsx").read_bytes()
    with pytest.raises(InvalidArgument, match="password-protected") as caught:
        parse("budget.xls", data)
    assert errors.reason_of(caught.value) == errors.PASSWORD_PROTECTED


def _png_declaring(width: int, height: int) -> bytes:
    """A tiny PNG whose header claims width x height pixels (its data is never inflated)."""
    import struct
    import zlib

    buffer = io.BytesIO()
    Image.new("L", (1, 1)).save(buffer, format="PNG")
    data = bytearray(buffer.getvalue())
    header = b"IHDR" + struct.pack(">II", width, height) + bytes(data[24:29])
    data[12:29] = header
    data[29:33] = struct.pack(">I", zlib.crc32(header))
    return bytes(data)


@pytest.mark.parametrize("width, height", [(12_000, 12_000), (30_000, 30_000)])
def test_image_declaring_too_many_pixels_is_refused_before_decoding(width, height):
    with pytest.raises(InvalidArgument, match="pixels") as caught:
        parse("bomb.png", _png_declaring(width, height), OCR)
    assert errors.reason_of(caught.value) == errors.TOO_LARGE


def test_scanned_page_inside_a_born_digital_pdf_is_read_with_ocr_in_page_order():
    import pypdf

    scan = io.BytesIO()
    Image.open(FILES / "phototest.tif").convert("RGB").save(scan, format="PDF", resolution=100)
    writer = pypdf.PdfWriter()
    writer.append(pypdf.PdfReader(FILES / "fake-memo.pdf"))
    writer.append(pypdf.PdfReader(io.BytesIO(scan.getvalue())))
    mixed = io.BytesIO()
    writer.write(mixed)
    blocks = formats.read("mixed.pdf", mixed.getvalue(), formats.ReadOptions(ocr=True)).blocks
    pages = [b.page for b in blocks]
    assert pages == sorted(pages) and pages[0] == 1 and pages[-1] == 2
    text = " ".join(" ".join(b.text for b in blocks).split())
    assert "20,000 bottles of water" in text and "The quick brown dog jumped over the lazy fox." in text
    without_ocr = formats.read("mixed.pdf", mixed.getvalue()).blocks
    assert {b.page for b in without_ocr} == {1}
