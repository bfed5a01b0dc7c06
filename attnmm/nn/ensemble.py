r"""The former spelling of a deep ensemble's size: ensembles are :class:`attnmm.lightning.Ensemble` now, a
wrapper around a task (``Ensemble(task, size)``; in a recipe, the ``ensemble:`` key)."""

from __future__ import annotations

import warnings

from torch import nn

from attnmm._checks import check_nonneg_int


class Ensemble(nn.Module):
    r"""Deprecated: the size of a deep ensemble, as the task once took it (``ensemble=Ensemble(2)``).

    Wrap the task instead, ``attnmm.lightning.Ensemble(task, size)`` (``--ensemble 2`` in a recipe);
    ``ClassificationTask.load_from_checkpoint`` reads an ensemble run's checkpoint without it.

    Args:
        size (int, optional): number of models n, >= 2. (default: :obj:`2`)
    """

    def __init__(self, size: int = 2) -> None:
        super().__init__()
        warnings.warn("attnmm.nn.Ensemble is deprecated: wrap the task, attnmm.lightning.Ensemble(task, size) "
                      "(in a recipe, --ensemble N)", DeprecationWarning, stacklevel=2)
        self.size = check_nonneg_int("size", size, minimum=2)


__all__ = ["Ensemble"]
