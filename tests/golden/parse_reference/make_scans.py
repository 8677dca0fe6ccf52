"""Rebuild the derived scans of the reference set (run once; the outputs are committed).

- zh-scan.png: the Chinese sample article (../shared/data/docs/zh, Apache-2.0) set in
  WenQuanYi Zen Hei at about 200 dpi, lightly blurred, as a scanner would give it;
- zh-scan-rotated-90.pdf: the same page turned 90° clockwise, as a one-page image PDF;
- layout-parser-paper-fast-rotated-180.pdf: unstructured's 72 dpi page image upside down, as an image PDF.
"""

import re
import sys
import textwrap
from pathlib import Path

from PIL import Image, ImageDraw, ImageFilter, ImageFont

HERE = Path(__file__).resolve().parent
FILES = HERE / "files"
ROOT = HERE.parents[2]
ZH_SOURCE = ROOT.parent / "shared" / "data" / "docs" / "zh" / "大模型指令对齐训练原理.md"
FONT = "/usr/share/fonts/truetype/wqy/wqy-zenhei.ttc"


def plain_lines(markdown: str) -> list[str]:
    lines = []
    for line in markdown.splitlines():
        text = re.sub(r"^\s*(?:#+|-)\s*", "", line).replace("**", "").strip()
        if text:
            lines.append(text)
    return lines


def zh_page() -> Image.Image:
    font = ImageFont.truetype(FONT, 30)
    page = Image.new("L", (1654, 2339), 255)  # A4 at 200 dpi
    draw = ImageDraw.Draw(page)
    y = 120
    for paragraph in plain_lines(ZH_SOURCE.read_text(encoding="utf-8")):
        for line in textwrap.wrap(paragraph, 44) or [""]:
            draw.text((120, y), line, font=font, fill=0)
            y += 44
        y += 18
    return page.filter(ImageFilter.GaussianBlur(0.6))


def main() -> None:
    if not ZH_SOURCE.exists():
        sys.exit(f"missing {ZH_SOURCE} (see ../shared/data/README.md)")
    page = zh_page()
    page.save(FILES / "zh-scan.png")
    page.rotate(-90, expand=True).convert("RGB").save(FILES / "zh-scan-rotated-90.pdf", resolution=200)
    paper = Image.open(FILES / "layout-parser-paper-fast.jpg").convert("RGB")
    paper.rotate(180).save(FILES / "layout-parser-paper-fast-rotated-180.pdf", resolution=72)


if __name__ == "__main__":
    main()
