r"""One attention plan per forward: dispatch made once and shared by every layer attending under one mask."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from attnmm.attention._problem import Problem
from attnmm.attention.backends.base import Backend

#: The problem's derived values that depend on the mask and the sizes only (no tensor of the call), so a
#: later layer with the same mask and sizes can take them instead of working them out again.
_SHARED = ("_pairs", "forms", "structure", "row_counts", "blocks", "split")


@dataclass
class _Entry:
    backend: Backend
    derived: dict[str, Any]


class AttentionPlan:
    r"""What :func:`~attnmm.attend` decides for one forward, made once and shared by its layers.

    Every layer of an encoder attends under the same mask with the same sizes, so dispatch (every
    backend's checks, cost and memory estimates) and the mask's sparse form come out the same in each.
    A plan keeps, for each distinct problem of the forward, the backend chosen and the derived values
    of the mask (its pairs, structure, counts of allowed keys per query, blocks and their split), keyed by everything
    dispatch reads: the mask, the sizes (B, H, L, S, E, Ev), the dtype and device, whether a gradient
    flows, a bias, dropout, the score and whether weights are returned. The first layer makes the
    entry; the others take it.

    A plan lives for one forward (:class:`~attnmm.attention.Encoder` makes one per call and passes it
    down): it holds the mask it was made for, so the mask's identity is a safe key, and nothing
    outlives the forward. Without a plan, :func:`~attnmm.attend` dispatches on its own.

    Examples:
        >>> import torch
        >>> from attnmm import attend
        >>> from attnmm.attention import AttentionPlan
        >>> from attnmm.masks import Window
        >>> plan, mask = AttentionPlan(), Window(2, 0)
        >>> q = torch.randn(1, 2, 16, 8)  # (B, H, L, E)
        >>> for _ in range(3):  # three layers
        ...     q = attend(q, q, q, mask, plan=plan)
        >>> plan.made, plan.reused
        (1, 2)
    """

    def __init__(self) -> None:
        self._entries: dict[tuple[Any, ...], _Entry] = {}
        self._masks: list[Any] = []  # held: their ids stay unique while the plan lives
        self.made = 0
        self.reused = 0

    @staticmethod
    def _key(problem: Problem) -> tuple[Any, ...]:
        return (id(problem.mask), *problem.signature)

    def take(self, problem: Problem) -> Backend | None:
        """The backend chosen for an equal problem earlier in the forward, its derived values given to
        ``problem``; ``None`` when this is the first such problem."""
        entry = self._entries.get(self._key(problem))
        if entry is None:
            return None
        problem.__dict__.update(entry.derived)
        self.reused += 1
        return entry.backend

    def keep(self, problem: Problem, backend: Backend) -> None:
        """Remember ``backend`` and the derived values ``problem`` has worked out."""
        self._masks.append(problem.mask)
        derived = {name: problem.__dict__[name] for name in _SHARED if problem.__dict__.get(name) is not None}
        self._entries[self._key(problem)] = _Entry(backend, derived)
        self.made += 1

    def __repr__(self) -> str:
        return f"AttentionPlan(problems={len(self._entries)}, made={self.made}, reused={self.reused})"


__all__ = ["AttentionPlan"]
