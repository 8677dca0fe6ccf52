"""OCR with tesseract: orientation and script first, then recognition, page by page in parallel.

Per page: tesseract's orientation and script detection (OSD, `--psm 0`) says how far the
page is turned and which script it is written in; the page is turned upright, small
images are scaled up (tesseract reads text of about 30 px x-height best; a 72 dpi scan
is mostly unreadable as is), and recognition runs with the knowledge base's languages
that write that script (all of them when none does or OSD cannot tell). The tesseract
command line is called directly (a process per page, one thread each), up to
`parallel_pages()` pages at a time.
"""

from __future__ import annotations

import functools
import io
import os
import re
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor

from services.parser import errors
from services.parser.formats import Block

MIN_WIDTH = 1600            # narrower page images are scaled up to this width before OCR
MAX_PIXELS = 80_000_000     # a page image larger than this is refused (a decompression bomb)
PAGE_TIMEOUT_S = 120.0
PDF_DPI = 300
# scripts OSD reports -> tesseract language packs that write them
SCRIPT_LANGUAGES = {
    "Latin": {"eng", "fra", "deu", "spa", "ita", "por", "nld", "swe", "dan", "nor", "fin", "pol", "ces", "tur",
              "vie", "ron", "hun", "cat", "ind", "msa"},
    "Han": {"chi_sim", "chi_tra", "chi_sim_vert", "chi_tra_vert", "jpn", "jpn_vert"},
    "Japanese": {"jpn", "jpn_vert"}, "Hangul": {"kor", "kor_vert"}, "Korean": {"kor", "kor_vert"},
    "Arabic": {"ara", "fas", "urd"}, "Hebrew": {"heb"}, "Cyrillic": {"rus", "ukr", "bul", "srp"},
    "Greek": {"ell"}, "Devanagari": {"hin", "mar", "nep", "san"}, "Thai": {"tha"},
}
# tesseract puts a space between CJK characters, and a line break inside a CJK sentence is no word boundary
_CJK_GAP = re.compile(r"(?<=[\u3000-\u303f\u3400-\u9fff\uff00-\uffef])[ \n](?=[\u3000-\u303f\u3400-\u9fff\uff00-\uffef])")


def parallel_pages() -> int:
    """Pages recognised at once: the cores this process may use, at most 4."""
    return max(1, min(4, len(os.sched_getaffinity(0))))


@functools.lru_cache(maxsize=1)
def installed_languages() -> frozenset[str]:
    try:
        listing = subprocess.run(["tesseract", "--list-langs"], capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        raise errors.ParseError(errors.CORRUPT, "OCR is on but tesseract is not installed on the parser host") \
            from None
    return frozenset(line.strip() for line in listing.stdout.splitlines()[1:] if line.strip())


def usable_languages(languages: tuple[str, ...]) -> tuple[str, ...]:
    """The knowledge base's OCR languages that are installed; an error naming the missing packs if none is."""
    installed = installed_languages()
    usable = tuple(language for language in languages if language in installed)
    if not usable:
        raise errors.ParseError(errors.CORRUPT,
                                f"none of the OCR languages {', '.join(languages)} is installed for tesseract "
                                f"(installed: {', '.join(sorted(installed - {'osd'})) or 'none'})")
    return usable


def read_images(images: list, languages: tuple[str, ...]) -> list[Block]:
    """PIL images (one per page) -> paragraph blocks with their page numbers."""
    usable = usable_languages(languages)
    return _blocks(_in_parallel(lambda image: recognize(image, usable), images))


def read_pdf(data: bytes, pages: list[int], languages: tuple[str, ...]) -> list[Block]:
    """Pages of a scanned PDF (numbers from 1): each rendered by poppler when its turn comes (memory holds
    only the pages being read), then OCR."""
    from pdf2image import convert_from_bytes

    usable = usable_languages(languages)  # fail before rendering anything

    def page_text(number: int) -> str:
        [image] = convert_from_bytes(data, dpi=PDF_DPI, first_page=number, last_page=number)
        return recognize(image, usable)

    return _blocks(_in_parallel(page_text, pages), pages)


def _in_parallel(read_page, pages) -> list[str]:
    pages = list(pages)
    with ThreadPoolExecutor(max_workers=min(parallel_pages(), max(1, len(pages)))) as pool:
        return list(pool.map(read_page, pages))


def _blocks(texts: list[str], page_numbers: list[int] | None = None) -> list[Block]:
    blocks = []
    for page, text in zip(page_numbers or range(1, len(texts) + 1), texts):
        for paragraph in re.split(r"\n\s*\n", text):
            paragraph = _CJK_GAP.sub("", "\n".join(line.strip() for line in paragraph.splitlines() if line.strip()))
            if paragraph:
                blocks.append(Block(kind="paragraph", text=paragraph, page=page))
    return blocks


def image_pages(filename: str, data: bytes, max_pages: int) -> list:
    """The frames of an image file (a TIFF may hold many pages), checked against the size and page limits."""
    from PIL import Image, ImageSequence, UnidentifiedImageError

    try:
        image = Image.open(io.BytesIO(data))
    except Image.DecompressionBombError:
        raise errors.ParseError(errors.TOO_LARGE, f"{filename!r} declares more pixels than the limit of "
                                                  f"{MAX_PIXELS} a page (a decompression bomb)") from None
    except (UnidentifiedImageError, OSError) as error:
        raise errors.ParseError(errors.CORRUPT, f"{filename!r} is not a readable image: {error}") from None
    frames = getattr(image, "n_frames", 1)
    if frames > max_pages:
        raise errors.ParseError(errors.TOO_MANY_PAGES,
                                f"{filename!r} has {frames} pages; this knowledge base allows {max_pages}")
    pages = []
    for frame in ImageSequence.Iterator(image):
        if frame.width * frame.height > MAX_PIXELS:
            raise errors.ParseError(errors.TOO_LARGE, f"{filename!r} is a {frame.width}x{frame.height} image; "
                                                      f"the limit is {MAX_PIXELS} pixels a page")
        pages.append(frame.convert("RGB"))
    return pages


def recognize(image, languages: tuple[str, ...]) -> str:
    """One page: turned upright by OSD, scaled up when small, read with the languages of its script."""
    if image.width < MIN_WIDTH:
        scale = MIN_WIDTH / image.width
        image = image.resize((MIN_WIDTH, round(image.height * scale)))
    with tempfile.TemporaryDirectory(prefix="ragkb-ocr-") as folder:
        path = os.path.join(folder, "page.png")
        image.save(path)
        rotate, script = _orientation(path)
        if rotate:
            image.rotate(-rotate, expand=True).save(path)  # OSD's "Rotate" is clockwise, PIL turns anticlockwise
        chosen = tuple(language for language in languages if language in SCRIPT_LANGUAGES.get(script, ()))
        return _tesseract([path, "-", "-l", "+".join(chosen or languages), "--psm", "3"])


def _orientation(path: str) -> tuple[int, str]:
    """(degrees to turn clockwise, script) from OSD; (0, '') when it cannot tell (too little text)."""
    if "osd" not in installed_languages():
        return 0, ""
    try:
        report = _tesseract([path, "-", "--psm", "0"])
    except errors.ParseError:
        return 0, ""
    rotate = re.search(r"Rotate: (\d+)", report)
    script = re.search(r"Script: (\w+)", report)
    return (int(rotate.group(1)) % 360 if rotate else 0), (script.group(1) if script else "")


def _tesseract(arguments: list[str]) -> str:
    environment = {**os.environ, "OMP_THREAD_LIMIT": "1"}  # pages run in parallel; one thread each
    try:
        done = subprocess.run(["tesseract", *arguments], capture_output=True, text=True, timeout=PAGE_TIMEOUT_S,
                              env=environment)
    except subprocess.TimeoutExpired:
        raise errors.ParseError(errors.TIMEOUT, f"tesseract took longer than {PAGE_TIMEOUT_S:g} s on one page") \
            from None
    if done.returncode != 0:
        raise errors.ParseError(errors.CORRUPT, f"tesseract failed: {done.stderr.strip()[-300:]}")
    return done.stdout
