"""The knowledge-base catalog: one YAML file per KB under `<data_dir>/kbs/<name>.yaml`.

Files (not an in-memory dict) so every service process reads the same catalog
and it survives restarts. A file holds the config as its tenant wrote it;
`get` returns it resolved against the operator's profiles (shared/profiles.py),
so an operator changing an endpoint or a secret never rewrites KB files.
"""

from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path

from shared.config import KBConfig, Settings, validate_kb_name
from shared.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound
from shared.files import file_stamp
from shared.profiles import OperatorProfiles, profiles_path


class KnowledgeBaseCatalog:
    """`profiles_file` (the operator's) is re-read when it changes; None = the built-in profiles."""

    def __init__(self, data_dir: Path, profiles_file: Path | None = None):
        self._dir = Path(data_dir) / "kbs"
        self._profiles_file = profiles_file
        self._profiles_stamp: tuple | None = None
        self._profiles = OperatorProfiles()
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[float, tuple[KBConfig, KBConfig | InvalidArgument]]] = {}

    @classmethod
    def for_settings(cls, settings: Settings) -> KnowledgeBaseCatalog:
        return cls(settings.data_dir, profiles_path(settings))

    @property
    def profiles(self) -> OperatorProfiles:
        if self._profiles_file is not None:
            stamp = file_stamp(self._profiles_file)
            if stamp != self._profiles_stamp:
                with self._lock:
                    self._profiles = OperatorProfiles.read(self._profiles_file)
                    self._profiles_stamp = stamp
                    self._cache.clear()  # effective configs depend on the profiles
        return self._profiles

    def _path(self, name: str) -> Path:
        validate_kb_name(name)
        return self._dir / f"{name}.yaml"

    def create(self, name: str, *, description: str = "", config_yaml: str = "") -> KBConfig:
        """Create a KB from tenant YAML (operator settings refused); returns the effective config."""
        config = KBConfig.from_tenant_yaml(config_yaml or "{}", name=name, profiles=self.profiles)
        if description:
            config = config.model_copy(update={"description": description})
        path = self._path(name)
        with self._lock:
            if path.exists():
                raise AlreadyExists(f"knowledge base {name!r} already exists")
            self._write(path, config)
        return config.resolve(self.profiles)

    def replace(self, config: KBConfig) -> KBConfig:
        """Store a new tenant-level config of an existing KB (fusion settings fitted by `ragkb tune`, a gated
        change); returns the effective config."""
        path = self._path(config.name)
        with self._lock:
            if not path.exists():
                raise NotFound(f"knowledge base {config.name!r} does not exist")
            self._write(path, config)
            self._cache.pop(config.name, None)
        return config.resolve(self.profiles)

    def _write(self, path: Path, config: KBConfig) -> None:
        self._dir.mkdir(parents=True, exist_ok=True)
        # write-then-rename so a reader never sees half a file
        fd, tmp = tempfile.mkstemp(dir=self._dir, suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(config.to_tenant_yaml())
        os.replace(tmp, path)

    def get(self, name: str) -> KBConfig:
        """The effective config (operator settings resolved from the profiles).

        A KB whose profile the operator has since removed fails here, naming the profile;
        the rest of the catalog is unaffected."""
        stored, resolved = self._load(name)
        if isinstance(resolved, InvalidArgument):
            raise FailedPrecondition(f"knowledge base {name!r} cannot be served: {resolved.message}")
        return resolved

    def tenant_config(self, name: str) -> KBConfig:
        """The config as its tenant wrote it: profile and model names, no operator settings."""
        return self._load(name)[0]

    def _load(self, name: str) -> tuple[KBConfig, KBConfig | InvalidArgument]:
        path = self._path(name)
        profiles = self.profiles
        try:
            mtime = path.stat().st_mtime
        except FileNotFoundError:
            raise NotFound(f"knowledge base {name!r} does not exist") from None
        with self._lock:
            cached = self._cache.get(name)
            if cached and cached[0] == mtime:
                return cached[1]
            stored = _stored(path.read_text(encoding="utf-8"), name)
            try:
                loaded = (stored, stored.resolve(profiles))
            except InvalidArgument as error:
                loaded = (stored, error)
            self._cache[name] = (mtime, loaded)
            return loaded

    def names(self) -> list[str]:
        if not self._dir.exists():
            return []
        return sorted(p.stem for p in self._dir.glob("*.yaml"))

    def exists(self, name: str) -> bool:
        return self._path(name).exists()


def _stored(text: str, name: str) -> KBConfig:
    """A stored config; operator settings that older versions kept in the file are ignored."""
    config = KBConfig.from_yaml(text, name=name)
    return config.tenant_view()
