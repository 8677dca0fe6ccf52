"""Hostile input files, generated on demand (never committed): one per row of the hostile-input table.

Used by tests/integration/test_hostile_inputs.py and scripts/bench/hostile_memory.py. Every
generator streams what it writes, so making a file that inflates to hundreds of MB costs
little memory.
"""

from __future__ import annotations

import io
import zipfile

MB = 1024 * 1024

# (encoding, text): one sample per legacy encoding the parser must store as correct Unicode
ENCODED_TEXTS = {
    "shift_jis": "倉庫管理マニュアル：倉庫は毎週土曜日の午前6時に開きます。出荷前に注文番号を確認してください。",
    "euc_kr": "창고 관리 설명서: 창고는 매주 토요일 오전 6시에 문을 엽니다. 출하 전에 주문 번호를 확인하십시오.",
    "big5": "倉庫管理手冊：倉庫每週六上午六點開門，週日休息。出貨前請確認訂單編號與客戶地址。",
    "gb18030": "仓库管理手册：仓库每周六上午六点开门，周日休息。发货前请确认订单编号与客户地址。",
    "utf-16": "Warehouse manual / 仓库手册: the warehouse opens at 6 am on Saturdays; 周日休息。",
    "cp1252": "Lagerhandbuch: Das Lager öffnet samstags um 6 Uhr. Prüfen Sie die Größe – „Bestellnummer“ – vor dem Versand.",
}

_CONTENT_TYPES = (
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
    '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
    '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
    '<Default Extension="xml" ContentType="application/xml"/>'
    '<Override PartName="/xl/workbook.xml" '
    'ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml"/>'
    '<Override PartName="/xl/worksheets/sheet1.xml" '
    'ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml"/>'
    '</Types>')
_ROOT_RELS = (
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
    '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
    '<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/'
    'officeDocument" Target="xl/workbook.xml"/></Relationships>')
_WORKBOOK = (
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
    '<workbook xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main" '
    'xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships">'
    '<sheets><sheet name="Data" sheetId="1" r:id="rId1"/></sheets></workbook>')
_WORKBOOK_RELS = (
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
    '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
    '<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/worksheet" '
    'Target="worksheets/sheet1.xml"/></Relationships>')


def docx_zip_bomb(inflated_bytes: int = 300 * MB) -> bytes:
    """A real DOCX whose document.xml is padded with whitespace until it inflates to `inflated_bytes`."""
    import docx

    document = docx.Document()
    document.add_paragraph("A bomb hides in the whitespace of this document.")
    plain = io.BytesIO()
    document.save(plain)
    out = io.BytesIO()
    with zipfile.ZipFile(plain) as source, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as bomb:
        for entry in source.infolist():
            data = source.read(entry)
            if entry.filename != "word/document.xml":
                bomb.writestr(entry, data)
                continue
            head, tail = data.split(b"<w:body>", 1)
            with bomb.open("word/document.xml", "w", force_zip64=True) as part:
                part.write(head + b"<w:body>")
                padding = b" " * MB
                for _ in range(inflated_bytes // MB):
                    part.write(padding)
                part.write(tail)
    return out.getvalue()


def xlsx_with_cells(cells: int = 1_000_000, columns: int = 50) -> bytes:
    """A minimal XLSX whose one sheet holds `cells` numeric cells."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as book:
        book.writestr("[Content_Types].xml", _CONTENT_TYPES)
        book.writestr("_rels/.rels", _ROOT_RELS)
        book.writestr("xl/workbook.xml", _WORKBOOK)
        book.writestr("xl/_rels/workbook.xml.rels", _WORKBOOK_RELS)
        with book.open("xl/worksheets/sheet1.xml", "w", force_zip64=True) as sheet:
            sheet.write(b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
                        b'<worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"><sheetData>')
            row = b"<row>" + b"".join(b"<c><v>%d</v></c>" % i for i in range(columns)) + b"</row>"
            for _ in range(cells // columns):
                sheet.write(row)
            sheet.write(b"</sheetData></worksheet>")
    return out.getvalue()


def xlsx_with_page_like_sheets() -> bytes:
    """Sheets named Sheet1..Sheet3 and "Page 1", each with a title, a lone number and a small table."""
    import openpyxl

    book = openpyxl.Workbook()
    book.remove(book.active)
    for index, name in enumerate(["Sheet1", "Sheet2", "Sheet3", "Page 1"], start=1):
        sheet = book.create_sheet(name)
        sheet.append([f"Depot {index} stock"])
        sheet.append([])
        sheet.append([40 + index])
        sheet.append([])
        sheet.append(["item", "count"])
        sheet.append([f"pallets-{index}", 100 * index])
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def nested_divs_html(depth: int = 100_000) -> bytes:
    return ("<html><body>" + "<div>" * depth + "Deep inside the nesting." + "</div>" * depth
            + "<p>The paragraph after the nesting is kept.</p></body></html>").encode()


def encoded_text(encoding: str) -> tuple[bytes, str]:
    text = ENCODED_TEXTS[encoding]
    return text.encode(encoding), text
