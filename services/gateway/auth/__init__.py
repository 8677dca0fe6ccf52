"""Tenants and API keys: a key maps to a role (reader < writer < admin), namespaces and ACL groups.

Keys are kept as SHA-256 hashes (the raw key is shown once, when it is
created): in a YAML file in embedded mode, re-read when it changes, or in the
`api_keys` table of the control-plane database in cluster mode, looked up on
every request so a deleted key stops working at once on every gateway. No keys
is open mode: a caller on the loopback interface is an anonymous admin on any
namespace and document ACLs are not applied, which keeps the embedded quickstart
open; a caller from any other address is refused unless the operator set `RAGKB_OPEN_ACCESS=true`. The
first key is created on the server (`ragkb keys create`), never over the API.

The caller of the current request is kept in a context variable, set by the
REST dependency and the gRPC interceptor, so the gateway's operations scope
namespaces and ACL groups without every handler passing it along.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
import os
import re
import secrets
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import yaml

from shared import tenancy
from shared.config import DEFAULT_NAMESPACE
from shared.contracts import chunk_pb2
from shared.errors import (
    AlreadyExists,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    RagkbError,
    Unauthenticated,
)
from shared.files import file_stamp
from shared.server import is_loopback
from shared.state.postgres import database_for
from shared.state.sql import SqlDatabase
from shared.stores.acl import parse_groups

ROLES = tenancy.ROLES  # reader < writer < kb_admin (creates knowledge bases) < admin
ANY = "*"
KEY_PREFIX = "rk_"
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


@dataclass(frozen=True)
class Principal:
    """Who is calling. `namespaces`/`groups` None = unrestricted (open mode, or '*' in the keys file)."""

    name: str
    role: str
    namespaces: tuple[str, ...] | None
    groups: tuple[str, ...] | None

    def require(self, role: str) -> None:
        if ROLES.index(self.role) < ROLES.index(role):
            raise PermissionDenied(f"key {self.name!r} has role {self.role}; this needs {role}")

    def read_namespaces(self, requested) -> list[str]:
        """The namespaces a read may search: those asked for (all checked), or all of the caller's."""
        asked = [ns for ns in requested if ns]
        if self.namespaces is None:
            return asked or [DEFAULT_NAMESPACE]
        if not asked:
            return list(self.namespaces)
        self._check(asked)
        return asked

    def write_namespace(self, requested: str) -> str:
        if self.namespaces is None:
            return requested or DEFAULT_NAMESPACE
        namespace = requested or self.namespaces[0]
        self._check([namespace])
        return namespace

    def can_see(self, namespace: str) -> bool:
        return self.namespaces is None or namespace in self.namespaces

    def can_read(self, namespace: str, acl: str) -> bool:
        """Whether a chunk of `namespace` whose ACL metadata is `acl` is readable by this caller."""
        if not self.can_see(namespace):
            return False
        allowed = parse_groups(acl or "")
        return self.groups is None or not allowed or bool(set(allowed) & set(self.groups))

    def tenant(self) -> chunk_pb2.TenantContext:
        """The tenant context inner calls made for this caller carry."""
        return chunk_pb2.TenantContext(
            principal=self.name, namespaces=self.namespaces or (), all_namespaces=self.namespaces is None,
            acl_enforced=self.groups is not None, acl_groups=self.groups or (), role=self.role)

    def _check(self, namespaces: list[str]) -> None:
        outside = [ns for ns in namespaces if ns not in self.namespaces]
        if outside:
            raise PermissionDenied(f"key {self.name!r} may not access namespace(s) {', '.join(outside)}")


OPEN = Principal(name="anonymous", role="admin", namespaces=None, groups=None)
_current: contextvars.ContextVar[Principal] = contextvars.ContextVar("ragkb_principal", default=OPEN)


def current() -> Principal:
    return _current.get()


def use(principal: Principal) -> tuple[contextvars.Token, contextvars.Token]:
    """Make `principal` the caller of this request, and its tenant the context of every inner call."""
    return _current.set(principal), tenancy.use(principal.tenant())


def reset(tokens: tuple[contextvars.Token, contextvars.Token]) -> None:
    _current.reset(tokens[0])
    tenancy.reset(tokens[1])


@contextlib.contextmanager
def acting_as(principal: Principal):
    """`use` for the duration of a block."""
    tokens = use(principal)
    try:
        yield principal
    finally:
        reset(tokens)


def hash_key(raw: str) -> str:
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()


class KeyEntries(Protocol):
    """Where the key entries ({name, role, namespaces, groups, sha256}) are kept."""

    def find(self, sha256: str) -> dict | None: ...

    def any(self) -> bool: ...

    def all(self) -> list[dict]: ...

    def add(self, entry: dict) -> None:
        """AlreadyExists when the name is taken."""

    def remove(self, name: str) -> None:
        """NotFound when there is no such key."""


class KeyStore:
    """API keys: a YAML file of hashes (`path`, embedded) or the control-plane database (`database`)."""

    def __init__(self, path: Path | None, *, open_access: bool = False, database: SqlDatabase | None = None):
        self.open_access = open_access
        self._entries: KeyEntries = FileKeyEntries(Path(path) if path else None) if database is None \
            else DatabaseKeyEntries(database)

    @property
    def enabled(self) -> bool:
        return self._entries.any()

    def authenticate(self, raw_key: str | None, *, loopback_peer: bool = False) -> Principal:
        """The principal for a presented key; OPEN while no key exists, for loopback callers only.

        A presented key is looked up first: a valid one is the whole check, one store read per request."""
        entry = self._entries.find(hash_key(raw_key.strip())) if raw_key else None
        if entry is None:
            if not self._entries.any():
                if loopback_peer or self.open_access:
                    return OPEN
                raise Unauthenticated("this instance has no API keys yet and answers loopback clients only; "
                                      "create the first key on the server with `ragkb keys create`")
            if not raw_key:
                raise Unauthenticated("an API key is required: send 'Authorization: Bearer <key>' or "
                                      "'X-API-Key: <key>'")
            raise Unauthenticated("the API key is not valid")
        namespaces = tuple(entry["namespaces"])
        groups = tuple(entry.get("groups", ()))
        return Principal(name=entry["name"], role=entry["role"],
                         namespaces=None if ANY in namespaces else namespaces,
                         groups=None if ANY in groups else groups)

    def list(self) -> list[dict]:
        return [{k: v for k, v in e.items() if k != "sha256"} for e in self._entries.all()]

    def create(self, name: str, *, role: str, namespaces: list[str], groups: list[str] | None = None) -> str:
        """Add a key and return the raw key (the only time it is visible)."""
        entry = validate_entry({"name": name, "role": role, "namespaces": namespaces, "groups": groups or []})
        raw = KEY_PREFIX + secrets.token_urlsafe(32)
        self._entries.add({**entry, "sha256": hash_key(raw)})
        return raw

    def delete(self, name: str) -> None:
        self._entries.remove(name)


class FileKeyEntries:
    """The keys file, re-read when it changes; no path or no file = no keys."""

    def __init__(self, path: Path | None):
        self.path = path
        self._lock = threading.Lock()
        self._stamp: tuple | None = None
        self._by_hash: dict[str, dict] = {}
        self._refresh()

    def find(self, sha256: str) -> dict | None:
        self._refresh()
        return self._by_hash.get(sha256)

    def any(self) -> bool:
        self._refresh()
        return bool(self._by_hash)

    def all(self) -> list[dict]:
        self._refresh()
        return list(self._by_hash.values())

    def add(self, entry: dict) -> None:
        with self._lock:
            entries = self._read_entries()
            if any(e["name"] == entry["name"] for e in entries):
                raise AlreadyExists(f"a key named {entry['name']!r} already exists")
            self._write_entries([*entries, entry])

    def remove(self, name: str) -> None:
        with self._lock:
            entries = self._read_entries()
            kept = [e for e in entries if e["name"] != name]
            if len(kept) == len(entries):
                raise NotFound(f"no key named {name!r}")
            self._write_entries(kept)

    def _refresh(self) -> None:
        if self.path is None:
            return
        stamp = file_stamp(self.path)
        if stamp == self._stamp:
            return
        with self._lock:
            entries = self._read_entries()
            self._by_hash = {e["sha256"]: e for e in entries}
            self._stamp = stamp

    def _read_entries(self) -> list[dict]:
        """Entries from the file; a broken file is an error naming it (auth never silently turns off)."""
        if self.path is None or not self.path.exists():
            return []
        try:
            data = yaml.safe_load(self.path.read_text(encoding="utf-8")) or {}
        except (yaml.YAMLError, UnicodeDecodeError) as error:
            raise RagkbError(f"keys file {self.path} is not readable YAML: {error}") from None
        raw_entries = data.get("keys", []) if isinstance(data, dict) else None
        if not isinstance(raw_entries, list):
            raise RagkbError(f"keys file {self.path}: expected a mapping with a 'keys' list")
        entries = []
        for position, raw in enumerate(raw_entries, start=1):
            try:
                entry = validate_entry(raw)
                digest = str(raw.get("sha256", ""))
                if not re.fullmatch(r"[0-9a-f]{64}", digest):
                    raise InvalidArgument("sha256 must be 64 lower-case hex digits")
            except InvalidArgument as error:
                raise RagkbError(f"keys file {self.path}, key #{position}: {error.message}") from None
            entries.append({**entry, "sha256": digest})
        return entries

    def _write_entries(self, entries: list[dict]) -> None:
        if self.path is None:
            raise RagkbError("no keys file is configured (set RAGKB_KEYS_FILE or RAGKB_DATA_DIR)")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        staging = self.path.with_suffix(self.path.suffix + ".tmp")
        staging.write_text(yaml.safe_dump({"keys": entries}, sort_keys=False, allow_unicode=True), encoding="utf-8")
        os.chmod(staging, 0o600)
        os.replace(staging, self.path)
        self._stamp = None


class DatabaseKeyEntries:
    """The `api_keys` table, read on each call: a key created or deleted counts on every gateway at once."""

    _COLUMNS = "name, role, namespaces, groups, sha256"

    def __init__(self, db: SqlDatabase):
        self._db = db

    def find(self, sha256: str) -> dict | None:
        row = self._db.execute(f"SELECT {self._COLUMNS} FROM api_keys WHERE sha256 = ?", (sha256,)).one()
        return _key_entry(row) if row else None

    def any(self) -> bool:
        return self._db.execute("SELECT EXISTS (SELECT 1 FROM api_keys)").one()[0] in (True, 1)

    def all(self) -> list[dict]:
        return [_key_entry(row) for row in
                self._db.execute(f"SELECT {self._COLUMNS} FROM api_keys ORDER BY created_at, name").rows]

    def add(self, entry: dict) -> None:
        added = self._db.execute(
            f"INSERT INTO api_keys({self._COLUMNS}) VALUES (?, ?, ?, ?, ?) ON CONFLICT(name) DO NOTHING",
            (entry["name"], entry["role"], json.dumps(entry["namespaces"], ensure_ascii=False),
             json.dumps(entry["groups"], ensure_ascii=False), entry["sha256"]))
        if added.rowcount != 1:
            raise AlreadyExists(f"a key named {entry['name']!r} already exists")

    def remove(self, name: str) -> None:
        if self._db.execute("DELETE FROM api_keys WHERE name = ?", (name,)).rowcount != 1:
            raise NotFound(f"no key named {name!r}")


def _key_entry(row) -> dict:
    name, role, namespaces, groups, sha256 = row
    return {"name": name, "role": role, "namespaces": json.loads(namespaces), "groups": json.loads(groups),
            "sha256": sha256}


def validate_entry(raw) -> dict:
    if not isinstance(raw, dict):
        raise InvalidArgument("a key entry must be a mapping")
    name, role = str(raw.get("name", "")), str(raw.get("role", ""))
    if not _NAME.match(name):
        raise InvalidArgument(f"invalid key name {name!r}: use 1-64 letters, digits, '.', '-' or '_'")
    if role not in ROLES:
        raise InvalidArgument(f"invalid role {role!r}; roles: {', '.join(ROLES)}")
    namespaces, groups = raw.get("namespaces") or [], raw.get("groups") or []
    if not isinstance(namespaces, list) or not namespaces or not all(isinstance(n, str) and n for n in namespaces):
        raise InvalidArgument(f"key {name!r} needs a non-empty list of namespaces ('*' = all)")
    if not isinstance(groups, list) or not all(isinstance(g, str) and g for g in groups):
        raise InvalidArgument(f"key {name!r}: groups must be a list of names ('*' = ignore document ACLs)")
    return {"name": name, "role": role, "namespaces": list(namespaces), "groups": list(groups)}



def key_store_for(settings) -> KeyStore:
    """The control-plane database's keys in cluster mode; else the keys file named by settings, or
    <data_dir>/keys.yaml."""
    return KeyStore(Path(settings.keys_file) if settings.keys_file else Path(settings.data_dir) / "keys.yaml",
                    open_access=settings.open_access, database=database_for(settings))


def is_loopback_peer(address: str | None) -> bool:
    """Whether a peer address (REST client host, or a gRPC peer such as 'ipv4:127.0.0.1:5123') is loopback."""
    if not address:
        return False
    host = address
    if address.startswith(("ipv4:", "ipv6:")):
        host = address.split(":", 1)[1].rsplit(":", 1)[0]
    elif address.startswith("unix:"):
        return True
    return is_loopback(host.strip("[]").replace("%25", "%").split("%")[0])


def required_role(method: str, path: str) -> str:
    """The least role a REST call needs: admin paths admin, reads (GET, queries, replays) reader, other writes writer."""
    if path.startswith("/v1/admin"):
        return "admin"
    if method == "POST" and path.rstrip("/") == "/v1/knowledge-bases":
        return "kb_admin"
    if method in ("GET", "HEAD", "OPTIONS"):
        return "reader"
    leaf = path.rstrip("/").rsplit("/", 1)[-1].lower()
    return "reader" if leaf in READ_ACTIONS else "writer"


def grpc_role(full_method: str) -> str:
    """The least role a gRPC method needs, from its name (Get*/List*/Query* read, the rest write)."""
    name = full_method.rsplit("/", 1)[-1]
    if name == "CreateKnowledgeBase":
        return "kb_admin"
    return "reader" if name.startswith(("Get", "List", "Query", "Stream", "Chat")) else "writer"


# POST actions that only read the knowledge base (queries, streams, conversation turns, replays, chat completions)
READ_ACTIONS = ("query", "stream", "chat", "messages", "replay", "retrieve", "ask", "completions")
