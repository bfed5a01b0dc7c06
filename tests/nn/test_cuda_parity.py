"""The layers on CUDA against themselves on the CPU: the same weights and inputs give the same outputs and
gradients (fp32), masks built from CPU or CUDA tensors alike, in training and under ``torch.inference_mode``
(as Lightning's validation and test loops run). Runs where a GPU is (``bash benchmarks/gpu_recipes_check.sh``
runs this file), skipped elsewhere."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from torch import Tensor

from attnmm.masks import Causal, Graph, Padding, SameGraph, Window

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

TOL = {"atol": 2e-4, "rtol": 2e-4}
GPU = "cuda"


@pytest.fixture(autouse=True)
def _full_fp32() -> Iterator[None]:
    """No TF32 on the GPU (cuDNN's convolutions use it by default): fp32 on both sides."""
    before = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = before


def _graphs(seed: int = 0) -> tuple[Tensor, Tensor, Tensor]:
    """Three random graphs of 5, 9 and 1 nodes, packed: features (15, 16), edge_index, batch."""
    g = torch.Generator().manual_seed(seed)
    sizes, edges, start = [5, 9, 1], [], 0
    for n in sizes:
        m = 2 * n
        edges.append(torch.randint(0, n, (2, m), generator=g) + start)
        start += n
    batch = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    return torch.randn(start, 16, generator=g), torch.cat(edges, 1), batch


def _moved(value: Any, device: str) -> Any:
    if isinstance(value, Tensor):
        return value.detach().to(device).clone()  # a leaf of its own on each device
    if isinstance(value, (list, tuple)):
        return type(value)(_moved(v, device) for v in value)
    if isinstance(value, dict):
        return {k: _moved(v, device) for k, v in value.items()}
    return value


def _both(module: torch.nn.Module, call: Callable[[torch.nn.Module, Any], Tensor], inputs: Any) -> None:
    """``call(module, inputs)`` on the CPU and on CUDA: outputs and gradients (inputs and parameters) agree."""
    results = []
    for device in ("cpu", GPU):
        m = copy.deepcopy(module).to(device)
        args = _moved(inputs, device)
        x = args[0].requires_grad_() if args[0].is_floating_point() else args[0]
        out = call(m, args)
        out.square().sum().backward()
        grads = [p.grad for p in m.parameters() if p.grad is not None]
        results.append((out.detach().cpu(), None if x.grad is None else x.grad.cpu(), [g.cpu() for g in grads]))
    (out_c, gx_c, gp_c), (out_g, gx_g, gp_g) = results
    torch.testing.assert_close(out_g, out_c, **TOL)
    if gx_c is not None:
        torch.testing.assert_close(gx_g, gx_c, **TOL)
    assert len(gp_c) == len(gp_g)
    for a, b in zip(gp_g, gp_c):
        torch.testing.assert_close(a, b, **TOL)


@pytest.mark.parametrize("masked", [False, True])
def test_gps_conv(masked: bool) -> None:
    from torch_geometric.nn import GINEConv

    from attnmm.nn import GPSConv

    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16))
    layer = GPSConv(16, GINEConv(mlp), heads=2).train()
    x, edge_index, batch = _graphs()
    edge_attr = torch.randn(edge_index.size(1), 16)

    def call(m: torch.nn.Module, a: Any) -> Tensor:
        x, edge_index, batch, edge_attr = a
        mask = Graph(edge_index, x.size(0)) if masked else None  # the graph's own edges: an Exphormer-style mask
        return m(x, edge_index, batch, mask=mask, edge_attr=edge_attr)

    _both(layer, call, (x, edge_index, batch, edge_attr))


@pytest.mark.parametrize("name", ["GATConv", "GATv2Conv", "AttentionConv"])
def test_graph_attention_layers(name: str) -> None:
    import attnmm.nn

    torch.manual_seed(0)
    layer = getattr(attnmm.nn, name)(16, 8, heads=2)
    x, edge_index, _ = _graphs(1)
    _both(layer, lambda m, a: m(a[0], a[1]), (x, edge_index))


@pytest.mark.parametrize("mask_device", ["cpu", GPU])
@pytest.mark.parametrize("inference", [False, True])
def test_encoder_under_padding_and_window(mask_device: str, inference: bool) -> None:
    from attnmm.nn import Encoder

    torch.manual_seed(0)
    encoder = Encoder(32, 2, 2, 64, dropout=0.0)
    x = torch.randn(3, 40, 32)
    lengths = torch.tensor([40, 17, 1])
    results = []
    for device in ("cpu", GPU):
        m = copy.deepcopy(encoder).to(device)
        for mask in (Padding(lengths.to(mask_device)) & Window(4, 4), Causal() & Padding(lengths.to(mask_device))):
            if inference:
                with torch.inference_mode():
                    results.append((device, m(x.to(device), mask).cpu()))
            else:
                out = m(x.to(device), mask)
                out.square().sum().backward()
                results.append((device, out.detach().cpu()))
    cpu, gpu = results[:2], results[2:]
    for (_, a), (_, b) in zip(gpu, cpu):
        torch.testing.assert_close(a, b, **TOL)


def test_same_graph_attention_under_inference_mode() -> None:
    # Lightning's test loop: batches and masks made under inference_mode on the GPU
    from attnmm import attend

    x, _, batch = _graphs(2)
    q = torch.randn(x.size(0), 2, 16)
    with torch.inference_mode():
        outs = [attend(q.to(d), q.to(d), q.to(d), SameGraph(batch.to(d))).cpu() for d in ("cpu", GPU)]
        again = attend(q.to(GPU), q.to(GPU), q.to(GPU), SameGraph(batch.to(GPU))).cpu()  # an equal mask, a new tensor
    torch.testing.assert_close(outs[1], outs[0], **TOL)
    torch.testing.assert_close(again, outs[0], **TOL)


def test_speech_stream_on_the_gpu_takes_cpu_audio() -> None:
    # a model on the GPU streams audio that arrives on the CPU (a microphone's), as it does on the CPU
    from attnmm.adapters import SpeechAdapter, SpeechStream
    from attnmm.masks import Chunk
    from attnmm.nn import Encoder

    torch.manual_seed(0)
    adapter, encoder = SpeechAdapter(d_model=32, mask=Chunk(4, 1) | Causal()).eval(), Encoder(32, 4, 2, 64).eval()
    audio = torch.randn(2, 6000)
    outs = []
    for device in ("cpu", GPU):
        stream = SpeechStream(copy.deepcopy(adapter).to(device), copy.deepcopy(encoder).to(device), batch_size=2)
        parts = [stream.push(piece) for piece in audio.split(700, dim=1)] + [stream.flush()]
        assert all(p.device.type == torch.device(device).type for p in parts)
        outs.append(torch.cat(parts, 1).cpu())
    torch.testing.assert_close(outs[1], outs[0], **TOL)
