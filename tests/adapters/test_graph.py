"""The graph adapter: tokens, masks and positional encodings of PyG batches."""

from __future__ import annotations

import pytest
import torch

from attnmm.adapters import GraphAdapter, GraphTokens
from attnmm.masks import Graph


def test_tokens_of_a_batch() -> None:
    batch = GraphAdapter.example_batch(3)
    tokens = GraphAdapter(in_channels=16, d_model=24).eval()(batch)
    assert isinstance(tokens, GraphTokens) and isinstance(tokens.mask, Graph)
    assert tokens.x.shape == (batch.num_nodes, 24)
    assert torch.equal(tokens.batch, batch.batch) and tokens.edge_index is batch.edge_index
    dense = tokens.mask.dense(batch.num_nodes)
    assert dense.diagonal().all()  # self loops
    assert not (dense & (batch.batch.view(-1, 1) != batch.batch.view(1, -1))).any()  # block-diagonal


@pytest.mark.parametrize("pe", ["laplacian", "random_walk"])
def test_positional_encodings_match_pyg_transforms(pe: str) -> None:
    batch = GraphAdapter.example_batch(2)
    adapter = GraphAdapter(in_channels=16, d_model=None, pe=pe, pe_dim=3).eval()
    tokens = adapter(batch)
    assert tokens.x.shape == (batch.num_nodes, 16 + 3) and adapter.out_dim == 19
    first = batch.to_data_list()[0]
    want = getattr(adapter.transform()(first.clone()), adapter.pe_attr)
    n = first.num_nodes
    if pe == "random_walk":
        torch.testing.assert_close(tokens.x[:n, 16:], want)
    else:  # eigenvectors are defined up to sign
        torch.testing.assert_close(tokens.x[:n, 16:].abs(), want.abs(), atol=1e-5, rtol=1e-4)


def test_stored_encoding_is_used() -> None:
    batch = GraphAdapter.example_batch(2)
    batch.random_walk_pe = torch.full((batch.num_nodes, 2), 7.0)
    tokens = GraphAdapter(in_channels=16, d_model=None, pe="random_walk", pe_dim=2)(batch)
    assert bool((tokens.x[:, 16:] == 7.0).all())


def test_graphs_without_features_and_errors() -> None:
    from torch_geometric.data import Data

    data = Data(edge_index=torch.tensor([[0, 1], [1, 2]]), num_nodes=3)
    tokens = GraphAdapter(in_channels=1, d_model=8, self_loops=False)(data)
    assert tokens.x.shape == (3, 8) and tokens.mask.num_edges == 2
    with pytest.raises(ValueError, match=r"node features must be \(N, in_channels\) = \(3, 4\)"):
        GraphAdapter(in_channels=4)(Data(x=torch.ones(3, 2), edge_index=data.edge_index))
    with pytest.raises(ValueError, match="pe must be"):
        GraphAdapter(pe="spectral")  # type: ignore[arg-type]


def test_scope_graph_attends_every_node_of_the_graph() -> None:
    from attnmm.masks import SameGraph

    batch = GraphAdapter.example_batch(3)
    tokens = GraphAdapter(in_channels=16, d_model=8, scope="graph")(batch)
    assert isinstance(tokens.mask, SameGraph)
    same = batch.batch.view(-1, 1) == batch.batch.view(1, -1)
    assert torch.equal(tokens.mask.dense(batch.num_nodes, batch.num_nodes), same)
    with pytest.raises(ValueError, match="scope must be 'edges'"):
        GraphAdapter(scope="nodes")  # type: ignore[arg-type]


def _peptides(sizes: list[int], seed: int = 0) -> list:
    from torch_geometric.data import Data

    g = torch.Generator().manual_seed(seed)
    return [Data(x=torch.randint(0, 9, (n, 9), generator=g), edge_index=torch.tensor([[0, 1], [1, 0]]), num_nodes=n)
            for n in sizes]


def test_scope_expander_is_edges_expander_edges_and_self_loops() -> None:
    from torch_geometric.data import Batch

    from attnmm.adapters.graph import _content_noise
    from attnmm.masks.graph_helpers import expander, self_loops

    batch = Batch.from_data_list(_peptides([4, 7, 5]))
    N = batch.num_nodes
    adapter = GraphAdapter(9, 16, cardinalities=[9] * 9, scope="expander", expander_degree=4)
    tokens = adapter(batch)
    extra = expander(N, 4, batch.batch, noise=_content_noise(batch.x, batch.batch, 2))
    want = Graph(batch.edge_index, N) | extra | self_loops(N)
    assert isinstance(tokens.mask, Graph)  # one Graph, not a union
    assert torch.equal(tokens.mask.dense(N, N), want.dense(N, N))
    assert torch.equal(batch.batch[extra.edge_index[0]], batch.batch[extra.edge_index[1]])  # inside each graph
    for row in extra.edge_index:  # two permutations both ways: every node 4 times as source and as target
        assert torch.equal(torch.bincount(row, minlength=N), torch.full((N,), 4))
    assert torch.equal(tokens.x, adapter(batch).x) and tokens.x.shape == (N, 16)
    with pytest.raises(ValueError, match="even"):
        GraphAdapter(9, 16, scope="expander", expander_degree=3)
    with pytest.raises(ValueError, match=r"noise must be \(degree // 2, num_nodes\) = \(2, 16\)"):
        expander(N, 4, batch.batch, noise=torch.zeros(1, N))


def test_scope_expander_draws_each_graphs_edges_once() -> None:
    from torch_geometric.data import Batch

    graphs = _peptides([4, 7, 5, 6])
    adapter = GraphAdapter(9, 8, cardinalities=[9] * 9, scope="expander", expander_degree=2)

    def local(order: list[int]) -> dict[int, set[tuple[int, int]]]:
        """Each graph's allowed pairs, in its own numbering, in a batch of ``order``."""
        batch = Batch.from_data_list([graphs[i] for i in order])
        pairs = adapter(batch).mask.pairs(batch.num_nodes, batch.num_nodes)
        out: dict[int, set[tuple[int, int]]] = {i: set() for i in order}
        for q, k in zip(pairs.row.tolist(), pairs.col.tolist()):
            assert batch.batch[q] == batch.batch[k]  # inside each graph
            first = int(batch.ptr[batch.batch[q]])
            out[order[int(batch.batch[q])]].add((q - first, k - first))
        return out

    first, again = local([0, 1, 2, 3]), local([2, 3, 0])  # another batch, other places, one graph left out
    assert all(again[i] == first[i] for i in again)
    edges = {(int(s), int(t)) for s, t in graphs[1].edge_index.t()}
    assert {(t, s) for s, t in edges} | {(i, i) for i in range(7)} < first[1]  # and expander edges beyond
    other = GraphAdapter(9, 8, cardinalities=[9] * 9, scope="expander", expander_degree=4)
    batch = Batch.from_data_list(graphs)
    assert other(batch).mask.num_edges > adapter(batch).mask.num_edges  # a higher degree, more edges


def test_a_batch_without_edges_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="GraphAdapter reads a PyG Data or Batch with edge_index"):
        GraphAdapter(in_channels=16)({"x": torch.randn(3, 16)})


def _molecule() -> object:
    from torch_geometric.data import Data

    return Data(x=torch.tensor([[6, 0], [6, 1], [8, 0]]), edge_index=torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]]),
                edge_attr=torch.tensor([[0, 1], [0, 1], [2, 0], [2, 0]]))


def test_categorical_atoms_and_bonds_are_embedded() -> None:
    """Atoms: the sum of one embedding per column, the encoding projected and added; bonds: embedded the
    same way into tokens.edge_attr (M, D)."""
    mol = _molecule()
    adapter = GraphAdapter(2, 8, pe="random_walk", pe_dim=3, cardinalities=[10, 2], edge_cardinalities=[3, 2]).eval()
    tokens = adapter(mol)
    assert adapter.atoms is not None and adapter.bonds is not None and adapter.proj is not None
    pe = adapter.encoding(mol)
    torch.testing.assert_close(tokens.x, adapter.atoms(mol.x) + adapter.proj(pe))
    torch.testing.assert_close(tokens.edge_attr, adapter.bonds(mol.edge_attr))
    assert tokens.edge_attr.shape == (4, 8)
    plain = GraphAdapter(2, 8, cardinalities=[10, 2])(mol)  # no encoding: the embeddings alone
    assert plain.x.shape == (3, 8) and plain.edge_attr is mol.edge_attr  # bonds passed on as they are


def test_categorical_errors() -> None:
    from torch_geometric.data import Data

    with pytest.raises(ValueError, match="cardinalities gives 3 columns but in_channels is 2"):
        GraphAdapter(2, 8, cardinalities=[10, 2, 2])
    with pytest.raises(ValueError, match="embedded to width d_model: set d_model"):
        GraphAdapter(2, None, cardinalities=[10, 2])
    mol = _molecule()
    with pytest.raises(ValueError, match="the batch has no edge_attr"):
        GraphAdapter(2, 8, cardinalities=[10, 2], edge_cardinalities=[3])(Data(x=mol.x, edge_index=mol.edge_index))
    with pytest.raises(ValueError, match="column 0 holds categories 6 to 8, but its table has 5"):
        GraphAdapter(2, 8, cardinalities=[5, 2])(mol)
