"""Knowledge-base versions: numbered configs, each with its own physical index, one of them live.

A version is a KB config (chunker, embedder, analyzer, stores; `KBConfig.index_version` holds its
number) plus the index and collection named after that number. It moves
`building → ready → live → retired → dropped`, or `building → failed`:

- building: every stored document is being re-indexed into it; writes reach it too (dual writes);
- ready: complete and consistent, waiting for the switch (a gate that refused leaves it here);
- live: the catalog holds its config, so every request resolves to it; exactly one per KB;
- retired: a former live version kept for rollback (writes still reach it) until retention drops it;
- dropped: its index and collection deleted; the row stays as history.

A KB that has no rows yet is version 1, live, on the names it had before versions existed: nothing is
migrated. The rows are kept in `<data_dir>/versions.sqlite` (embedded) or the `kb_versions` table
(cluster), written by the indexer, which owns the catalog.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from shared.config import KBConfig, Settings
from shared.errors import FailedPrecondition, NotFound
from shared.profiles import OperatorProfiles
from shared.state.postgres import database_for
from shared.state.sql import SqlDatabase, SqliteDatabase

BUILDING, READY, LIVE, RETIRED, DROPPED, FAILED = "building", "ready", "live", "retired", "dropped", "failed"
STATES = (BUILDING, READY, LIVE, RETIRED, DROPPED, FAILED)
# versions whose index exists and must stay complete: every write reaches each of them
HELD = (BUILDING, READY, LIVE, RETIRED)
# the moves a version may make; anything else is refused
MOVES = {
    BUILDING: (READY, FAILED),
    READY: (LIVE, DROPPED),
    LIVE: (RETIRED,),
    RETIRED: (LIVE, DROPPED),
    FAILED: (DROPPED,),
    DROPPED: (),
}

SCHEMA = """
CREATE TABLE IF NOT EXISTS kb_versions (
    kb TEXT NOT NULL,
    version INTEGER NOT NULL,
    config_yaml TEXT NOT NULL,
    state TEXT NOT NULL,
    docs_done INTEGER NOT NULL DEFAULT 0,
    docs_total INTEGER NOT NULL DEFAULT 0,
    error TEXT NOT NULL DEFAULT '',
    decision TEXT NOT NULL DEFAULT '',
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (kb, version)
);
CREATE TABLE IF NOT EXISTS kb_version_batches (
    kb TEXT NOT NULL,
    version INTEGER NOT NULL,
    batch INTEGER NOT NULL,
    documents TEXT NOT NULL,
    size INTEGER NOT NULL,
    done INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (kb, version, batch)
);
"""

_COLUMNS = "kb, version, config_yaml, state, docs_done, docs_total, error, decision, created_at, updated_at"


@dataclass(frozen=True)
class KBVersion:
    kb: str
    version: int
    config_yaml: str  # the tenant config of this version (`KBConfig.to_tenant_yaml`)
    state: str
    docs_done: int = 0
    docs_total: int = 0
    error: str = ""
    decision: dict = field(default_factory=dict)  # the switch gate: both metric rows, the outcome, forced
    created_at: str = ""
    updated_at: str = ""

    def summary(self) -> dict:
        """The version as the API shows it (the config is shown separately, to those who may see configs)."""
        return {"kb": self.kb, "version": self.version, "state": self.state, "docs_done": self.docs_done,
                "docs_total": self.docs_total, "error": self.error, "decision": self.decision,
                "created_at": self.created_at, "updated_at": self.updated_at}


class VersionRows:
    """The `kb_versions` rows of every KB; `where` is a SQLite file (embedded) or the control-plane database."""

    def __init__(self, where: Path | SqlDatabase):
        self._db = SqliteDatabase(where, schema=SCHEMA) if isinstance(where, (str, Path)) else where

    @classmethod
    def for_settings(cls, settings: Settings) -> VersionRows:
        return cls(database_for(settings) or Path(settings.data_dir) / "versions.sqlite")

    def list(self, kb: str) -> list[KBVersion]:
        rows = self._db.execute(f"SELECT {_COLUMNS} FROM kb_versions WHERE kb = ? ORDER BY version", (kb,)).rows
        return [_version(row) for row in rows]

    def get(self, kb: str, version: int) -> KBVersion:
        row = self._db.execute(f"SELECT {_COLUMNS} FROM kb_versions WHERE kb = ? AND version = ?",
                               (kb, version)).one()
        if row is None:
            raise NotFound(f"knowledge base {kb!r} has no version {version}")
        return _version(row)

    def held(self, kb: str) -> list[KBVersion]:
        """The versions whose index exists (building, ready, live, retired): every write goes to each."""
        return [v for v in self.list(kb) if v.state in HELD]

    def adopt(self, kb: str, config_yaml: str) -> None:
        """Record the version a KB had before versions existed (1, live), once; a no-op when it has rows."""
        now = _now()
        self._db.execute(f"INSERT INTO kb_versions({_COLUMNS}) VALUES (?, 1, ?, ?, 0, 0, '', '', ?, ?) "
                         "ON CONFLICT(kb, version) DO NOTHING", (kb, config_yaml, LIVE, now, now))

    def create(self, kb: str, config_yaml_for) -> KBVersion:
        """A new version numbered after the highest one ever used by this KB, `building`.

        `config_yaml_for(number)` gives its config; refused while another version is building or ready,
        so there is one candidate at a time."""
        with self._db.transaction() as db:
            rows = db.execute("SELECT version, state FROM kb_versions WHERE kb = ?", (kb,)).rows
            pending = [v for v, state in rows if state in (BUILDING, READY)]
            if pending:
                raise FailedPrecondition(f"knowledge base {kb!r} already has version {pending[0]} "
                                         f"{dict(rows)[pending[0]]}; switch to it or drop it first")
            number = max((v for v, _ in rows), default=1) + 1
            now = _now()
            db.execute(f"INSERT INTO kb_versions({_COLUMNS}) VALUES (?, ?, ?, ?, 0, 0, '', '', ?, ?)",
                       (kb, number, config_yaml_for(number), BUILDING, now, now))
        return self.get(kb, number)

    def move(self, kb: str, version: int, state: str, *, error: str = "", decision: dict | None = None) -> KBVersion:
        """Move one version to `state` if that move is allowed from the state it is in now (checked in the
        same statement, so two movers never both succeed)."""
        sources = [source for source, targets in MOVES.items() if state in targets]
        marks = ", ".join("?" for _ in sources)
        params: list = [state, _now(), error]
        sql = "UPDATE kb_versions SET state = ?, updated_at = ?, error = ?"
        if decision is not None:
            sql += ", decision = ?"
            params.append(json.dumps(decision, sort_keys=True))
        sql += f" WHERE kb = ? AND version = ? AND state IN ({marks})"
        result = self._db.execute(sql, (*params, kb, version, *sources))
        if result.rowcount != 1:
            current = self.get(kb, version)
            raise FailedPrecondition(f"version {version} of knowledge base {kb!r} is {current.state} and cannot "
                                     f"become {state}")
        return self.get(kb, version)

    def switch(self, kb: str, version: int, decision: dict | None = None) -> int:
        """Make `version` the live one and retire the live one, in one transaction; returns the former."""
        with self._db.transaction() as db:
            live = [row[0] for row in db.execute("SELECT version FROM kb_versions WHERE kb = ? AND state = ?",
                                                 (kb, LIVE)).rows]
            now = _now()
            params: list = [LIVE, now]
            sql = "UPDATE kb_versions SET state = ?, updated_at = ?"
            if decision is not None:
                sql += ", decision = ?"
                params.append(json.dumps(decision, sort_keys=True))
            moved = db.execute(sql + " WHERE kb = ? AND version = ? AND state IN (?, ?)",
                               (*params, kb, version, READY, RETIRED)).rowcount
            if moved != 1:
                raise FailedPrecondition(f"version {version} of knowledge base {kb!r} is not ready or retired")
            db.execute("UPDATE kb_versions SET state = ?, updated_at = ? WHERE kb = ? AND state = ? AND version <> ?",
                       (RETIRED, now, kb, LIVE, version))
        return live[0] if live else 0

    def decide(self, kb: str, version: int, decision: dict) -> None:
        """Store a gate's decision with a version that stays where it is (a refused switch)."""
        self._db.execute("UPDATE kb_versions SET decision = ?, updated_at = ? WHERE kb = ? AND version = ?",
                         (json.dumps(decision, sort_keys=True), _now(), kb, version))

    def plan(self, kb: str, version: int, batches: list[list[tuple[str, str]]]) -> None:
        """Record a build's re-index jobs, each a list of (namespace, doc_id), once: a build planned before (by a
        process that stopped) keeps its batches and what they have done."""
        with self._db.transaction() as db:
            if db.execute("SELECT 1 FROM kb_version_batches WHERE kb = ? AND version = ? LIMIT 1",
                          (kb, version)).one() is not None:
                return
            db.execute_many("INSERT INTO kb_version_batches(kb, version, batch, documents, size, done) "
                            "VALUES (?, ?, ?, ?, ?, 0)",
                            [(kb, version, number, json.dumps(documents), len(documents))
                             for number, documents in enumerate(batches)])
            db.execute("UPDATE kb_versions SET docs_done = 0, docs_total = ?, updated_at = ? WHERE kb = ? AND "
                       "version = ?", (sum(map(len, batches)), _now(), kb, version))

    def pending_batches(self, kb: str, version: int) -> list[int]:
        """The planned batches of a version not done yet, in order."""
        rows = self._db.execute("SELECT batch FROM kb_version_batches WHERE kb = ? AND version = ? AND done = 0 "
                                "ORDER BY batch", (kb, version)).rows
        return [int(row[0]) for row in rows]

    def batch(self, kb: str, version: int, batch: int) -> list[tuple[str, str]]:
        """The (namespace, doc_id) of one planned batch."""
        row = self._db.execute("SELECT documents FROM kb_version_batches WHERE kb = ? AND version = ? AND batch = ?",
                               (kb, version, batch)).one()
        if row is None:
            raise NotFound(f"version {version} of knowledge base {kb!r} has no re-index batch {batch}")
        return [(namespace, doc_id) for namespace, doc_id in json.loads(row[0])]

    def finish_batch(self, kb: str, version: int, batch: int) -> None:
        """Mark a batch done and count its documents into the version's progress (a repeat changes nothing)."""
        with self._db.transaction() as db:
            db.execute("UPDATE kb_version_batches SET done = 1 WHERE kb = ? AND version = ? AND batch = ?",
                       (kb, version, batch))
            db.execute("UPDATE kb_versions SET docs_done = (SELECT COALESCE(SUM(size), 0) FROM kb_version_batches "
                       "WHERE kb = ? AND version = ? AND done = 1), updated_at = ? WHERE kb = ? AND version = ?",
                       (kb, version, _now(), kb, version))

    def close(self) -> None:
        self._db.close()


def version_config(version: KBVersion, profiles: OperatorProfiles) -> KBConfig:
    """The effective config of a version (its stored tenant config resolved against the operator's profiles)."""
    return KBConfig.from_yaml(version.config_yaml, name=version.kb).tenant_view().resolve(profiles)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def _version(row) -> KBVersion:
    return KBVersion(kb=row[0], version=int(row[1]), config_yaml=row[2], state=row[3], docs_done=int(row[4]),
                     docs_total=int(row[5]), error=row[6], decision=json.loads(row[7]) if row[7] else {},
                     created_at=row[8], updated_at=row[9])
