r"""The full mask: every query attends every key (defined with the base type in :mod:`attnmm.masks.base`, as
the unit of its algebra)."""

from attnmm.masks._registry import register_mask
from attnmm.masks.base import Full

register_mask(Full)

__all__ = ["Full"]
