"""The mask registry: the names of the built-in masks (and of any mask a user registers), so that
``list_masks()``, the tests parametrised over it and the docs read one list."""

from __future__ import annotations

from typing import TypeVar

from attnmm.masks.base import Mask

M = TypeVar("M", bound=type[Mask])

_MASKS: dict[str, type[Mask]] = {}


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
        ValueError: a mask named 'Window' is already registered (attnmm.masks.window.Window); rename the class
    """
    if not (isinstance(cls, type) and issubclass(cls, Mask)):
        raise TypeError(f"register_mask expects a Mask subclass, got {cls!r}")
    name = cls.__name__
    if name in _MASKS and _MASKS[name] is not cls:
        taken = _MASKS[name]
        raise ValueError(
            f"a mask named {name!r} is already registered ({taken.__module__}.{taken.__qualname__}); rename the class"
        )
    _MASKS[name] = cls
    return cls


def list_masks() -> list[str]:
    """Names of the registered masks, sorted: the built-in ones and any registered with
    :func:`register_mask` (used to parametrise tests).

    Examples:
        >>> from attnmm.masks import list_masks
        >>> list_masks()
        ['Causal', 'Chunk', 'Documents', 'Full', 'Graph', 'Grid', 'Padding', 'SameGraph', 'Segments', 'Window']
    """
    return sorted(_MASKS)
