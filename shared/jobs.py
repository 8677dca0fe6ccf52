"""Ingestion job records (SQLite under the data directory), shared by the gateway and the worker."""

from __future__ import annotations

import sqlite3
import threading
import uuid
from datetime import datetime, timezone
from pathlib import Path

from shared.contracts import gateway_pb2, indexer_pb2
from shared.errors import NotFound

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    job_id TEXT PRIMARY KEY,
    kb TEXT NOT NULL,
    namespace TEXT NOT NULL,
    doc_id TEXT NOT NULL,
    filename TEXT NOT NULL,
    upload_path TEXT NOT NULL,
    state INTEGER NOT NULL,
    error TEXT NOT NULL DEFAULT '',
    chunks_total INTEGER NOT NULL DEFAULT 0,
    chunks_done INTEGER NOT NULL DEFAULT 0,
    outcome INTEGER NOT NULL DEFAULT 0,
    metadata TEXT NOT NULL DEFAULT '{}',
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS jobs_by_kb ON jobs(kb, created_at);
"""

FINAL_STATES = {gateway_pb2.JOB_STATE_DONE, gateway_pb2.JOB_STATE_FAILED, gateway_pb2.JOB_STATE_CANCELLED}
_COLUMNS = ("job_id", "kb", "namespace", "doc_id", "filename", "state", "error", "chunks_total", "chunks_done",
            "outcome", "created_at", "updated_at")


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


class JobStore:
    def __init__(self, data_dir: Path):
        self.uploads_dir = Path(data_dir) / "uploads"
        self.uploads_dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(Path(data_dir) / "jobs.sqlite", check_same_thread=False, timeout=30,
                                   isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(SCHEMA)

    def create(self, *, kb: str, namespace: str, doc_id: str, filename: str, content: bytes,
               metadata_json: str = "{}") -> gateway_pb2.IngestJob:
        """Persist the upload next to the job record; the task receives only the job id."""
        job_id = uuid.uuid4().hex
        upload = self.uploads_dir / job_id
        upload.write_bytes(content)
        now = _now()
        with self._lock:
            self._db.execute(
                "INSERT INTO jobs(job_id, kb, namespace, doc_id, filename, upload_path, state, metadata, created_at, "
                "updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (job_id, kb, namespace, doc_id, filename, str(upload), gateway_pb2.JOB_STATE_QUEUED, metadata_json,
                 now, now),
            )
        return self.get(job_id)

    def get(self, job_id: str) -> gateway_pb2.IngestJob:
        with self._lock:
            row = self._db.execute(f"SELECT {', '.join(_COLUMNS)} FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
        if row is None:
            raise NotFound(f"job {job_id!r} does not exist")
        return gateway_pb2.IngestJob(**dict(zip(_COLUMNS, row)))

    def upload_of(self, job_id: str) -> tuple[Path, str]:
        with self._lock:
            row = self._db.execute("SELECT upload_path, metadata FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
        if row is None:
            raise NotFound(f"job {job_id!r} does not exist")
        return Path(row[0]), row[1]

    def update(self, job_id: str, *, state: int | None = None, error: str | None = None,
               chunks_total: int | None = None, chunks_done: int | None = None, outcome: int | None = None,
               doc_id: str | None = None) -> None:
        changes = {k: v for k, v in dict(state=state, error=error, chunks_total=chunks_total, chunks_done=chunks_done,
                                          outcome=outcome, doc_id=doc_id).items() if v is not None}
        changes["updated_at"] = _now()
        assignments = ", ".join(f"{k} = ?" for k in changes)
        with self._lock:
            self._db.execute(f"UPDATE jobs SET {assignments} WHERE job_id = ?", (*changes.values(), job_id))

    def list(self, kb: str, limit: int = 100) -> list[gateway_pb2.IngestJob]:
        with self._lock:
            rows = self._db.execute(
                f"SELECT {', '.join(_COLUMNS)} FROM jobs WHERE kb = ? ORDER BY created_at DESC LIMIT ?", (kb, limit)
            ).fetchall()
        return [gateway_pb2.IngestJob(**dict(zip(_COLUMNS, row))) for row in rows]

    def close(self) -> None:
        with self._lock:
            self._db.close()


def outcome_name(outcome: int) -> str:
    return indexer_pb2.IndexOutcome.Name(outcome).removeprefix("INDEX_OUTCOME_").lower()
