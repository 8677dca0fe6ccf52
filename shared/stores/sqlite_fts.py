"""Embedded keyword store: SQLite FTS5 with its built-in BM25 ranking.

Text is analyzed by `shared.text.analyze` (jieba words or characters for CJK,
lower-cased words for Latin) before FTS5 sees it, and FTS5's porter stemmer
runs on top; queries go through the same analyzer, so Chinese and English both
match. Namespace and other filters are part of the same SQL statement as MATCH.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path

from shared.contracts import chunk_pb2
from shared.stores.base import require_namespaces
from shared.text import Analyzer, analyze, query_terms

SCHEMA = """
CREATE TABLE IF NOT EXISTS chunks (
    rowid INTEGER PRIMARY KEY,
    chunk_id TEXT NOT NULL UNIQUE,
    namespace TEXT NOT NULL,
    doc_id TEXT NOT NULL,
    block_type INTEGER NOT NULL,
    payload BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS chunks_by_doc ON chunks(namespace, doc_id);
CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5(
    terms, tokenize='porter unicode61 remove_diacritics 2'
);
"""


class SqliteFtsKeywordStore:
    """One SQLite database per knowledge base; safe to share between threads and processes (WAL)."""

    def __init__(self, path: Path, *, analyzer: Analyzer = "jieba"):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._analyzer = analyzer
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, timeout=30, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(SCHEMA)

    def upsert(self, chunks: Sequence[chunk_pb2.KnowledgeChunk]) -> None:
        rows = [(c, " ".join(analyze(_indexed_text(c), self._analyzer))) for c in chunks]
        with self._lock, _transaction(self._db):
            self._delete_ids_locked([c.chunk_id for c, _ in rows])
            for chunk, terms in rows:
                cursor = self._db.execute(
                    "INSERT INTO chunks(chunk_id, namespace, doc_id, block_type, payload) VALUES (?, ?, ?, ?, ?)",
                    (chunk.chunk_id, chunk.namespace, chunk.doc_id, int(chunk.block_type), chunk.SerializeToString()),
                )
                self._db.execute("INSERT INTO chunks_fts(rowid, terms) VALUES (?, ?)", (cursor.lastrowid, terms))

    def delete_ids(self, chunk_ids: Sequence[str]) -> int:
        with self._lock, _transaction(self._db):
            return self._delete_ids_locked(chunk_ids)

    def delete_document(self, namespace: str, doc_id: str) -> int:
        return self.delete_ids(sorted(self.chunk_ids(namespace, doc_id)))

    def search(self, query: str, search_filter: chunk_pb2.SearchFilter, limit: int) -> list[chunk_pb2.Candidate]:
        namespaces = require_namespaces(search_filter)
        terms = query_terms(query, self._analyzer)
        if not terms:
            return []
        match = " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
        where = [f"c.namespace IN ({_marks(namespaces)})"]
        params: list = [match, *namespaces]
        if search_filter.doc_ids:
            where.append(f"c.doc_id IN ({_marks(search_filter.doc_ids)})")
            params.extend(search_filter.doc_ids)
        if search_filter.block_types:
            where.append(f"c.block_type IN ({_marks(search_filter.block_types)})")
            params.extend(int(b) for b in search_filter.block_types)
        sql = (
            "SELECT c.payload, bm25(chunks_fts) AS rank FROM chunks_fts JOIN chunks c ON c.rowid = chunks_fts.rowid "
            f"WHERE chunks_fts MATCH ? AND {' AND '.join(where)} ORDER BY rank LIMIT ?"
        )
        with self._lock:
            rows = self._db.execute(sql, (*params, limit)).fetchall()
        candidates = []
        for rank, (payload, score) in enumerate(rows, start=1):
            chunk = chunk_pb2.KnowledgeChunk.FromString(payload)
            # FTS5's bm25() is negative (lower is better); expose the usual positive score.
            candidates.append(chunk_pb2.Candidate(chunk=chunk, score=-score, route=chunk_pb2.ROUTE_BM25,
                                                  bm25_rank=rank, bm25_score=-score))
        return candidates

    def chunk_ids(self, namespace: str, doc_id: str) -> set[str]:
        with self._lock:
            rows = self._db.execute(
                "SELECT chunk_id FROM chunks WHERE namespace = ? AND doc_id = ?", (namespace, doc_id)
            ).fetchall()
        return {r[0] for r in rows}

    def get(self, chunk_ids: Sequence[str]) -> list[chunk_pb2.KnowledgeChunk]:
        if not chunk_ids:
            return []
        with self._lock:
            rows = self._db.execute(
                f"SELECT payload FROM chunks WHERE chunk_id IN ({_marks(chunk_ids)})", list(chunk_ids)
            ).fetchall()
        return [chunk_pb2.KnowledgeChunk.FromString(r[0]) for r in rows]

    def count(self) -> int:
        with self._lock:
            return self._db.execute("SELECT count(*) FROM chunks").fetchone()[0]

    def drop(self) -> None:
        with self._lock, _transaction(self._db):
            self._db.execute("DELETE FROM chunks")
            self._db.execute("DELETE FROM chunks_fts")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _delete_ids_locked(self, chunk_ids: Sequence[str]) -> int:
        deleted = 0
        for start in range(0, len(chunk_ids), 500):
            batch = list(chunk_ids[start:start + 500])
            rowids = [r[0] for r in self._db.execute(
                f"SELECT rowid FROM chunks WHERE chunk_id IN ({_marks(batch)})", batch
            ).fetchall()]
            if rowids:
                self._db.execute(f"DELETE FROM chunks_fts WHERE rowid IN ({_marks(rowids)})", rowids)
                self._db.execute(f"DELETE FROM chunks WHERE rowid IN ({_marks(rowids)})", rowids)
                deleted += len(rowids)
        return deleted


def _indexed_text(chunk: chunk_pb2.KnowledgeChunk) -> str:
    return chunk.content or chunk.raw_content


def _marks(values: Sequence) -> str:
    return ", ".join("?" for _ in values)


class _transaction:
    def __init__(self, db: sqlite3.Connection):
        self._db = db

    def __enter__(self):
        self._db.execute("BEGIN IMMEDIATE")
        return self._db

    def __exit__(self, exc_type, exc, tb):
        self._db.execute("ROLLBACK" if exc_type else "COMMIT")
        return False
