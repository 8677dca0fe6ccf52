"""Zip-based Office files (DOCX, PPTX, XLSX) before any library opens them: what they are, and how big.

A 4 MB DOCX can inflate to gigabytes of XML (a zip bomb). The central directory
declares each entry's uncompressed size, and Python's zipfile never inflates an
entry past its declared size (it fails the CRC check instead), so the declared
sizes and the entry count bound what any reader of the file can be made to
decompress. Spreadsheets are also counted cell by cell, streaming, so a sheet
of a million cells is refused before it is parsed.
"""

from __future__ import annotations

import io
import re
import zipfile

from services.parser import errors

ZIP_MAGIC = b"PK\x03\x04"
# the part that tells which Office format a zip is; the values are the parser's type names (formats.DOCX, …)
OFFICE_PARTS = {"word/document.xml": "docx", "ppt/presentation.xml": "pptx", "xl/workbook.xml": "xlsx"}
_CELL = re.compile(rb"<(?:\w+:)?c[\s>/]")
_STREAM_BYTES = 1 << 20


def open_zip(filename: str, data: bytes) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, ValueError) as error:
        raise errors.ParseError(errors.CORRUPT, f"{filename!r} is not a readable zip container: {error}") from None


def office_kind(data: bytes) -> str:
    """'docx', 'pptx' or 'xlsx' for an Office zip; '' for anything else."""
    if not data.startswith(ZIP_MAGIC):
        return ""
    try:
        names = set(zipfile.ZipFile(io.BytesIO(data)).namelist())
    except (zipfile.BadZipFile, ValueError):
        return ""
    return next((kind for part, kind in OFFICE_PARTS.items() if part in names), "")


def check_zip_limits(filename: str, data: bytes, *, max_entries: int, max_unzipped_bytes: int) -> None:
    archive = open_zip(filename, data)
    entries = archive.infolist()
    if len(entries) > max_entries:
        raise errors.ParseError(errors.TOO_MANY_ZIP_ENTRIES,
                                f"{filename!r} holds {len(entries)} zip entries; the limit is {max_entries}")
    unzipped = sum(entry.file_size for entry in entries)
    if unzipped > max_unzipped_bytes:
        raise errors.ParseError(errors.DECOMPRESSED_TOO_LARGE,
                                f"{filename!r} inflates from {len(data)} to {unzipped} bytes; the limit is "
                                f"{max_unzipped_bytes} bytes decompressed")


def check_spreadsheet_cells(filename: str, data: bytes, *, max_cells: int) -> int:
    """Count the cells of every sheet (streaming the XML); refuse past `max_cells`. Returns the count."""
    archive = open_zip(filename, data)
    cells = 0
    for name in archive.namelist():
        if not (name.startswith("xl/worksheets/") and name.endswith(".xml")):
            continue
        with archive.open(name) as sheet:
            tail = b""
            while block := sheet.read(_STREAM_BYTES):
                window = tail + block
                cells += len(_CELL.findall(window)) - len(_CELL.findall(tail))
                tail = window[-16:]
                if cells > max_cells:
                    raise errors.ParseError(errors.TOO_MANY_ELEMENTS,
                                            f"{filename!r} has more than {max_cells} spreadsheet cells; "
                                            f"the limit is {max_cells} elements")
    return cells
