"""A mask seen from an offset (defined with the base type in :mod:`attnmm.masks.base`)."""

from attnmm.masks.base import Shifted, ShiftedInterval

__all__ = ["Shifted", "ShiftedInterval"]
