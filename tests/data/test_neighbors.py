"""Neighbour-sampled mini-batches on generated graphs: the sampler's contract, exactness with every
neighbour, and training through Lightning."""

from __future__ import annotations

from typing import Any

import lightning as L
import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.sampler import NodeSamplerInput

from attnmm.adapters import GraphAdapter
from attnmm.data.neighbors import UniformNeighborSampler, neighbor_loader
from attnmm.lightning import ClassificationTask, MultiClass, Optimization
from attnmm.nn import GraphAttentionEncoder


def random_graph(n: int = 300, m: int = 3000, seed: int = 0) -> Data:
    """Two communities (the label), edges mostly within one; features: noisy one-hot community."""
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % 2
    src = torch.randint(0, n, (m,), generator=g)
    same = torch.rand(m, generator=g) < 0.9
    dst = torch.randint(0, n // 2, (m,), generator=g) * 2 + torch.where(same, y[src], 1 - y[src])
    x = torch.nn.functional.one_hot(y, 2).float() + 2.0 * torch.randn(n, 2, generator=g)
    split = torch.randperm(n, generator=g)
    masks = {name: torch.zeros(n, dtype=torch.bool) for name in ("train_mask", "val_mask", "test_mask")}
    for name, part in (("train_mask", split[:150]), ("val_mask", split[150:200]), ("test_mask", split[200:])):
        masks[name][part] = True
    return Data(x=x, edge_index=torch.stack([src, dst]), y=y, **masks)


@pytest.mark.parametrize("num_neighbors", [[3, 2], [-1, -1], [0], [5, -1, 2]])
def test_sampler_contract(num_neighbors: list[int]) -> None:
    data = random_graph()
    torch.manual_seed(1)
    seeds = torch.tensor([5, 17, 42, 299])
    out = UniformNeighborSampler(data.edge_index, data.num_nodes, num_neighbors).sample_from_nodes(
        NodeSamplerInput(input_id=torch.arange(4), node=seeds)
    )
    assert torch.equal(out.node[:4], seeds) and out.node.unique().numel() == out.node.numel()
    assert sum(out.num_sampled_nodes) == out.node.numel() and sum(out.num_sampled_edges) == out.row.numel()
    # every drawn edge is an edge of the graph, with its id
    torch.testing.assert_close(torch.stack([out.node[out.row], out.node[out.col]]), data.edge_index[:, out.edge])
    assert out.edge.unique().numel() == out.edge.numel()
    # hop by hop: at most k edges into each node reached at the hop before (all of them for k = -1)
    in_degree = torch.bincount(data.edge_index[1], minlength=data.num_nodes)
    edge_start, node_start = 0, 0
    for hop, k in enumerate(num_neighbors):
        frontier = out.node[node_start : node_start + out.num_sampled_nodes[hop]]
        cols = out.node[out.col[edge_start : edge_start + out.num_sampled_edges[hop]]]
        drawn = torch.stack([(cols == i).sum() for i in frontier]) if frontier.numel() else torch.zeros(0)
        want = in_degree[frontier] if k < 0 else in_degree[frontier].clamp(max=k)
        assert torch.equal(drawn, want)
        edge_start += out.num_sampled_edges[hop]
        node_start += out.num_sampled_nodes[hop]


def test_sampler_draws_uniformly() -> None:
    edge_index = torch.stack([torch.arange(1, 11), torch.zeros(10, dtype=torch.long)])  # ten edges into node 0
    sampler = UniformNeighborSampler(edge_index, 11, [3])
    torch.manual_seed(0)
    counts = torch.zeros(10)
    for _ in range(2000):
        out = sampler.sample_from_nodes(NodeSamplerInput(input_id=None, node=torch.tensor([0])))
        counts[out.edge] += 1
    assert torch.allclose(counts / 2000, torch.full((10,), 0.3), atol=0.05)


def make_task(seed: int = 0) -> ClassificationTask:
    torch.manual_seed(seed)
    return ClassificationTask(
        GraphAdapter(in_channels=2, d_model=None, self_loops=True, dropout=0.0),
        GraphAttentionEncoder(in_channels=2, hidden_channels=8, out_channels=2, heads=2, dropout=0.0),
        None, num_classes=2, objective=MultiClass(target_key="y"), lr=1e-2, optimizer=Optimization(warmup_fraction=0.0),
    )


def test_every_neighbour_gives_the_full_graph_outputs() -> None:
    data, task = random_graph(), make_task().eval()
    with torch.no_grad():
        full = task(data)
        for batch in neighbor_loader(data, "test", [-1, -1], batch_size=32):
            seeds = batch.n_id[: batch.batch_size]
            assert torch.equal(batch.test_mask, torch.arange(batch.num_nodes) < batch.batch_size)
            torch.testing.assert_close(task(batch)[: batch.batch_size], full[seeds], rtol=1e-5, atol=1e-5)


class SampledGraph(L.LightningDataModule):
    def __init__(self) -> None:
        super().__init__()
        self.data = random_graph()

    def train_dataloader(self) -> Any:
        return neighbor_loader(self.data, "train", [5, 5], batch_size=32, shuffle=True)

    def val_dataloader(self) -> Any:
        return neighbor_loader(self.data, "val", [-1, -1], batch_size=64)

    def test_dataloader(self) -> Any:
        return neighbor_loader(self.data, "test", [-1, -1], batch_size=64)


@pytest.mark.slow  # trains for a while: the recipe tier
def test_trains_on_sampled_batches(tmp_path) -> None:
    task = make_task()
    trainer = L.Trainer(max_epochs=8, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir=tmp_path)
    trainer.fit(task, datamodule=SampledGraph())
    assert trainer.global_step == 8 * 5  # 150 training seeds in batches of 32
    (result,) = trainer.test(task, datamodule=SampledGraph(), verbose=False)
    assert result["test_acc"] > 0.75  # two communities; chance is 0.5


@pytest.mark.data
def test_graph_node_recipe_with_neighbour_sampling(tmp_path) -> None:
    from _recipes import data_root, run_recipe

    data_root("planetoid")
    args = ["fit", "--trainer.max_epochs=1", "--data.num_neighbors=[10,10]", "--data.batch_size=64",
            "--torch_threads=1"]
    proc = run_recipe("graph_node", args, tmp_path)
    assert "metrics written to" in proc.stdout
    (last,) = tmp_path.glob("runs/**/last.ckpt")
    assert torch.load(last, weights_only=True)["global_step"] == 3  # 140 training nodes in batches of 64
