"""PDF: checks before parsing (encryption, copy protection, damage, page limit), then the text layer or OCR.

Order of attempts:
1. the text layer's layout (`pdf_layout`: pdfplumber words, fonts and rules ->
   tables, headings from font statistics and the outline, columns, no chrome); with
   OCR on, pages that are one big image and no text (scans inside the PDF) are OCR'd
   and take their place by page number;
2. when that fails on a damaged file, unstructured `fast` (pdfminer, with its own
   structure repair);
3. when both yield nothing but the file has a text layer (unstructured skips
   PDFs its heuristics call "too complex", e.g. heavy vector drawings), the
   text layer page by page through pypdf;
4. no text layer at all: OCR (`ocr`: tesseract with orientation detection, the KB's
   languages) when the knowledge base enables it, otherwise `image_only_without_ocr`.
`hi_res` is never used: it needs layout models downloaded from a model hub.
"""

from __future__ import annotations

import io
import logging
import re

from services.parser import elements, errors, pdf_layout
from services.parser.formats import Block, ReadOptions

log = logging.getLogger("ragkb.parser")

_EXTRACT_PERMISSION = 1 << 4  # PDF permission bit 5: copy or extract text and graphics


def read(filename: str, data: bytes, options: ReadOptions) -> tuple[list[Block], int]:
    pages, outline = open_checked(filename, data, options)
    scanned: list[int] = []
    blocks = _layout(data, outline, scanned)
    if blocks and scanned and options.ocr:  # scanned pages inside a born-digital PDF
        blocks = sorted(blocks + _ocr(data, pages, options, only=scanned), key=lambda b: b.page)
    if not blocks:
        blocks = _text_layer(data)
    if not blocks:
        blocks = _pypdf_text(data)
    if not blocks:
        if not options.ocr:
            raise errors.ParseError(errors.IMAGE_ONLY,
                                    f"{filename!r} has no text layer (scanned or image-only PDF) and OCR is off "
                                    "for this knowledge base; enable parser.ocr to read it")
        blocks = _ocr(data, pages, options)
    return blocks, pages


def open_checked(filename: str, data: bytes, options: ReadOptions) -> tuple[int, dict[str, int]]:
    """The page count and outline titles, after refusing encrypted, copy-protected, damaged or too long PDFs."""
    import pypdf

    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            if not reader.decrypt(""):
                raise errors.ParseError(errors.PASSWORD_PROTECTED,
                                        f"{filename!r} is password-protected; remove the password and upload it again")
            if not options.allow_copy_protected and not reader.user_access_permissions & _EXTRACT_PERMISSION:
                raise errors.ParseError(errors.COPY_PROTECTED,
                                        f"{filename!r} is copy-protected: its owner does not permit text extraction "
                                        "(set parser.allow_copy_protected if you hold the rights)")
        pages = len(reader.pages)
        outline = pdf_layout.outline_levels(reader)
    except errors.ParseError:
        raise
    except Exception as error:
        raise errors.ParseError(errors.CORRUPT, f"{filename!r} is not a readable PDF: "
                                                f"{type(error).__name__}: {str(error)[:200]}") from None
    if pages == 0:
        raise errors.ParseError(errors.CORRUPT, f"{filename!r} is a PDF without pages")
    if pages > options.max_pages:
        raise errors.ParseError(errors.TOO_MANY_PAGES,
                                f"{filename!r} has {pages} pages; this knowledge base allows {options.max_pages}")
    return pages, outline


def _layout(data: bytes, outline: dict[str, int], scanned: list[int]) -> list[Block]:
    try:
        return pdf_layout.read(data, outline, scanned)
    except Exception as error:  # pdfminer's structure repair in unstructured may still read it
        log.info("pdf layout reading failed (%s: %s); trying unstructured", type(error).__name__, str(error)[:200])
        return []


def _text_layer(data: bytes) -> list[Block]:
    from unstructured.partition.pdf import partition_pdf

    # languages only label elements here; OCR languages matter in _ocr
    found = partition_pdf(file=io.BytesIO(data), strategy="fast", languages=["eng"])
    blocks = elements.to_blocks(found, headings="inferred")
    return blocks if any(b.text.strip() for b in blocks) else []


def _pypdf_text(data: bytes) -> list[Block]:
    import pypdf

    blocks: list[Block] = []
    for number, page in enumerate(pypdf.PdfReader(io.BytesIO(data)).pages, start=1):
        text = page.extract_text() or ""
        for paragraph in re.split(r"\n\s*\n", text):
            lines = " ".join(line.strip() for line in paragraph.splitlines() if line.strip())
            if lines:
                blocks.append(Block(kind="paragraph", text=lines, page=number))
    if blocks:
        log.info("pdf text layer read with pypdf (unstructured extracted nothing)")
    return blocks


def _ocr(data: bytes, pages: int, options: ReadOptions, only: list[int] | None = None) -> list[Block]:
    from services.parser import ocr

    return ocr.read_pdf(data, only or list(range(1, pages + 1)), options.ocr_languages)
