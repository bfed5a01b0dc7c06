r"""The graph adapter: PyG ``Data``/``Batch`` -> node tokens (+ positional encodings) and a Graph mask."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor, nn

from attnmm._checks import check_nonneg_int
from attnmm.adapters._registry import register_adapter
from attnmm.adapters.base import Adapter, Tokens
from attnmm.common.categorical import CategoricalEncoder
from attnmm.masks import Graph, Mask, SameGraph
from attnmm.masks.graph_helpers import expander, graph_mask

PE = Literal["none", "laplacian", "random_walk"]


@dataclass
class GraphTokens(Tokens):
    """:class:`~attnmm.adapters.Tokens` of a graph batch, also carrying its edges for message passing.

    Attributes:
        edge_index (LongTensor, optional): the batch's edges (2, M), packed node indices.
        edge_attr (Tensor, optional): edge features (M, F_e).
    """

    edge_index: Tensor | None = None
    edge_attr: Tensor | None = None


@register_adapter("graph")
class GraphAdapter(Adapter):
    r"""Nodes of a PyG ``Data``/``Batch`` as tokens in the packed layout, attending along the edges.

    .. math::
        \mathbf{x}^{(0)}_i = \mathbf{W} \left[\mathbf{x}_i \,\|\, \mathbf{p}_i\right] + \mathbf{b},
        \qquad A(i) = \{j : (j \to i) \in \mathcal{E}\} \;(\cup \{i\})

    where :math:`\mathbf{p}_i` is an optional positional encoding
    (:func:`~attnmm.common.encodings.graph_encoding`; Laplacian eigenvectors get random signs in
    training, since an eigenvector's sign is arbitrary). An encoding already stored on the batch under
    :attr:`pe_attr` (e.g. by :class:`~attnmm.data.GraphDataModule` with ``pe``) is used as is; otherwise
    it is computed per graph of every batch.

    Categorical node features (atoms of a molecule: atomic number, chirality, ...) are embedded instead,
    one table per column, summed (:class:`~attnmm.nn.CategoricalEncoder`, OGB's atom encoder), and the
    encoding projected and added,
    :math:`\mathbf{x}^{(0)}_i = \sum_c \mathbf{E}_c[x_{ic}] + \mathbf{W}_p \mathbf{p}_i + \mathbf{b}`,
    when ``cardinalities`` are given; ``edge_cardinalities`` embed categorical edge features (bonds) the
    same way into ``GraphTokens.edge_attr`` (M, D), for local layers that read edge features (GINE).

    The mask (``scope``) is the batch's block-diagonal :class:`~attnmm.masks.Graph` of in-edges
    (``"edges"``, the attention of GNN layers), or every node of the same graph
    (``"graph"``, :class:`~attnmm.masks.SameGraph`: the global attention of graph transformers), or
    Exphormer's sparse global attention (``"expander"``, Shirzad et al., 2023): the in-edges,
    ``expander_degree`` random expander edges per node (:func:`~attnmm.masks.graph_helpers.expander`)
    and ``self_loops``. A graph's expander edges are drawn from a hash of its content (its size and node
    features) and each node's place in it, so a graph gets the same edges in every batch and epoch.

    Args:
        in_channels (int, optional): node feature width F (graphs without ``x`` get ones).
            (default: :obj:`16`)
        d_model (int, optional): token width D; ``None`` passes :math:`[\mathbf{x} \| \mathbf{p}]`
            through without a projection (D = F + pe_dim). (default: :obj:`64`)
        pe (str, optional): ``"none"``, ``"laplacian"`` or ``"random_walk"``. (default: :obj:`"none"`)
        pe_dim (int, optional): width of the positional encoding. (default: :obj:`8`)
        self_loops (bool, optional): let every node attend itself too (``scope="edges"``; a node always
            attends itself under ``"graph"``). (default: :obj:`True`)
        dropout (float, optional): dropout on the input features (on the embedded ones with
            ``cardinalities``) in training. (default: :obj:`0.0`)
        scope (str, optional): the mask, ``"edges"``, ``"graph"`` or ``"expander"``. (default: :obj:`"edges"`)
        cardinalities (list[int], optional): the category count of each of the F node feature columns,
            when ``x`` holds categories (long); ``None`` for float features. (default: :obj:`None`)
        edge_cardinalities (list[int], optional): the category count of each ``edge_attr`` column, to
            embed categorical edge features to width D; ``None`` passes ``edge_attr`` on as it is.
            (default: :obj:`None`)
        expander_degree (int, optional): even number of expander edges per node (``scope="expander"``).
            (default: :obj:`4`)

    Shapes:
        - **input:** a PyG ``Data`` or ``Batch`` with N nodes (``x`` (N, F) optional, ``edge_index`` (2, M),
          ``edge_attr`` (M, F_e) optional)
        - **output:** :class:`GraphTokens` with x (N, D), a Graph mask over N nodes, ``batch`` (N,)
          and the edges, ``edge_attr`` (M, D) with ``edge_cardinalities`` (the mask is a SameGraph
          under ``scope="graph"``)

    Examples:
        >>> adapter = GraphAdapter(in_channels=16, d_model=32, pe="random_walk", pe_dim=4)
        >>> tokens = adapter(GraphAdapter.example_batch(2))
        >>> tokens.x.shape[1], tokens.mask.num_dst == tokens.x.shape[0]
        (32, True)

        Atoms and bonds as categories (a molecule of 3 atoms, 2 bonds both ways):

        >>> import torch
        >>> from torch_geometric.data import Data
        >>> mol = Data(x=torch.tensor([[6, 0], [6, 0], [8, 1]]), edge_index=torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]]),
        ...            edge_attr=torch.tensor([[0], [0], [1], [1]]))
        >>> adapter = GraphAdapter(2, 32, cardinalities=[119, 2], edge_cardinalities=[4])
        >>> tokens = adapter(mol)
        >>> tokens.x.shape, tokens.edge_attr.shape
        (torch.Size([3, 32]), torch.Size([4, 32]))
    """

    def __init__(
        self, in_channels: int = 16, d_model: int | None = 64, pe: PE = "none", pe_dim: int = 8,
        self_loops: bool = True, dropout: float = 0.0, scope: Literal["edges", "graph", "expander"] = "edges",
        cardinalities: list[int] | None = None, edge_cardinalities: list[int] | None = None,
        expander_degree: int = 4,
    ) -> None:
        super().__init__()
        if scope not in ("edges", "graph", "expander"):
            raise ValueError(f"scope must be 'edges' (attend along in-edges), 'graph' (every node of the graph) or "
                             f"'expander' (in-edges and expander edges), got {scope!r}")
        if expander_degree < 2 or expander_degree % 2:
            raise ValueError(f"expander_degree must be even and >= 2, got {expander_degree}")
        self.scope, self.expander_degree = scope, expander_degree
        if pe not in ("none", "laplacian", "random_walk"):
            raise ValueError(f"pe must be 'none', 'laplacian' or 'random_walk', got {pe!r}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.in_channels = check_nonneg_int("in_channels", in_channels, minimum=1)
        self.pe = pe
        self.pe_dim = check_nonneg_int("pe_dim", pe_dim, minimum=1) if pe != "none" else 0
        self.self_loops = self_loops
        self.drop = nn.Dropout(dropout)
        width = self.in_channels + self.pe_dim
        self.proj: nn.Linear | None = None
        self.atoms: CategoricalEncoder | None = None
        self.bonds: CategoricalEncoder | None = None
        if (cardinalities is not None or edge_cardinalities is not None) and d_model is None:
            raise ValueError("categorical features (cardinalities, edge_cardinalities) are embedded to width d_model: "
                             "set d_model")
        if cardinalities is not None:
            if len(cardinalities) != self.in_channels:
                raise ValueError(
                    f"cardinalities gives {len(cardinalities)} columns but in_channels is {self.in_channels}: give "
                    "one category count per node feature column"
                )
            assert d_model is not None
            self.atoms = CategoricalEncoder(cardinalities, d_model)
            if self.pe_dim:
                self.proj = nn.Linear(self.pe_dim, d_model)  # the encoding, added to the embedded features
        elif d_model is not None:
            self.proj = nn.Linear(width, check_nonneg_int("d_model", d_model, minimum=1))
        if edge_cardinalities is not None:
            assert d_model is not None
            self.bonds = CategoricalEncoder(edge_cardinalities, d_model)
        self.out_dim = width if d_model is None else d_model
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for part in (self.proj, self.atoms, self.bonds):
            if part is not None:
                part.reset_parameters()

    @property
    def pe_attr(self) -> str:
        """Name of the batch attribute holding the encoding (``"laplacian_pe"`` or ``"random_walk_pe"``)."""
        return f"{self.pe}_pe"

    def transform(self) -> Any:
        """The PyG transform adding this adapter's encoding to a ``Data`` (``None`` without one); pass it
        as a dataset's ``pre_transform`` to compute the encodings once."""
        import torch_geometric.transforms as T

        if self.pe == "laplacian":
            return T.AddLaplacianEigenvectorPE(self.pe_dim, attr_name=self.pe_attr, is_undirected=True)
        if self.pe == "random_walk":
            return T.AddRandomWalkPE(self.pe_dim, attr_name=self.pe_attr)
        return None

    def encoding(self, batch: Any) -> Tensor:
        """The positional encoding (N, pe_dim) of ``batch``: stored, or computed per graph."""
        stored = getattr(batch, self.pe_attr, None)
        if stored is not None:
            if stored.dim() != 2 or stored.size(1) != self.pe_dim:
                raise ValueError(
                    f"the batch stores {self.pe_attr} of shape {tuple(stored.shape)} but the adapter's pe_dim is "
                    f"{self.pe_dim}: compute the data's encodings with the adapter's width (GraphDataModule's "
                    "pe_dim), or set pe_dim to theirs"
                )
            return stored.float()
        from attnmm.common.encodings import graph_encoding

        graphs = batch.to_data_list() if hasattr(batch, "to_data_list") else [batch]
        return torch.cat([graph_encoding(g, self.pe, self.pe_dim) for g in graphs])

    def forward(self, batch: Any) -> GraphTokens:
        if getattr(batch, "edge_index", None) is None or getattr(batch, "num_nodes", None) is None:
            raise ValueError(
                f"GraphAdapter reads a PyG Data or Batch with edge_index and num_nodes, got {type(batch).__name__}; "
                "build batches with torch_geometric.loader.DataLoader (or Batch.from_data_list)"
            )
        N = int(batch.num_nodes)
        x = getattr(batch, "x", None)
        device = batch.edge_index.device
        if x is None:
            x = torch.ones(N, self.in_channels, device=device)
        if x.dim() != 2 or x.size(1) != self.in_channels:
            raise ValueError(
                f"node features must be (N, in_channels) = ({N}, {self.in_channels}), got {tuple(x.shape)}; "
                "set in_channels to the dataset's feature width"
            )
        pe = None
        if self.pe != "none":
            pe = self.encoding(batch).to(device=device, dtype=torch.float)
            if self.pe == "laplacian" and self.training:
                pe = pe * (torch.randint(0, 2, (1, self.pe_dim), device=device) * 2 - 1)  # random signs
        if self.atoms is not None:  # categories: embedded, the encoding projected and added
            h = self.drop(self.atoms(x))  # (N, D)
            if pe is not None and self.proj is not None:
                h = h + self.proj(pe)
        else:
            x = x.float()
            h = self.drop(x if pe is None else torch.cat([x, pe], dim=-1))
            if self.proj is not None:
                h = self.proj(h)  # (N, D)
        graph = getattr(batch, "batch", None)
        if graph is None:
            graph = torch.zeros(N, dtype=torch.long, device=device)
        if self.scope == "graph":
            mask: Mask = SameGraph(graph)
        else:
            mask = edges = graph_mask(batch, self_loops=self.self_loops)
            if self.scope == "expander":  # the edges and the expander edges as one Graph (not a union): sparse path
                noise = _content_noise(x, graph, self.expander_degree // 2)
                extra = expander(N, self.expander_degree, graph, noise=noise).edge_index
                mask = Graph(torch.cat([edges.edge_index, extra], 1), N)
        edge_attr = getattr(batch, "edge_attr", None)
        if self.bonds is not None:
            if edge_attr is None:
                raise ValueError(
                    "edge_cardinalities embeds categorical edge features, but the batch has no edge_attr: give "
                    "edge_cardinalities=None for graphs without edge features"
                )
            edge_attr = self.bonds(edge_attr.view(edge_attr.size(0), -1))  # (M, D)
        return GraphTokens(h, mask, batch=graph, edge_index=batch.edge_index, edge_attr=edge_attr)

    @classmethod
    def example_batch(cls, batch_size: int = 2) -> Any:
        """A ``Batch`` of ``batch_size`` small random undirected graphs with 16 node features."""
        from torch_geometric.data import Batch, Data
        from torch_geometric.utils import to_undirected

        g = torch.Generator().manual_seed(0)
        graphs = []
        for i in range(batch_size):
            n = 6 + i
            edges = torch.randint(0, n, (2, 2 * n), generator=g)
            edges = to_undirected(edges[:, edges[0] != edges[1]], num_nodes=n)
            graphs.append(Data(x=torch.randn(n, 16, generator=g), edge_index=edges, y=torch.tensor([i % 2])))
        return Batch.from_data_list(graphs)


def _mix(h: Tensor) -> Tensor:
    for m in (0x5851F42D4C957F2D, 0x14057B7EF767814F):  # multiply and xor-shift rounds (int64 wraps)
        h = (h ^ (h >> 29)) * m
    return h ^ (h >> 32)


def _content_noise(x: Tensor, graph: Tensor, draws: int) -> Tensor:
    """(draws, N) values in [0, 1) hashed from each node's graph (its size and node features, placed) and its
    place in that graph, so the same in any batch (nodes grouped by graph, as PyG batches them)."""
    counts = torch.bincount(graph)
    place = torch.arange(graph.numel(), device=graph.device) - (counts.cumsum(0) - counts)[graph]
    feats = (x.float().contiguous().view(torch.int32) if x.is_floating_point() else x).long().view(x.size(0), -1)
    node = _mix((feats * torch.arange(1, feats.size(1) + 1, device=x.device)).sum(1) * 1_000_003 + place * 7919)
    key = _mix(torch.zeros_like(counts).index_add_(0, graph, node) + counts)[graph]
    h = torch.stack([_mix(key + _mix(place + (k << 40))) for k in range(1, draws + 1)])
    return (h & ((1 << 52) - 1)).double() / float(1 << 52)


__all__ = ["GraphAdapter", "GraphTokens"]
