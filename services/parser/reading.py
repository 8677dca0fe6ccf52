"""One reader per format, each built on unstructured's partitioners (imported lazily: they are heavy)."""

from __future__ import annotations

import io
import os
import zipfile

from services.parser import cleaning, elements, errors, formats
from services.parser.formats import Block, ParsedDocument, ReadOptions


def read(filename: str, doc_type: str, data: bytes, options: ReadOptions) -> ParsedDocument:
    _prepare()
    return _READERS[doc_type](filename, data, options)


def _prepare() -> None:
    os.environ.setdefault("UNSTRUCTURED_DISABLE_NOTICE", "1")
    os.environ.setdefault("SCARF_NO_ANALYTICS", "true")  # unstructured pings its analytics host otherwise
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # no strategy we use may fetch models
    from services.parser.nlp import install_offline_pipeline

    install_offline_pipeline()


def preload(doc_type: str) -> None:
    """Import the partitioner of one format now (a parse worker does it before the file's memory limit)."""
    import importlib

    _prepare()
    for module in _PARTITIONERS.get(doc_type, ()):
        importlib.import_module(module)


def read_text(filename: str, data: bytes, options: ReadOptions) -> ParsedDocument:
    from unstructured.partition.text import partition_text

    text, encoding = formats.decode_text_file(filename, formats.TEXT, data)
    blocks = elements.to_blocks(partition_text(text=text, languages=["auto"]), headings="none")
    return ParsedDocument(blocks=blocks, encoding=encoding)


def read_html(filename: str, data: bytes, options: ReadOptions) -> ParsedDocument:
    text, encoding = formats.decode_text_file(filename, formats.HTML, data)
    document = html_document(text)
    document.encoding = encoding
    return document


def read_markdown(filename: str, data: bytes, options: ReadOptions) -> ParsedDocument:
    import markdown

    text, encoding = formats.decode_text_file(filename, formats.MARKDOWN, data)
    # the same conversion unstructured's partition_md makes, so images and chrome get our HTML cleaning
    document = html_document(markdown.markdown(text, extensions=["tables", "fenced_code"]))
    document.encoding = encoding
    return document


def html_document(html: str) -> ParsedDocument:
    from unstructured.partition.html import partition_html

    cleaned, title = cleaning.clean_html(html)
    if not cleaned.strip():
        return ParsedDocument(title=title)
    blocks = elements.to_blocks(partition_html(text=cleaned, languages=["auto"]), headings="structured")
    return ParsedDocument(blocks=blocks, title=title)


def read_docx(filename: str, data: bytes, options: ReadOptions) -> ParsedDocument:
    from unstructured.partition.docx import partition_docx

    from services.parser.docx_prepare import prepare

    found = partition_docx(file=io.BytesIO(prepare(data)), metadata_filename=filename, languages=["auto"])
    blocks = elements.to_blocks(found, headings="structured", numbered_headings=True)
    return _paged(filename, blocks, options)


def read_pptx(filename: str, data: bytes, options: ReadOptions) -> ParsedDocument:
    from unstructured.partition.pptx import partition_pptx

    slides = sum(1 for name in zipfile.ZipFile(io.BytesIO(data)).namelist()
                 if name.startswith("ppt/slides/slide") and name.endswith(".xml"))
    _check_pages(filename, slides, options)
    found = partition_pptx(file=io.BytesIO(data), metadata_filename=filename, languages=["auto"])
    return _paged(filename, elements.to_blocks(found, headings="structured"), options)


def read_xlsx(filename: str, data: bytes, options: ReadOptions) -> ParsedDocument:
    """Each sheet is a level-1 section named after the sheet; titles inside it are level 2."""
    from unstructured.partition.xlsx import partition_xlsx

    try:
        found = partition_xlsx(file=io.BytesIO(data), metadata_filename=filename, languages=["auto"])
    except Exception as error:
        if "password" in str(error).lower():
            raise errors.ParseError(errors.PASSWORD_PROTECTED, f"{filename!r} is password-protected") from None
        raise
    blocks: list[Block] = []
    sheets = _by_sheet(found)
    _check_pages(filename, len(sheets), options)
    for sheet, sheet_elements in sheets:
        blocks.append(Block(kind="heading", text=sheet, level=1, page=sheet_elements[0].metadata.page_number or 0))
        for block in elements.to_blocks(sheet_elements, headings="inferred"):
            if block.kind == "heading":
                block.level = 2
            blocks.append(block)
    # sheets are not printed pages: no page chrome to remove (a sheet named "Page 1" or a lone number is content)
    return ParsedDocument(blocks=blocks, page_count=len(sheets))


def _by_sheet(found: list) -> list[tuple[str, list]]:
    sheets: list[tuple[str, list]] = []
    for element in found:
        name = element.metadata.page_name or f"Sheet {element.metadata.page_number or len(sheets) + 1}"
        if not sheets or sheets[-1][0] != name:
            sheets.append((name, []))
        sheets[-1][1].append(element)
    return sheets


def read_pdf(filename: str, data: bytes, options: ReadOptions) -> ParsedDocument:
    from services.parser import pdf

    blocks, pages = pdf.read(filename, data, options)
    document = _paged(filename, blocks, options)
    document.page_count = pages
    return document


def read_eml(filename: str, data: bytes, options: ReadOptions) -> ParsedDocument:
    from services.parser import mail

    return mail.read(filename, data)


def read_msg(filename: str, data: bytes, options: ReadOptions) -> ParsedDocument:
    from services.parser import mail

    return mail.read_msg(filename, data)


def read_image(filename: str, data: bytes, options: ReadOptions) -> ParsedDocument:
    """A photo or scan (PNG, JPEG, TIFF with its pages, …) is read with OCR, or refused when OCR is off."""
    from services.parser import ocr

    pages = ocr.image_pages(filename, data, options.max_pages)
    if not options.ocr:
        raise errors.ParseError(errors.IMAGE_ONLY, f"{filename!r} is an image and OCR is off for this knowledge "
                                                   "base; enable parser.ocr to read it")
    return ParsedDocument(blocks=ocr.read_images(pages, options.ocr_languages), page_count=len(pages))


def read_csv(filename: str, data: bytes, options: ReadOptions) -> ParsedDocument:
    """CSV/TSV: one table whose first row is the header; a leading row with a single filled cell is its caption."""
    import csv

    text, encoding = formats.decode_text_file(filename, formats.CSV, data)
    if filename.lower().endswith(".tsv"):
        delimiter = "\t"
    else:
        try:
            delimiter = csv.Sniffer().sniff(text[:8192], delimiters=",;\t|").delimiter
        except csv.Error:  # one column, or too irregular to tell: commas
            delimiter = ","
    rows = [[" ".join(cell.split()).replace("|", "/") for cell in row]
            for row in csv.reader(io.StringIO(text), delimiter=delimiter)]
    rows = [row for row in rows if any(row)]
    cells = sum(len(row) for row in rows)
    if cells > options.max_elements:
        raise errors.ParseError(errors.TOO_MANY_ELEMENTS, f"{filename!r} has {cells} cells; the limit is "
                                                          f"{options.max_elements} elements")
    blocks: list[Block] = []
    while rows and sum(1 for cell in rows[0] if cell) == 1 and len(rows) > 1:
        blocks.append(Block(kind="paragraph", text=next(cell for cell in rows.pop(0) if cell)))
    if rows:
        blocks.append(Block(kind="table", text=elements.markdown_table(rows)))
    return ParsedDocument(blocks=blocks, encoding=encoding)


def read_legacy_office(filename: str, data: bytes, options: ReadOptions) -> ParsedDocument:
    """.doc / .xls / .ppt: converted by LibreOffice, then read (and limited) as the OOXML file it becomes."""
    from services.parser import legacy

    doc_type = formats.sniff_type(filename, data)
    converted = legacy.convert(filename, doc_type, data)
    target = legacy.TARGETS[doc_type]
    formats.check_container(filename, target, converted, options)
    return _READERS[target](filename, converted, options)


def _paged(filename: str, blocks: list[Block], options: ReadOptions) -> ParsedDocument:
    """A document of printed pages (PDF, DOCX, PPTX): page numbers and running headers/footers are chrome."""
    pages = max((b.page for b in blocks), default=0)
    _check_pages(filename, pages, options)
    return ParsedDocument(blocks=cleaning.drop_page_chrome(blocks, pages), page_count=pages)


def _check_pages(filename: str, pages: int, options: ReadOptions) -> None:
    if pages > options.max_pages:
        raise errors.ParseError(errors.TOO_MANY_PAGES,
                                f"{filename!r} has {pages} pages; this knowledge base allows {options.max_pages}")


_PARTITIONERS = {
    formats.TEXT: ("unstructured.partition.text",), formats.HTML: ("unstructured.partition.html",),
    formats.MARKDOWN: ("markdown", "unstructured.partition.html"), formats.DOCX: ("unstructured.partition.docx",),
    formats.PPTX: ("unstructured.partition.pptx",), formats.XLSX: ("unstructured.partition.xlsx",),
    formats.PDF: ("unstructured.partition.pdf",),
    formats.EML: ("unstructured.partition.text", "unstructured.partition.html"),
    formats.MSG: ("extract_msg", "unstructured.partition.text", "unstructured.partition.html"),
    formats.IMAGE: ("PIL.Image",), formats.DOC: ("unstructured.partition.docx",),
    formats.XLS: ("unstructured.partition.xlsx",), formats.PPT: ("unstructured.partition.pptx",),
}
_READERS = {
    formats.TEXT: read_text, formats.HTML: read_html, formats.MARKDOWN: read_markdown, formats.DOCX: read_docx,
    formats.PPTX: read_pptx, formats.XLSX: read_xlsx, formats.PDF: read_pdf, formats.EML: read_eml,
    formats.MSG: read_msg, formats.IMAGE: read_image, formats.CSV: read_csv, formats.DOC: read_legacy_office,
    formats.XLS: read_legacy_office, formats.PPT: read_legacy_office,
}
