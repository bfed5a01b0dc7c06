import pytest
import torch

from attnmm import Encoder, EncoderLayer, RelativePositionBias, RotaryPE
from attnmm.masks import Causal, Chunk, Documents, Full, Graph, Grid, Padding, SameGraph, Segments, Window, list_masks

D, H = 16, 4


def make_input(name: str):
    """A mask of the named kind and a matching input (padded (B, L, D) or packed (N, D))."""
    torch.manual_seed(0)
    if name == "Graph":
        edge_index = torch.randint(0, 7, (2, 20))
        return Graph(edge_index, num_nodes=7), torch.randn(7, D)  # node 6 may have no in-edges
    if name == "SameGraph":
        return SameGraph(torch.tensor([0, 0, 0, 1, 2, 2, 2])), torch.randn(7, D)  # graph 1 has one node
    masks = {
        "Causal": Causal(),
        "Chunk": Chunk(3, 1),
        "Documents": Documents([4, 0, 5]),
        "Full": Full(),
        "Grid": Grid(3, 3, kernel=3),
        "Padding": Padding([9, 5]),
        "Segments": Segments([4, 5], within=[Causal(), Window(1, 1)], links="full", lengths=[[4, 5], [0, 3]]),
        "Window": Window(2, 1),
    }
    return masks[name], torch.randn(2, 9, D)


@pytest.mark.parametrize("name", list_masks())
def test_encoder_runs_with_each_mask(name):
    mask, x = make_input(name)
    enc = Encoder(D, H, num_layers=2, dim_feedforward=32, dropout=0.1)
    x.requires_grad_(True)
    out = enc(x, mask)
    assert out.shape == x.shape
    out.square().sum().backward()
    assert torch.isfinite(x.grad).all()
    for pname, p in enc.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), pname
    enc.eval()
    with torch.no_grad():
        torch.testing.assert_close(enc(x, mask), enc(x, mask), rtol=0, atol=0)


def test_train_mode_uses_dropout():
    mask, x = make_input("Window")
    enc = Encoder(D, H, num_layers=1, dim_feedforward=32, dropout=0.5).train()
    assert not torch.allclose(enc(x, mask), enc(x, mask))


def test_layer_is_pre_norm_residual():
    torch.manual_seed(1)
    layer = EncoderLayer(D, H, dim_feedforward=32, dropout=0.0)
    x, mask = torch.randn(2, 5, D), Causal()
    h = x + layer.attn(layer.norm1(x), mask=mask)
    expected = h + layer.ffn(layer.norm2(h))
    torch.testing.assert_close(layer(x, mask), expected)


def test_encoder_is_stack_plus_norm():
    torch.manual_seed(2)
    enc = Encoder(D, H, num_layers=3, dim_feedforward=32, dropout=0.0, activation="relu")
    x, mask = torch.randn(2, 6, D), Window(1, 1)
    h = x
    for layer in enc.layers:
        h = layer(h, mask)
    torch.testing.assert_close(enc(x, mask), enc.norm(h))


def test_shared_position_bias_and_rotary():
    torch.manual_seed(3)
    rpb = RelativePositionBias.for_window(H, 2, 0)
    enc = Encoder(D, H, 2, 32, 0.0, rotary=RotaryPE(D // H), position_bias=rpb)
    assert sum(p is rpb.table for p in enc.parameters()) == 1
    x = torch.randn(2, 7, D)
    mask = Window(2, 0) & Padding([7, 4])
    out, weights = enc(x, mask, return_weights=True)
    assert out.shape == x.shape and len(weights) == 2
    assert weights[0].values.shape == (mask.nnz(7, 7, 2), H)
    out.sum().backward()
    assert rpb.table.grad.abs().sum() > 0
    # computed once and passed to each layer: equals running the layers with that bias
    h = x
    for layer in enc.layers:
        h = layer(h, mask, bias=rpb(mask, 7, 7, 2))
    torch.testing.assert_close(out, enc.norm(h))


def test_errors():
    with pytest.raises(ValueError, match="activation must be one of"):
        EncoderLayer(D, H, activation="tanh")
    with pytest.raises(ValueError, match="num_layers must be an int >= 1, got 0"):
        Encoder(D, H, num_layers=0)
    with pytest.raises(ValueError, match="position_bias.num_heads must equal num_heads = 4, got 2"):
        Encoder(D, H, 1, position_bias=RelativePositionBias.for_window(2, 1, 1))
    with pytest.raises(ValueError, match="dropout must be in"):
        Encoder(D, H, 1, dropout=-0.1)


def test_built_from_yaml_config():
    jsonargparse = pytest.importorskip("jsonargparse")
    parser = jsonargparse.ArgumentParser()
    parser.add_argument("--encoder", type=Encoder)
    cfg = parser.parse_string(
        """
        encoder:
          class_path: attnmm.Encoder
          init_args:
            d_model: 16
            num_heads: 4
            num_layers: 2
            dim_feedforward: 32
            rotary: {class_path: attnmm.RotaryPE, init_args: {head_dim: 4}}
            position_bias:
              class_path: attnmm.RelativePositionBias
              init_args: {num_heads: 4, max_offset: [1, 1], dilation: 1}
        """
    )
    instantiate = getattr(parser, "instantiate", None) or parser.instantiate_classes
    enc = instantiate(cfg).encoder
    assert isinstance(enc, Encoder) and enc.position_bias.table.shape == (9, 4)
    assert enc(torch.randn(1, 9, D), Grid(3, 3, kernel=3)).shape == (1, 9, D)


@pytest.mark.parametrize("cls", ["Encoder", "EncoderLayer"])
def test_input_that_does_not_fit_names_d_model(cls: str) -> None:
    """A wrong width, rank or dtype is refused at the top of forward, naming d_model and both shapes,
    before a LayerNorm meets it."""
    layer = Encoder(32, 4, num_layers=2, dim_feedforward=64) if cls == "Encoder" else EncoderLayer(32, 4, 64)
    with pytest.raises(
        ValueError,
        match=rf"{cls} was built with d_model=32, so x must have 32 features in its last dim, shape \(B, L, 32\), "
        r"got shape \(2, 10, 16\); build it with d_model=16 or project x to 32 features first",
    ):
        layer(torch.randn(2, 10, 16), Causal())
    with pytest.raises(ValueError, match=r"shape \(N, 32\), got shape \(7, 16\)"):
        layer(torch.randn(7, 16), SameGraph(torch.zeros(7, dtype=torch.long)))
    with pytest.raises(ValueError, match=r"x must have shape \(B, L, 32\) or \(N, 32\), got a 4-D tensor of shape "
                       r"\(2, 4, 10, 32\); the layer splits its own heads"):  # fmt: skip
        layer(torch.randn(2, 4, 10, 32), Causal())
    with pytest.raises(TypeError, match=r"x must be a floating-point tensor of shape \(B, L, 32\), got dtype torch.int64"):  # noqa: E501
        layer(torch.ones(2, 10, 32, dtype=torch.long), Causal())
    with pytest.raises(TypeError, match=r"x must be a Tensor of shape \(B, L, 32\) or \(N, 32\), got list"):
        layer([[0.0] * 32], Causal())  # type: ignore[arg-type]
