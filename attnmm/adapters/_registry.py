"""The adapter registry: names to :class:`~attnmm.adapters.Adapter` classes."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from attnmm.adapters.base import Adapter

A = TypeVar("A", bound=type[Adapter])

_ADAPTERS: dict[str, type[Adapter]] = {}


def register_adapter(name: str) -> Callable[[A], A]:
    """Class decorator registering an adapter under ``name``; a taken name is refused.

    Examples:
        >>> from attnmm.adapters import Adapter, register_adapter
        >>> @register_adapter("speech")
        ... class Other(Adapter):
        ...     def forward(self, batch): ...
        Traceback (most recent call last):
        ...
        ValueError: an adapter named 'speech' is already registered (SpeechAdapter); pick another name
    """

    def decorate(cls: A) -> A:
        if not (isinstance(cls, type) and issubclass(cls, Adapter)):
            raise TypeError(f"register_adapter expects an Adapter subclass, got {cls!r}")
        if name in _ADAPTERS:
            raise ValueError(
                f"an adapter named {name!r} is already registered ({_ADAPTERS[name].__name__}); pick another name"
            )
        _ADAPTERS[name] = cls
        return cls

    return decorate


def get_adapter(name: str) -> type[Adapter]:
    """The adapter class registered as ``name``."""
    try:
        return _ADAPTERS[name]
    except KeyError:
        raise KeyError(f"unknown adapter {name!r}; registered adapters: {', '.join(list_adapters())}") from None


def list_adapters() -> list[str]:
    """Names of the registered adapters, sorted.

    Examples:
        >>> from attnmm.adapters import list_adapters
        >>> "speech" in list_adapters()
        True
    """
    return sorted(_ADAPTERS)
