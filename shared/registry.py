"""Component registries: (kind, name) -> factory, so swapping a component is a config change.

Each service builds its own registry in its `main` from the factories it offers:
the shared ones (embedders, stores, the cross-encoder) from `shared/`, its own
from its package. Nothing registers on import, so what a process can build is
exactly what its main put in, whichever other modules happen to be imported.

Instances are cached process-wide per (kind, name, factory, config), so one
process that runs several services (embedded mode) shares one model and one
store connection even though each service has its own registry.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

from shared.errors import FailedPrecondition

_instances: dict[tuple, Any] = {}
_lock = threading.RLock()


class ComponentRegistry:
    """The components one service offers; `service` names it in the error for an unknown component."""

    def __init__(self, service: str = ""):
        self.service = service
        self._factories: dict[tuple[str, str], Callable[..., Any]] = {}

    def add(self, kind: str, name: str, factory: Callable[..., Any]) -> ComponentRegistry:
        self._factories[(kind, name)] = factory
        return self

    def names(self, kind: str) -> list[str]:
        return sorted(name for k, name in self._factories if k == kind)

    def create(self, kind: str, name: str, *args: Any, cache_key: tuple | None = None, **kwargs: Any) -> Any:
        """Build (or reuse, when `cache_key` is given) the component registered as (kind, name)."""
        factory = self._factories.get((kind, name))
        if factory is None:
            where = f"the {self.service} service" if self.service else "this process"
            raise FailedPrecondition(f"unknown {kind} {name!r}; {where} offers: "
                                     f"{', '.join(self.names(kind)) or 'none'}")
        if cache_key is None:
            return factory(*args, **kwargs)
        key = (kind, name, factory.__module__, factory.__qualname__, *cache_key)
        with _lock:
            if key not in _instances:
                _instances[key] = factory(*args, **kwargs)
            return _instances[key]


def cached_kinds() -> Counter[str]:
    """How many instances of each kind this process has built and keeps (a model is built once per config)."""
    with _lock:
        return Counter(key[0] for key in _instances)


def clear_cache() -> None:
    """Forget cached instances (closing those that can be closed); used on shutdown and in tests."""
    with _lock:
        for instance in _instances.values():
            close = getattr(instance, "close", None)
            if callable(close):
                close()
        _instances.clear()
