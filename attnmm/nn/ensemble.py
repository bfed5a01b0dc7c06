"""The former spelling of a deep ensemble's size (ensembles wrap a task now: ``attnmm.lightning.Ensemble``)."""

from __future__ import annotations

import warnings

from torch import nn

from attnmm._checks import check_nonneg_int


class Ensemble(nn.Module):
    """Deprecated: the ``size`` of a deep ensemble, as the task once took it; wrap the task instead,
    ``attnmm.lightning.Ensemble(task, size)`` (``--ensemble N`` in a recipe)."""

    def __init__(self, size: int = 2) -> None:
        super().__init__()
        warnings.warn("attnmm.nn.Ensemble is deprecated: wrap the task, attnmm.lightning.Ensemble(task, size)",
                      DeprecationWarning, stacklevel=2)
        self.size = check_nonneg_int("size", size, minimum=2)


__all__ = ["Ensemble"]
