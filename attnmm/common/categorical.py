r"""Categorical features as one vector: an embedding per column, summed (OGB's atom and bond encoders)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from attnmm._checks import check_nonneg_int


class CategoricalEncoder(nn.Module):
    r"""Embeds rows of categorical features, one embedding table per column, and sums the columns,

    .. math::
        \mathbf{h}_i = \sum_{c=1}^{F} \mathbf{E}_c[x_{ic}], \qquad \mathbf{E}_c \in \mathbb{R}^{K_c \times D},

    the atom and bond encoders of the Open Graph Benchmark (Hu et al., 2020) that molecular graph models
    (LRGB's Peptides-func among them) take their node and edge features through. The sum equals a linear
    layer on the concatenated one-hot columns, without building them. Tables are initialised as OGB's
    (Xavier uniform).

    Args:
        cardinalities (list[int]): the number of categories :math:`K_c` of each of the F columns
            (e.g. :attr:`GraphDataModule.feature_cardinalities <attnmm.data.GraphDataModule.feature_cardinalities>`).
        d_model (int): output width D.

    Shapes:
        - **input:** x (N, F) integer categories, column c in 0 to :math:`K_c - 1`
        - **output:** (N, D)

    Examples:
        >>> import torch
        >>> atoms = CategoricalEncoder([119, 4, 2], d_model=16)  # atomic number, chirality, aromatic
        >>> atoms(torch.tensor([[6, 0, 1], [8, 0, 0]])).shape
        torch.Size([2, 16])
        >>> atoms
        CategoricalEncoder([119, 4, 2], d_model=16)
    """

    offsets: Tensor

    def __init__(self, cardinalities: Sequence[int], d_model: int) -> None:
        super().__init__()
        if isinstance(cardinalities, int | str) or not len(cardinalities):
            raise ValueError(f"cardinalities must be a non-empty list of category counts, one per column, got "
                             f"{cardinalities!r}")
        self.cardinalities = [
            check_nonneg_int(f"cardinalities[{c}]", k, minimum=1) for c, k in enumerate(cardinalities)
        ]
        self.d_model = check_nonneg_int("d_model", d_model, minimum=1)
        self.embeddings = nn.ModuleList(nn.Embedding(k, self.d_model) for k in self.cardinalities)
        # the tables as one, each column's ids shifted past the tables before it
        self.register_buffer("offsets", torch.tensor([0, *self.cardinalities[:-1]]).cumsum(0), persistent=False)
        self.reset_parameters()

    def _tables(self) -> list[nn.Embedding]:
        return [e for e in self.embeddings if isinstance(e, nn.Embedding)]

    def reset_parameters(self) -> None:
        for embedding in self._tables():
            nn.init.xavier_uniform_(embedding.weight)

    def forward(self, x: Tensor) -> Tensor:
        F = len(self.cardinalities)
        if x.dim() != 2 or x.size(1) != F or x.is_floating_point():
            raise ValueError(
                f"CategoricalEncoder takes integer categories of shape (N, F) = (N, {F}), one column per "
                f"cardinality, got {x.dtype} {tuple(x.shape)}; float features take a linear layer instead"
            )
        x = x.long()
        if x.numel():
            low, high = x.amin(0), x.amax(0)
            bad = ((low < 0) | (high >= torch.tensor(self.cardinalities, device=x.device))).nonzero()
            if bad.numel():
                c = int(bad[0])
                raise ValueError(
                    f"column {c} holds categories {int(low[c])} to {int(high[c])}, but its table has "
                    f"{self.cardinalities[c]} (0 to {self.cardinalities[c] - 1}): give the data's category counts "
                    "as cardinalities"
                )
        weight = torch.cat([e.weight for e in self._tables()])  # (sum K_c, D)
        ids = x + self.offsets  # (N, F): ids into the joined tables
        return nn.functional.embedding_bag(ids, weight, mode="sum")  # (N, D): each row's F vectors summed

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.cardinalities}, d_model={self.d_model})"


__all__ = ["CategoricalEncoder"]
