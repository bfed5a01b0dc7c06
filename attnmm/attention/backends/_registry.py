"""The backend registry: names to :class:`~attnmm.attention.backends.Backend` instances (the built-in ones
are registered by the package; dispatch and the composite ``segments`` backend read the registry here)."""

from __future__ import annotations

from attnmm.attention.backends.base import Backend

_BACKENDS: dict[str, Backend] = {}


def register_backend(backend: Backend) -> Backend:
    """Register a backend under ``backend.name``; names are unique (registering another instance of
    the registered backend's class is a no-op, so a module that registers may run twice)."""
    if not backend.name:
        raise ValueError("a backend needs a non-empty name")
    if backend.name in _BACKENDS:
        if type(_BACKENDS[backend.name]) is type(backend):  # the same backend again (a module run twice)
            return _BACKENDS[backend.name]
        raise ValueError(f"a backend named {backend.name!r} is already registered")
    _BACKENDS[backend.name] = backend
    return backend


def unregister_backend(name: str) -> Backend:
    """Remove the backend registered as ``name`` and return it (for tests and examples)."""
    backend = get_backend(name)
    del _BACKENDS[name]
    return backend


def get_backend(name: str) -> Backend:
    """The backend registered as ``name``."""
    try:
        return _BACKENDS[name]
    except KeyError:
        raise ValueError(f"unknown backend {name!r}; valid names: 'auto', {', '.join(map(repr, _BACKENDS))}") from None


def list_backends() -> list[str]:
    """Names of the registered backends."""
    return list(_BACKENDS)
