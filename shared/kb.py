"""The knowledge-base catalog: one YAML file per KB under `<data_dir>/kbs/<name>.yaml`.

Files (not an in-memory dict) so every service process reads the same catalog
and it survives restarts.
"""

from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path

from shared.config import KBConfig, validate_kb_name
from shared.errors import AlreadyExists, NotFound


class KnowledgeBaseCatalog:
    def __init__(self, data_dir: Path):
        self._dir = Path(data_dir) / "kbs"
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[float, KBConfig]] = {}

    def _path(self, name: str) -> Path:
        validate_kb_name(name)
        return self._dir / f"{name}.yaml"

    def create(self, name: str, *, description: str = "", config_yaml: str = "") -> KBConfig:
        config = KBConfig.from_yaml(config_yaml or "{}", name=name)
        if description:
            config = config.model_copy(update={"description": description})
        path = self._path(name)
        with self._lock:
            if path.exists():
                raise AlreadyExists(f"knowledge base {name!r} already exists")
            self._dir.mkdir(parents=True, exist_ok=True)
            self._write(path, config)
        return config

    def replace(self, name: str, config: KBConfig) -> None:
        """Write a KB's whole config (e.g. after calibration); the KB must exist."""
        path = self._path(name)
        with self._lock:
            if not path.exists():
                raise NotFound(f"knowledge base {name!r} does not exist")
            self._write(path, config)

    def _write(self, path: Path, config: KBConfig) -> None:
        # write-then-rename so a reader never sees half a file
        fd, tmp = tempfile.mkstemp(dir=self._dir, suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(config.to_yaml())
        os.replace(tmp, path)

    def get(self, name: str) -> KBConfig:
        path = self._path(name)
        try:
            mtime = path.stat().st_mtime
        except FileNotFoundError:
            raise NotFound(f"knowledge base {name!r} does not exist") from None
        with self._lock:
            cached = self._cache.get(name)
            if cached and cached[0] == mtime:
                return cached[1]
            config = KBConfig.from_yaml(path.read_text(encoding="utf-8"), name=name)
            self._cache[name] = (mtime, config)
            return config

    def names(self) -> list[str]:
        if not self._dir.exists():
            return []
        return sorted(p.stem for p in self._dir.glob("*.yaml"))

    def exists(self, name: str) -> bool:
        return self._path(name).exists()
