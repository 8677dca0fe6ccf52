"""Stable identifiers: the document id rules.

A doc_id has 1 to `MAX_DOC_ID_CHARS` characters, none of them a control
character (U+0000-U+001F, U+007F-U+009F), and no whitespace at either end.
A caller's explicit doc_id that breaks a rule is refused with the rule; an id
derived from a file name longer than the limit becomes a readable prefix plus a
hash of the whole name, so two long names never share an id and the same name
always gets the same one (the full name travels as `ORIGINAL_NAME_KEY` metadata).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from pathlib import PurePosixPath

from shared.errors import InvalidArgument

MAX_DOC_ID_CHARS = 512
MAX_FILENAME_CHARS = 4096
DOC_ID_RULE = (f"a doc_id has 1-{MAX_DOC_ID_CHARS} characters, no control characters (U+0000-U+001F, "
               "U+007F-U+009F) and no whitespace at either end")
ORIGINAL_NAME_KEY = "original_name"  # chunk metadata: the full file name behind a hashed doc_id
_HASH_CHARS = 16
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _control_character(text: str) -> str:
    """'' when `text` has no control character, else a description of the first one."""
    match = _CONTROL.search(text)
    if not match:
        return ""
    char = match.group()
    name = unicodedata.name(char, "") or {"\x00": "NUL"}.get(char, "control character")
    return f"U+{ord(char):04X} ({name}) at position {match.start()}"


def check_filename(filename: str) -> None:
    """A file name is stored with its job and shown in citations: no control characters, bounded length."""
    if not filename:
        raise InvalidArgument("a document upload needs a file name")
    bad = _control_character(filename)
    if bad:
        raise InvalidArgument(f"file name {filename!r} contains {bad}; file names may not contain control "
                              "characters")
    if len(filename) > MAX_FILENAME_CHARS:
        raise InvalidArgument(f"file name is {len(filename)} characters; the limit is {MAX_FILENAME_CHARS}")


def validate_doc_id(doc_id: str) -> str:
    """An explicit doc_id as given, or InvalidArgument naming the rule it breaks."""
    problem = ""
    if not doc_id:
        problem = "it is empty"
    elif len(doc_id) > MAX_DOC_ID_CHARS:
        problem = f"it has {len(doc_id)} characters"
    elif _control_character(doc_id):
        problem = f"it contains {_control_character(doc_id)}"
    elif doc_id != doc_id.strip():
        problem = "it starts or ends with whitespace"
    if problem:
        shown = doc_id if len(doc_id) <= 80 else doc_id[:80] + "…"
        raise InvalidArgument(f"invalid doc_id {shown!r}: {problem}; {DOC_ID_RULE}")
    return doc_id


def bounded_doc_id(name: str) -> str:
    """`name` when it fits the length rule, else its prefix + '~' + a hash of all of it (stable, unique)."""
    if len(name) <= MAX_DOC_ID_CHARS:
        return name
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:_HASH_CHARS]
    return f"{name[:MAX_DOC_ID_CHARS - _HASH_CHARS - 1].rstrip()}~{digest}"


def default_doc_id(filename: str) -> str:
    """A stable business id from the name a document was uploaded under (not an absolute path)."""
    check_filename(filename)
    name = PurePosixPath(filename.replace("\\", "/")).as_posix().lstrip("/")
    name = re.sub(r"\s+", "-", name.strip())
    if not name or name in {".", ".."}:
        raise InvalidArgument("a document needs a file name or an explicit doc_id")
    return bounded_doc_id(name)
