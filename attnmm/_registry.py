"""One registry contract for every kind of named part: masks, adapters and attention backends.

A :class:`Registry` maps names to values of one kind. Registering a name that is taken by another value
is refused, naming what holds it; registering the same value again (a module imported twice) is a no-op.
Looking up an unknown name raises :class:`UnknownName`, which lists the registered names; it is both a
``KeyError`` and a ``ValueError``, so either handler catches it. :meth:`Registry.names` lists the names
sorted (tests parametrise over them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class UnknownName(KeyError, ValueError):  # noqa: N818 - the name says what is wrong
    """A name no registry entry has; the message lists the registered names."""

    def __str__(self) -> str:  # (KeyError would show the message quoted)
        return str(self.args[0]) if self.args else ""


def _describe(value: object) -> str:
    cls = value if isinstance(value, type) else type(value)
    return f"{cls.__module__}.{cls.__qualname__}"


class Registry(Generic[T]):
    """Names to values of one ``kind`` (``"mask"``, ``"adapter"``, ``"backend"``).

    Args:
        kind (str): what the values are, for messages.
        check (Callable, optional): raises ``TypeError`` for a value of the wrong kind.
            (default: :obj:`None`)
        also (tuple[str, ...], optional): names the caller accepts besides the registered ones (e.g.
            ``"auto"`` for backends), listed first in the error of an unknown name. (default: ``()``)
        same (Callable, optional): whether a value registered again under its name is the registered
            one (e.g. another instance of a backend's class, from a module run twice).
            (default: :obj:`None`, the very same object)

    Examples:
        >>> colours = Registry("colour")
        >>> colours.register("red", 1)
        1
        >>> colours.register("red", 2)
        Traceback (most recent call last):
        ...
        ValueError: a colour named 'red' is already registered (builtins.int); pick another name
        >>> colours.get("blue")
        Traceback (most recent call last):
        ...
        attnmm._registry.UnknownName: unknown colour 'blue'; registered: 'red'
    """

    def __init__(
        self, kind: str, check: Callable[[object], None] | None = None, also: tuple[str, ...] = (),
        same: Callable[[T, T], bool] | None = None,
    ) -> None:
        self.kind, self._check, self._also, self._same = kind, check, also, same
        self._entries: dict[str, T] = {}
        #: How many times the registered set changed (for callers that keep what they derived from it).
        self.generation = 0

    def register(self, name: str, value: T) -> T:
        """Register ``value`` as ``name`` and return it."""
        if self._check is not None:
            self._check(value)
        if not isinstance(name, str) or not name:
            raise ValueError(f"a {self.kind} needs a non-empty name, got {name!r}")
        taken = self._entries.get(name)
        if taken is not None and taken is not value and not (self._same is not None and self._same(taken, value)):
            article = "an" if self.kind[0] in "aeiou" else "a"
            raise ValueError(
                f"{article} {self.kind} named {name!r} is already registered ({_describe(taken)}); pick another name"
            )
        if name not in self._entries:
            self._entries[name] = value
            self.generation += 1
        return self._entries[name]

    def unregister(self, name: str) -> T:
        """Remove ``name`` and return its value."""
        value = self.get(name)
        del self._entries[name]
        self.generation += 1
        return value

    def get(self, name: str) -> T:
        """The value registered as ``name``."""
        try:
            return self._entries[name]
        except KeyError:
            known = ", ".join(map(repr, [*self._also, *self.names()])) or "none"
            raise UnknownName(f"unknown {self.kind} {name!r}; registered: {known}") from None

    def names(self) -> list[str]:
        """The registered names, sorted."""
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries


__all__ = ["Registry", "UnknownName"]
