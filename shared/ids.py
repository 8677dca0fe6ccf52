"""Stable identifiers."""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from shared.errors import InvalidArgument


def default_doc_id(filename: str) -> str:
    """A stable business id from the name a document was uploaded under (not an absolute path)."""
    name = PurePosixPath(filename.replace("\\", "/")).as_posix().lstrip("/")
    name = re.sub(r"\s+", "-", name.strip())
    if not name or name in {".", ".."}:
        raise InvalidArgument("a document needs a file name or an explicit doc_id")
    return name[:512]
