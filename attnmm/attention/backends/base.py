"""The backend interface of the attention core."""

from __future__ import annotations

from abc import ABC, abstractmethod

from torch import Tensor

from attnmm.attention._memory import PAIR_BYTES, compute_bytes, max_pairs, output_bytes
from attnmm.attention._problem import Problem


class Backend(ABC):
    """One way to compute :func:`attnmm.attend`.

    A backend says whether it can compute a problem (:meth:`unsupported`) and computes it
    (:meth:`forward`), returning the output (B, H, L, Ev) and, when ``problem.return_weights``, the
    weights (P, H) at ``problem.weight_pairs()``. Every backend must equal
    :class:`~attnmm.attention.backends.reference.ReferenceBackend` in values and gradients.
    """

    name: str = ""

    #: What to change when :meth:`memory_bytes` exceeds the memory available.
    memory_hint: str = "use a sparser mask (fewer allowed pairs), a smaller batch, or fewer heads"

    @abstractmethod
    def unsupported(self, problem: Problem) -> str | None:
        """``None`` if this backend computes ``problem``, else the reason it does not."""

    @abstractmethod
    def forward(self, problem: Problem) -> tuple[Tensor, Tensor | None]:
        """Output (B, H, L, Ev) and weights (P, H) or ``None``."""

    def memory_bytes(self, problem: Problem) -> int:
        """Estimated bytes this backend allocates for ``problem`` (working memory and the output),
        checked by :func:`~attnmm.attend` against the memory available before anything is computed.

        The default is the sparse kernel's cost, O(nnz * H): the allowed pairs repeated over the
        batch, their CSR pattern per head (three indices) and about eight per-pair values per head
        (scores, weights and their gradients); 0 when the mask cannot bound its pair count.
        Problems whose :func:`~attnmm.attention._memory.ceiling_bytes` (1 KiB per score) is small are
        not asked.
        """
        pairs = max_pairs(problem)
        if pairs is None:
            return 0
        if problem.batch_size is None:
            pairs *= problem.B  # the pattern repeats an unbatched mask's pairs for every batch item
        per_pair = PAIR_BYTES + 8 + problem.H * (16 + 8 * compute_bytes(problem.q.dtype))
        return pairs * per_pair + output_bytes(problem)
