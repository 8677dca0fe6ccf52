"""The knowledge-base catalog: each KB's config as its tenant wrote it, with a config version.

Embedded mode keeps one YAML file per KB under `<data_dir>/kbs/<name>.yaml`;
cluster mode keeps one row per KB in the control-plane PostgreSQL database
(`kb_catalog`). Either way every process reads the same catalog and it survives
restarts. Each write raises the KB's config version; a reader compares the
stored version (a file stamp or one indexed row) with what it cached on every
`get`, so a change is seen by the next request on every replica, without a
restart and without a stale cache.

A stored config is as its tenant wrote it; `get` returns it resolved against
the operator's profiles (shared/profiles.py), so an operator changing an
endpoint or a secret never rewrites KB configs.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import psycopg

from shared.config import KBConfig, Settings, storage_name, validate_kb_name
from shared.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound
from shared.files import file_stamp
from shared.profiles import LiveProfiles, OperatorProfiles, profiles_path
from shared.state.postgres import database_for
from shared.state.sql import SqlDatabase

EMBEDDED_KEYWORD_STORE = "sqlite-fts5"


@dataclass(frozen=True)
class StoredConfig:
    tenant_yaml: str
    version: int


class CatalogRows(Protocol):
    """Where KB configs are kept: files (embedded) or the `kb_catalog` table (cluster)."""

    def stamp(self, name: str) -> object | None:
        """A cheap marker that changes with every write of `name`; None when there is no such KB."""

    def read(self, name: str) -> StoredConfig | None: ...

    def insert(self, name: str, tenant_yaml: str) -> int:
        """Store a new KB; its first version. AlreadyExists when the name is taken, or when another KB's name
        has the same `storage_name` (their vector collections would be one)."""

    def update(self, name: str, tenant_yaml: str) -> int:
        """Store a new config of an existing KB; its new, higher version. NotFound when there is none."""

    def names(self) -> list[str]: ...


class KnowledgeBaseCatalog:
    """`profiles_file` (the operator's) is re-read when it changes; None = the built-in profiles.

    `database` (cluster mode) keeps the configs in PostgreSQL; there the embedded keyword store is not
    offered, since the indexer and the retrievers run on different machines.
    """

    def __init__(self, data_dir: Path, profiles_file: Path | None = None, *, database: SqlDatabase | None = None):
        self._rows: CatalogRows = FileCatalogRows(Path(data_dir) / "kbs") if database is None \
            else DatabaseCatalogRows(database)
        self.cluster = database is not None
        self._live_profiles = LiveProfiles(profiles_file)
        self._profiles: OperatorProfiles | None = None  # what the cached configs were resolved with
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[object, int, tuple[KBConfig, KBConfig | InvalidArgument]]] = {}

    @classmethod
    def for_settings(cls, settings: Settings) -> KnowledgeBaseCatalog:
        return cls(settings.data_dir, profiles_path(settings), database=database_for(settings))

    @property
    def profiles(self) -> OperatorProfiles:
        current = self._live_profiles.current()
        if current is not self._profiles:
            with self._lock:
                self._profiles = current
                self._cache.clear()  # effective configs depend on the profiles
        return current

    def create(self, name: str, *, description: str = "", config_yaml: str = "") -> KBConfig:
        """Create a KB from tenant YAML (operator settings refused); returns the effective config."""
        validate_kb_name(name)
        config = KBConfig.from_tenant_yaml(config_yaml or "{}", name=name, profiles=self.profiles)
        if config.index_version != 1:
            raise InvalidArgument("index_version is set by the version commands (ragkb kb version), "
                                  "not in a knowledge-base config")
        if description:
            config = config.model_copy(update={"description": description})
        self.check_mode(config)
        self._rows.insert(name, config.to_tenant_yaml())
        return config.resolve(self.profiles)

    def replace(self, config: KBConfig) -> KBConfig:
        """Store a new tenant-level config of an existing KB (fusion settings fitted by `ragkb tune`, a gated
        change); returns the effective config."""
        validate_kb_name(config.name)
        self.check_mode(config)
        self._rows.update(config.name, config.to_tenant_yaml())
        with self._lock:
            self._cache.pop(config.name, None)
        return config.resolve(self.profiles)

    def check_mode(self, config: KBConfig) -> None:
        """Cluster mode offers no store that is a file of one process: the indexer and the retrievers run apart."""
        if not self.cluster:
            return
        if config.keyword_store.name == EMBEDDED_KEYWORD_STORE:
            raise InvalidArgument(
                f"knowledge base {config.name!r}: keyword_store {EMBEDDED_KEYWORD_STORE!r} is the embedded store "
                "(a file of one process) and is not offered in cluster mode; set keyword_store.name: elasticsearch")
        if config.vector_store.name == "milvus" and not config.resolve(self.profiles).vector_store.uri:
            raise InvalidArgument(
                f"knowledge base {config.name!r}: the vector_store profile {config.vector_store.profile!r} names no "
                "Milvus server (uri), and a Milvus Lite file is not offered in cluster mode; the operator sets "
                "the server's uri in that profile")

    def get(self, name: str) -> KBConfig:
        """The effective config (operator settings resolved from the profiles).

        A KB whose profile the operator has since removed fails here, naming the profile;
        the rest of the catalog is unaffected."""
        return self.get_with_version(name)[0]

    def get_with_version(self, name: str) -> tuple[KBConfig, int]:
        """The effective config and its config version (higher = newer)."""
        version, (_, resolved) = self._load(name)
        return _servable(name, resolved), version

    def servable_tenant_config(self, name: str) -> KBConfig:
        """`tenant_config` of a KB that `get` would serve (else its error), in one catalog read."""
        _, (stored, resolved) = self._load(name)
        _servable(name, resolved)
        return stored

    def version(self, name: str) -> int:
        return self._load(name)[0]

    def tenant_config(self, name: str) -> KBConfig:
        """The config as its tenant wrote it: profile and model names, no operator settings."""
        return self._load(name)[1][0]

    def _load(self, name: str) -> tuple[int, tuple[KBConfig, KBConfig | InvalidArgument]]:
        validate_kb_name(name)
        profiles = self.profiles
        stamp = self._rows.stamp(name)
        if stamp is None:
            raise NotFound(f"knowledge base {name!r} does not exist")
        with self._lock:
            cached = self._cache.get(name)
            if cached and cached[0] == stamp:
                return cached[1], cached[2]
        stored = self._rows.read(name)
        if stored is None:  # removed between the two reads
            raise NotFound(f"knowledge base {name!r} does not exist")
        config = _stored(stored.tenant_yaml, name)
        try:
            loaded = (config, config.resolve(profiles))
        except InvalidArgument as error:
            loaded = (config, error)
        with self._lock:
            self._cache[name] = (stamp, stored.version, loaded)
        return stored.version, loaded

    def names(self) -> list[str]:
        return self._rows.names()

    def exists(self, name: str) -> bool:
        validate_kb_name(name)
        return self._rows.stamp(name) is not None


class FileCatalogRows:
    """One YAML file per KB; its first line records the config version (`# config_version: N`).

    Writes hold an exclusive lock on the directory's `.lock` file, so catalogs of the same data directory
    (several in one process, or the CLI beside a server) never both create clashing names."""

    _VERSION_LINE = re.compile(r"^# config_version: (\d+)\n")

    def __init__(self, directory: Path):
        self._dir = Path(directory)

    @contextlib.contextmanager
    def _lock(self):
        self._dir.mkdir(parents=True, exist_ok=True)
        with open(self._dir / ".lock", "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            yield

    def _path(self, name: str) -> Path:
        return self._dir / f"{name}.yaml"

    def stamp(self, name: str) -> object | None:
        return file_stamp(self._path(name))

    def read(self, name: str) -> StoredConfig | None:
        try:
            text = self._path(name).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        match = self._VERSION_LINE.match(text)
        # files written before versions were recorded are version 1
        return StoredConfig(tenant_yaml=text[match.end():] if match else text, version=int(match[1]) if match else 1)

    def insert(self, name: str, tenant_yaml: str) -> int:
        with self._lock():
            if self._path(name).exists():
                raise AlreadyExists(f"knowledge base {name!r} already exists")
            clash = next((other for other in self.names() if storage_name(other) == storage_name(name)), None)
            if clash is not None:
                raise _storage_clash(name, clash)
            return self._write(name, tenant_yaml, 1)

    def update(self, name: str, tenant_yaml: str) -> int:
        with self._lock():
            current = self.read(name)
            if current is None:
                raise NotFound(f"knowledge base {name!r} does not exist")
            return self._write(name, tenant_yaml, current.version + 1)

    def _write(self, name: str, tenant_yaml: str, version: int) -> int:
        self._dir.mkdir(parents=True, exist_ok=True)
        # write-then-rename so a reader never sees half a file
        fd, tmp = tempfile.mkstemp(dir=self._dir, suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(f"# config_version: {version}\n{tenant_yaml}")
        os.replace(tmp, self._path(name))
        return version

    def names(self) -> list[str]:
        if not self._dir.exists():
            return []
        return sorted(p.stem for p in self._dir.glob("*.yaml"))


class DatabaseCatalogRows:
    """The `kb_catalog` table; versions come from one sequence, so they only grow."""

    def __init__(self, db: SqlDatabase):
        self._db = db

    def stamp(self, name: str) -> object | None:
        row = self._db.execute("SELECT version FROM kb_catalog WHERE name = ?", (name,)).one()
        return row[0] if row else None

    def read(self, name: str) -> StoredConfig | None:
        row = self._db.execute("SELECT config_yaml, version FROM kb_catalog WHERE name = ?", (name,)).one()
        return StoredConfig(tenant_yaml=row[0], version=row[1]) if row else None

    def insert(self, name: str, tenant_yaml: str) -> int:
        """The unique index on the storage name (migration 0005) settles two replicas creating 'a-b' and 'a_b'
        at once; the read before it only names the KB in the error."""
        clash = self._db.execute("SELECT name FROM kb_catalog WHERE replace(name, '-', '_') = ? AND name <> ?",
                                 (storage_name(name), name)).one()
        if clash:
            raise _storage_clash(name, clash[0])
        try:
            row = self._db.execute("INSERT INTO kb_catalog(name, config_yaml) VALUES (?, ?) "
                                   "ON CONFLICT(name) DO NOTHING RETURNING version", (name, tenant_yaml)).one()
        except psycopg.errors.UniqueViolation:
            raise _storage_clash(name, None) from None
        if row is None:
            raise AlreadyExists(f"knowledge base {name!r} already exists")
        return row[0]

    def update(self, name: str, tenant_yaml: str) -> int:
        row = self._db.execute("UPDATE kb_catalog SET config_yaml = ?, version = nextval('kb_config_version'), "
                               "updated_at = now() WHERE name = ? RETURNING version", (tenant_yaml, name)).one()
        if row is None:
            raise NotFound(f"knowledge base {name!r} does not exist")
        return row[0]

    def names(self) -> list[str]:
        return sorted(row[0] for row in self._db.execute("SELECT name FROM kb_catalog").rows)


def _storage_clash(name: str, other: str | None) -> AlreadyExists:
    """`other` None: a KB created by another replica at the same moment, not read back."""
    existing = repr(other) if other else "a knowledge base created at the same moment"
    return AlreadyExists(f"knowledge base {name!r} cannot be created: {existing} already exists and its name differs "
                         "only in '-' and '_', which vector collections spell alike")


def _servable(name: str, resolved: KBConfig | InvalidArgument) -> KBConfig:
    """A KB whose profile the operator has since removed cannot be served: its resolution failed."""
    if isinstance(resolved, InvalidArgument):
        raise FailedPrecondition(f"knowledge base {name!r} cannot be served: {resolved.message}")
    return resolved


def _stored(text: str, name: str) -> KBConfig:
    """A stored config; operator settings that older versions kept in the file are ignored."""
    config = KBConfig.from_yaml(text, name=name)
    return config.tenant_view()
