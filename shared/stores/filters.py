"""Search-filter pieces every backend shares: metadata equality, validated once.

A `SearchFilter.metadata` entry {key: value} keeps only chunks whose metadata
holds that key with exactly that value (all entries must hold). Each store
turns the pairs into a clause of its own query; none filters after the fact.
"""

from __future__ import annotations

import json

from shared.contracts import chunk_pb2
from shared.errors import InvalidArgument

METADATA_KEY_MAX = 256
METADATA_VALUE_MAX = 4096
METADATA_PAIRS_MAX = 32


def metadata_pairs(search_filter: chunk_pb2.SearchFilter) -> list[tuple[str, str]]:
    """The filter's metadata equalities, sorted by key; raises on empty or oversized keys and values."""
    pairs = sorted(search_filter.metadata.items())
    if len(pairs) > METADATA_PAIRS_MAX:
        raise InvalidArgument(f"a search filter may hold at most {METADATA_PAIRS_MAX} metadata pairs, got {len(pairs)}")
    for key, value in pairs:
        if not key.strip():
            raise InvalidArgument("a metadata filter key is empty")
        if len(key) > METADATA_KEY_MAX:
            raise InvalidArgument(f"metadata filter key {key[:40]!r}... is longer than {METADATA_KEY_MAX} characters")
        if len(value) > METADATA_VALUE_MAX:
            raise InvalidArgument(f"metadata filter value for {key!r} is longer than {METADATA_VALUE_MAX} characters")
    return pairs


def metadata_terms(metadata) -> list[str]:
    """`key=value` strings: how a keyword engine stores a string map as exact-match terms.

    The key is JSON-quoted so a `=` inside a key can never make two different
    pairs produce the same term.
    """
    return [f"{json.dumps(key, ensure_ascii=False)}={value}" for key, value in sorted(metadata.items())]


def milvus_metadata_clauses(pairs: list[tuple[str, str]]) -> list[str]:
    """Milvus boolean-expression clauses on the JSON payload's `metadata` object."""
    return [f'payload["metadata"][{json.dumps(key, ensure_ascii=False)}] == {json.dumps(value, ensure_ascii=False)}'
            for key, value in pairs]
