"""The adapter registry: names to :class:`~attnmm.adapters.Adapter` classes (the contract of
:class:`attnmm._registry.Registry`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from attnmm._registry import Registry
from attnmm.adapters.base import Adapter

A = TypeVar("A", bound=type[Adapter])


def _check(cls: object) -> None:
    if not (isinstance(cls, type) and issubclass(cls, Adapter)):
        raise TypeError(f"register_adapter expects an Adapter subclass, got {cls!r}")


ADAPTERS: Registry[type[Adapter]] = Registry("adapter", _check)


def register_adapter(name: str) -> Callable[[A], A]:
    """Class decorator registering an adapter under ``name``; a taken name is refused.

    Examples:
        >>> from attnmm.adapters import Adapter, register_adapter
        >>> @register_adapter("speech")  # doctest: +ELLIPSIS
        ... class Other(Adapter):
        ...     def forward(self, batch): ...
        Traceback (most recent call last):
        ...
        ValueError: an adapter named 'speech' is already registered (attnmm.adapters.speech.SpeechAdapter); ...
    """

    def decorate(cls: A) -> A:
        ADAPTERS.register(name, cls)
        return cls

    return decorate


def get_adapter(name: str) -> type[Adapter]:
    """The adapter class registered as ``name`` (an unknown name's error lists the registered ones)."""
    return ADAPTERS.get(name)


def list_adapters() -> list[str]:
    """Names of the registered adapters, sorted.

    Examples:
        >>> from attnmm.adapters import list_adapters
        >>> "speech" in list_adapters()
        True
    """
    return ADAPTERS.names()
