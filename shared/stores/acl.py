"""Document ACLs: which groups may read a chunk, and how a search filter asks for it.

A chunk's allowed groups come from its `acl` metadata ("hr, finance"); no
`acl` means the chunk is readable by anyone in its namespace. Every store turns
the filter's groups into a clause of its own query, so an excluded chunk is
never recalled, rather than removed after the fact.
"""

from __future__ import annotations

from shared.contracts import chunk_pb2
from shared.errors import InvalidArgument

ACL_KEY = "acl"
MAX_GROUPS = 64
MAX_GROUP_CHARS = 128


def chunk_groups(chunk: chunk_pb2.KnowledgeChunk) -> list[str]:
    """The chunk's allowed groups, parsed from metadata `acl` (comma separated, order kept, no duplicates)."""
    return parse_groups(chunk.metadata.get(ACL_KEY, ""))


def parse_groups(raw: str) -> list[str]:
    groups: list[str] = []
    for part in raw.replace("，", ",").split(","):
        group = part.strip()
        if "|" in group:
            raise InvalidArgument(f"ACL group {group!r} contains '|', which group names cannot contain")
        if group and group not in groups:
            groups.append(group[:MAX_GROUP_CHARS])
    return groups[:MAX_GROUPS]


def acl_clause_groups(search_filter: chunk_pb2.SearchFilter) -> list[str] | None:
    """None when the filter does not enforce ACLs; otherwise the caller's groups (possibly empty)."""
    if not search_filter.acl_enforced:
        return None
    return [g for g in search_filter.acl_groups if g]
