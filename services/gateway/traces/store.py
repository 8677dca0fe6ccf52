"""Per-request traces: every list the query went through, with scores and ranks, kept in a bounded store.

A trace holds the request (so it can be replayed), the step settings and step
outcomes, each stage's timing and metadata, and the BM25, dense, fused,
reranked and dropped lists. Traces live in SQLite under the data directory
(embedded) or in the control-plane PostgreSQL database (cluster mode); the
oldest are deleted once `limit` is exceeded.

Traces are written off the request path: `put` hands a trace to a bounded queue
that a background thread drains, committing up to `batch_size` traces per
transaction; once woken by a trace it gathers more for up to WRITE_GATHER_S, so under
load a commit writes many traces and a query does not wake the writer each time. A full
queue drops the trace (`put` returns False, the gateway counts it in
ragkb_traces_dropped_total) rather than making the request wait. Until
committed, a trace is read from the queue, so a trace can be read right after its
answer; `close` writes what is queued.
"""

from __future__ import annotations

import itertools
import json
import logging
import threading
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import orjson
from google.protobuf import json_format

from shared.contracts import chunk_pb2
from shared.errors import InvalidArgument, NotFound
from shared.state.postgres import database_for
from shared.state.sql import SqlDatabase, SqliteDatabase
from shared.stores.acl import ACL_KEY

log = logging.getLogger("ragkb.gateway.traces")

SNIPPET_CHARS = 300
WRITE_GATHER_S = 0.05


def candidate_entry(rank: int, candidate: chunk_pb2.Candidate, chunk_fields: dict) -> dict:
    """`chunk_fields`: the entry's chunk fields (`_chunk_fields`)."""
    return {
        "rank": rank, **chunk_fields, "score": round(candidate.score, 6),
        "bm25_rank": candidate.bm25_rank, "bm25_score": round(candidate.bm25_score, 6),
        "dense_rank": candidate.dense_rank, "dense_score": round(candidate.dense_score, 6),
        "rerank_score": round(candidate.rerank_score, 6),
    }


def _chunk_fields(chunk: chunk_pb2.KnowledgeChunk) -> dict:
    return {
        "chunk_id": chunk.chunk_id, "doc_id": chunk.doc_id, "namespace": chunk.namespace,
        "heading_path": list(chunk.heading_path), "source": chunk.source.uri,
        "acl": chunk.metadata.get(ACL_KEY, ""),
        "text": (chunk.raw_content or chunk.content)[:SNIPPET_CHARS],
    }


def candidate_list(candidates, stored: dict[str, dict] | None = None) -> list[dict]:
    """Trace entries of `candidates`. `stored`: chunk fields by chunk id, shared by the lists of one query
    whose chunks are the stores' own (the routes' and the fused list hold the same chunks; a reranked list's
    may be rewritten, so it reads its own), so each chunk is read once."""
    stored = {} if stored is None else stored
    entries = []
    for rank, candidate in enumerate(candidates, start=1):
        chunk_id = candidate.chunk.chunk_id
        fields = stored.get(chunk_id)
        if fields is None:
            fields = stored[chunk_id] = _chunk_fields(candidate.chunk)
        entries.append(candidate_entry(rank, candidate, fields))
    return entries


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


def _encode(trace: dict) -> bytes:
    """A trace as the UTF-8 JSON the store keeps."""
    return orjson.dumps(trace, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY)


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


SQLITE_SCHEMA = """
CREATE TABLE IF NOT EXISTS traces (seq INTEGER PRIMARY KEY AUTOINCREMENT, trace_id TEXT NOT NULL UNIQUE,
                                   namespaces TEXT NOT NULL, body TEXT NOT NULL);
"""


class TraceStore:
    """Bounded trace storage with a background writer; safe to share between threads.

    `where`: a SQLite file or the control-plane database; `queue_size`: traces waiting to be written
    before `put` drops; `batch_size`: traces per commit.
    """

    def __init__(self, where: Path | SqlDatabase, *, limit: int = 1000, queue_size: int = 1000,
                 batch_size: int = 100):
        if limit < 1 or queue_size < 1 or batch_size < 1:
            raise ValueError(f"trace limit, queue size and batch size must be >= 1, got {limit}, {queue_size}, "
                             f"{batch_size}")
        self.limit = limit
        self.queue_size = queue_size
        self.batch_size = batch_size
        # a trace is a diagnostic record written on every query: no fsync per answer
        self._db = (SqliteDatabase(where, schema=SQLITE_SCHEMA, durable=False) if isinstance(where, (str, Path))
                    else where)
        self._queued: dict[str, dict] = {}  # trace id -> trace, oldest first, until committed
        self._changed = threading.Condition()
        self._closing = False
        self._flushing = 0  # callers of `flush` waiting: the writer stops gathering for them
        self._writer = threading.Thread(target=self._write_queued, name="trace-writer", daemon=True)
        self._writer.start()

    @classmethod
    def for_settings(cls, settings) -> TraceStore:
        return cls(database_for(settings) or Path(settings.data_dir) / "traces.sqlite", limit=settings.trace_limit)

    def put(self, trace: dict) -> bool:
        """Queue `trace` for writing; False (dropped) when the queue is full or the store is closed."""
        with self._changed:
            if self._closing or (len(self._queued) >= self.queue_size and trace["trace_id"] not in self._queued):
                return False
            self._queued.pop(trace["trace_id"], None)  # a rewrite of a queued trace goes to the end
            self._queued[trace["trace_id"]] = trace
            if len(self._queued) in (1, self.batch_size):  # the writer waits for a first trace or a full batch
                self._changed.notify_all()
        return True

    def get(self, trace_id: str) -> dict:
        if not trace_id or len(trace_id) > 64 or not trace_id.isalnum():
            raise InvalidArgument(f"invalid trace id {trace_id[:80]!r}: expected up to 64 letters and digits")
        with self._changed:
            queued = self._queued.get(trace_id)
        if queued is not None:  # read back as the stored JSON reads, not as the live dict
            return orjson.loads(_encode(queued))
        row = self._db.execute("SELECT body FROM traces WHERE trace_id = ?", (trace_id,)).one()
        if row is None:
            raise NotFound(f"no trace {trace_id!r} (it may have been evicted; the store keeps the last {self.limit})")
        return json.loads(row[0])

    def count(self) -> int:
        """Traces stored, once those queued now are written."""
        self.flush()
        return self._db.execute("SELECT count(*) FROM traces").one()[0]

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Wait until every trace queued so far is written (or dropped after a failed commit)."""
        with self._changed:
            self._flushing += 1
            self._changed.notify_all()
            try:
                return self._changed.wait_for(lambda: not self._queued or not self._writer.is_alive(), timeout_s)
            finally:
                self._flushing -= 1

    def close(self) -> None:
        """Write what is queued, stop the writer, close the database."""
        with self._changed:
            self._closing = True
            self._changed.notify_all()
        self._writer.join()
        self._db.close()

    def _write_queued(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._queued or self._closing)
                if not self._queued:
                    return  # closing, nothing left
                self._changed.wait_for(lambda: len(self._queued) >= self.batch_size or self._closing
                                       or self._flushing, WRITE_GATHER_S)
                batch = list(itertools.islice(self._queued.items(), self.batch_size))
            try:
                self._commit(batch)
            except Exception as error:  # losing traces must not stop the writer
                log.warning("%d traces not stored: %s", len(batch), error)
            with self._changed:
                for trace_id, trace in batch:
                    if self._queued.get(trace_id) is trace:
                        del self._queued[trace_id]
                self._changed.notify_all()

    def _commit(self, batch: list[tuple[str, dict]]) -> None:
        rows = [(trace_id, json.dumps(trace["request"]["namespaces"]), _encode(trace).decode("utf-8"))
                for trace_id, trace in batch]
        with self._db.transaction() as db:
            last = 0
            for row in rows:
                seq = db.execute("INSERT INTO traces(trace_id, namespaces, body) VALUES (?, ?, ?) "
                                  "ON CONFLICT(trace_id) DO UPDATE SET namespaces = excluded.namespaces, "
                                  "body = excluded.body RETURNING seq", row).one()[0]
                last = max(last, seq)
            db.execute("DELETE FROM traces WHERE seq <= ?", (last - self.limit,))
