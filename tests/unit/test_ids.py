"""doc_id rules: refused with the rule, long names hashed (stable, distinct), control characters refused."""

from __future__ import annotations

import re

import pytest

from shared.errors import InvalidArgument
from shared.ids import DOC_ID_RULE, MAX_DOC_ID_CHARS, check_filename, default_doc_id, validate_doc_id

pytestmark = pytest.mark.unit


def test_long_names_sharing_a_prefix_get_distinct_stable_ids():
    first, second = "a" * 600 + "-first.md", "a" * 600 + "-second.md"
    ids = default_doc_id(first), default_doc_id(second)
    assert ids[0] != ids[1]
    assert all(len(i) <= MAX_DOC_ID_CHARS for i in ids)
    assert default_doc_id(first) == ids[0]  # the same name always gets the same id
    assert ids[0].startswith("a" * 100)  # still readable


def test_a_name_within_the_limit_is_its_own_id():
    assert default_doc_id("docs/Q3 report.pdf") == "docs/Q3-report.pdf"
    assert default_doc_id("b" * MAX_DOC_ID_CHARS + ".md") != "b" * MAX_DOC_ID_CHARS


@pytest.mark.parametrize("name, shown", [
    pytest.param("report\x00.pdf", "U+0000 (NUL) at position 6", id="nul"),
    pytest.param("a\nb.txt", "U+000A", id="newline"),
    pytest.param("a\x7f.txt", "U+007F", id="delete"),
    pytest.param("a\x85.txt", "U+0085", id="c1-control"),
])
def test_control_characters_in_file_names_are_refused(name, shown):
    with pytest.raises(InvalidArgument, match=re.escape(shown)):
        check_filename(name)
    with pytest.raises(InvalidArgument, match="control characters"):
        default_doc_id(name)


@pytest.mark.parametrize("doc_id, problem", [
    pytest.param("x" * (MAX_DOC_ID_CHARS + 1), f"it has {MAX_DOC_ID_CHARS + 1} characters", id="too-long"),
    pytest.param("bad\x00id", "U+0000", id="nul"),
    pytest.param(" padded", "whitespace", id="leading-space"),
])
def test_explicit_doc_ids_breaking_a_rule_are_refused_with_the_rule(doc_id, problem):
    with pytest.raises(InvalidArgument) as error:
        validate_doc_id(doc_id)
    assert problem in str(error.value) and DOC_ID_RULE in str(error.value)


def test_valid_explicit_doc_ids_pass_unchanged():
    assert validate_doc_id("客户/合同-2024.pdf") == "客户/合同-2024.pdf"
