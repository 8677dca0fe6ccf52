"""DOCX content python-docx skips: text boxes, shapes, content controls, equations, Strict OOXML; HTML <figure>."""

from __future__ import annotations

import io
import re
import zipfile

import pytest
from docx import Document

from services.parser import docx_prepare, formats

pytestmark = pytest.mark.unit

W = docx_prepare.W
NAMESPACES = (f'xmlns:w="{W}" xmlns:m="{docx_prepare.M}" xmlns:a="{docx_prepare.A}" xmlns:mc="{docx_prepare.MC}" '
              'xmlns:wps="http://schemas.microsoft.com/office/word/2010/wordprocessingShape" '
              'xmlns:wp="http://schemas.openxmlformats.org/drawingml/2006/wordprocessingDrawing" '
              'xmlns:v="urn:schemas-microsoft-com:vml"')
TEXT_BOX = """<w:p><w:r><w:t>Anchor paragraph.</w:t></w:r><w:r><mc:AlternateContent>
<mc:Choice Requires="wps"><w:drawing><wp:anchor><a:graphic><a:graphicData><wps:wsp><wps:txbx><w:txbxContent>
<w:p><w:r><w:t>Battery warning inside a text box.</w:t></w:r></w:p></w:txbxContent></wps:txbx></wps:wsp>
</a:graphicData></a:graphic></wp:anchor></w:drawing></mc:Choice>
<mc:Fallback><w:pict><v:shape><v:textbox><w:txbxContent><w:p><w:r><w:t>Battery warning inside a text box.</w:t>
</w:r></w:p></w:txbxContent></v:textbox></v:shape></w:pict></mc:Fallback></mc:AlternateContent></w:r></w:p>"""
CONTROL = """<w:sdt><w:sdtPr><w:alias w:val="Owner"/></w:sdtPr><w:sdtContent><w:p><w:r><w:t>Owner: 运维组</w:t></w:r></w:p>
</w:sdtContent></w:sdt>"""
TOC = """<w:sdt><w:sdtPr><w:docPartObj><w:docPartGallery w:val="Table of Contents"/></w:docPartObj></w:sdtPr>
<w:sdtContent><w:p><w:r><w:t>1 Charging ........ 3</w:t></w:r></w:p></w:sdtContent></w:sdt>"""
EQUATION = """<w:p><w:r><w:t>Energy: </w:t></w:r><m:oMath><m:r><m:t>E=m</m:t></m:r><m:sSup><m:e><m:r><m:t>c</m:t></m:r>
</m:e><m:sup><m:r><m:t>2</m:t></m:r></m:sup></m:sSup></m:oMath></w:p>"""
SHAPE = """<w:p><w:r><w:drawing><wp:inline><a:graphic><a:graphicData><a:sp><a:txBody><a:p><a:r><a:t>Shape label only</a:t>
</a:r></a:p></a:txBody></a:sp></a:graphicData></a:graphic></wp:inline></w:drawing></w:r></w:p>"""


def docx_with(body_xml: str, *, strict: bool = False) -> bytes:
    document = Document()
    document.add_heading("Charging", level=1)
    buffer = io.BytesIO()
    document.save(buffer)
    source = zipfile.ZipFile(io.BytesIO(buffer.getvalue()))
    output = io.BytesIO()
    with zipfile.ZipFile(output, "w") as target:
        for info in source.infolist():
            content = source.read(info)
            if info.filename == "word/document.xml":
                text = content.decode()
                text = text.replace("<w:document ", f"<w:document {NAMESPACES} ", 1)
                content = text.replace("<w:sectPr", body_xml + "<w:sectPr", 1).encode()
                content = _dedupe_namespaces(content)
            if strict and info.filename.endswith((".xml", ".rels")):
                for strict_uri, transitional in docx_prepare.STRICT_NAMESPACES.items():
                    content = content.replace(transitional, strict_uri)
            target.writestr(info, content)
    return output.getvalue()


def _dedupe_namespaces(content: bytes) -> bytes:
    """python-docx already declares some of these prefixes; keep each declaration once."""
    start = content.index(b"<w:document")
    end = content.index(b">", start)
    tag = content[start:end]
    seen, kept = set(), []
    for part in re.split(rb"\s+", tag):
        key = part.split(b"=", 1)[0]
        if key not in seen:
            seen.add(key)
            kept.append(part)
    return content[:start] + b" ".join(kept) + content[end:]


def blocks_of(data: bytes, name: str = "guide.docx"):
    return formats.read(name, data).blocks


def test_text_box_text_follows_its_anchor_once():
    texts = [b.text for b in blocks_of(docx_with(TEXT_BOX))]
    assert texts.index("Anchor paragraph.") < texts.index("Battery warning inside a text box.")
    assert texts.count("Battery warning inside a text box.") == 1


def test_content_control_is_unwrapped_and_a_table_of_contents_dropped():
    texts = [b.text for b in blocks_of(docx_with(CONTROL + TOC))]
    assert "Owner: 运维组" in texts
    assert not any("Charging ........" in text for text in texts)


def test_equation_becomes_its_linear_text():
    texts = [b.text for b in blocks_of(docx_with(EQUATION))]
    assert "Energy: E=mc2" in texts


def test_drawingml_only_text_is_read_not_refused_as_no_text():
    data = docx_with(SHAPE)
    assert "Shape label only" in [b.text for b in blocks_of(data)]


def test_strict_ooxml_reads_like_transitional():
    data = docx_with(CONTROL, strict=True)
    assert b"http://purl.oclc.org/ooxml/wordprocessingml/main" in zipfile.ZipFile(io.BytesIO(data)).read(
        "word/document.xml")
    blocks = blocks_of(data)
    assert ("heading", "Charging") in [(b.kind, b.text) for b in blocks]
    assert "Owner: 运维组" in [b.text for b in blocks]


def test_plain_docx_passes_through_unchanged():
    document = Document()
    document.add_paragraph("Nothing special here.")
    buffer = io.BytesIO()
    document.save(buffer)
    assert docx_prepare.prepare(buffer.getvalue()) == buffer.getvalue()


def test_html_figure_keeps_its_content_and_caption():
    html = (b"<html><body><h1>Dock</h1><figure><img src='dock.png' alt='charging dock'>"
            b"<figcaption>Figure 1: the dock from the front</figcaption></figure>"
            b"<figure><table><tr><th>a</th><th>b</th></tr><tr><td>1</td><td>2</td></tr></table>"
            b"<figcaption>Table 3: values</figcaption></figure></body></html>")
    blocks = formats.read("page.html", html).blocks
    texts = [b.text for b in blocks]
    assert "[image: charging dock]" in texts and "Figure 1: the dock from the front" in texts
    assert ("table", "Table 3: values\n| a | b |\n|---|---|\n| 1 | 2 |") in [(b.kind, b.text) for b in blocks]
