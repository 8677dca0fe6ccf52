"""Named runtime steps and their settings, reloaded from a YAML file while the gateway runs.

Each step has `enabled`, `skip_when` and `timeout_s`. Optional steps
(query_rewrite, multi_query, hyde) are off by default and fail soft; the
rerank and generation steps are on by default, and turning them off makes
post-retrieval a passthrough and the answer empty (retrieval only).

The file is checked on every request (one `stat`), so an edit applies to the
next request without a restart; an invalid file is reported and the last good
settings stay in force.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from shared.errors import InvalidArgument
from shared.files import file_stamp

log = logging.getLogger("ragkb.gateway.steps")

OPTIONAL_STEPS = ("query_rewrite", "multi_query", "hyde")
REQUIRED_STEPS = ("rerank", "generation")
STEP_NAMES = (*OPTIONAL_STEPS, *REQUIRED_STEPS)


class SkipWhen(BaseModel):
    """A step is skipped when any listed condition holds for the (normalised) query."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    languages: tuple[str, ...] = ()            # e.g. ["zh"]: detected query language
    shorter_than: int = Field(0, ge=0)         # characters; 0 = no limit
    longer_than: int = Field(0, ge=0)          # characters; 0 = no limit
    matches: str = ""                          # regular expression searched in the query

    @field_validator("matches")
    @classmethod
    def _valid_pattern(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as error:
            raise ValueError(f"invalid regular expression {value!r}: {error}") from None
        return value

    def reason(self, query: str, language: str) -> str | None:
        if language in self.languages:
            return f"query language is {language}"
        if self.shorter_than and len(query) < self.shorter_than:
            return f"query is shorter than {self.shorter_than} characters"
        if self.longer_than and len(query) > self.longer_than:
            return f"query is longer than {self.longer_than} characters"
        if self.matches and re.search(self.matches, query):
            return f"query matches {self.matches!r}"
        return None


class StepConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = False
    skip_when: SkipWhen = SkipWhen()
    timeout_s: float = Field(5.0, gt=0, le=600)


class StepsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    query_rewrite: StepConfig = StepConfig()
    multi_query: StepConfig = StepConfig()
    hyde: StepConfig = StepConfig()
    rerank: StepConfig = StepConfig(enabled=True, timeout_s=30)
    generation: StepConfig = StepConfig(enabled=True, timeout_s=60)

    def step(self, name: str) -> StepConfig:
        if name not in STEP_NAMES:
            raise InvalidArgument(f"unknown step {name!r}; steps: {', '.join(STEP_NAMES)}")
        return getattr(self, name)

    @classmethod
    def parse(cls, data: object, *, source: str) -> StepsConfig:
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise InvalidArgument(f"{source}: step settings must be a mapping of step name -> settings")
        data = data.get("steps", data) or {}
        if not isinstance(data, dict):
            raise InvalidArgument(f"{source}: 'steps' must be a mapping of step name -> settings")
        # a step's unset fields keep that step's own defaults (generation stays enabled when only skip_when is set)
        defaults = cls().model_dump(mode="json")
        data = {name: {**defaults[name], **value} if name in defaults and isinstance(value, dict) else value
                for name, value in data.items()}
        try:
            return cls.model_validate(data)
        except ValidationError as error:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors())
            raise InvalidArgument(f"{source}: invalid step settings: {problems}") from None

    @classmethod
    def from_yaml(cls, text: str, *, source: str) -> StepsConfig:
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as error:
            raise InvalidArgument(f"{source}: not valid YAML: {error}") from None
        return cls.parse(data, source=source)

    def to_yaml(self) -> str:
        return yaml.safe_dump({"steps": self.model_dump(mode="json")}, sort_keys=False, allow_unicode=True)


class StepRegistry:
    """The step settings in force, backed by a YAML file that may change at any time."""

    def __init__(self, path: Path | None):
        self.path = Path(path) if path else None
        self._lock = threading.Lock()
        self._config = StepsConfig()
        self._stamp: tuple | None = None
        self.last_error: str | None = None
        self.current()

    def current(self) -> StepsConfig:
        """The settings for the next request: re-read when the file changed since the last look."""
        if self.path is None:
            return self._config
        stamp = file_stamp(self.path)
        if stamp == self._stamp:
            return self._config
        with self._lock:
            if stamp != self._stamp:
                self._load(stamp)
        return self._config

    def reload(self) -> StepsConfig:
        with self._lock:
            self._stamp = None
            if self.path is not None:
                self._load(file_stamp(self.path))
        if self.last_error:
            raise InvalidArgument(self.last_error)
        return self._config

    def replace(self, config: StepsConfig) -> StepsConfig:
        """Apply new settings and persist them (atomically) so every gateway replica picks them up."""
        with self._lock:
            if self.path is not None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                staging = self.path.with_suffix(self.path.suffix + ".tmp")
                staging.write_text(config.to_yaml(), encoding="utf-8")
                os.replace(staging, self.path)
                self._stamp = file_stamp(self.path)
            self._config = config
            self.last_error = None
        return config

    def _load(self, stamp: tuple | None) -> None:
        self._stamp = stamp
        if stamp is None:
            self._config, self.last_error = StepsConfig(), None
            return
        try:
            text = self.path.read_text(encoding="utf-8")
            self._config = StepsConfig.from_yaml(text, source=str(self.path))
            self.last_error = None
            log.info("step settings loaded", extra={"path": str(self.path)})
        except (InvalidArgument, OSError, UnicodeDecodeError) as error:
            self.last_error = str(error)
            log.error("step settings not applied; keeping the previous ones: %s", error)
