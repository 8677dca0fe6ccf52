"""Ingestion job records and their uploads, shared by the gateway (creates) and the workers (run).

Embedded mode keeps them under the data directory (jobs.sqlite, uploads/);
cluster mode keeps both in the control-plane PostgreSQL database, so no worker
needs the gateway's disk. The uploads are bounded by the gateway's upload limit.

A job in a final state (done, failed, cancelled) never changes again: updates
apply only to active jobs, so a worker that is still running a cancelled job
cannot bring it back. Retrying makes a new job from the same saved upload.

Every job finishes or says why: a job left active by a process that died is
found by `abandoned`, put back to queued with the interruption as its note
(`requeue`), and run again; a job started `max_attempts` times without
finishing fails with `retry_limit` and the last interruption it had.

Two workers never run one job: `start` is one conditional UPDATE that takes a
queued job, or one whose runner went silent for `stale_after_s` (it died), and
records the runner; a job running elsewhere is left alone. The row lock of that
UPDATE (PostgreSQL) or the database write lock (SQLite) makes the claim atomic.
"""

from __future__ import annotations

import logging
import sqlite3
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Protocol

from shared.contracts import gateway_pb2, indexer_pb2
from shared.errors import FailedPrecondition, NotFound
from shared.state.postgres import database_for
from shared.state.sql import Executor, SqlDatabase, SqliteDatabase

log = logging.getLogger("ragkb.jobs")

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
    runner TEXT NOT NULL DEFAULT '',
    kb_settings BLOB NOT NULL DEFAULT x''
);
CREATE INDEX IF NOT EXISTS jobs_by_kb ON jobs(kb, created_at);
"""
# columns added after the first release, for job databases created before them
_ADDED_COLUMNS = {"attempts": "INTEGER NOT NULL DEFAULT 0", "started_at": "TEXT NOT NULL DEFAULT ''",
                  "runner": "TEXT NOT NULL DEFAULT ''", "kb_settings": "BLOB NOT NULL DEFAULT x''"}

FINAL_STATES = {gateway_pb2.JOB_STATE_DONE, gateway_pb2.JOB_STATE_FAILED, gateway_pb2.JOB_STATE_CANCELLED}
_COLUMNS = ("job_id", "kb", "namespace", "doc_id", "filename", "state", "error", "chunks_total", "chunks_done",
            "outcome", "created_at", "updated_at", "attempts", "started_at")
RUNNING_STATES = {gateway_pb2.JOB_STATE_PARSING, gateway_pb2.JOB_STATE_EMBEDDING, gateway_pb2.JOB_STATE_INDEXING}
_ACTIVE = f"state NOT IN ({', '.join(str(int(state)) for state in sorted(FINAL_STATES))})"
DEFAULT_MAX_ATTEMPTS = 3
DEFAULT_STALE_AFTER_S = 3600.0  # a running job silent this long lost its runner (workers pass their own bound)
RETRY_LIMIT = "retry_limit"  # reason code of a job that was started too often without finishing


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="microseconds")


def _now() -> str:
    return _iso(datetime.now(timezone.utc))


class Uploads(Protocol):
    """Where the bytes of uploaded files wait for their job (and a retry)."""

    def put(self, job_id: str, content: bytes, db: Executor) -> str:
        """Store, inside the transaction `db` that creates the job; returns where (recorded with the job)."""

    def get(self, job_id: str) -> bytes | None: ...

    def discard(self, job_id: str) -> None: ...


class FileUploads:
    """One file per job under `<data_dir>/uploads` (embedded mode)."""

    def __init__(self, directory: Path):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)

    def put(self, job_id: str, content: bytes, db: Executor) -> str:
        path = self.directory / job_id
        path.write_bytes(content)
        return str(path)

    def get(self, job_id: str) -> bytes | None:
        try:
            return (self.directory / job_id).read_bytes()
        except FileNotFoundError:
            return None

    def discard(self, job_id: str) -> None:
        (self.directory / job_id).unlink(missing_ok=True)


class DatabaseUploads:
    """Upload bytes in the `job_uploads` table of the control-plane database (cluster mode: no shared disk)."""

    def __init__(self, db: SqlDatabase):
        self._db = db

    def put(self, job_id: str, content: bytes, db: Executor) -> str:
        db.execute("INSERT INTO job_uploads(job_id, content) VALUES (?, ?)", (job_id, content))
        return ""

    def get(self, job_id: str) -> bytes | None:
        row = self._db.execute("SELECT content FROM job_uploads WHERE job_id = ?", (job_id,)).one()
        return bytes(row[0]) if row else None

    def discard(self, job_id: str) -> None:
        self._db.execute("DELETE FROM job_uploads WHERE job_id = ?", (job_id,))


class JobStore:
    """Jobs in `<data_dir>/jobs.sqlite` with uploads in `<data_dir>/uploads`, or both in `database`."""

    def __init__(self, data_dir: Path, *, max_attempts: int = DEFAULT_MAX_ATTEMPTS,
                 stale_after_s: float = DEFAULT_STALE_AFTER_S, database: SqlDatabase | None = None):
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        self.max_attempts = max_attempts
        self.stale_after_s = stale_after_s
        self.runner = uuid.uuid4().hex  # this store's claims; a redelivery to the same process may take them again
        if database is None:
            self._db: SqlDatabase = SqliteDatabase(Path(data_dir) / "jobs.sqlite", schema=SCHEMA)
            self._add_missing_columns()
            self._uploads: Uploads = FileUploads(Path(data_dir) / "uploads")
        else:
            self._db = database
            self._uploads = DatabaseUploads(database)

    @classmethod
    def for_settings(cls, settings, *, max_attempts: int = DEFAULT_MAX_ATTEMPTS,
                     stale_after_s: float = DEFAULT_STALE_AFTER_S) -> JobStore:
        return cls(settings.data_dir, max_attempts=max_attempts, stale_after_s=stale_after_s,
                   database=database_for(settings))

    def _add_missing_columns(self) -> None:
        present = {row[1] for row in self._db.execute("PRAGMA table_info(jobs)").rows}
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
        now = _now()
        with self._db.transaction() as db:  # the job and its upload appear together or not at all
            db.execute(
                "INSERT INTO jobs(job_id, kb, namespace, doc_id, filename, upload_path, state, metadata, created_at, "
                "updated_at, kb_settings) VALUES (?, ?, ?, ?, ?, '', ?, ?, ?, ?, ?)",
                (job_id, kb, namespace, doc_id, filename, gateway_pb2.JOB_STATE_QUEUED, metadata_json, now, now,
                 kb_settings),
            )
            location = self._uploads.put(job_id, content, db)
            if location:
                db.execute("UPDATE jobs SET upload_path = ? WHERE job_id = ?", (location, job_id))
        return self.get(job_id)

    def get(self, job_id: str) -> gateway_pb2.IngestJob:
        row = self._db.execute(f"SELECT {', '.join(_COLUMNS)} FROM jobs WHERE job_id = ?", (job_id,)).one()
        if row is None:
            raise NotFound(f"job {job_id!r} does not exist")
        return _job(row)

    def upload_of(self, job_id: str) -> tuple[bytes, str]:
        """The uploaded bytes and metadata JSON of a job."""
        row = self._db.execute("SELECT metadata FROM jobs WHERE job_id = ?", (job_id,)).one()
        if row is None:
            raise NotFound(f"job {job_id!r} does not exist")
        content = self._uploads.get(job_id)
        if content is None:
            raise FailedPrecondition(f"the upload of job {job_id!r} is no longer stored; upload the file again")
        return content, row[0]

    def discard_upload(self, job_id: str) -> None:
        """Forget a job's upload once its document is indexed."""
        self._uploads.discard(job_id)

    def kb_settings_of(self, job_id: str) -> bytes:
        """The serialized KB settings the job was accepted with (empty for jobs from before they were kept)."""
        row = self._db.execute("SELECT kb_settings FROM jobs WHERE job_id = ?", (job_id,)).one()
        if row is None:
            raise NotFound(f"job {job_id!r} does not exist")
        return bytes(row[0])

    def update(self, job_id: str, *, state: int | None = None, error: str | None = None,
               chunks_total: int | None = None, chunks_done: int | None = None, outcome: int | None = None,
               doc_id: str | None = None) -> bool:
        """Change an active job; False when the job is already final (e.g. cancelled meanwhile)."""
        return self._update(job_id, dict(state=state, error=error, chunks_total=chunks_total,
                                         chunks_done=chunks_done, outcome=outcome, doc_id=doc_id))

    def advance(self, job_id: str, *, state: int, error: str | None = None, chunks_total: int | None = None,
                chunks_done: int | None = None, outcome: int | None = None, doc_id: str | None = None) -> bool:
        """A runner's write (progress, done, failed): as `update`, and False when this store's runner no longer
        holds the job, so a runner that was silent long enough to be taken over cannot overwrite its
        successor's progress or end the job under it."""
        return self._update(job_id, dict(state=state, error=error, chunks_total=chunks_total,
                                         chunks_done=chunks_done, outcome=outcome, doc_id=doc_id),
                            runner=self.runner)

    def _update(self, job_id: str, values: dict, *, runner: str | None = None) -> bool:
        changes = {k: v for k, v in values.items() if v is not None}
        changes["updated_at"] = _now()
        assignments = ", ".join(f"{k} = ?" for k in changes)
        held = "" if runner is None else " AND runner = ?"
        result = self._db.execute(f"UPDATE jobs SET {assignments} WHERE job_id = ? AND {_ACTIVE}{held}",
                                  (*changes.values(), job_id, *(() if runner is None else (runner,))))
        return result.rowcount == 1

    def start(self, job_id: str) -> bool:
        """Claim the job for this store's runner and count the delivery; False when another runner holds it,
        it is final, or it is out of attempts.

        A job is claimable when queued, when this runner already holds it (a redelivery), or when its runner
        has been silent for `stale_after_s` (the process died). A job that was already started `max_attempts`
        times fails here with `retry_limit`, keeping the note of its last interruption, so a file that kills
        its process every time cannot loop forever.
        """
        now = _now()
        stale = _iso(datetime.now(timezone.utc) - timedelta(seconds=self.stale_after_s))
        claimed = self._db.execute(
            "UPDATE jobs SET state = ?, attempts = attempts + 1, updated_at = ?, runner = ?, "
            "started_at = CASE WHEN started_at = '' THEN ? ELSE started_at END "
            f"WHERE job_id = ? AND {_ACTIVE} AND attempts < ? "
            "AND (state = ? OR runner = ? OR updated_at <= ?)",
            (gateway_pb2.JOB_STATE_PARSING, now, self.runner, now, job_id, self.max_attempts,
             gateway_pb2.JOB_STATE_QUEUED, self.runner, stale),
        )
        if claimed.rowcount == 1:
            return True
        job = self.get(job_id)
        if job.state in FINAL_STATES:
            return False
        if job.attempts < self.max_attempts:
            log.info("job %s is running elsewhere; this delivery leaves it alone", job_id)
            return False
        last = f"; last: {job.error}" if job.error else ""
        self.update(job_id, state=gateway_pb2.JOB_STATE_FAILED,
                    error=f"{RETRY_LIMIT}: started {job.attempts} times without finishing{last}")
        return False

    def takeover_in(self, job_id: str) -> float | None:
        """Seconds until this store may claim a job another runner holds (0 = now); None when no other
        runner holds it (queued, final, or this store's own). A delivery that found its job held
        elsewhere looks again after that long, so a job whose runner died is never left behind."""
        row = self._db.execute("SELECT state, runner, updated_at FROM jobs WHERE job_id = ?", (job_id,)).one()
        if row is None:
            raise NotFound(f"job {job_id!r} does not exist")
        state, runner, updated_at = row
        if state in FINAL_STATES or state == gateway_pb2.JOB_STATE_QUEUED or runner == self.runner:
            return None
        silent_s = (datetime.now(timezone.utc) - datetime.fromisoformat(updated_at)).total_seconds()
        return max(0.0, self.stale_after_s - silent_s)

    def abandoned(self, *, idle_s: float = 0.0) -> list[gateway_pb2.IngestJob]:
        """Active jobs (queued or running) not updated for `idle_s` seconds, oldest first.

        In embedded mode every active job found at start-up belonged to the process that died
        (idle_s=0); a Celery worker passes a bound past which no live job stays silent.
        """
        cutoff = _iso(datetime.now(timezone.utc) - timedelta(seconds=idle_s))
        rows = self._db.execute(f"SELECT {', '.join(_COLUMNS)} FROM jobs WHERE {_ACTIVE} AND updated_at <= ? "
                                "ORDER BY created_at", (cutoff,)).rows
        return [_job(row) for row in rows]

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
        content, metadata_json = self.upload_of(job_id)
        retried = self.create(kb=job.kb, namespace=job.namespace, doc_id=job.doc_id, filename=job.filename,
                              content=content, metadata_json=metadata_json,
                              kb_settings=self.kb_settings_of(job_id) if kb_settings is None else kb_settings)
        self.update(job_id, state=gateway_pb2.JOB_STATE_CANCELLED, error=f"superseded by retry {retried.job_id}")
        return retried

    def list(self, kb: str, namespace: str = "", limit: int = 100) -> list[gateway_pb2.IngestJob]:
        sql = f"SELECT {', '.join(_COLUMNS)} FROM jobs WHERE kb = ?"
        params: tuple = (kb,)
        if namespace:
            sql += " AND namespace = ?"
            params += (namespace,)
        rows = self._db.execute(sql + " ORDER BY created_at DESC LIMIT ?", (*params, limit or 100)).rows
        return [_job(row) for row in rows]

    def counts_by_state(self) -> dict[int, int]:
        """How many jobs are in each state (the gateway's job metrics)."""
        return dict(self._db.execute("SELECT state, count(*) FROM jobs GROUP BY state").rows)

    def close(self) -> None:
        self._db.close()


def _job(row) -> gateway_pb2.IngestJob:
    return gateway_pb2.IngestJob(**dict(zip(_COLUMNS, row)))


def outcome_name(outcome: int) -> str:
    return indexer_pb2.IndexOutcome.Name(outcome).removeprefix("INDEX_OUTCOME_").lower()


def _state_name(state: int) -> str:
    return gateway_pb2.JobState.Name(state).removeprefix("JOB_STATE_").lower()
