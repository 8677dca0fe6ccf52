"""Operator profiles: the endpoints, secrets, store connections and paths a knowledge base may use.

A knowledge-base config is tenant input. It chooses among named profiles the
operator defined in the server settings (a YAML file, `RAGKB_PROFILES_FILE`,
default `<data_dir>/profiles.yaml`); it never names a URL, a host, a file path or
the environment variable that holds a secret. Resolving a tenant config against
the profiles gives the effective config every service uses.

    llm:                      # generator.profile
      local: {base_url: "http://127.0.0.1:11434/v1", model: "qwen2.5:7b"}
      openai: {base_url: "https://api.openai.com/v1", model: gpt-4o-mini, api_key_env: OPENAI_API_KEY}
    keyword_store:            # keyword_store.profile
      default: {hosts: ["http://127.0.0.1:9200"], index_prefix: ragkb}
    vector_store:             # vector_store.profile
      default: {uri: ""}      # empty = Milvus Lite under the data directory
    models:                   # embedder.model / reranker.model names -> local model directories
      bge-m3: /models/bge-m3
    templates:                # generator.templates -> prompt template directories
      support: /etc/ragkb/templates/support

Built-in profiles (`local`, `default`) exist unless the file redefines them.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from shared.errors import FailedPrecondition, InvalidArgument
from shared.files import file_stamp

log = logging.getLogger("ragkb.profiles")


class _Profile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LLMProfile(_Profile):
    base_url: str = "http://127.0.0.1:11434/v1"
    model: str = ""
    # the secret comes from a variable or a file the operator names; empty both = no Authorization header
    api_key_env: str = ""
    api_key_file: str = ""

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {value!r}")
        return value


class KeywordStoreProfile(_Profile):
    hosts: tuple[str, ...] = ("http://127.0.0.1:9200",)
    index_prefix: str = "ragkb"


class VectorStoreProfile(_Profile):
    uri: str = ""  # empty = Milvus Lite file under the data directory


class OperatorProfiles(_Profile):
    llm: dict[str, LLMProfile] = Field(default_factory=dict)
    keyword_store: dict[str, KeywordStoreProfile] = Field(default_factory=dict)
    vector_store: dict[str, VectorStoreProfile] = Field(default_factory=dict)
    models: dict[str, str] = Field(default_factory=dict)
    templates: dict[str, str] = Field(default_factory=dict)

    def model_post_init(self, _context) -> None:
        # built-in profiles fill in whatever the operator did not define
        for kind, name, profile in (("llm", "local", LLMProfile()),
                                    ("keyword_store", "default", KeywordStoreProfile()),
                                    ("vector_store", "default", VectorStoreProfile())):
            getattr(self, kind).setdefault(name, profile)

    @classmethod
    def from_yaml(cls, text: str, *, source: str = "profiles") -> OperatorProfiles:
        try:
            data = yaml.safe_load(text) or {}
            return cls.model_validate(data)
        except yaml.YAMLError as error:
            raise ValueError(f"{source} is not valid YAML: {error}") from None
        except ValidationError as error:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors())
            raise ValueError(f"{source}: {problems}") from None

    @classmethod
    def read(cls, path: Path) -> OperatorProfiles:
        """The profiles in a file, or the built-ins when there is no file."""
        if not path.exists():
            return cls()
        return cls.from_yaml(path.read_text(encoding="utf-8"), source=str(path))

    def pick(self, kind: str, name: str):
        """A profile of one kind by name; the tenant hears only which names exist."""
        profiles = getattr(self, kind)
        if name not in profiles:
            raise InvalidArgument(f"unknown {kind} profile {name!r}; this server offers: {', '.join(sorted(profiles))}")
        return profiles[name]

    def model_path(self, name: str) -> str:
        """An operator-named model's directory, or the name itself (a shipped model or a default)."""
        return self.models.get(name, name)

    def template_dir(self, name: str) -> str:
        if not name:
            return ""
        if name not in self.templates:
            raise InvalidArgument(f"unknown template set {name!r}; this server offers: "
                                  f"{', '.join(sorted(self.templates)) or 'none'}")
        return self.templates[name]


class LiveProfiles:
    """One process's operator profiles, re-read when the file changes (None = the built-in profiles).

    Every service reads its own copy (in Kubernetes, the `ragkb-profiles` ConfigMap each pod mounts)."""

    def __init__(self, path: Path | None):
        self._path = path
        self._stamp: tuple | None = None
        self._profiles = OperatorProfiles()
        self._lock = threading.Lock()

    @classmethod
    def for_settings(cls, settings) -> LiveProfiles:
        return cls(profiles_path(settings))

    def current(self) -> OperatorProfiles:
        if self._path is not None:
            stamp = file_stamp(self._path)
            if stamp != self._stamp:
                with self._lock:
                    self._profiles = OperatorProfiles.read(self._path)
                    self._stamp = stamp
        return self._profiles


def read_secret(profile_name: str, *, env_name: str = "", file_name: str = "",
                environ: dict[str, str] | None = None) -> str:
    """The API key of an LLM profile. A missing secret is logged for the operator; callers hear only
    that the profile is unavailable, never which variable or file was looked for."""
    env = os.environ if environ is None else environ
    value = ""
    if env_name:
        value = env.get(env_name, "")
    elif file_name:
        try:
            value = Path(file_name).read_text(encoding="utf-8").strip()
        except OSError as error:
            log.error("llm profile %r: cannot read its api_key_file: %s", profile_name, error)
    else:
        return ""
    if not value:
        log.error("llm profile %r: its API key (%s) is empty or missing", profile_name,
                  f"env {env_name}" if env_name else f"file {file_name}")
        raise FailedPrecondition(f"the LLM profile {profile_name!r} is not available on this server; "
                                 "ask the operator to check its credentials")
    return value


def profiles_path(settings) -> Path:
    """The operator's profiles file: RAGKB_PROFILES_FILE (which must exist), else <data_dir>/profiles.yaml."""
    if settings.profiles_file:
        path = Path(settings.profiles_file)
        if not path.exists():
            raise ValueError(f"RAGKB_PROFILES_FILE={settings.profiles_file} does not exist")
        return path
    return Path(settings.data_dir) / "profiles.yaml"
