r"""Deep ensembles: several independently initialised copies of a model, trained side by side on the
same batches and predicting together."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from copy import deepcopy

import torch
from torch import Tensor, nn

from attnmm._checks import check_nonneg_int


class Ensemble(nn.Module):
    r"""The extra members of a deep ensemble of ``size`` models, and how they predict together.

    A task injects it (``ClassificationTask(..., ensemble=Ensemble(2))``, in YAML by ``class_path``) and
    hands it its own parts with :meth:`build`; the ensemble then holds ``size - 1`` deep copies of
    them, each initialised afresh (every submodule's ``reset_parameters``), as :attr:`members`. The
    task's own parts are the first member. Each member trains on its own loss (the task minimises
    their mean), and the ensemble predicts with :meth:`combine`, the log of the members' mean
    probabilities,

    .. math::
        \log \frac{1}{n} \sum_{k=1}^{n} \mathrm{softmax}(\mathbf{z}_k).

    It costs ``size`` times the compute, the simplest way to buy accuracy with time (a few tenths of a
    point in tagging).

    Args:
        size (int, optional): number of models n, >= 2. (default: :obj:`2`)

    Examples:
        >>> import torch
        >>> ensemble = Ensemble(3)
        >>> ensemble.build({"head": torch.nn.Linear(4, 2)})
        >>> len(ensemble.members), ensemble.members[0]["head"].out_features
        (2, 2)
        >>> Ensemble.combine([torch.zeros(1, 2), torch.zeros(1, 2)]).exp()
        tensor([[0.5000, 0.5000]])
    """

    def __init__(self, size: int = 2) -> None:
        super().__init__()
        self.size = check_nonneg_int("size", size, minimum=2)
        self.members = nn.ModuleList()

    def build(self, parts: Mapping[str, nn.Module | None]) -> None:
        """Make the ``size - 1`` extra members: fresh copies of ``parts`` (a task's adapter, encoder,
        head, ...; ``None`` entries stay ``None``), each a :class:`~torch.nn.ModuleDict` with the same keys."""
        if len(self.members):
            raise RuntimeError("this Ensemble already holds its members; give each task its own Ensemble")
        template = nn.ModuleDict(dict(parts))
        for _ in range(self.size - 1):
            copy = deepcopy(template)
            for sub in copy.modules():
                reset = getattr(sub, "reset_parameters", None)
                if callable(reset):
                    reset()
            self.members.append(copy)

    @staticmethod
    def combine(logits: Sequence[Tensor]) -> Tensor:
        """``log(mean_k softmax(logits_k))``, computed stably in float32."""
        logp = torch.stack([x.float().log_softmax(-1) for x in logits])
        return torch.logsumexp(logp, 0) - math.log(len(logits))

    def extra_repr(self) -> str:
        return f"size={self.size}"


__all__ = ["Ensemble"]
