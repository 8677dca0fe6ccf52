"""Ingestion job records (SQLite under the data directory), shared by the gateway and the workers.

A job in a final state (done, failed, cancelled) never changes again: updates
apply only to active jobs, so a worker that is still running a cancelled job
cannot bring it back. Retrying makes a new job from the same saved upload.

Every job finishes or says why: a job left active by a process that died is
found by `abandoned`, put back to queued with the interruption as its note
(`requeue`), and run again; a job started `max_attempts` times without
finishing fails with `retry_limit` and the last interruption it had.
"""

from __future__ import annotations

import sqlite3
import threading
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

from shared.contracts import gateway_pb2, indexer_pb2
from shared.errors import FailedPrecondition, NotFound

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
    updated_at TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    started_at TEXT NOT NULL DEFAULT '',
    kb_settings BLOB NOT NULL DEFAULT x''
);
CREATE INDEX IF NOT EXISTS jobs_by_kb ON jobs(kb, created_at);
"""
# columns added after the first release, for job databases created before them
_ADDED_COLUMNS = {"attempts": "INTEGER NOT NULL DEFAULT 0", "started_at": "TEXT NOT NULL DEFAULT ''",
                  "kb_settings": "BLOB NOT NULL DEFAULT x''"}

FINAL_STATES = {gateway_pb2.JOB_STATE_DONE, gateway_pb2.JOB_STATE_FAILED, gateway_pb2.JOB_STATE_CANCELLED}
_COLUMNS = ("job_id", "kb", "namespace", "doc_id", "filename", "state", "error", "chunks_total", "chunks_done",
            "outcome", "created_at", "updated_at", "attempts", "started_at")
RUNNING_STATES = {gateway_pb2.JOB_STATE_PARSING, gateway_pb2.JOB_STATE_EMBEDDING, gateway_pb2.JOB_STATE_INDEXING}
_ACTIVE = f"state NOT IN ({', '.join(str(int(state)) for state in sorted(FINAL_STATES))})"
DEFAULT_MAX_ATTEMPTS = 3
RETRY_LIMIT = "retry_limit"  # reason code of a job that was started too often without finishing


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


class JobStore:
    def __init__(self, data_dir: Path, *, max_attempts: int = DEFAULT_MAX_ATTEMPTS):
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        self.max_attempts = max_attempts
        self.uploads_dir = Path(data_dir) / "uploads"
        self.uploads_dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(Path(data_dir) / "jobs.sqlite", check_same_thread=False, timeout=30,
                                   isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(SCHEMA)
        present = {row[1] for row in self._db.execute("PRAGMA table_info(jobs)")}
        for column, declaration in _ADDED_COLUMNS.items():
            if column not in present:
                try:
                    self._db.execute(f"ALTER TABLE jobs ADD COLUMN {column} {declaration}")
                except sqlite3.OperationalError:  # another process added it first
                    pass

    def create(self, *, kb: str, namespace: str, doc_id: str, filename: str, content: bytes,
               metadata_json: str = "{}", kb_settings: bytes = b"") -> gateway_pb2.IngestJob:
        """Persist the upload next to the job record; the task receives only the job id.

        `kb_settings`: the serialized `KnowledgeBaseSettings` the worker runs the job with (shared/kb_settings.py),
        resolved by the gateway when it accepted the job."""
        job_id = uuid.uuid4().hex
        upload = self.uploads_dir / job_id
        upload.write_bytes(content)
        now = _now()
        with self._lock:
            self._db.execute(
                "INSERT INTO jobs(job_id, kb, namespace, doc_id, filename, upload_path, state, metadata, created_at, "
                "updated_at, kb_settings) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (job_id, kb, namespace, doc_id, filename, str(upload), gateway_pb2.JOB_STATE_QUEUED, metadata_json,
                 now, now, kb_settings),
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

    def kb_settings_of(self, job_id: str) -> bytes:
        """The serialized KB settings the job was accepted with (empty for jobs from before they were kept)."""
        with self._lock:
            row = self._db.execute("SELECT kb_settings FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
        if row is None:
            raise NotFound(f"job {job_id!r} does not exist")
        return bytes(row[0])

    def update(self, job_id: str, *, state: int | None = None, error: str | None = None,
               chunks_total: int | None = None, chunks_done: int | None = None, outcome: int | None = None,
               doc_id: str | None = None) -> bool:
        """Change an active job; False when the job is already final (e.g. cancelled meanwhile)."""
        changes = {k: v for k, v in dict(state=state, error=error, chunks_total=chunks_total, chunks_done=chunks_done,
                                          outcome=outcome, doc_id=doc_id).items() if v is not None}
        changes["updated_at"] = _now()
        assignments = ", ".join(f"{k} = ?" for k in changes)
        with self._lock:
            cursor = self._db.execute(f"UPDATE jobs SET {assignments} WHERE job_id = ? AND {_ACTIVE}",
                                      (*changes.values(), job_id))
        return cursor.rowcount == 1

    def start(self, job_id: str) -> bool:
        """A worker picked the job up: count the delivery; False when the job is final or out of attempts.

        A job that was already started `max_attempts` times fails here with `retry_limit`, keeping the
        note of its last interruption, so a file that kills its process every time cannot loop forever.
        """
        now = _now()
        with self._lock:
            cursor = self._db.execute(
                "UPDATE jobs SET state = ?, attempts = attempts + 1, updated_at = ?, "
                "started_at = CASE WHEN started_at = '' THEN ? ELSE started_at END "
                f"WHERE job_id = ? AND {_ACTIVE} AND attempts < ?",
                (gateway_pb2.JOB_STATE_PARSING, now, now, job_id, self.max_attempts),
            )
        if cursor.rowcount == 1:
            return True
        job = self.get(job_id)
        if job.state not in FINAL_STATES:
            last = f"; last: {job.error}" if job.error else ""
            self.update(job_id, state=gateway_pb2.JOB_STATE_FAILED,
                        error=f"{RETRY_LIMIT}: started {job.attempts} times without finishing{last}")
        return False

    def abandoned(self, *, idle_s: float = 0.0) -> list[gateway_pb2.IngestJob]:
        """Active jobs (queued or running) not updated for `idle_s` seconds, oldest first.

        In embedded mode every active job found at start-up belonged to the process that died
        (idle_s=0); a Celery worker passes a bound past which no live job stays silent.
        """
        cutoff = (datetime.now(timezone.utc) - timedelta(seconds=idle_s)).isoformat(timespec="microseconds")
        with self._lock:
            rows = self._db.execute(f"SELECT {', '.join(_COLUMNS)} FROM jobs WHERE {_ACTIVE} AND updated_at <= ? "
                                    "ORDER BY created_at", (cutoff,)).fetchall()
        return [gateway_pb2.IngestJob(**dict(zip(_COLUMNS, row))) for row in rows]

    def requeue(self, job_id: str, note: str) -> bool:
        """Put an interrupted job back to queued, keeping `note` (why it was interrupted) in its error."""
        return self.update(job_id, state=gateway_pb2.JOB_STATE_QUEUED, error=note)

    def cancel(self, job_id: str) -> gateway_pb2.IngestJob:
        if not self.update(job_id, state=gateway_pb2.JOB_STATE_CANCELLED, error="cancelled on request"):
            raise FailedPrecondition(f"job {job_id!r} is already {_state_name(self.get(job_id).state)}; "
                                     "only queued or running jobs can be cancelled")
        return self.get(job_id)

    def retry(self, job_id: str, *, kb_settings: bytes | None = None) -> gateway_pb2.IngestJob:
        """A new queued job with the same document and upload as a job that is not running, run with
        `kb_settings` (None = the old job's).

        A queued job (e.g. one whose dispatch was lost) is cancelled in favour of the new one, so the
        two never both run.
        """
        job = self.get(job_id)
        if job.state in RUNNING_STATES:
            raise FailedPrecondition(f"job {job_id!r} is {_state_name(job.state)}; a running job cannot be "
                                     "retried (cancel it first)")
        upload, metadata_json = self.upload_of(job_id)
        if not upload.exists():
            raise FailedPrecondition(f"the upload of job {job_id!r} is no longer stored; upload the file again")
        retried = self.create(kb=job.kb, namespace=job.namespace, doc_id=job.doc_id, filename=job.filename,
                              content=upload.read_bytes(), metadata_json=metadata_json,
                              kb_settings=self.kb_settings_of(job_id) if kb_settings is None else kb_settings)
        self.update(job_id, state=gateway_pb2.JOB_STATE_CANCELLED, error=f"superseded by retry {retried.job_id}")
        return retried

    def list(self, kb: str, namespace: str = "", limit: int = 100) -> list[gateway_pb2.IngestJob]:
        sql = f"SELECT {', '.join(_COLUMNS)} FROM jobs WHERE kb = ?"
        params: tuple = (kb,)
        if namespace:
            sql += " AND namespace = ?"
            params += (namespace,)
        with self._lock:
            rows = self._db.execute(sql + " ORDER BY created_at DESC LIMIT ?", (*params, limit or 100)).fetchall()
        return [gateway_pb2.IngestJob(**dict(zip(_COLUMNS, row))) for row in rows]

    def close(self) -> None:
        with self._lock:
            self._db.close()


def outcome_name(outcome: int) -> str:
    return indexer_pb2.IndexOutcome.Name(outcome).removeprefix("INDEX_OUTCOME_").lower()


def _state_name(state: int) -> str:
    return gateway_pb2.JobState.Name(state).removeprefix("JOB_STATE_").lower()
