r"""The Planetoid citation graphs (Cora, CiteSeer, PubMed) for full-batch node classification."""

from __future__ import annotations

from attnmm.data.nodes import PLANETOID_NAMES, RAW_PARTS, NodeDataModule

#: The Planetoid graphs.
NAMES = PLANETOID_NAMES

__all__ = ["NAMES", "RAW_PARTS", "PlanetoidDataModule"]


class PlanetoidDataModule(NodeDataModule):
    r"""A Planetoid citation graph (Yang et al., 2016) as one full batch: :class:`~attnmm.data.NodeDataModule`
    restricted to Cora, CiteSeer and PubMed (``NodeDataModule`` also reads Actor). Every step sees the
    whole graph, and the split is given by its ``train_mask``, ``val_mask`` and ``test_mask``; raw files
    are read from ``<root>/planetoid/<name>/raw`` and processed in a writable copy. Arguments as
    :class:`~attnmm.data.NodeDataModule`'s.

    Examples:
        >>> dm = PlanetoidDataModule(root="/data", name="CiteSeer")
        >>> dm
        PlanetoidDataModule(name='CiteSeer', root='/data/planetoid', split='public')
    """

    names = PLANETOID_NAMES
