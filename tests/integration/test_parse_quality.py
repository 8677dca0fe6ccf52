"""The parser quality benchmark as a regression gate: no group may fall below its recorded floor.

scripts/bench/parse_quality.py parses the reference set (tests/golden/parse_reference) and
compares the chunks with the team's reference markdown; floors.json holds the numbers of the
last accepted run. Raise a floor when the parser gets better; never lower one to go green.
"""

from __future__ import annotations

import json
import sys

import pytest

from tests.conftest import ROOT, shared_data

sys.path.insert(0, str(ROOT / "scripts" / "bench"))
import parse_quality  # noqa: E402

pytestmark = pytest.mark.integration
FLOORS = ROOT / "tests" / "golden" / "parse_reference" / "floors.json"


def test_every_reference_document_and_reference_exists():
    entries = parse_quality.load_manifest()
    for entry in entries:
        if entry.source.startswith("shared:"):
            shared_data("docs", entry.source.removeprefix("shared:"))
        assert entry.path.exists(), entry.source
        assert (parse_quality.REFERENCE_DIR / "reference" / f"{entry.name}.md").exists(), entry.name
    assert {e.split for e in entries} == {"dev", "unseen"}


def test_reference_reader_counts_words_headings_and_tables():
    entry = next(e for e in parse_quality.load_manifest() if e.name == "fake-html.html")
    reference = parse_quality.load_reference(entry)
    assert [" ".join(h) for h in reference.headings] == ["my first heading", "my second heading", "a third heading"]
    assert len(reference.tables) == 1 and reference.tables[0]["cell"] == 4
    assert parse_quality.words("ﬁle 中文, 1.5") == ["file", "中", "文", "1", "5"]
    assert parse_quality.heading_words("2.1 Overview") == ["overview"]


def test_no_group_falls_below_its_floor():
    entries = parse_quality.load_manifest()
    for entry in entries:
        if entry.source.startswith("shared:"):
            shared_data("docs", entry.source.removeprefix("shared:"))
    summary = parse_quality.summarize(parse_quality.evaluate(entries))
    assert parse_quality.check(summary, json.loads(FLOORS.read_text())) == []
