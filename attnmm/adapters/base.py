r"""The :class:`Adapter` base class: one modality's raw batch in, tokens and their mask out."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from torch import nn

from attnmm.common.tokens import Tokens


class Adapter(nn.Module, ABC):
    r"""Turns a raw batch of one modality into :class:`Tokens` :math:`(\mathbf{X}, A)`: features
    :math:`\mathbf{X}` of width :attr:`out_dim` and the allowed set :math:`A` they attend under.

    Subclasses implement :meth:`forward`. They are passed into models as constructor arguments
    (LightningCLI picks them by ``class_path``) and registered by name with
    :func:`~attnmm.adapters.register_adapter`, which drives the parametrised adapter tests through
    :meth:`example_batch`.

    Attributes:
        out_dim (int): width D of the produced tokens.
    """

    out_dim: int

    @abstractmethod
    def forward(self, batch: Any) -> Tokens:
        """Tokens and mask of ``batch``."""

    @classmethod
    def example_batch(cls, batch_size: int = 2) -> Any:
        """A small random batch this adapter accepts (for tests and docs)."""
        raise NotImplementedError(f"{cls.__name__} does not provide an example batch")
