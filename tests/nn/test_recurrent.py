"""RecurrentEncoder: the masks it honours (and those it refuses), padding, directions, incremental state."""

from __future__ import annotations

import pytest
import torch

from attnmm.masks import Causal, Chunk, Documents, Full, Graph, Grid, Padding, Window
from attnmm.nn import IncrementalState, RecurrentEncoder

D = 12


@pytest.mark.parametrize("cell", ["lstm", "gru"])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_padded_items_equal_each_item_alone(cell: str, bidirectional: bool) -> None:
    torch.manual_seed(0)
    enc = RecurrentEncoder(D, num_layers=2, cell=cell, bidirectional=bidirectional).eval()
    lengths = torch.tensor([7, 3, 1])
    x = torch.randn(3, 7, D, dtype=torch.float64, requires_grad=True)
    enc = enc.double()
    mask = Padding(lengths) if bidirectional else Causal() & Padding(lengths)
    out = enc(x, mask)
    for b, n in enumerate(lengths.tolist()):
        alone = enc(x[b : b + 1, :n].detach(), None)
        torch.testing.assert_close(out[b, :n], alone[0])
        assert (out[b, n:] == 0).all()  # padded positions are written as 0
    out.square().sum().backward()
    assert x.grad is not None and x.grad[1, 3:].abs().max() == 0  # ... and never read


def test_a_unidirectional_output_depends_on_the_past_only() -> None:
    torch.manual_seed(1)
    enc = RecurrentEncoder(D, num_layers=2).eval()
    x = torch.randn(1, 9, D)
    y = x.clone()
    y[:, 5:] += 1.0  # change the future of position 4
    torch.testing.assert_close(enc(x, Causal())[:, :5], enc(y, Causal())[:, :5])
    assert not torch.allclose(enc(x, Causal())[:, 5:], enc(y, Causal())[:, 5:])
    bi = RecurrentEncoder(D, bidirectional=True).eval()
    assert not torch.allclose(bi(x)[:, :5], bi(y)[:, :5])  # a bidirectional one reads ahead


def test_an_empty_item_gives_zeros_and_zero_gradients() -> None:
    enc = RecurrentEncoder(D, bidirectional=True)
    x = torch.randn(2, 4, D, requires_grad=True)
    out = enc(x, Padding([4, 0]))
    assert torch.isfinite(out).all() and out[1].abs().max() == 0
    out.sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all() and x.grad[1].abs().max() == 0


@pytest.mark.parametrize("mask", [None, Full(), Causal(), Causal() & Padding([5, 2]), Full() & Padding([5, 2])])
def test_unidirectional_accepts_causal_and_full_masks(mask) -> None:
    assert RecurrentEncoder(D)(torch.randn(2, 5, D), mask).shape == (2, 5, D)


def test_padding_intersected_twice_is_the_shorter_padding() -> None:
    """The recurrence asks the mask for its real lengths: two paddings intersected allow the shorter."""
    enc = RecurrentEncoder(D).eval()
    x = torch.randn(2, 5, D)
    torch.testing.assert_close(enc(x, Padding([5, 2]) & Padding([4, 4])), enc(x, Padding([4, 2])))


@pytest.mark.parametrize(
    "mask",
    [
        Window(2, 0),
        Window(2, 0) & Padding([5, 2]),
        Chunk(2, 1),
        Grid(1, 5, kernel=3),
        Causal() | Window(1, 1),
        ~Causal(),
        Graph(torch.tensor([[0, 1], [1, 2]]), 5),
        Documents([[3, 2], [2, 3]]),
    ],
    ids=repr,
)
def test_masks_a_recurrence_cannot_honour_are_refused_by_name(mask) -> None:
    with pytest.raises(ValueError, match="recurrent encoder reads every earlier position, so it cannot honour"):
        RecurrentEncoder(D)(torch.randn(2, 5, D), mask)


def test_bidirectional_refuses_causal() -> None:
    with pytest.raises(ValueError, match=r"bidirectional recurrent encoder reads the whole sequence.*Causal\(\)"):
        RecurrentEncoder(D, bidirectional=True)(torch.randn(2, 5, D), Causal() & Padding([5, 3]))


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_incremental_state_equals_one_call(cell: str) -> None:
    torch.manual_seed(2)
    enc = RecurrentEncoder(D, num_layers=2, cell=cell, hidden_size=7).eval()
    x = torch.randn(2, 10, D)
    state = IncrementalState()
    parts = []
    for piece in x.split([4, 1, 3, 2], dim=1):
        parts.append(enc(piece, Causal(), state=state))
        state.advance(piece.size(1))
    torch.testing.assert_close(torch.cat(parts, 1), enc(x, Causal()))
    per_tensor = 2 * 2 * 7 * 4  # layers x B x hidden float32s
    per_layer = 2 * per_tensor if cell == "lstm" else per_tensor  # (h, c) or h
    assert state.num_bytes() == per_layer  # constant, whatever the length read


def test_incremental_state_errors() -> None:
    with pytest.raises(ValueError, match="needs a unidirectional encoder and a batch without padding"):
        RecurrentEncoder(D, bidirectional=True)(torch.randn(1, 3, D), None, state=IncrementalState())
    with pytest.raises(ValueError, match="needs a unidirectional encoder and a batch without padding"):
        RecurrentEncoder(D)(torch.randn(2, 3, D), Causal() & Padding([3, 2]), state=IncrementalState())


def test_widths_and_projection() -> None:
    assert RecurrentEncoder(D).proj is None and RecurrentEncoder(D).hidden_size == D
    assert RecurrentEncoder(D, bidirectional=True).hidden_size == D // 2
    enc = RecurrentEncoder(D, hidden_size=5, bidirectional=True)
    assert enc.proj is not None and enc(torch.randn(1, 3, D)).shape == (1, 3, D)
    assert "hidden_size=5, cell='lstm', bidirectional=True" in repr(enc)


def test_constructor_and_input_errors() -> None:
    with pytest.raises(ValueError, match="cell must be one of \\['gru', 'lstm'\\], got 'rnn'"):
        RecurrentEncoder(D, cell="rnn")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="dropout must be in \\[0, 1\\), got 1.0"):
        RecurrentEncoder(D, dropout=1.0)
    with pytest.raises(ValueError, match="expects padded x of shape \\(B, L, D\\) with D=12, got shape \\(5, 12\\)"):
        RecurrentEncoder(D)(torch.randn(5, D))
    with pytest.raises(ValueError, match="Padding lengths \\[6, 2\\] do not fit x of shape \\(2, 5, 12\\)"):
        RecurrentEncoder(D)(torch.randn(2, 5, D), Padding([6, 2]))


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_runs_under_cpu_bfloat16_autocast(cell: str) -> None:
    # oneDNN has no bfloat16 recurrence on some CPUs ("could not create a primitive descriptor"): the
    # recurrence runs in float32 inside autocast, so a bf16-mixed recipe trains on any CPU
    torch.manual_seed(0)
    enc = RecurrentEncoder(16, num_layers=2, cell=cell)
    x = torch.randn(3, 9, 16, requires_grad=True)
    mask = Padding([9, 4, 1])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = enc(x, mask)
    out.float().sum().backward()
    assert out.shape == (3, 9, 16) and torch.isfinite(out).all() and x.grad is not None
    torch.testing.assert_close(out.float(), enc(x, mask), atol=0.05, rtol=0.05)
