"""Golden tests: small documents with known structure produce exactly these chunks (ids, paths, types, parts).

The ids are frozen: a change here means every stored chunk of such a document
gets a new id on re-ingestion, so it must be deliberate.
"""

from __future__ import annotations

import io

import pytest
from docx import Document

from services.parser.parser import parse_document
from shared.config import ChunkerConfig
from shared.contracts import chunk_pb2

pytestmark = pytest.mark.unit

MODEL = "all-MiniLM-L6-v2"

CHARGING = (
    "The dock charges the battery from 20% to 80% in 45 minutes. Charging stops at 95% to protect "
    "the cells. A full charge from empty takes two hours. The charging light is green when the robot "
    "is docked. It blinks while the battery is charging. It turns off when the robot leaves the "
    "dock. Keep the charging contacts clean and dry."
)
GUIDE = f"""# Lumen AMR-7 Guide

Read this guide before the first start.

## Charging

{CHARGING}

### Battery care

Store at 40%.

## Error codes

Codes the robot shows:

- E101: lidar obstruction
- E202: wheel slip

| Code | Meaning |
|---|---|
| E101 | Lidar obstruction |
| E202 | Wheel slip |

## 维护

每周清洁一次激光雷达窗口。每月检查一次驱动轮磨损。
"""

GUIDE_CHUNKS = [
    ("41535185a86660d71b0300d70cfe6246", ["Lumen AMR-7 Guide"], "SECTION", 1, 1,
     "Read this guide before the first start."),
    ("070b0df89aa54a63a54293fa90a21154", ["Lumen AMR-7 Guide", "Charging"], "MERGED", 1, 3,
     "The dock charges the battery from 20% to 80% in 45 minutes. Charging stops at 95% to protect the "
     "cells. A full charge from empty takes two hours."),
    ("f960c882944ef8e4127ec281a2979110", ["Lumen AMR-7 Guide", "Charging"], "MERGED", 2, 3,
     "A full charge from empty takes two hours. The charging light is green when the robot is docked. "
     "It blinks while the battery is charging. It turns off when the robot leaves the dock."),
    ("c3d2cdd52abc24c38c7936080e94309d", ["Lumen AMR-7 Guide", "Charging"], "MERGED", 3, 3,
     "It turns off when the robot leaves the dock. Keep the charging contacts clean and dry.\n\nBattery "
     "care\nStore at 40%."),
    ("7b20e2e003d78afa5d1422100348a070", ["Lumen AMR-7 Guide", "Error codes"], "SECTION", 1, 1,
     "Codes the robot shows:\n- E101: lidar obstruction\n- E202: wheel slip"),
    ("2a4b1be24986282cbf765c78a0a3ccf8", ["Lumen AMR-7 Guide", "Error codes"], "TABLE", 1, 1,
     "| Code | Meaning |\n|---|---|\n| E101 | Lidar obstruction |\n| E202 | Wheel slip |"),
    ("7482102dd6f28c53d30e3052a8a92e7b", ["Lumen AMR-7 Guide", "维护"], "SECTION", 1, 1,
     "每周清洁一次激光雷达窗口。每月检查一次驱动轮磨损。"),
]

MANUAL_CHUNKS = [
    ("1b0d52be523e23627a5006a87b069c1c", ["巡检机器人手册"], "SECTION", 1, 1,
     "本手册适用于 B-2 型号。"),
    ("89d9916133f09830937b5bb04a4815ae", ["巡检机器人手册", "安全"], "SECTION", 1, 1,
     "运行前请确认急停按钮可用。"),
    ("13d4dd85d7672ca80d8bdff08cd77afc", ["巡检机器人手册", "参数"], "TABLE", 1, 1,
     "| 项目 | 数值 |\n|---|---|\n| 最大速度 | 1.5 m/s |\n| 续航 | 8 小时 |"),
    ("fbe0b5166f67fee48edfe523d24d6718", ["Maintenance"], "SECTION", 1, 1,
     "Clean the lidar window weekly."),
]


def _manual_docx() -> bytes:
    document = Document()
    document.add_heading("巡检机器人手册", level=1)
    document.add_paragraph("本手册适用于 B-2 型号。")
    document.add_heading("安全", level=2)
    document.add_paragraph("运行前请确认急停按钮可用。")
    document.add_heading("参数", level=2)
    table = document.add_table(rows=3, cols=2)
    for r, row in enumerate([("项目", "数值"), ("最大速度", "1.5 m/s"), ("续航", "8 小时")]):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    document.add_heading("Maintenance", level=1)
    document.add_paragraph("Clean the lidar window weekly.")
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def _rows(result) -> list[tuple]:
    return [(c.chunk_id, list(c.heading_path), chunk_pb2.BlockType.Name(c.block_type).removeprefix("BLOCK_TYPE_"),
             c.part_index, c.part_count, c.raw_content) for c in result.chunks]


def test_markdown_golden():
    result = parse_document(kb="kb", namespace="ns", filename="guide.md", data=GUIDE.encode(),
                            chunker=ChunkerConfig(max_chars=220, overlap_chars=60), tokenizer_model=MODEL)
    assert _rows(result) == GUIDE_CHUNKS
    charging = [c for c in result.chunks if list(c.heading_path) == ["Lumen AMR-7 Guide", "Charging"]]
    assert len({c.group_id for c in charging}) == 1 and charging[0].group_id.startswith("guide.md:")
    assert [c.position for c in result.chunks] == list(range(len(GUIDE_CHUNKS)))
    # the parent of a subsection is its section's first chunk
    assert charging[0].parent_id == result.chunks[0].chunk_id
    assert charging[0].content.startswith("Lumen AMR-7 Guide > Charging\nThe dock charges")


def test_docx_golden():
    data = _manual_docx()
    result = parse_document(kb="kb", namespace="ns", filename="manual.docx", data=data, tokenizer_model=MODEL)
    assert _rows(result) == MANUAL_CHUNKS
    assert result.doc_type == "docx" and result.chunks[0].source.title == "巡检机器人手册"
    assert [c.metadata["language"] for c in result.chunks] == ["zh", "zh", "zh", "en"]
