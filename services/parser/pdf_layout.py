"""A PDF's text layer -> structured blocks, from the glyphs' positions and fonts alone (no layout model).

pdfplumber gives every word with its box, font and size; from those, per page:
- tables: fully ruled grids (pdfplumber's line strategy) and rule-bounded tables
  whose columns are whitespace-aligned (booktabs style: a rule above, one below the
  header, one at the end) become Markdown tables with their header row;
- chrome: rotated text in the margins (arXiv stamps, rotated axis labels), text over
  images, lines in the outer 6% of the page's height, and a page's first or last line
  when it is short and carries a page number (a running head or footer) are dropped;
- reading order: lines are split at wide gaps into segments; when a vertical gutter
  near the middle separates enough segments, the page is read as two columns, band by
  band between full-width segments (a title, a full-width figure caption);
- paragraphs: consecutive lines of one column and one style; a line-end hyphen
  between two lower-case letters is repaired;
- headings: per document, the body size is the most common glyph size; short
  paragraphs set larger than it (x1.15), or bold and numbered ("3.1 Overview"), or
  matching an entry of the PDF outline (bookmarks), are headings; sizes rank the
  levels. Text that is mostly digits or symbols (axis ticks, cells in figures) never is.
Right-to-left lines (Arabic, Hebrew) are stored in the PDF in visual order; they are
put back in logical order with the Unicode bidi algorithm, and ligatures and Arabic
presentation forms are NFKC-normalised so the words are searchable.
"""

from __future__ import annotations

import io
import re
import statistics
import unicodedata
from collections import Counter
from dataclasses import dataclass, field

from services.parser.cleaning import clean_text
from services.parser.elements import markdown_table
from services.parser.formats import Block

WORD_GAP = 1.5             # points between glyphs that still belong to one word
HEADING_SIZE_RATIO = 1.15  # a heading's size over the body size
EDGE_SHARE = 0.06          # the outer share of the page height where only chrome lives
MAX_HEADING_WORDS = 20
MAX_CELL_WORDS = 40          # a longer "cell" is a text column inside a layout grid
_BOLD = re.compile(r"bold|black|heavy|semibold|demi|medi|cmbx|,b$", re.IGNORECASE)
_NUMBERED = re.compile(r"^(\d{1,2}(?:\.\d{1,2}){0,3})\.?\s+\S")
_EDGE_NUMBER = re.compile(r"^\d{1,3}\s|\s\d{1,3}$|^\d{1,3}$")
_SENTENCE_END = (".", "!", "?", ";", ",", "。", "！", "？", "；", "，")
# ligatures (U+FB00–FB4F) and Arabic presentation forms: compatibility characters that hide words
_COMPATIBILITY = re.compile(r"[\ufb00-\ufdff\ufe70-\ufefe]+")
_RTL_LETTER = re.compile(r"[\u0590-\u08ff\ufb1d-\ufdff\ufe70-\ufefe]")
_LETTER = re.compile(r"[^\W\d_]")
_NUMBER = re.compile(r"[-+−]?[\d.,]+(?:[eE][-+]?\d+)?%?")


@dataclass
class Segment:
    """Words of one line that sit together (a line is split at wide gaps)."""

    x0: float
    x1: float
    top: float
    bottom: float
    size: float
    bold: bool
    text: str
    words: list[dict] = field(default_factory=list, repr=False)


@dataclass
class Line:
    top: float
    bottom: float
    size: float
    bold: bool
    text: str
    x0: float = 0.0


@dataclass
class PageContent:
    number: int
    lines: list[Line] = field(default_factory=list)
    tables: list[tuple[float, str]] = field(default_factory=list)  # (top, markdown)


def read(data: bytes, outline_titles: dict[str, int] | None = None, scanned: list[int] | None = None) -> list[Block]:
    """Blocks of the whole document; [] when the text layer holds no words. The numbers of pages without
    words whose image covers most of the page (scans inside a born-digital PDF) go to `scanned`."""
    import pdfplumber

    pages: list[PageContent] = []
    with pdfplumber.open(io.BytesIO(data)) as pdf:
        for number, page in enumerate(pdf.pages, start=1):
            pages.append(_read_page(page, number))
            if scanned is not None and not pages[-1].lines and not pages[-1].tables and _mostly_image(page):
                scanned.append(number)
            page.flush_cache()
    sizes = Counter()
    for content in pages:
        for line in content.lines:
            sizes[round(line.size * 2) / 2] += len(line.text)
    if not sizes:
        return [] if not any(c.tables for c in pages) else _only_tables(pages)
    body = sizes.most_common(1)[0][0]
    return _blocks(pages, body, outline_titles or {})


def _mostly_image(page) -> bool:
    area = page.width * page.height
    return any((i["x1"] - i["x0"]) * (i["bottom"] - i["top"]) >= 0.5 * area for i in page.images)


def normalize(text: str) -> str:
    """Ligatures and presentation forms NFKC-normalised; a right-to-left line in logical order."""
    if _RTL_LETTER.search(text) and len(_RTL_LETTER.findall(text)) * 2 >= len(_LETTER.findall(text)):
        from bidi import get_display

        text = get_display(text)  # the PDF stores the line in visual order; bidi reorders it back
    return _COMPATIBILITY.sub(lambda m: unicodedata.normalize("NFKC", m.group(0)), text)


def outline_levels(reader) -> dict[str, int]:
    """The PDF outline (bookmarks) as {normalised title: level}."""
    titles: dict[str, int] = {}

    def walk(items, depth: int) -> None:
        for item in items:
            if isinstance(item, list):
                walk(item, depth + 1)
            else:
                title = _key(str(getattr(item, "title", "") or ""))
                if title:
                    titles.setdefault(title, depth + 1)

    try:
        walk(reader.outline, 0)
    except Exception:  # a damaged outline is no reason to lose the text
        return {}
    return titles


def _key(text: str) -> str:
    return " ".join(re.sub(r"^\d+(?:\.\d+)*\.?\s*", "", normalize(text)).lower().split())


def _read_page(page, number: int) -> PageContent:
    content = PageContent(number=number)
    words = [_with_font(word) for word in page.extract_words(x_tolerance=WORD_GAP, extra_attrs=["upright"],
                                                                return_chars=True)]
    if not words:
        return content
    upright = [w for w in words if w["upright"]]
    if len(upright) * 2 >= len(words):
        words = upright  # rotated text on an upright page: margin stamps, rotated axis labels
    images = [(i["x0"], i["top"], i["x1"], i["bottom"]) for i in page.images
              if (i["x1"] - i["x0"]) * (i["bottom"] - i["top"]) > 0.02 * page.width * page.height]
    words = [w for w in words if not any(_inside(w, box) for box in images)]
    for box, markdown in _tables(page, words):
        content.tables.append((box[1], markdown))
        words = [w for w in words if not _inside(w, box)]
    segments = _segments(words)
    segments = _drop_edge_chrome(segments, page.height)
    content.lines = _reading_order(segments, page.width)
    return content


def _with_font(word: dict) -> dict:
    """The word's size and font from its glyphs (a font change inside a word, as in "LayoutParser:", keeps
    it one word)."""
    chars = word.pop("chars")
    word["size"] = statistics.median(c["size"] for c in chars)
    word["fontname"] = Counter(c["fontname"] for c in chars).most_common(1)[0][0]
    return word


def _inside(word: dict, box: tuple[float, float, float, float]) -> bool:
    x = (word["x0"] + word["x1"]) / 2
    y = (word["top"] + word["bottom"]) / 2
    return box[0] <= x <= box[2] and box[1] <= y <= box[3]


def _segments(words: list[dict]) -> list[Segment]:
    """Words grouped into lines by their top, each line split where the gap is wider than its font size."""
    segments: list[Segment] = []
    for row in _word_lines(words):
        row.sort(key=lambda w: w["x0"])
        run = [row[0]]
        for word in row[1:]:
            if word["x0"] - run[-1]["x1"] > 1.2 * max(word["size"], run[-1]["size"]):
                segments.append(_segment(run))
                run = []
            run.append(word)
        segments.append(_segment(run))
    return segments


def _segment(words: list[dict]) -> Segment:
    sizes = [w["size"] for w in words]
    bold = sum(len(w["text"]) for w in words if _BOLD.search(w["fontname"].split("+")[-1]))
    return Segment(x0=min(w["x0"] for w in words), x1=max(w["x1"] for w in words),
                   top=min(w["top"] for w in words), bottom=max(w["bottom"] for w in words),
                   size=statistics.median(sizes), bold=bold * 2 > sum(len(w["text"]) for w in words),
                   text=normalize(" ".join(w["text"] for w in words)), words=words)


def _drop_edge_chrome(segments: list[Segment], height: float) -> list[Segment]:
    """Running heads and footers: lines in the page's outer bands, and a first or last line that is
    short and carries a page number at either end. Text larger than the body is never chrome."""
    if len(segments) < 3:
        return segments
    body_size = statistics.median(s.size for s in segments)
    small = [s for s in segments if s.size <= body_size + 0.5]
    doomed = {id(s) for s in small if s.top < EDGE_SHARE * height or s.bottom > (1 - EDGE_SHARE) * height}
    kept = sorted((s for s in segments if id(s) not in doomed), key=lambda s: s.top)
    for edge in (kept[:1] + kept[-1:]) if len(kept) >= 3 else []:
        line = [s for s in kept if abs(s.top - edge.top) < 2]
        text = " ".join(s.text for s in sorted(line, key=lambda s: s.x0))
        if _EDGE_NUMBER.search(text) and len(text.split()) <= 15 and all(s.size <= body_size + 0.5 for s in line):
            doomed.update(id(s) for s in line)
    return [s for s in segments if id(s) not in doomed]


def _reading_order(segments: list[Segment], width: float) -> list[Line]:
    """Segments in reading order, merged into lines; two columns when a middle gutter separates them."""
    gutter = _gutter(segments, width)
    ordered: list[Segment] = []
    if gutter is not None:
        segments = [piece for segment in segments for piece in _split_at(segment, gutter)]
    if gutter is None:
        ordered = sorted(segments, key=lambda s: (round(s.top), s.x0))
    else:
        band: list[Segment] = []
        for segment in sorted(segments, key=lambda s: (round(s.top), s.x0)):
            if segment.x0 < gutter < segment.x1:  # full width: ends the band above it
                ordered.extend(_columns(band, gutter))
                ordered.append(segment)
                band = []
            else:
                band.append(segment)
        ordered.extend(_columns(band, gutter))
    return _merge_lines(ordered)


def _split_at(segment: Segment, gutter: float) -> list[Segment]:
    """A segment whose words leave a gap over the gutter is two: the column gap was just narrow."""
    gaps = [(abs((left["x1"] + right["x0"]) / 2 - gutter), index)
            for index, (left, right) in enumerate(zip(segment.words, segment.words[1:]), start=1)
            if right["x0"] - left["x1"] >= 0.5 * segment.size
            and left["x1"] - segment.size <= gutter <= right["x0"] + segment.size]
    if not gaps:
        return [segment]
    index = min(gaps)[1]
    return [_segment(segment.words[:index]), _segment(segment.words[index:])]


def _columns(band: list[Segment], gutter: float) -> list[Segment]:
    left = [s for s in band if s.x1 <= gutter]
    right = [s for s in band if s.x0 >= gutter]
    return sorted(left, key=lambda s: (round(s.top), s.x0)) + sorted(right, key=lambda s: (round(s.top), s.x0))


def _gutter(segments: list[Segment], width: float) -> float | None:
    """The x of a vertical gutter in the middle third that most segments keep to one side of."""
    if len(segments) < 10:
        return None
    best, best_crossing = None, len(segments)
    for step in range(int(width * 0.35), int(width * 0.65), 2):
        crossing = sum(1 for s in segments if s.x0 < step < s.x1)
        if crossing < best_crossing:
            best, best_crossing = float(step), crossing
    if best is None:
        return None
    left = sum(1 for s in segments if s.x1 <= best)
    right = sum(1 for s in segments if s.x0 >= best)
    if min(left, right) >= max(5, 0.2 * len(segments)) and best_crossing <= 0.25 * len(segments):
        return best
    return None


def _merge_lines(ordered: list[Segment]) -> list[Line]:
    """Consecutive segments on the same line (a bullet and its text, a label and its value) are one line."""
    lines: list[Line] = []
    for segment in ordered:
        previous = lines[-1] if lines else None
        if previous and abs(previous.top - segment.top) < 0.3 * segment.size and segment.x0 >= previous.x0:
            previous.text = f"{previous.text} {segment.text}"
            previous.bottom = max(previous.bottom, segment.bottom)
            continue
        lines.append(Line(top=segment.top, bottom=segment.bottom, size=segment.size, bold=segment.bold,
                          text=segment.text, x0=segment.x0))
    return lines


def _blocks(pages: list[PageContent], body: float, outline: dict[str, int]) -> list[Block]:
    paragraphs: list[tuple[int, float, list[Line]]] = []  # (page, top, lines)
    tables: list[tuple[int, float, str]] = []
    for content in pages:
        tables.extend((content.number, top, markdown) for top, markdown in content.tables)
        for line in content.lines:
            last = paragraphs[-1] if paragraphs and paragraphs[-1][0] == content.number else None
            if last and _continues(last[2][-1], line):
                last[2].append(line)
            else:
                paragraphs.append((content.number, line.top, [line]))
    heading_sizes = sorted({round(lines[0].size, 1) for _, _, lines in paragraphs
                            if _heading_candidate(lines) and lines[0].size >= body * HEADING_SIZE_RATIO},
                           reverse=True)
    blocks: list[tuple[int, float, Block]] = []
    for order, (page, top, lines) in enumerate(paragraphs):
        text = _join(lines)
        level = _heading_level(lines, text, body, heading_sizes, outline)
        kind = "heading" if level else "paragraph"
        blocks.append((page, order, Block(kind=kind, text=text, level=level, page=page)))
    return _place_tables(blocks, paragraphs, tables)


def _continues(previous: Line, line: Line) -> bool:
    """The line goes on the previous one's paragraph: same style, no wider gap than the leading."""
    gap = line.top - previous.bottom
    same_style = abs(previous.size - line.size) < 0.6 and previous.bold == line.bold
    return same_style and -previous.size < gap < 0.75 * line.size and line.x0 > previous.x0 - 6 * line.size


def _join(lines: list[Line]) -> str:
    text = lines[0].text
    for line in lines[1:]:
        if re.search(r"[a-z]-$", text) and re.match(r"[a-z]", line.text):
            text = text[:-1] + line.text  # "re-" + "cent" -> "recent"
        else:
            text = f"{text}\n{line.text}"
    return clean_text(text)


def _heading_candidate(lines: list[Line]) -> bool:
    text = " ".join(line.text for line in lines)
    letters = len(_LETTER.findall(text))
    return (len(lines) <= 3 and len(text.split()) <= MAX_HEADING_WORDS and letters >= 3
            and letters * 2 >= len(text.replace(" ", "")) and not text.rstrip().endswith(_SENTENCE_END))


def _heading_level(lines: list[Line], text: str, body: float, heading_sizes: list[float],
                   outline: dict[str, int]) -> int:
    if not _heading_candidate(lines):
        return 0
    flat = " ".join(text.split())
    if _key(flat) in outline:
        return min(outline[_key(flat)], 6)
    size = round(lines[0].size, 1)
    if size in heading_sizes:
        return min(heading_sizes.index(size) + 1, 6)
    numbered = _NUMBERED.match(flat)
    if lines[0].bold and size >= body - 0.5 and len(lines) <= 2:
        if numbered:
            return min(len(heading_sizes) + numbered.group(1).count(".") + 1, 6)
        if len(flat.split()) <= 12 and flat[:1].isupper():
            return min(len(heading_sizes) + 1, 6)
    return 0


def _place_tables(blocks: list[tuple[int, float, Block]], paragraphs, tables) -> list[Block]:
    """Each table goes before the first paragraph of its page that starts below it."""
    result: list[Block] = []
    pending = sorted(tables)
    for (page, _order, block), (_, top, _) in zip(blocks, paragraphs):
        while pending and (pending[0][0] < page or (pending[0][0] == page and pending[0][1] <= top)):
            table_page, _, markdown = pending.pop(0)
            result.append(Block(kind="table", text=markdown, page=table_page))
        result.append(block)
    result.extend(Block(kind="table", text=markdown, page=page) for page, _, markdown in pending)
    return result


def _only_tables(pages: list[PageContent]) -> list[Block]:
    return [Block(kind="table", text=markdown, page=c.number) for c in pages for _, markdown in c.tables]


# --- tables -------------------------------------------------------------------------------------

def _tables(page, words: list[dict]) -> list[tuple[tuple[float, float, float, float], str]]:
    """Tables of the page from the three detectors; where two overlap, the one with more filled cells."""
    candidates = [(table.bbox, [[cell or "" for cell in row] for row in table.extract(x_tolerance=WORD_GAP)])
                  for table in page.find_tables()]
    candidates += [*_rule_bounded_tables(page, words), *_aligned_tables(words)]
    found: list[tuple[tuple[float, float, float, float], str]] = []
    for box, rows in sorted(candidates, key=lambda c: -sum(1 for row in c[1] for cell in row if cell.strip())):
        rows = [[clean_text(normalize(cell)) for cell in row] for row in rows]
        if _is_table(rows) and not any(_overlaps(box, other) for other, _ in found):
            found.append((box, markdown_table(_flat(rows))))
    return found


def _overlaps(a, b) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _is_table(rows: list[list[str]]) -> bool:
    """At least two rows and columns, most rows with two filled cells, and cells that are not pages of
    prose (a grid drawn around text columns is layout, not a table)."""
    filled = [row for row in rows if sum(1 for cell in row if cell) >= 2]
    cells = [len(cell.split()) for row in rows for cell in row if cell]
    return (len(rows) >= 2 and len(rows[0]) >= 2 and len(filled) * 2 >= len(rows)
            and max(cells, default=0) <= MAX_CELL_WORDS)


def _horizontal_rules(page) -> list[tuple[float, float, float]]:
    """(top, x0, x1) of horizontal lines and hairline rectangles wider than a quarter of the page."""
    rules = [(line["top"], line["x0"], line["x1"]) for line in page.lines if abs(line["top"] - line["bottom"]) < 1]
    rules += [(rect["top"], rect["x0"], rect["x1"]) for rect in page.rects if rect["height"] < 2]
    return sorted(r for r in rules if r[2] - r[1] > page.width / 4)


def _rule_bounded_tables(page, words: list[dict]):
    """Tables drawn with horizontal rules only: a rule on top, one under the header, one at the end."""
    groups: dict[tuple[int, int], list[float]] = {}
    for top, x0, x1 in _horizontal_rules(page):
        key = next((k for k in groups if abs(k[0] - x0) < 6 and abs(k[1] - x1) < 6), (round(x0), round(x1)))
        if not groups.get(key) or top - groups[key][-1] > 1:
            groups.setdefault(key, []).append(top)
    for (x0, x1), tops in groups.items():
        if len(tops) < 3:
            continue
        header_top, body_top, bottom = tops[0], tops[1], tops[-1]
        inside = [w for w in words if x0 - 2 <= w["x0"] and w["x1"] <= x1 + 2 and header_top < w["top"] < bottom]
        body = [w for w in inside if w["top"] > body_top]
        header = [w for w in inside if w["top"] < body_top]
        columns = _column_spans(body)
        if len(columns) < 2:
            continue
        rows = [_cells(header, columns, join_lines=True)] if header else []
        rows += [_cells(line, columns) for line in _word_lines(body)]
        if _is_table(rows) and len(rows) >= 3:
            yield (x0, header_top, x1, bottom), rows


def _column_spans(words: list[dict]) -> list[tuple[float, float]]:
    """x ranges covered by words, merged where they touch or overlap: whitespace-aligned columns."""
    spans: list[list[float]] = []
    for word in sorted(words, key=lambda w: w["x0"]):
        if spans and word["x0"] <= spans[-1][1] + 0.6 * word["size"]:
            spans[-1][1] = max(spans[-1][1], word["x1"])
        else:
            spans.append([word["x0"], word["x1"]])
    return [(a, b) for a, b in spans]


def _word_lines(words: list[dict]) -> list[list[dict]]:
    """Words grouped into lines by their top; a smaller word whose middle lies within a line's height
    (a sub- or superscript) joins that line."""
    lines: list[list[dict]] = []
    for word in sorted(words, key=lambda w: (w["top"], w["x0"])):
        line = lines[-1] if lines else None
        if line and (abs(line[0]["top"] - word["top"]) <= 0.3 * word["size"] or _script_of(word, line[0])):
            line.append(word)
        else:
            lines.append([word])
    return lines


def _script_of(word: dict, base: dict) -> bool:
    middle = (word["top"] + word["bottom"]) / 2
    return word["size"] < 0.85 * base["size"] and base["top"] <= middle <= base["bottom"] + 0.2 * base["size"]


def _cells(words: list[dict], columns: list[tuple[float, float]], *, join_lines: bool = False) -> list[str]:
    cells: list[list[dict]] = [[] for _ in columns]
    for word in words:
        middle = (word["x0"] + word["x1"]) / 2
        index = min(range(len(columns)),
                    key=lambda i: 0 if columns[i][0] <= middle <= columns[i][1]
                    else min(abs(middle - columns[i][0]), abs(middle - columns[i][1])))
        cells[index].append(word)
    order = (lambda w: (w["top"], w["x0"])) if join_lines else (lambda w: w["x0"])
    return [normalize(" ".join(w["text"] for w in sorted(cell, key=order))) for cell in cells]


def _flat(rows: list[list[str]]) -> list[list[str]]:
    """Cells fit one Markdown line: no newlines, no pipes."""
    return [[" ".join(cell.split()).replace("|", "/") for cell in row] for row in rows]


def _aligned_tables(words: list[dict]):
    """Tables without rules: three or more consecutive lines split into three or more whitespace-separated
    runs, their columns aligned. The first line is the header; lines that fill under half of the columns
    continue the header (before the first full row) or the row above (after it)."""
    lines = _word_lines(words)
    run: list[list[dict]] = []
    for line in lines + [[]]:
        pieces = _pieces(line) if line else 0
        adjacent = run and line and line[0]["top"] - max(w["bottom"] for w in run[-1]) < 2.5 * line[0]["size"]
        if line and (pieces >= 3 or (pieces >= 2 and run)) and (not run or adjacent):
            run.append(line)
            continue
        table = _aligned_table(run) if len(run) >= 3 else None
        if table:
            yield table
        run = [line] if line and pieces >= 3 else []


def _pieces(line: list[dict]) -> int:
    ordered = sorted(line, key=lambda w: w["x0"])
    return 1 + sum(1 for a, b in zip(ordered, ordered[1:]) if b["x0"] - a["x1"] > 1.2 * max(a["size"], b["size"]))


def _aligned_table(run: list[list[dict]]):
    widest = max(_pieces(line) for line in run)
    columns = _column_spans([w for line in run if _pieces(line) == widest for w in line])
    if len(columns) < 3:
        return None
    lines = [_cells(line, columns) for line in run]
    numeric = [any(_NUMBER.fullmatch(cell) for cell in cells) for cells in lines]
    header_lines = numeric.index(True) if any(numeric) else 1
    if 1 <= header_lines <= 3:  # the words above the first row of figures are the header
        lines[:header_lines] = [[" ".join(filter(None, column)) for column in zip(*lines[:header_lines])]]
    rows: list[list[str]] = []
    header_done = False
    for cells in lines:
        filled = sum(1 for cell in cells if cell)
        if rows and filled * 2 < len(columns) and (not header_done or not cells[0]):
            rows[-1] = [f"{a} {b}".strip() for a, b in zip(rows[-1], cells)]
            continue
        header_done = header_done or bool(rows)
        rows.append(cells)
    if len(rows) < 3 or not _is_table(rows):
        return None
    box = (min(w["x0"] for line in run for w in line), min(w["top"] for w in run[0]),
           max(w["x1"] for line in run for w in line), max(w["bottom"] for w in run[-1]))
    return box, rows
