"""The backend registry: names to :class:`~attnmm.attention.backends.Backend` instances (the built-in ones
are registered by the package; dispatch reads the registry here). The contract is
:class:`attnmm._registry.Registry`'s: a taken name is refused (registering another instance of the
registered backend's class is a no-op, so a module that registers may run twice)."""

from __future__ import annotations

from attnmm._registry import Registry
from attnmm.attention.backends.base import Backend


def _check(backend: object) -> None:
    if not isinstance(backend, Backend):
        raise TypeError(f"register_backend expects a Backend instance, got {backend!r}")


BACKENDS: Registry[Backend] = Registry(
    "backend", _check, also=("auto",), same=lambda registered, again: type(registered) is type(again)
)


def register_backend(backend: Backend) -> Backend:
    """Register a backend under ``backend.name``."""
    return BACKENDS.register(getattr(backend, "name", ""), backend)


def unregister_backend(name: str) -> Backend:
    """Remove the backend registered as ``name`` and return it (for tests and examples)."""
    return BACKENDS.unregister(name)


def get_backend(name: str) -> Backend:
    """The backend registered as ``name`` (an unknown name's error lists the registered ones)."""
    return BACKENDS.get(name)


def list_backends() -> list[str]:
    """Names of the registered backends, sorted."""
    return BACKENDS.names()
