"""Incremental folder sync: compare a folder's manifest with what a namespace holds.

The folder is the truth for the namespace: a file whose doc id is new or whose
bytes changed is uploaded; one with the same bytes under a new path (a move
with a stable doc id) is uploaded too, and indexing finds its chunks unchanged
and only records the new path, so nothing is re-embedded; documents of the
namespace without a file are deleted from every store.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from shared.contracts import gateway_pb2, indexer_pb2
from shared.errors import InvalidArgument

_SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass
class SyncPlan:
    upload: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    moved: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)


def plan_sync(entries: list[gateway_pb2.SyncEntry], documents: list[indexer_pb2.DocumentRecord]) -> SyncPlan:
    seen: dict[str, str] = {}
    for entry in entries:
        if not entry.doc_id:
            raise InvalidArgument(f"sync entry {entry.source_uri!r} has no doc_id")
        if entry.doc_id in seen:
            raise InvalidArgument(f"doc_id {entry.doc_id!r} is given twice: {seen[entry.doc_id]!r} and "
                                  f"{entry.source_uri!r}")
        if not _SHA256.match(entry.content_hash):
            raise InvalidArgument(f"sync entry {entry.source_uri!r}: content_hash must be a lower-case hex sha256, "
                                  f"got {entry.content_hash!r}")
        seen[entry.doc_id] = entry.source_uri
    current = {doc.doc_id: doc for doc in documents}
    plan = SyncPlan()
    for entry in entries:
        held = current.get(entry.doc_id)
        if held is None or held.content_hash != entry.content_hash or held.status not in ("", "indexed"):
            plan.upload.append(entry.doc_id)
        elif held.source_uri != entry.source_uri:
            plan.upload.append(entry.doc_id)
            plan.moved.append(entry.doc_id)
        else:
            plan.unchanged.append(entry.doc_id)
    plan.deleted = sorted(set(current) - set(seen))
    return plan
