"""Token-safe splitting, the fixed-size chunker, per-file chunker rules, cleaning and decoding."""

from __future__ import annotations

import email.message

import pytest

from services.parser import errors, formats
from services.parser.cleaning import clean_text, drop_page_chrome
from services.parser.formats import Block
from services.parser.parser import parse_document
from services.parser.tokens import counter_for
from shared.config import ChunkerConfig, KBConfig
from shared.contracts import chunk_pb2
from shared.errors import InvalidArgument

pytestmark = pytest.mark.unit

MODEL = "all-MiniLM-L6-v2"
CHINESE = "。".join(f"第{i}条：充电桩在四十五分钟内把电池从百分之二十充到百分之八十" for i in range(40)) + "。"


def parse(text: str, filename: str = "doc.md", **kwargs):
    return parse_document(kb="kb", namespace="ns", filename=filename, data=text.encode("utf-8"), **kwargs)


def test_chinese_text_is_split_by_tokens_at_sentence_marks():
    counter = counter_for(MODEL)
    # 2,000 characters fit the character budget but are far over MiniLM's 256 tokens
    chunks = parse(f"# 充电\n\n{CHINESE}", chunker=ChunkerConfig(max_chars=5000), tokenizer_model=MODEL).chunks
    assert len(chunks) > 5
    assert all(counter.count(c.content) <= counter.limit - 16 for c in chunks)
    assert all(c.raw_content.endswith("。") for c in chunks)
    assert [c.part_index for c in chunks] == list(range(1, len(chunks) + 1))
    assert {c.part_count for c in chunks} == {len(chunks)} and len({c.group_id for c in chunks}) == 1
    # pieces overlap by whole sentences so a fact at a boundary stays retrievable
    first_sentence_of_second = chunks[1].raw_content.split("。")[0]
    assert first_sentence_of_second in chunks[0].raw_content


def test_configured_max_tokens_is_a_tighter_limit():
    counter = counter_for(MODEL)
    body = " ".join(f"Sentence {i} explains how the dock charges the battery." for i in range(60))
    chunks = parse(f"# Dock\n\n{body}", chunker=ChunkerConfig(max_chars=20000, max_tokens=64, token_margin=4),
                   tokenizer_model=MODEL).chunks
    assert len(chunks) > 5 and all(counter.count(c.content) <= 60 for c in chunks)


def test_a_single_overlong_word_run_is_cut_to_fit():
    counter = counter_for(MODEL)
    chunks = parse("x" * 3000 + " tail", filename="blob.txt", tokenizer_model=MODEL).chunks
    assert all(counter.count(c.content) <= counter.limit - 16 for c in chunks)
    assert "".join(c.raw_content for c in chunks).replace(" ", "") == "x" * 3000 + "tail"


def test_a_token_budget_too_small_is_refused_with_the_numbers():
    with pytest.raises(InvalidArgument, match="limit 20 - margin 16 leaves 4 tokens"):
        parse("# A\n\nb", chunker=ChunkerConfig(max_tokens=20), tokenizer_model=MODEL)


def test_fixed_chunker_makes_overlapping_windows_within_the_token_limit():
    counter = counter_for(MODEL)
    chunks = parse(f"# 充电\n\n{CHINESE}", chunker=ChunkerConfig(name="fixed", max_chars=600, overlap_chars=100),
                   tokenizer_model=MODEL).chunks
    assert {c.block_type for c in chunks} == {chunk_pb2.BLOCK_TYPE_PARAGRAPH}
    assert all(not c.heading_path for c in chunks)
    assert all(counter.count(c.content) <= counter.limit - 16 for c in chunks)
    assert [c.part_index for c in chunks] == list(range(1, len(chunks) + 1))


RULES = """
name: handbook
chunker: {max_chars: 900}
chunker_rules:
  - glob: "contracts/*"
    name: fixed
    max_chars: 400
  - glob: "*.xlsx"
    max_tokens: 128
"""


@pytest.mark.parametrize(
    "filename, name, max_chars, max_tokens",
    [
        pytest.param("contracts/2024/lease.pdf", "fixed", 400, 0, id="folder-rule"),
        pytest.param("finance/q1.xlsx", "structure", 900, 128, id="name-rule-keeps-kb-defaults"),
        pytest.param("manuals/amr7.md", "structure", 900, 0, id="no-rule"),
    ],
)
def test_per_file_rules_choose_the_chunker(filename, name, max_chars, max_tokens):
    chosen = KBConfig.from_yaml(RULES).chunker_for(filename)
    assert (chosen.name, chosen.max_chars, chosen.max_tokens) == (name, max_chars, max_tokens)


def test_an_invalid_rule_names_the_bad_value():
    with pytest.raises(InvalidArgument, match=r"chunker_rules\.0\.name"):
        KBConfig.from_yaml("name: x\nchunker_rules:\n  - glob: '*.pdf'\n    name: sliding\n")
    bad = KBConfig.from_yaml("name: x\nchunker_rules:\n  - glob: '*.pdf'\n    max_chars: 5\n")
    with pytest.raises(ValueError, match="max_chars"):
        bad.chunker_for("a.pdf")


def test_running_headers_footers_and_page_numbers_are_dropped():
    bodies = ["The dock charges the battery.", "Lidar needs a clean window.", "Wheels wear after a year.",
              "Maps are stored on the robot.", "Errors are shown on the screen."]
    blocks = []
    for page, body in enumerate(bodies, start=1):
        blocks += [Block("paragraph", "ACME Robotics — Confidential", page=page), Block("paragraph", body, page=page),
                   Block("paragraph", f"Page {page} of 5", page=page)]
    blocks.append(Block("paragraph", "- 5 -", page=5))
    assert [b.text for b in drop_page_chrome(blocks, 5)] == bodies
    # two pages are too few to call anything a running header
    assert len(drop_page_chrome([Block("paragraph", "Header", page=p) for p in (1, 2)], 2)) == 2


def test_whitespace_and_extraction_artefacts_are_normalised():
    assert clean_text("  Lorem\u00a0\u00a0ipsum\t(cid:3)dolor\u200b  \r\n\n\n\nsit  ") == "Lorem ipsum dolor\n\nsit"


def test_cp1252_html_is_not_mistaken_for_gb18030():
    html = "<h1>Kaffee</h1><p>Die schöne Frau sagte: köstlich!</p>".encode("cp1252")
    result = parse_document(kb="kb", namespace="ns", filename="cafe.html", data=html)
    assert result.encoding == "cp1252" and "Die schöne Frau sagte: köstlich!" in result.chunks[0].raw_content


def test_markdown_images_keep_only_their_alt_text_or_link():
    text = "# Map\n\n![charging dock layout](img/dock.png)\n\n![](https://example.com/a/floor.jpg?size=2)\n\nDone."
    raw = parse(text).chunks[0].raw_content
    assert "[image: charging dock layout]" in raw and "[image: floor.jpg]" in raw and "img/dock.png" not in raw


def test_eml_body_and_attachments_parse_in_process():
    message = email.message.EmailMessage()
    message["From"], message["Subject"] = "a@example.com", "周报"
    message.set_content("<html><body><h2>进展</h2><p>完成了充电桩测试。</p></body></html>", subtype="html")
    message.add_attachment(b"Battery log: all cells nominal.", maintype="text", subtype="plain",
                           filename="log.txt")
    message.add_attachment(b"", maintype="text", subtype="plain", filename="empty.txt")
    result = parse_document(kb="kb", namespace="ns", filename="weekly.eml", data=message.as_bytes())
    assert [list(c.heading_path) for c in result.chunks] == [["周报", "进展"]]
    assert [a.doc_id for a in result.attachments] == ["weekly.eml/log.txt"]
    assert result.attachments[0].chunks[0].metadata["attachment_of"] == "weekly.eml"
    assert result.warnings == ["attachment 'weekly.eml/empty.txt' skipped: empty_file: 'empty.txt' is empty (0 bytes)"]


@pytest.mark.parametrize(
    "name, data, reason",
    [
        pytest.param("not-an-email.eml", b"just some words", errors.CORRUPT, id="eml-without-headers"),
        pytest.param("fake.docx", b"this is not a zip", errors.CORRUPT, id="docx-not-zip"),
        pytest.param("broken.pdf", b"%PDF-1.7\n" + b"\x00garbage" * 50, errors.CORRUPT, id="pdf-garbage"),
        pytest.param("broken.pptx", b"PK\x03\x04" + b"\x00" * 64, errors.CORRUPT, id="pptx-truncated-zip"),
        pytest.param("markup.html", b"<html><body><script>x()</script><img src='data:x'></body></html>",
                     errors.NO_TEXT, id="html-markup-only"),
        pytest.param("report.odt", b"x", errors.UNSUPPORTED_TYPE, id="unsupported"),
    ],
)
def test_broken_files_get_a_specific_reason(name, data, reason):
    with pytest.raises(InvalidArgument) as caught:
        parse_document(kb="kb", namespace="ns", filename=name, data=data)
    assert errors.reason_of(caught.value) == reason
    assert repr(name) in str(caught.value)


def test_supported_extensions_cover_every_format():
    assert {".pdf", ".docx", ".pptx", ".xlsx", ".html", ".md", ".txt", ".eml"} <= set(formats.EXTENSIONS)
