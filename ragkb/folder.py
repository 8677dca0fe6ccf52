"""A local folder as a sync manifest: each file's stable doc id, path and content hash.

The doc id of a file, first match wins:
1. a sidecar file `<name>.docid` next to it holding the id (any format);
2. `doc_id: <id>` in a Markdown file's YAML front matter (between `---` lines at the top);
3. its path relative to the folder (so a file moved without 1 or 2 is a new document).
A file that keeps its doc id through a move is recognised as the same document
and is not re-embedded.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import yaml

from ragkb.client import iter_files
from shared.ids import default_doc_id

SIDECAR_SUFFIX = ".docid"
FRONT_MATTER_SUFFIXES = (".md", ".markdown")


class ManifestError(ValueError):
    """A folder that cannot be synced as it is (two files claim one doc id, unreadable sidecar)."""


@dataclass(frozen=True)
class FolderFile:
    path: Path
    source_uri: str     # path relative to the folder, '/'-separated
    doc_id: str
    content_hash: str

    def entry(self) -> dict:
        return {"doc_id": self.doc_id, "source_uri": self.source_uri, "content_hash": self.content_hash}


def scan(folder: Path) -> list[FolderFile]:
    files, owners = [], {}
    for path, relative in iter_files(folder):
        if relative.endswith(SIDECAR_SUFFIX):
            continue
        data = path.read_bytes()
        doc_id = _sidecar_id(path) or _front_matter_id(path, data) or default_doc_id(relative)
        if doc_id in owners:
            raise ManifestError(f"{relative!r} and {owners[doc_id]!r} both have doc id {doc_id!r}")
        owners[doc_id] = relative
        files.append(FolderFile(path, relative, doc_id, hashlib.sha256(data).hexdigest()))
    return files


def _sidecar_id(path: Path) -> str:
    sidecar = path.with_name(path.name + SIDECAR_SUFFIX)
    if not sidecar.is_file():
        return ""
    try:
        doc_id = sidecar.read_text(encoding="utf-8").strip()
    except UnicodeDecodeError:
        raise ManifestError(f"{sidecar} is not UTF-8 text") from None
    if not doc_id or "\n" in doc_id:
        raise ManifestError(f"{sidecar} must hold one doc id on one line")
    return doc_id


def _front_matter_id(path: Path, data: bytes) -> str:
    if path.suffix.lower() not in FRONT_MATTER_SUFFIXES or not data.startswith(b"---"):
        return ""
    text = data.decode("utf-8", errors="replace")
    lines = text.splitlines()
    try:
        end = lines.index("---", 1)
    except ValueError:
        return ""
    try:
        meta = yaml.safe_load("\n".join(lines[1:end]))
    except yaml.YAMLError:
        return ""  # not front matter after all; the path names the document
    value = meta.get("doc_id") if isinstance(meta, dict) else None
    return str(value).strip() if value is not None else ""
