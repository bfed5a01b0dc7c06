r"""The graph adapter: PyG ``Data``/``Batch`` -> node tokens (+ positional encodings) and a Graph mask."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor, nn

from attnmm._checks import check_nonneg_int
from attnmm.adapters._registry import register_adapter
from attnmm.adapters.base import Adapter, Tokens
from attnmm.masks import SameGraph
from attnmm.masks.graph_helpers import graph_mask

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

    where :math:`\mathbf{p}_i` is an optional positional encoding computed with PyG's transforms:
    the ``pe_dim`` Laplacian eigenvectors of smallest non-trivial eigenvalue (``"laplacian"``,
    ``AddLaplacianEigenvectorPE``; their signs are flipped at random in training, since an eigenvector's
    sign is arbitrary) or the random-walk return probabilities of 1 to ``pe_dim`` steps
    (``"random_walk"``, ``AddRandomWalkPE``). An encoding already stored on the batch under
    :attr:`pe_attr` (e.g. by a dataset transform) is used as is; otherwise it is computed per graph.
    The mask (``scope``) is the batch's block-diagonal :class:`~attnmm.masks.Graph` of in-edges
    (``"edges"``, the attention of GNN layers), or every node of the same graph
    (``"graph"``, :class:`~attnmm.masks.SameGraph`: the global attention of graph transformers).

    Args:
        in_channels (int, optional): node feature width F (graphs without ``x`` get ones).
            (default: :obj:`16`)
        d_model (int, optional): token width D; ``None`` passes :math:`[\mathbf{x} \| \mathbf{p}]`
            through without a projection (D = F + pe_dim). (default: :obj:`64`)
        pe (str, optional): ``"none"``, ``"laplacian"`` or ``"random_walk"``. (default: :obj:`"none"`)
        pe_dim (int, optional): width of the positional encoding. (default: :obj:`8`)
        self_loops (bool, optional): let every node attend itself too (``scope="edges"``; a node always
            attends itself under ``"graph"``). (default: :obj:`True`)
        scope (str, optional): the mask, ``"edges"`` or ``"graph"``. (default: :obj:`"edges"`)
        dropout (float, optional): dropout on the input features in training. (default: :obj:`0.0`)

    Shapes:
        - **input:** a PyG ``Data`` or ``Batch`` with N nodes (``x`` (N, F) optional, ``edge_index`` (2, M))
        - **output:** :class:`GraphTokens` with x (N, D), a Graph mask over N nodes, ``batch`` (N,)
          and the edges (the mask is a SameGraph under ``scope="graph"``)

    Examples:
        >>> adapter = GraphAdapter(in_channels=16, d_model=32, pe="random_walk", pe_dim=4)
        >>> tokens = adapter(GraphAdapter.example_batch(2))
        >>> tokens.x.shape[1], tokens.mask.num_dst == tokens.x.shape[0]
        (32, True)
    """

    def __init__(
        self,
        in_channels: int = 16,
        d_model: int | None = 64,
        pe: PE = "none",
        pe_dim: int = 8,
        self_loops: bool = True,
        dropout: float = 0.0,
        scope: Literal["edges", "graph"] = "edges",
    ) -> None:
        super().__init__()
        if scope not in ("edges", "graph"):
            raise ValueError(
                f"scope must be 'edges' (attend along in-edges) or 'graph' (every node of the graph), got {scope!r}"
            )
        self.scope = scope
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
        if d_model is not None:
            self.proj = nn.Linear(width, check_nonneg_int("d_model", d_model, minimum=1))
        self.out_dim = width if d_model is None else d_model
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.proj is not None:
            self.proj.reset_parameters()

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
            return stored
        transform = self.transform()
        graphs = batch.to_data_list() if hasattr(batch, "to_data_list") else [batch]
        parts = []
        for g in graphs:
            g = g.clone()
            n = int(g.num_nodes)
            if self.pe == "laplacian" and n <= self.pe_dim:  # too small for pe_dim eigenvectors: pad with zeros
                parts.append(torch.zeros(n, self.pe_dim, device=g.edge_index.device))
                continue
            parts.append(getattr(transform(g), self.pe_attr))
        return torch.cat(parts).float()

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
        x = x.float()
        if self.pe != "none":
            pe = self.encoding(batch).to(x)
            if self.pe == "laplacian" and self.training:
                pe = pe * (torch.randint(0, 2, (1, self.pe_dim), device=device) * 2 - 1)  # random signs
            x = torch.cat([x, pe], dim=-1)
        h = self.drop(x)
        if self.proj is not None:
            h = self.proj(h)  # (N, D)
        graph = getattr(batch, "batch", None)
        if graph is None:
            graph = torch.zeros(N, dtype=torch.long, device=device)
        mask = SameGraph(graph) if self.scope == "graph" else graph_mask(batch, self_loops=self.self_loops)
        return GraphTokens(
            h,
            mask,
            batch=graph,
            edge_index=batch.edge_index,
            edge_attr=getattr(batch, "edge_attr", None),
        )

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


__all__ = ["GraphAdapter", "GraphTokens"]
