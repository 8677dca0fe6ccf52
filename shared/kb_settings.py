"""The knowledge-base settings an inner call carries (`CallContext.kb`), so inner services never read the catalog.

The gateway resolves a KB once per request (the worker gets it with the job) and
makes its settings current (`using`); the typed clients then put into each
request only the sections the called service needs (`SLICES`). The values are
the tenant's config: profile and model names, never endpoints, secrets or paths.

An inner service treats the slice as tenant input (`SettingsResolver`): it is
validated like a KB config a tenant uploads (operator settings refused, models
and profiles must be offered) and resolved against the service's own operator
profiles. The resolved config is cached by the slice's content, so a changed
config is a different cache entry: the next request sees it on every replica.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator

from shared.config import OPERATOR_FIELDS, OPERATOR_RECORDS, KBConfig
from shared.contracts import chunk_pb2
from shared.errors import InvalidArgument
from shared.kb import KnowledgeBaseCatalog
from shared.profiles import LiveProfiles, OperatorProfiles

# `index_version` names the physical index and collection the stores address (shared/kb_versions.py)
_STORES = ("embedder", "keyword_store", "vector_store", "index_version")
# The config sections each callee reads. The reranker holds the store sections to pass them on to the
# retriever (split-part restoration); the generator's evidence selection and claim check use the embedder,
# and `claim_check: cross-encoder` the reranker's model.
SLICES: dict[str, tuple[str, ...]] = {
    "indexer": _STORES,
    "retriever": (*_STORES, "retriever"),
    "reranker": (*_STORES, "reranker"),
    "generator": ("embedder", "reranker", "generator"),
    "worker": ("chunker", "chunker_rules", "parser", *_STORES),
}
# Operator values (defaults in a tenant view anyway) and the operator tools' records (a server path,
# measurements) never travel: no inner service takes them from a request.
_NEVER_SENT = {section: (*OPERATOR_FIELDS.get(section, ()), *OPERATOR_RECORDS.get(section, ()))
               for section in {*OPERATOR_FIELDS, *OPERATOR_RECORDS}}
KB_FIELD = "kb"


class _Once:
    """One KB's settings for one request, resolved at the first inner call that needs them and then kept:
    a request refused before any inner call never looks its KB up, and none looks it up twice."""

    def __init__(self, kb: str, resolve: Callable[[], chunk_pb2.KnowledgeBaseSettings]):
        self.kb = kb
        self._resolve = resolve
        self._settings: chunk_pb2.KnowledgeBaseSettings | None = None
        self._slices: dict[str, chunk_pb2.KnowledgeBaseSettings] = {}
        self._lock = threading.Lock()

    @property
    def version(self) -> str:
        """The config version the request used; empty while no inner call needed it."""
        return self._settings.version if self._settings is not None else ""

    def get(self) -> chunk_pb2.KnowledgeBaseSettings:
        with self._lock:
            if self._settings is None:
                self._settings = self._resolve()
            return self._settings

    def sliced(self, service: str) -> chunk_pb2.KnowledgeBaseSettings:
        """The settings narrowed to `service`, cut once per request and service."""
        settings = self.get()
        with self._lock:
            if service not in self._slices:
                self._slices[service] = narrow(settings, service)
            return self._slices[service]


_current: contextvars.ContextVar[_Once | None] = contextvars.ContextVar("ragkb_kb_settings", default=None)


def canonical_json(data) -> str:
    return json.dumps(data, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def config_version(config: KBConfig) -> str:
    """A version of a KB's tenant config: the hash of its canonical form (equal configs, equal versions)."""
    return hashlib.sha256(canonical_json(config.tenant_view().model_dump(mode="json")).encode()).hexdigest()[:16]


def settings_of(config: KBConfig, sections: tuple[str, ...] | None = None) -> chunk_pb2.KnowledgeBaseSettings:
    """The settings of `config` (the tenant's, not resolved) for the given sections; None = every section."""
    data = config.tenant_view().model_dump(mode="json", exclude={"name", "description"})
    return _slice(config.name, config_version(config), data, sections)


def narrow(settings: chunk_pb2.KnowledgeBaseSettings, service: str) -> chunk_pb2.KnowledgeBaseSettings:
    """The part of `settings` that `service` needs (sections the holder lacks stay at their defaults)."""
    return _slice(settings.kb, settings.version, json.loads(settings.sections_json or "{}"), SLICES[service])


def _slice(kb: str, version: str, data: dict, sections: tuple[str, ...] | None) -> chunk_pb2.KnowledgeBaseSettings:
    kept = {name: value for name, value in data.items() if sections is None or name in sections}
    for section, keys in _NEVER_SENT.items():
        if isinstance(kept.get(section), dict):
            kept[section] = {key: value for key, value in kept[section].items() if key not in keys}
    return chunk_pb2.KnowledgeBaseSettings(kb=kb, version=version, sections_json=canonical_json(kept))


@contextlib.contextmanager
def resolving(kb: str, resolve: Callable[[], chunk_pb2.KnowledgeBaseSettings]) -> Iterator[_Once]:
    """Inner calls about `kb` made inside the block carry the settings `resolve` returns (called at most once)."""
    pending = _Once(kb, resolve)
    token = _current.set(pending)
    try:
        yield pending
    finally:
        _current.reset(token)


def using(settings: chunk_pb2.KnowledgeBaseSettings | None):
    """Inner calls about the KB of `settings` made inside the block carry them (None: carry none)."""
    if settings is None:
        return resolving("", lambda: None)
    return resolving(settings.kb, lambda: settings)


def attach(request, service: str) -> None:
    """Put the current settings, narrowed to `service`, into a request that names their KB (the typed clients
    call this); a request about another KB, or made with no current settings, carries none."""
    if "context" not in request.DESCRIPTOR.fields_by_name or service not in SLICES:
        return
    pending = _current.get()
    names_kb = KB_FIELD in request.DESCRIPTOR.fields_by_name and pending is not None and pending.kb \
        and getattr(request, KB_FIELD) == pending.kb
    if names_kb:
        request.context.kb.CopyFrom(pending.sliced(service))
    else:
        request.context.ClearField("kb")


def for_catalog(catalog: KnowledgeBaseCatalog, name: str) -> chunk_pb2.KnowledgeBaseSettings:
    """A KB's settings as the gateway resolves them once per request: servable under the operator's profiles
    (else NotFound, or FailedPrecondition naming a removed profile), the tenant's config sent on."""
    return settings_of(catalog.servable_tenant_config(name))


def carried(request) -> chunk_pb2.KnowledgeBaseSettings | None:
    """The settings an inner request carries, if any."""
    if "context" in request.DESCRIPTOR.fields_by_name and request.HasField("context") \
            and request.context.HasField("kb"):
        return request.context.kb
    return None


class SettingsResolver:
    """An inner service's reading of the settings its requests carry: validated as tenant input and resolved
    against this process's operator profiles; cached by content (and by the profiles they were resolved with)."""

    CACHE_SIZE = 256

    def __init__(self, profiles: LiveProfiles):
        self._profiles = profiles
        self._cache: OrderedDict[tuple[str, str], tuple[OperatorProfiles, KBConfig]] = OrderedDict()
        self._lock = threading.Lock()

    def config(self, request) -> KBConfig:
        """The effective config of the KB `request.kb` names, from the settings the request carries."""
        kb = getattr(request, KB_FIELD)
        settings = carried(request)
        if settings is None or settings.kb != kb:
            raise InvalidArgument(f"the call carries no settings for knowledge base {kb!r}; inner services get "
                                  "them from the gateway or the worker, never from the catalog")
        return self.resolve(settings)

    def resolve(self, settings: chunk_pb2.KnowledgeBaseSettings) -> KBConfig:
        profiles = self._profiles.current()
        key = (settings.kb, settings.sections_json)
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None and cached[0] is profiles:  # resolved with the profiles in force now
                self._cache.move_to_end(key)
                return cached[1]
        config = self._resolve(settings, profiles)
        with self._lock:
            self._cache[key] = (profiles, config)
            self._cache.move_to_end(key)
            while len(self._cache) > self.CACHE_SIZE:
                self._cache.popitem(last=False)
        return config

    @staticmethod
    def _resolve(settings: chunk_pb2.KnowledgeBaseSettings, profiles) -> KBConfig:
        try:
            data = json.loads(settings.sections_json or "{}")
        except json.JSONDecodeError as error:
            raise InvalidArgument(f"settings of knowledge base {settings.kb!r} are not valid JSON: {error}") from None
        if not isinstance(data, dict) or {"name", "description"} & set(data):
            raise InvalidArgument(f"settings of knowledge base {settings.kb!r} must map config sections to "
                                  "their settings")
        try:
            config = KBConfig.from_tenant_mapping(data, name=settings.kb, profiles=profiles)
        except InvalidArgument as error:
            raise InvalidArgument(f"settings of knowledge base {settings.kb!r} refused: {error.message}") from None
        return config.resolve(profiles)
