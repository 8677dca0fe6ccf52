"""Component registry: (kind, name) -> factory, so swapping a component is a config change.

Factories take the component's config section (and, where they need it, the
process settings) and return an object that satisfies the kind's Protocol.
Instances are cached per (kind, name, config), so one process that runs several
services shares one model and one store connection.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from shared.errors import FailedPrecondition

_factories: dict[tuple[str, str], Callable[..., Any]] = {}
_instances: dict[tuple, Any] = {}
_lock = threading.RLock()


def register(kind: str, name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def decorator(factory: Callable[..., Any]) -> Callable[..., Any]:
        _factories[(kind, name)] = factory
        return factory

    return decorator


def names(kind: str) -> list[str]:
    _load_builtin_components()
    return sorted(name for k, name in _factories if k == kind)


def create(kind: str, name: str, *args: Any, cache_key: tuple | None = None, **kwargs: Any) -> Any:
    """Build (or reuse, when `cache_key` is given) the component registered as (kind, name)."""
    _load_builtin_components()
    factory = _factories.get((kind, name))
    if factory is None:
        raise FailedPrecondition(f"unknown {kind} {name!r}; available: {', '.join(names(kind)) or 'none'}")
    if cache_key is None:
        return factory(*args, **kwargs)
    key = (kind, name, *cache_key)
    with _lock:
        if key not in _instances:
            _instances[key] = factory(*args, **kwargs)
        return _instances[key]


def clear_cache() -> None:
    """Forget cached instances (closing those that can be closed); used on shutdown and in tests."""
    with _lock:
        for instance in _instances.values():
            close = getattr(instance, "close", None)
            if callable(close):
                close()
        _instances.clear()


def _load_builtin_components() -> None:
    # Importing the modules runs their @register decorators.
    import shared.components  # noqa: F401
