"""Embedded keyword store: SQLite FTS5, searched through an in-memory BM25 index of the same rows.

Text is analyzed by `shared.text.analyze` (jieba words or characters for CJK,
lower-cased words for Latin) before FTS5 sees it, and FTS5's porter stemmer
runs on top; queries go through the same analyzer, so Chinese and English both
match. SQLite is the durable copy. `MemoryBm25Index` (shared/stores/memory_bm25.py)
holds the same terms and scores as FTS5's `bm25()`; it is built from the rows when
the store opens, changed under the store's lock in the same call as every write,
and rebuilt when another connection (another process) has written the file.
Namespace, document and block-type filters are applied to its candidates before
ranking; metadata and ACL filters by the same SQL clauses as the FTS5 query, on
the candidate rows, so no excluded row is ever ranked. A query with a word FTS5
splits into several tokens (a phrase such as "don't" or "3.5", which FTS5 matches
by position) runs as an FTS5 `MATCH`, as does every query of a store opened with
`memory_index=False`.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path

from shared.contracts import chunk_pb2
from shared.stores.acl import acl_clause_groups, chunk_groups
from shared.stores.base import require_namespaces, sibling_fetch_args
from shared.stores.filters import metadata_pairs
from shared.stores.memory_bm25 import IndexedRow, MemoryBm25Index, PreparedRows, RowFilter, ranked, shared_tokenizer
from shared.text import Analyzer, analyze, query_terms

logger = logging.getLogger(__name__)

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

    def __init__(self, path: Path, *, analyzer: Analyzer = "jieba", memory_index: bool = True):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._analyzer = analyzer
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, timeout=30, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(SCHEMA)
        self._ensure_group_column()
        self._ensure_acl_column()
        self._ensure_metadata_column()
        self._index = MemoryBm25Index(shared_tokenizer()) if memory_index else None
        self._indexed_version: int | None = None  # PRAGMA data_version the index reflects
        if self._index is not None:
            with self._lock:
                self._rebuild_index_locked()

    def upsert(self, chunks: Sequence[chunk_pb2.KnowledgeChunk]) -> None:
        rows = [(c, " ".join(analyze(_indexed_text(c), self._analyzer))) for c in chunks]
        prepared = self._index.prepare([IndexedRow(0, terms, c.namespace, c.doc_id, int(c.block_type))
                                        for c, terms in rows]) if self._index is not None else None
        inserted: list[int] = []
        with self._lock:
            with _transaction(self._db):
                index_current = self._index_current_locked()
                deleted = self._delete_ids_locked([c.chunk_id for c, _ in rows])
                for chunk, terms in rows:
                    inserted.append(self._insert_locked(chunk, terms))
            if prepared is not None:
                self._follow_locked(index_current, deleted, prepared.with_rowids(inserted))

    def _insert_locked(self, chunk: chunk_pb2.KnowledgeChunk, terms: str) -> int:
        """Insert one chunk and its FTS5 row; returns the rowid both share."""
        rowid = self._db.execute(
            "INSERT INTO chunks(chunk_id, namespace, doc_id, block_type, payload) VALUES (?, ?, ?, ?, ?)",
            (chunk.chunk_id, chunk.namespace, chunk.doc_id, int(chunk.block_type), chunk.SerializeToString()),
        ).lastrowid
        self._db.execute("INSERT INTO chunks_fts(rowid, terms) VALUES (?, ?)", (rowid, terms))
        if chunk.group_id:
            self._db.execute("UPDATE chunks SET group_id = ? WHERE rowid = ?", (chunk.group_id, rowid))
        self._db.execute("UPDATE chunks SET acl = ? WHERE rowid = ?",
                         (json.dumps(chunk_groups(chunk), ensure_ascii=False), rowid))
        self._db.execute("UPDATE chunks SET metadata = ? WHERE rowid = ?",
                         (json.dumps(dict(chunk.metadata), ensure_ascii=False), rowid))
        return rowid

    def delete_ids(self, chunk_ids: Sequence[str]) -> int:
        with self._lock:
            with _transaction(self._db):
                index_current = self._index_current_locked()
                deleted = self._delete_ids_locked(chunk_ids)
            if self._index is not None:
                self._follow_locked(index_current, deleted, None)
            return len(deleted)

    def delete_document(self, namespace: str, doc_id: str) -> int:
        return self.delete_ids(sorted(self.chunk_ids(namespace, doc_id)))

    def search(self, query: str, search_filter: chunk_pb2.SearchFilter, limit: int) -> list[chunk_pb2.Candidate]:
        namespaces = require_namespaces(search_filter)
        terms = query_terms(query, self._analyzer)
        if not terms:
            return []
        where, params = _filter_clauses(search_filter, namespaces)
        # a non-positive LIMIT means something else to SQLite: kept on its own path
        tokens = self._index.query_tokens(terms) if self._index is not None and limit > 0 else None
        with self._lock:
            if tokens is not None and self._index_current_locked(rebuild=True):
                rows = self._search_index_locked(tokens, search_filter, namespaces, where, params, limit)
            else:
                rows = self._search_fts_locked(terms, where, params, limit)
        candidates = []
        for rank, (payload, score) in enumerate(rows, start=1):
            chunk = chunk_pb2.KnowledgeChunk.FromString(payload)
            candidates.append(chunk_pb2.Candidate(chunk=chunk, score=score, route=chunk_pb2.ROUTE_BM25,
                                                  bm25_rank=rank, bm25_score=score))
        return candidates

    def _search_fts_locked(self, terms: list[str], where: list[str], params: list, limit: int) -> list[tuple]:
        """(payload, score) of the best rows by FTS5's own MATCH and bm25()."""
        match = " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
        sql = (
            "SELECT c.payload, bm25(chunks_fts) AS rank FROM chunks_fts JOIN chunks c ON c.rowid = chunks_fts.rowid "
            f"WHERE chunks_fts MATCH ? AND {' AND '.join(where)} ORDER BY rank LIMIT ?"
        )
        # FTS5's bm25() is negative (lower is better); expose the usual positive score.
        return [(payload, -rank) for payload, rank in self._db.execute(sql, (match, *params, limit)).fetchall()]

    def _search_index_locked(self, tokens: list[str], search_filter: chunk_pb2.SearchFilter,
                             namespaces: list[str], where: list[str], params: list, limit: int) -> list[tuple]:
        """(payload, score) of the best rows by the in-memory index.

        Namespace, document and block-type filters are applied to the index's candidates; the
        payloads are then read with every clause of the FTS5 query's WHERE, so metadata and ACL
        filters drop rows before they are counted toward `limit` (more candidates are read while
        rows are dropped and candidates remain).
        """
        row_filter = RowFilter(namespaces=namespaces, doc_ids=list(search_filter.doc_ids) or None,
                               block_types=[int(b) for b in search_filter.block_types] or None)
        rowids, scores = self._index.scores(tokens, row_filter)
        sql_only = bool(search_filter.metadata) or search_filter.acl_enforced
        found: list[tuple] = []
        taken = 0
        want = limit if not sql_only else max(4 * limit, 64)
        while len(found) < limit and taken < len(rowids):
            order = ranked(rowids, scores, min(len(rowids), taken + want))[taken:]
            taken += len(order)
            want *= 4
            batch = rowids[order].tolist()
            payloads: dict[int, bytes] = {}
            for start in range(0, len(batch), 500):
                part = batch[start:start + 500]
                # NOT INDEXED: read the rows by rowid and test the clauses on them; left to itself the planner
                # walks the namespace's whole index instead (4 x slower with 5k rows, growing with the KB)
                payloads.update(self._db.execute(
                    f"SELECT c.rowid, c.payload FROM chunks c NOT INDEXED WHERE c.rowid IN ({_marks(part)}) "
                    f"AND {' AND '.join(where)}",
                    (*part, *params)).fetchall())
            found.extend((payloads[rowid], float(score)) for rowid, score in zip(batch, scores[order].tolist())
                         if rowid in payloads)
        return found[:limit]

    def _follow_locked(self, index_current: bool, deleted: list[int], added: PreparedRows | None) -> None:
        """Bring the index to a write just committed, before the lock is released (so no search
        sees half of it); rebuilt instead when another connection wrote since the last sync."""
        try:
            if not index_current:
                self._rebuild_index_locked()
                return
            self._index.remove(deleted)
            if added is not None:
                self._index.add(added)
        except Exception:
            # the write is committed; the index must not answer until rebuilt from it
            self._indexed_version = None
            logger.exception("in-memory BM25 index update failed; it is rebuilt on the next search")

    def _index_current_locked(self, rebuild: bool = False) -> bool:
        """Whether the in-memory index reflects the file: no other connection committed since it was
        last synchronised (PRAGMA data_version). With `rebuild`, a stale index is rebuilt first."""
        if self._index is None:
            return False
        current = self._db.execute("PRAGMA data_version").fetchone()[0] == self._indexed_version
        if not current and rebuild:
            self._rebuild_index_locked()
            return True
        return current

    def _rebuild_index_locked(self) -> None:
        """The in-memory index from every stored row, read in one transaction."""
        self._indexed_version = None  # until the whole file is in it
        self._index.clear()
        with _transaction(self._db, "BEGIN"):
            version = self._db.execute("PRAGMA data_version").fetchone()[0]
            cursor = self._db.execute(
                "SELECT f.rowid, f.terms, c.namespace, c.doc_id, c.block_type "
                "FROM chunks_fts f JOIN chunks c ON c.rowid = f.rowid ORDER BY f.rowid")
            while batch := cursor.fetchmany(5000):
                self._index.add(self._index.prepare([IndexedRow(*row) for row in batch]))
        self._indexed_version = version

    def index_bytes(self) -> int:
        """Bytes the in-memory index holds (`MemoryBm25Index.nbytes`; 0 without one)."""
        with self._lock:
            return self._index.nbytes() if self._index is not None else 0

    def chunk_ids(self, namespace: str, doc_id: str) -> set[str]:
        with self._lock:
            rows = self._db.execute(
                "SELECT chunk_id FROM chunks WHERE namespace = ? AND doc_id = ?", (namespace, doc_id)
            ).fetchall()
        return {r[0] for r in rows}

    def chunk_ids_of(self, namespace: str, doc_ids: Sequence[str]) -> dict[str, set[str]]:
        found: dict[str, set[str]] = {doc_id: set() for doc_id in doc_ids}
        if not doc_ids:
            return found
        with self._lock:
            rows = self._db.execute(
                f"SELECT doc_id, chunk_id FROM chunks WHERE namespace = ? AND doc_id IN ({_marks(doc_ids)})",
                (namespace, *doc_ids)).fetchall()
        for doc_id, chunk_id in rows:
            found[doc_id].add(chunk_id)
        return found

    def get(self, chunk_ids: Sequence[str]) -> list[chunk_pb2.KnowledgeChunk]:
        if not chunk_ids:
            return []
        with self._lock:
            rows = self._db.execute(
                f"SELECT payload FROM chunks WHERE chunk_id IN ({_marks(chunk_ids)})", list(chunk_ids)
            ).fetchall()
        return [chunk_pb2.KnowledgeChunk.FromString(r[0]) for r in rows]

    def chunks_by_group(self, namespaces: Sequence[str], group_ids: Sequence[str]) -> list[chunk_pb2.KnowledgeChunk]:
        """Every stored part of the given split groups, ordered by group then part_index."""
        namespaces, group_ids = sibling_fetch_args(namespaces, group_ids)
        if not group_ids:
            return []
        with self._lock:
            rows = self._db.execute(
                f"SELECT payload FROM chunks WHERE namespace IN ({_marks(namespaces)}) "
                f"AND group_id IN ({_marks(group_ids)})", [*namespaces, *group_ids],
            ).fetchall()
        chunks = [chunk_pb2.KnowledgeChunk.FromString(r[0]) for r in rows]
        order = {g: i for i, g in enumerate(group_ids)}
        return sorted(chunks, key=lambda c: (order[c.group_id], c.part_index, c.position))

    def count(self) -> int:
        with self._lock:
            return self._db.execute("SELECT count(*) FROM chunks").fetchone()[0]

    def drop(self) -> None:
        with self._lock:
            with _transaction(self._db):
                self._db.execute("DELETE FROM chunks")
                self._db.execute("DELETE FROM chunks_fts")
            if self._index is not None:
                self._rebuild_index_locked()

    def make_live(self) -> None:
        """Nothing to point: one file per version, and the catalog's live version (one file rename or one row)
        is what every request resolves, so it is this engine's alias."""

    def close(self) -> None:
        with self._lock:
            self._db.close()
            if self._index is not None:
                self._index.clear()  # its memory goes with the store

    def _ensure_metadata_column(self) -> None:
        """Add the metadata column (metadata filters) to a database created before it existed."""
        if "metadata" in {row[1] for row in self._db.execute("PRAGMA table_info(chunks)")}:
            return
        with self._lock, _transaction(self._db):
            if "metadata" in {row[1] for row in self._db.execute("PRAGMA table_info(chunks)")}:
                return  # another process migrated it first
            self._db.execute("ALTER TABLE chunks ADD COLUMN metadata TEXT NOT NULL DEFAULT '{}'")
            for rowid, payload in self._db.execute("SELECT rowid, payload FROM chunks").fetchall():
                metadata = dict(chunk_pb2.KnowledgeChunk.FromString(payload).metadata)
                if metadata:
                    self._db.execute("UPDATE chunks SET metadata = ? WHERE rowid = ?",
                                     (json.dumps(metadata, ensure_ascii=False), rowid))

    def _ensure_acl_column(self) -> None:
        """Add the ACL column to a database created before ACLs existed, filled from each stored chunk."""
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(chunks)")}
        if "acl" in columns:
            return
        with self._lock, _transaction(self._db):
            if "acl" in {row[1] for row in self._db.execute("PRAGMA table_info(chunks)")}:
                return  # another process migrated it first
            self._db.execute("ALTER TABLE chunks ADD COLUMN acl TEXT NOT NULL DEFAULT '[]'")
            for rowid, payload in self._db.execute("SELECT rowid, payload FROM chunks").fetchall():
                groups = chunk_groups(chunk_pb2.KnowledgeChunk.FromString(payload))
                if groups:
                    self._db.execute("UPDATE chunks SET acl = ? WHERE rowid = ?",
                                     (json.dumps(groups, ensure_ascii=False), rowid))

    def _ensure_group_column(self) -> None:
        """Add the split-group column (sibling fetch) to a database created before it existed."""
        if "group_id" not in {row[1] for row in self._db.execute("PRAGMA table_info(chunks)")}:
            with self._lock, _transaction(self._db):
                if "group_id" not in {row[1] for row in self._db.execute("PRAGMA table_info(chunks)")}:
                    self._db.execute("ALTER TABLE chunks ADD COLUMN group_id TEXT NOT NULL DEFAULT ''")
                    for rowid, payload in self._db.execute("SELECT rowid, payload FROM chunks").fetchall():
                        group_id = chunk_pb2.KnowledgeChunk.FromString(payload).group_id
                        if group_id:
                            self._db.execute("UPDATE chunks SET group_id = ? WHERE rowid = ?", (group_id, rowid))
        self._db.execute("CREATE INDEX IF NOT EXISTS chunks_by_group ON chunks(namespace, group_id)")

    def _delete_ids_locked(self, chunk_ids: Sequence[str]) -> list[int]:
        """Delete the chunks and their FTS5 rows; returns the rowids deleted (the caller updates the index)."""
        deleted: list[int] = []
        for start in range(0, len(chunk_ids), 500):
            batch = list(chunk_ids[start:start + 500])
            rowids = [r[0] for r in self._db.execute(
                f"SELECT rowid FROM chunks WHERE chunk_id IN ({_marks(batch)})", batch
            ).fetchall()]
            if rowids:
                self._db.execute(f"DELETE FROM chunks_fts WHERE rowid IN ({_marks(rowids)})", rowids)
                self._db.execute(f"DELETE FROM chunks WHERE rowid IN ({_marks(rowids)})", rowids)
                deleted.extend(rowids)
        return deleted


def _indexed_text(chunk: chunk_pb2.KnowledgeChunk) -> str:
    return chunk.content or chunk.raw_content


def _marks(values: Sequence) -> str:
    return ", ".join("?" for _ in values)


def _filter_clauses(search_filter: chunk_pb2.SearchFilter, namespaces: list[str]) -> tuple[list[str], list]:
    """WHERE clauses (on `chunks c`) and their parameters for every part of a search filter."""
    where = [f"c.namespace IN ({_marks(namespaces)})"]
    params: list = [*namespaces]
    if search_filter.doc_ids:
        where.append(f"c.doc_id IN ({_marks(search_filter.doc_ids)})")
        params.extend(search_filter.doc_ids)
    if search_filter.block_types:
        where.append(f"c.block_type IN ({_marks(search_filter.block_types)})")
        params.extend(int(b) for b in search_filter.block_types)
    for key, value in metadata_pairs(search_filter):
        where.append("EXISTS (SELECT 1 FROM json_each(c.metadata) WHERE key = ? AND value = ?)")
        params.extend((key, value))
    groups = acl_clause_groups(search_filter)
    if groups is not None:
        # public chunks (no ACL) or one of the caller's groups, inside the same statement as MATCH
        allowed = f"EXISTS (SELECT 1 FROM json_each(c.acl) WHERE value IN ({_marks(groups)}))" if groups else "0"
        where.append(f"(c.acl = '[]' OR {allowed})")
        params.extend(groups)
    return where, params


class _transaction:
    def __init__(self, db: sqlite3.Connection, begin: str = "BEGIN IMMEDIATE"):
        self._db = db
        self._begin = begin

    def __enter__(self):
        self._db.execute(self._begin)
        return self._db

    def __exit__(self, exc_type, exc, tb):
        self._db.execute("ROLLBACK" if exc_type else "COMMIT")
        return False
