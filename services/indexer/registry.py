"""The document registry: doc id -> version, content hash, chunk ids, status.

It is the indexer's memory of what each store should hold, so re-ingestion can
skip unchanged documents and replace changed ones without orphans, and it
survives restarts: SQLite under the data directory in embedded mode, the
control-plane PostgreSQL database in cluster mode (same statements, same contract
tests). It also keeps each indexed chunk itself, so the reconciler can restore a
chunk that a store lost without re-parsing the source.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from collections.abc import Sequence
from pathlib import Path

from shared.config import Settings
from shared.contracts import chunk_pb2
from shared.state.postgres import database_for
from shared.state.sql import SqlDatabase, SqliteDatabase

SCHEMA = """
CREATE TABLE IF NOT EXISTS documents (
    kb TEXT NOT NULL,
    namespace TEXT NOT NULL,
    doc_id TEXT NOT NULL,
    version INTEGER NOT NULL,
    content_hash TEXT NOT NULL,
    chunk_ids TEXT NOT NULL,
    status TEXT NOT NULL,
    source_uri TEXT NOT NULL DEFAULT '',
    updated_at TEXT NOT NULL,
    PRIMARY KEY (kb, namespace, doc_id)
);
CREATE TABLE IF NOT EXISTS chunk_payloads (
    kb TEXT NOT NULL,
    namespace TEXT NOT NULL,
    doc_id TEXT NOT NULL,
    chunk_id TEXT NOT NULL,
    payload BLOB NOT NULL,
    PRIMARY KEY (kb, namespace, doc_id, chunk_id)
);
CREATE TABLE IF NOT EXISTS kb_models (
    kb TEXT PRIMARY KEY,
    model_id TEXT NOT NULL,
    dimension INTEGER NOT NULL
);
"""

INDEXED = "indexed"
INDEXING = "indexing"
INCOMPLETE = "incomplete"  # chunks missing from every store; the next ingestion re-indexes it


@dataclass(frozen=True)
class DocumentEntry:
    kb: str
    namespace: str
    doc_id: str
    version: int
    content_hash: str
    chunk_ids: tuple[str, ...]
    status: str
    source_uri: str
    updated_at: str


_COLUMNS = "kb, namespace, doc_id, version, content_hash, chunk_ids, status, source_uri, updated_at"


class DocumentRegistry:
    """`where` is a SQLite file (embedded) or the control-plane database (see `for_settings`)."""

    def __init__(self, where: Path | SqlDatabase):
        self._db = SqliteDatabase(where, schema=SCHEMA) if isinstance(where, (str, Path)) else where

    @classmethod
    def for_settings(cls, settings: Settings) -> DocumentRegistry:
        return cls(database_for(settings) or Path(settings.data_dir) / "registry.sqlite")

    def get(self, kb: str, namespace: str, doc_id: str) -> DocumentEntry | None:
        row = self._db.execute(f"SELECT {_COLUMNS} FROM documents WHERE kb = ? AND namespace = ? AND doc_id = ?",
                               (kb, namespace, doc_id)).one()
        return _entry(row) if row else None

    def put(self, kb: str, namespace: str, doc_id: str, *, version: int, content_hash: str, chunk_ids: list[str],
            status: str, source_uri: str) -> None:
        now = datetime.now(timezone.utc).isoformat(timespec="seconds")
        self._db.execute(
            f"INSERT INTO documents({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT(kb, namespace, doc_id) DO UPDATE "
            "SET version=excluded.version, content_hash=excluded.content_hash, chunk_ids=excluded.chunk_ids, "
            "status=excluded.status, source_uri=excluded.source_uri, updated_at=excluded.updated_at",
            (kb, namespace, doc_id, version, content_hash, json.dumps(chunk_ids), status, source_uri, now),
        )

    def delete(self, kb: str, namespace: str, doc_id: str) -> None:
        with self._db.transaction() as db:
            db.execute("DELETE FROM documents WHERE kb = ? AND namespace = ? AND doc_id = ?", (kb, namespace, doc_id))
            db.execute("DELETE FROM chunk_payloads WHERE kb = ? AND namespace = ? AND doc_id = ?",
                       (kb, namespace, doc_id))

    def set_status(self, kb: str, namespace: str, doc_id: str, status: str) -> None:
        self._db.execute("UPDATE documents SET status = ? WHERE kb = ? AND namespace = ? AND doc_id = ?",
                         (status, kb, namespace, doc_id))

    def put_chunks(self, kb: str, chunks: Sequence[chunk_pb2.KnowledgeChunk]) -> None:
        rows = [(kb, c.namespace, c.doc_id, c.chunk_id, c.SerializeToString()) for c in chunks]
        with self._db.transaction() as db:
            db.execute_many("INSERT INTO chunk_payloads(kb, namespace, doc_id, chunk_id, payload) "
                            "VALUES (?, ?, ?, ?, ?) ON CONFLICT(kb, namespace, doc_id, chunk_id) "
                            "DO UPDATE SET payload = excluded.payload", rows)

    def chunks(self, kb: str, namespace: str, doc_id: str, chunk_ids: Sequence[str]) -> list[chunk_pb2.KnowledgeChunk]:
        wanted = set(chunk_ids)
        rows = self._db.execute(
            "SELECT chunk_id, payload FROM chunk_payloads WHERE kb = ? AND namespace = ? AND doc_id = ?",
            (kb, namespace, doc_id),
        ).rows
        return [chunk_pb2.KnowledgeChunk.FromString(bytes(payload)) for chunk_id, payload in rows
                if chunk_id in wanted]

    def keep_chunks(self, kb: str, namespace: str, doc_id: str, chunk_ids: Sequence[str]) -> None:
        """Forget the stored chunks of a document except `chunk_ids`."""
        keep = set(chunk_ids)
        with self._db.transaction() as db:
            rows = db.execute("SELECT chunk_id FROM chunk_payloads WHERE kb = ? AND namespace = ? AND doc_id = ?",
                              (kb, namespace, doc_id)).rows
            gone = [(kb, namespace, doc_id, r[0]) for r in rows if r[0] not in keep]
            db.execute_many(
                "DELETE FROM chunk_payloads WHERE kb = ? AND namespace = ? AND doc_id = ? AND chunk_id = ?", gone)

    def list(self, kb: str, namespace: str = "") -> list[DocumentEntry]:
        sql = f"SELECT {_COLUMNS} FROM documents WHERE kb = ?"
        params: tuple = (kb,)
        if namespace:
            sql += " AND namespace = ?"
            params += (namespace,)
        # sorted here, not in SQL: PostgreSQL's text order follows the server's locale, SQLite's is binary
        return sorted((_entry(r) for r in self._db.execute(sql, params).rows), key=lambda e: (e.namespace, e.doc_id))

    def counts(self, kb: str, namespaces: Sequence[str] = ()) -> tuple[int, int]:
        """(documents, chunks) of a KB that are complete, in the given namespaces (none given = all);
        a version being written does not count yet."""
        docs = [d for namespace in (namespaces or [""]) for d in self.list(kb, namespace) if d.status == INDEXED]
        return len(docs), sum(len(d.chunk_ids) for d in docs)

    def model_of(self, kb: str) -> tuple[str, int] | None:
        row = self._db.execute("SELECT model_id, dimension FROM kb_models WHERE kb = ?", (kb,)).one()
        return (row[0], int(row[1])) if row else None

    def record_model(self, kb: str, model_id: str, dimension: int) -> None:
        self._db.execute("INSERT INTO kb_models(kb, model_id, dimension) VALUES (?, ?, ?) ON CONFLICT(kb) DO NOTHING",
                         (kb, model_id, dimension))

    def close(self) -> None:
        self._db.close()


def _entry(row) -> DocumentEntry:
    return DocumentEntry(kb=row[0], namespace=row[1], doc_id=row[2], version=int(row[3]), content_hash=row[4],
                         chunk_ids=tuple(json.loads(row[5])), status=row[6], source_uri=row[7], updated_at=row[8])
