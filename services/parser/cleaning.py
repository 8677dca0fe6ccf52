"""Cleaning: whitespace, extraction artefacts, page numbers, repeated page headers/footers, HTML chrome.

Media stays text: an image is kept only as its alt text or link, so what is
embedded and shown in a citation is what the author wrote about the image.
"""

from __future__ import annotations

import re
from collections import Counter
from posixpath import basename

from services.parser.formats import Block

_SPACES = re.compile(r"[ \t\u00a0\u3000\u2000-\u200a\u202f]+")
_INVISIBLE = re.compile(r"[\u200b-\u200d\u2060\ufeff\u00ad]")
_CID = re.compile(r"\(cid:\d+\)")  # pdfminer's placeholder for glyphs it cannot map
_PAGE_NUMBER = re.compile(
    r"^(?:(?:page|p\.|pg\.?)\s*\d{1,4}(?:\s*(?:of|/)\s*\d{1,4})?"
    r"|\d{1,4}(?:\s*(?:of|/)\s*\d{1,4})?"
    r"|[-–—]\s*\d{1,4}\s*[-–—]"
    r"|第\s*\d{1,4}\s*页(?:\s*[,，/]?\s*共\s*\d{1,4}\s*页)?)$",
    re.IGNORECASE,
)
_DIGITS = re.compile(r"\d+")
_XML_DECLARATION = re.compile(r"^\s*<\?xml[^>]*\?>")
# tags that only wrap other content and always have a closing tag: safe to drop when nested too deep
_WRAPPER_TAG = re.compile(r"<(/?)(?:div|span|section|article|main|font|center|blockquote|b|i|u|em|strong|small|big|"
                          r"sup|sub)(?=[\s>/])[^>]*>", re.IGNORECASE)
MAX_WRAPPER_DEPTH = 64

# Page chrome and interactive parts of a web page, never content.
HTML_DROP_TAGS = ("script", "style", "noscript", "template", "nav", "header", "footer", "aside", "form", "iframe",
                  "svg", "button", "select", "object", "embed", "canvas", "dialog")
HTML_DROP_ROLES = ("navigation", "banner", "contentinfo", "search", "menu", "menubar", "dialog")


def clean_text(text: str) -> str:
    """Normalise whitespace line by line; drop invisible characters and extraction artefacts."""
    text = _CID.sub("", _INVISIBLE.sub("", text)).replace("\r\n", "\n").replace("\r", "\n")
    lines = [_SPACES.sub(" ", line).strip() for line in text.split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def is_page_number(text: str) -> bool:
    return bool(_PAGE_NUMBER.match(text.strip()))


def drop_page_chrome(blocks: list[Block], page_count: int) -> list[Block]:
    """Remove page numbers and lines repeated at the top or bottom of most pages (running headers/footers).

    A line counts as running chrome when it (digits ignored) opens or closes at
    least 3 pages and at least half of them.
    """
    blocks = [b for b in blocks if not (b.page and b.kind != "table" and is_page_number(b.text))]
    pages: dict[int, list[int]] = {}
    for index, block in enumerate(blocks):
        if block.page:
            pages.setdefault(block.page, []).append(index)
    if len(pages) < 3:
        return blocks
    edge_keys: dict[int, str] = {}
    seen = Counter()
    for indexes in pages.values():
        keys = set()
        for index in indexes[:2] + indexes[-2:]:
            block = blocks[index]
            if block.kind != "table" and len(block.text) <= 120:
                edge_keys[index] = _DIGITS.sub("#", block.text.lower())
                keys.add(edge_keys[index])
        seen.update(keys)
    threshold = max(3, (len(pages) + 1) // 2)
    return [b for i, b in enumerate(blocks) if seen.get(edge_keys.get(i, ""), 0) < threshold]


def flatten_deep_nesting(html: str, max_depth: int = MAX_WRAPPER_DEPTH) -> str:
    """Drop wrapper tags (div, span, …) nested deeper than `max_depth`; their text and other tags stay.

    libxml2's HTML parser stops at about 256 open elements and silently loses the rest
    of the page, so 100k nested <div>s would turn a page into nothing.
    """
    kept: list[bool] = []  # one entry per open wrapper tag: was it kept?
    depth = 0  # open wrapper tags that were kept

    def keep_or_drop(match: re.Match) -> str:
        nonlocal depth
        if match.group(1):  # a closing tag goes when its opening tag went
            keep = kept.pop() if kept else True
            depth -= keep and depth > 0
            return match.group(0) if keep else ""
        keep = depth < max_depth
        kept.append(keep)
        depth += keep
        return match.group(0) if keep else ""

    return _WRAPPER_TAG.sub(keep_or_drop, html)


def clean_html(html: str) -> tuple[str, str]:
    """Strip scripts, styles, navigation and other chrome; images become their alt text or link; a <figure>
    keeps its content and caption.

    Returns (cleaned html, the <title> text).
    """
    import lxml.etree
    import lxml.html

    # lxml refuses str input that declares its own encoding; the text is already decoded
    html = flatten_deep_nesting(_XML_DECLARATION.sub("", html, count=1))
    try:
        root = lxml.html.document_fromstring(html)
    except lxml.etree.ParserError:  # nothing but whitespace or comments
        return "", ""
    title = " ".join(" ".join(root.xpath("//head/title//text()")).split())
    for element in root.xpath("//head"):
        element.drop_tree()
    doomed = root.xpath(" | ".join(f"//{tag}" for tag in HTML_DROP_TAGS))
    doomed += root.xpath("//*[" + " or ".join(f"@role='{role}'" for role in HTML_DROP_ROLES) + "]")
    doomed += root.xpath("//*[@hidden or @aria-hidden='true']")
    for element in doomed:
        if element.getparent() is not None:
            element.drop_tree()
    for figure in root.xpath("//figure | //figcaption"):  # unstructured skips both; their content is text
        figure.tag = "div" if figure.tag == "figure" else "p"
    for image in root.xpath("//img"):
        text = _image_text(image)
        if text:
            _replace_with_text(image, text)
        else:
            image.drop_tree()
    return lxml.html.tostring(root, encoding="unicode"), title


def _image_text(image) -> str:
    alt = " ".join((image.get("alt") or image.get("title") or "").split())
    if alt:
        return f"[image: {alt}]"
    src = image.get("src") or ""
    if src and not src.startswith("data:"):
        return f"[image: {basename(src.split('?', 1)[0]) or src}]"
    return ""


def _replace_with_text(element, text: str) -> None:
    import lxml.html

    span = lxml.html.Element("span")
    span.text = f" {text} "
    span.tail = element.tail
    element.getparent().replace(element, span)
