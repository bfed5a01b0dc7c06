"""The backend interface of the attention core."""

from __future__ import annotations

from abc import ABC, abstractmethod

from torch import Tensor

from attnmm.attention._problem import Problem


class Backend(ABC):
    """One way to compute :func:`attnmm.attend`.

    A backend says whether it can compute a problem (:meth:`unsupported`) and computes it
    (:meth:`forward`), returning the output (B, H, L, Ev) and, when ``problem.return_weights``, the
    weights (P, H) at ``problem.weight_pairs()``. Every backend must equal
    :class:`~attnmm.attention.backends.reference.ReferenceBackend` in values and gradients.
    """

    name: str = ""

    @abstractmethod
    def unsupported(self, problem: Problem) -> str | None:
        """``None`` if this backend computes ``problem``, else the reason it does not."""

    @abstractmethod
    def forward(self, problem: Problem) -> tuple[Tensor, Tensor | None]:
        """Output (B, H, L, Ev) and weights (P, H) or ``None``."""
