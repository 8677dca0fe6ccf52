"""Per-request traces: every list the query went through, with scores and ranks, kept in a bounded store.

A trace holds the request (so it can be replayed), the step settings and step
outcomes, each stage's timing and metadata, and the BM25, dense, fused,
reranked and dropped lists. Traces live in SQLite under the data directory
(embedded) or in the control-plane PostgreSQL database (cluster mode); the
oldest are deleted once `limit` is exceeded.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from google.protobuf import json_format

from shared.contracts import chunk_pb2
from shared.errors import InvalidArgument, NotFound
from shared.state.postgres import database_for
from shared.state.sql import SqlDatabase, SqliteDatabase
from shared.stores.acl import ACL_KEY

SNIPPET_CHARS = 300


def candidate_entry(rank: int, candidate: chunk_pb2.Candidate) -> dict:
    chunk = candidate.chunk
    return {
        "rank": rank, "chunk_id": chunk.chunk_id, "doc_id": chunk.doc_id, "namespace": chunk.namespace,
        "score": round(candidate.score, 6),
        "bm25_rank": candidate.bm25_rank, "bm25_score": round(candidate.bm25_score, 6),
        "dense_rank": candidate.dense_rank, "dense_score": round(candidate.dense_score, 6),
        "rerank_score": round(candidate.rerank_score, 6),
        "heading_path": list(chunk.heading_path), "source": chunk.source.uri,
        "acl": chunk.metadata.get(ACL_KEY, ""),
        "text": (chunk.raw_content or chunk.content)[:SNIPPET_CHARS],
    }


def candidate_list(candidates) -> list[dict]:
    return [candidate_entry(rank, c) for rank, c in enumerate(candidates, start=1)]


def dropped_list(dropped, known: dict[str, chunk_pb2.Candidate]) -> list[dict]:
    """What post-retrieval dropped and why; chunk details come from the fused list it was cut from."""
    entries = []
    for item in dropped:
        entry = {"chunk_id": item.chunk_id, "reason": item.reason, "score": round(item.score, 6)}
        candidate = known.get(item.chunk_id)
        if candidate is not None:
            entry.update({"doc_id": candidate.chunk.doc_id, "namespace": candidate.chunk.namespace,
                          "acl": candidate.chunk.metadata.get(ACL_KEY, ""),
                          "text": (candidate.chunk.raw_content or candidate.chunk.content)[:SNIPPET_CHARS]})
        entries.append(entry)
    return entries


def visible_to(trace: dict, can_read: Callable[[str, str], bool]) -> dict:
    """The trace as a reader sees it: entries of chunks it may not read (`can_read(namespace, acl)`) are
    withheld, and so is everything written from them (answer, citations, HyDE drafts, step details).

    Traces are stored whole and filtered here, at read time, so a reader of the same namespace without
    the document's ACL group learns nothing of it from someone else's trace.
    """
    withheld = 0

    def keep(entry: dict) -> dict:
        nonlocal withheld
        if "namespace" in entry and "acl" in entry and can_read(entry["namespace"], entry["acl"]):
            return entry
        withheld += 1
        return {"rank": entry.get("rank"), "withheld": True}

    lists = {name: [keep(e) for e in entries] for name, entries in trace["lists"].items() if name != "variants"}
    lists["variants"] = {query: [keep(e) for e in entries]
                         for query, entries in trace["lists"].get("variants", {}).items()}
    visible = {**trace, "lists": lists, "withheld": withheld}
    if withheld:
        visible.update(answer=None, citations=[], extra_queries=[], answer_withheld=True,
                       step_notes=[{**note, "detail": "withheld"} for note in trace.get("step_notes", [])])
    return visible


def stage_entries(stages) -> list[dict]:
    return [{"name": s.name, "ms": s.ms, "metadata": dict(s.metadata)} for s in stages]


def message_dicts(messages) -> list[dict]:
    return [json_format.MessageToDict(m, preserving_proto_field_name=True) for m in messages]


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


SQLITE_SCHEMA = """
CREATE TABLE IF NOT EXISTS traces (seq INTEGER PRIMARY KEY AUTOINCREMENT, trace_id TEXT NOT NULL UNIQUE,
                                   namespaces TEXT NOT NULL, body TEXT NOT NULL);
"""


class TraceStore:
    """Bounded trace storage; safe to share between threads. `where`: a SQLite file or the control-plane database."""

    def __init__(self, where: Path | SqlDatabase, *, limit: int = 1000):
        if limit < 1:
            raise ValueError(f"trace limit must be >= 1, got {limit}")
        self.limit = limit
        # a trace is a diagnostic record written on every query: no fsync per answer
        self._db = (SqliteDatabase(where, schema=SQLITE_SCHEMA, durable=False) if isinstance(where, (str, Path))
                    else where)

    @classmethod
    def for_settings(cls, settings) -> TraceStore:
        return cls(database_for(settings) or Path(settings.data_dir) / "traces.sqlite", limit=settings.trace_limit)

    def put(self, trace: dict) -> None:
        body = json.dumps(trace, ensure_ascii=False)
        namespaces = json.dumps(trace["request"]["namespaces"])
        with self._db.transaction() as db:
            seq = db.execute("INSERT INTO traces(trace_id, namespaces, body) VALUES (?, ?, ?) ON CONFLICT(trace_id) "
                             "DO UPDATE SET namespaces = excluded.namespaces, body = excluded.body RETURNING seq",
                             (trace["trace_id"], namespaces, body)).one()[0]
            db.execute("DELETE FROM traces WHERE seq <= ?", (seq - self.limit,))

    def get(self, trace_id: str) -> dict:
        if not trace_id or len(trace_id) > 64 or not trace_id.isalnum():
            raise InvalidArgument(f"invalid trace id {trace_id[:80]!r}: expected up to 64 letters and digits")
        row = self._db.execute("SELECT body FROM traces WHERE trace_id = ?", (trace_id,)).one()
        if row is None:
            raise NotFound(f"no trace {trace_id!r} (it may have been evicted; the store keeps the last {self.limit})")
        return json.loads(row[0])

    def count(self) -> int:
        return self._db.execute("SELECT count(*) FROM traces").one()[0]

    def close(self) -> None:
        self._db.close()
