"""Compositions of masks: ``&``, ``|`` and ``~`` (defined with the base type in :mod:`attnmm.masks.base`)."""

from attnmm.masks.base import And, Intersection, Not, Or, intersect

__all__ = ["And", "Intersection", "Not", "Or", "intersect"]
