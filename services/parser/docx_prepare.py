"""DOCX parts that python-docx (and so unstructured) skips, rewritten into plain paragraphs and runs first.

- Strict OOXML (ISO/IEC 29500 Strict) uses other namespace URIs for the same elements; they
  are mapped to the transitional ones, otherwise the file reads as "not a Word file".
- Content controls (`w:sdt`: form fields, cover-page blocks) are unwrapped to their content;
  a table of contents control is dropped (it repeats the headings with page numbers).
- Text boxes and shapes (`w:txbxContent`, DrawingML `a:t` text in drawings) are moved out
  after the paragraph that anchors them; where a drawing comes twice (`mc:AlternateContent`:
  DrawingML choice and VML fallback) only the choice is kept.
- Equations (Office Math, `m:oMath`) become a run of their linear text.
The zip's declared sizes were checked before (containers.check_zip_limits), so reading
the parts here inflates nothing unbounded.
"""

from __future__ import annotations

import io
import zipfile

W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
M = "http://schemas.openxmlformats.org/officeDocument/2006/math"
A = "http://schemas.openxmlformats.org/drawingml/2006/main"
MC = "http://schemas.openxmlformats.org/markup-compatibility/2006"
_NS = {"w": W, "m": M, "a": A, "mc": MC}
# Strict namespace -> transitional namespace (ECMA-376 Part 1, Annex A)
STRICT_NAMESPACES = {
    b"http://purl.oclc.org/ooxml/wordprocessingml/main": b"http://schemas.openxmlformats.org/wordprocessingml/2006/main",
    b"http://purl.oclc.org/ooxml/officeDocument/relationships":
        b"http://schemas.openxmlformats.org/officeDocument/2006/relationships",
    b"http://purl.oclc.org/ooxml/officeDocument/math": b"http://schemas.openxmlformats.org/officeDocument/2006/math",
    b"http://purl.oclc.org/ooxml/drawingml/main": b"http://schemas.openxmlformats.org/drawingml/2006/main",
    b"http://purl.oclc.org/ooxml/drawingml/wordprocessingDrawing":
        b"http://schemas.openxmlformats.org/drawingml/2006/wordprocessingDrawing",
    b"http://purl.oclc.org/ooxml/drawingml/picture": b"http://schemas.openxmlformats.org/drawingml/2006/picture",
    b"http://purl.oclc.org/ooxml/officeDocument/extendedProperties":
        b"http://schemas.openxmlformats.org/officeDocument/2006/extended-properties",
    b"http://purl.oclc.org/ooxml/officeDocument/relationships/":
        b"http://schemas.openxmlformats.org/officeDocument/2006/relationships/",
}
_STRICT_MARK = b"http://purl.oclc.org/ooxml/"


def prepare(data: bytes) -> bytes:
    """The DOCX with those parts rewritten; the input unchanged when there is nothing to rewrite."""
    import lxml.etree

    source = zipfile.ZipFile(io.BytesIO(data))
    parts = {info.filename: source.read(info) for info in source.infolist()}
    strict = any(_STRICT_MARK in content for name, content in parts.items() if name.endswith((".xml", ".rels")))
    if strict:
        parts = {name: _transitional(content) if name.endswith((".xml", ".rels")) else content
                 for name, content in parts.items()}
    document = parts.get("word/document.xml", b"")
    if not strict and not any(marker in document for marker in (b"<w:sdt>", b"<w:sdt ", b"txbxContent",
                                                                 b"<m:oMath", b"<a:t>", b"<a:t ")):
        return data
    root = lxml.etree.fromstring(document, lxml.etree.XMLParser(resolve_entities=False, huge_tree=False))
    _unwrap_content_controls(root)
    _equations_as_text(root)
    _lift_drawing_text(root)
    parts["word/document.xml"] = lxml.etree.tostring(root, xml_declaration=True, encoding="UTF-8", standalone=True)
    output = io.BytesIO()
    with zipfile.ZipFile(output, "w", zipfile.ZIP_DEFLATED) as target:
        for name, content in parts.items():
            target.writestr(name, content)
    return output.getvalue()


def _transitional(content: bytes) -> bytes:
    for strict, transitional in STRICT_NAMESPACES.items():
        content = content.replace(strict, transitional)
    return content


def _unwrap_content_controls(root) -> None:
    """Content controls give way to their content; a table of contents (a copy of the headings with page
    numbers) is dropped."""
    for control in reversed(root.xpath("//w:sdt", namespaces=_NS)):
        gallery = control.xpath("./w:sdtPr/w:docPartObj/w:docPartGallery/@w:val", namespaces=_NS)
        if gallery and gallery[0].lower().startswith("table of contents"):
            control.getparent().remove(control)
        else:
            _replace_with_children(control, control.find(f"{{{W}}}sdtContent"))


def _replace_with_children(element, container) -> None:
    parent = element.getparent()
    if parent is None:
        return
    index = parent.index(element)
    parent.remove(element)
    for offset, child in enumerate(list(container) if container is not None else []):
        parent.insert(index + offset, child)


def _equations_as_text(root) -> None:
    """Each outermost equation becomes a run with its linear text (the m:t texts in order)."""
    for equation in root.xpath("//m:oMathPara | //m:oMath[not(ancestor::m:oMathPara)]", namespaces=_NS):
        text = "".join(equation.xpath(".//m:t/text()", namespaces=_NS)).strip()
        run = _run(text)
        parent = equation.getparent()
        if parent.tag == f"{{{W}}}body":  # an equation paragraph on its own: wrap it in a paragraph
            paragraph = parent.makeelement(f"{{{W}}}p")
            paragraph.append(run)
            run = paragraph
        parent.replace(equation, run)


def _run(text: str):
    import lxml.etree

    run = lxml.etree.Element(f"{{{W}}}r")
    node = lxml.etree.SubElement(run, f"{{{W}}}t")
    node.text = text
    node.set("{http://www.w3.org/XML/1998/namespace}space", "preserve")
    return run


def _lift_drawing_text(root) -> None:
    """Text inside drawings goes after the top-level paragraph that anchors the drawing."""
    for fallback in root.xpath("//mc:AlternateContent[mc:Choice]/mc:Fallback", namespaces=_NS):
        fallback.getparent().remove(fallback)  # the VML copy of the same drawing
    body = root.find(f"{{{W}}}body")
    if body is None:
        return
    for anchor in list(body):
        boxes = anchor.xpath(".//w:txbxContent", namespaces=_NS)
        moved = [p for box in boxes for p in box.xpath("./w:p | ./w:tbl", namespaces=_NS)]
        for box in boxes:
            box.getparent().remove(box)
        shape_text = [text for paragraph in anchor.xpath(".//a:p", namespaces=_NS)
                      if (text := "".join(paragraph.xpath(".//a:t/text()", namespaces=_NS)).strip())]
        index = body.index(anchor)
        for offset, element in enumerate(moved + [_paragraph(text) for text in shape_text], start=1):
            body.insert(index + offset, element)


def _paragraph(text: str):
    import lxml.etree

    paragraph = lxml.etree.Element(f"{{{W}}}p")
    paragraph.append(_run(text))
    return paragraph
