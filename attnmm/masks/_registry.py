"""The mask registry: the names of the built-in masks (and of any mask a user registers), so that
``list_masks()``, the tests parametrised over it and the docs read one list (the contract of
:class:`attnmm._registry.Registry`)."""

from __future__ import annotations

from typing import TypeVar

from attnmm._registry import Registry
from attnmm.masks.base import Mask

M = TypeVar("M", bound=type[Mask])


def _check(cls: object) -> None:
    if not (isinstance(cls, type) and issubclass(cls, Mask)):
        raise TypeError(f"register_mask expects a Mask subclass, got {cls!r}")


MASKS: Registry[type[Mask]] = Registry("mask", _check)


def register_mask(cls: M) -> M:
    """Class decorator registering a :class:`~attnmm.masks.Mask` subclass under its class name; a
    taken name is refused.

    Examples:
        >>> from attnmm.masks import Mask, register_mask
        >>> @register_mask
        ... class Window(Mask):
        ...     pass
        Traceback (most recent call last):
        ...
        ValueError: a mask named 'Window' is already registered (attnmm.masks.window.Window); pick another name
    """
    MASKS.register(getattr(cls, "__name__", ""), cls)
    return cls


def get_mask(name: str) -> type[Mask]:
    """The mask class registered as ``name`` (an unknown name's error lists the registered ones).

    Examples:
        >>> from attnmm.masks import get_mask
        >>> get_mask("Window")(2, 0)
        Window(left=2, right=0)
    """
    return MASKS.get(name)


def list_masks() -> list[str]:
    """Names of the registered masks, sorted: the built-in ones and any registered with
    :func:`register_mask` (used to parametrise tests).

    Examples:
        >>> from attnmm.masks import list_masks
        >>> list_masks()
        ['Causal', 'Chunk', 'Documents', 'Full', 'Graph', 'Grid', 'Padding', 'SameGraph', 'Segments', 'Window']
    """
    return MASKS.names()
