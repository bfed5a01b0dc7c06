"""MultimodalAdapter: the fused mask of each pattern against a dense reference built block by block,
missing modalities, what each pattern lets flow between modalities (through the encoder), a new
modality by one dict entry; SegmentPoolingClassifier against pooling by hand; errors."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import Tensor, nn

from attnmm.adapters import (
    Adapter,
    ImageAdapter,
    MultimodalAdapter,
    SpeechAdapter,
    Tokens,
)
from attnmm.masks import Grid, Segments, Window
from attnmm.nn import Encoder, SegmentPoolingClassifier

D = 16


def _adapter(fusion: str = "joint", **kwargs: Any) -> MultimodalAdapter:
    adapters: dict[str, Adapter] = {
        "audio": SpeechAdapter(d_model=12, mask=Window(4, 1), dropout=0.0, freq_mask=0, time_mask=0),
        "image": ImageAdapter(d_model=D, mask=Grid(7, 7, kernel=3)),
    }
    return MultimodalAdapter(adapters, D, fusion, **kwargs).eval()  # type: ignore[arg-type]


def _batch(B: int = 3, seed: int = 0) -> dict[str, Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "waveform": torch.randn(B, 4000, generator=g) * 0.1,
        "lengths": torch.tensor([4000, 2400, 3200][:B]),
        "image": torch.rand(B, 1, 28, 28, generator=g),
        "audio_present": torch.tensor([True, True, False][:B]),
        "image_present": torch.tensor([True, False, True][:B]),
    }


def _reference(adapter: MultimodalAdapter, batch: dict[str, Tensor]) -> Tensor:
    """The fused allowed matrix (B, L, L) built from each modality's own dense mask and the pattern."""
    parts = [adapter.adapters[name](batch) for name in adapter.names]
    sizes = [t.x.size(1) for t in parts] + [adapter.num_fusion_tokens] * (adapter.fusion == "bottleneck")
    B, K, L = batch["image"].size(0), len(sizes), sum(sizes)
    real = []
    for name, t in zip(adapter.names, parts):
        n = t.lengths if t.lengths is not None else torch.full((B,), t.x.size(1))
        real.append(torch.arange(t.x.size(1)) < (n * batch[f"{name}_present"]).view(-1, 1))  # (B, n_k)
    if adapter.fusion == "bottleneck":
        real.append(torch.ones(B, adapter.num_fusion_tokens, dtype=torch.bool))
    out = torch.zeros(B, L, L, dtype=torch.bool)
    o = [0, *torch.tensor(sizes).cumsum(0).tolist()]
    for a in range(K):
        for c in range(K):
            if a == c:
                m = parts[a].mask if a < len(parts) else None
                block = torch.ones(B, sizes[a], sizes[a], dtype=torch.bool) if m is None else m.dense(
                    sizes[a], sizes[a], B
                ).expand(B, -1, -1)
            else:
                if adapter.fusion == "cross":
                    linked = adapter.names[a] in adapter.cross_queries
                else:
                    linked = {"late": False, "joint": True, "bottleneck": K - 1 in (a, c)}[adapter.fusion]
                block = torch.full((B, sizes[a], sizes[c]), linked)
            block = block & real[a].unsqueeze(2) & real[c].unsqueeze(1)
            out[:, o[a] : o[a + 1], o[c] : o[c + 1]] = block
    return out


@pytest.mark.parametrize("fusion", ["late", "joint", "bottleneck", "cross"])
def test_fused_mask_matches_a_dense_reference(fusion: str) -> None:
    adapter, batch = _adapter(fusion), _batch()
    tokens = adapter(batch)
    assert isinstance(tokens.mask, Segments) and tokens.lengths is None
    B, L, width = tokens.x.shape
    assert width == D and B == 3
    assert torch.equal(tokens.mask.dense(L, L, B), _reference(adapter, batch))
    frames = int(adapter.adapters["audio"].num_frames(batch["lengths"]).max())
    assert tokens.mask.sizes == (frames, 49, *([4] * (fusion == "bottleneck")))


def test_missing_modalities_have_length_zero() -> None:
    adapter, batch = _adapter("joint"), _batch()
    lengths = adapter(batch).mask.lengths
    frames = adapter.adapters["audio"].num_frames(batch["lengths"])
    assert lengths.tolist() == [[int(frames[0]), 49], [int(frames[1]), 0], [0, 49]]
    # without flags, every token of every adapter is real
    flagless = {k: v for k, v in batch.items() if not k.endswith("_present")}
    assert adapter(flagless).mask.lengths.tolist() == [[int(f), 49] for f in frames]


def test_a_batch_without_any_audio() -> None:
    adapter, batch = _adapter("bottleneck"), _batch()
    batch.update(waveform=torch.zeros(3, 0), lengths=torch.zeros(3, dtype=torch.long))
    batch["audio_present"] = torch.zeros(3, dtype=torch.bool)
    tokens = adapter(batch)
    assert tokens.mask.sizes == (0, 49, 4) and tokens.x.shape == (3, 53, D)
    h = Encoder(D, 2, 1, 32)(tokens.x, tokens.mask)
    assert torch.isfinite(h).all()


def _encode(adapter: MultimodalAdapter, batch: dict[str, Tensor], layers: int = 1) -> tuple[Tensor, Segments]:
    torch.manual_seed(0)
    encoder = Encoder(D, 2, layers, 32).eval()
    tokens = adapter(batch)
    return encoder(tokens.x, tokens.mask), tokens.mask


def _changes(fusion: str, changed: str, layers: int = 1) -> dict[str, bool]:
    """Which modalities' outputs (of the item with both) change when ``changed``'s input changes."""
    adapter = _adapter(fusion)
    batch = _batch()
    batch["audio_present"][:] = True
    batch["image_present"][:] = True
    other = dict(batch)
    if changed == "image":
        other["image"] = torch.rand(3, 1, 28, 28)
    else:
        other["waveform"] = torch.randn(3, 4000) * 0.1
    with torch.no_grad():
        h1, mask = _encode(adapter, batch, layers)
        h2, _ = _encode(adapter, other, layers)
    o = mask.offsets
    n_audio = int(mask.lengths[0, 0])
    spans = {"audio": (o[0], o[0] + n_audio), "image": (o[1], o[2])}
    return {name: not torch.allclose(h1[0, s:e], h2[0, s:e], atol=1e-6) for name, (s, e) in spans.items()}


def test_each_pattern_lets_information_flow_where_its_mask_says() -> None:
    assert _changes("late", "image", layers=2) == {"audio": False, "image": True}
    assert _changes("joint", "image") == {"audio": True, "image": True}
    assert _changes("cross", "image") == {"audio": True, "image": True}  # audio queries read image keys
    assert _changes("cross", "audio", layers=3) == {"audio": True, "image": False}  # never the reverse
    # bottleneck: one layer takes the image to the fusion tokens only; the second reaches the audio
    assert _changes("bottleneck", "image", layers=1) == {"audio": False, "image": True}
    assert _changes("bottleneck", "image", layers=2) == {"audio": True, "image": True}


def test_missing_modality_does_not_reach_the_other() -> None:
    adapter = _adapter("joint")
    batch = _batch()  # item 1 has no image
    other = dict(batch, image=torch.rand(3, 1, 28, 28))
    with torch.no_grad():
        h1, mask = _encode(adapter, batch, 2)
        h2, _ = _encode(adapter, other, 2)
    n = int(mask.lengths[1, 0])
    assert torch.equal(h1[1, :n], h2[1, :n])


class _Counts(Adapter):
    """A toy modality: a sequence of counts, one token each, full attention."""

    def __init__(self, d_model: int = 8) -> None:
        super().__init__()
        self.out_dim = d_model
        self.embed = nn.Linear(1, d_model)

    def forward(self, batch: dict[str, Any]) -> Tokens:
        return Tokens(self.embed(batch["counts"].unsqueeze(-1)), None, lengths=batch["counts_lengths"])


def test_a_new_modality_is_one_more_entry() -> None:
    adapters = {"image": ImageAdapter(d_model=D), "counts": _Counts(8)}
    adapter = MultimodalAdapter(adapters, D, "bottleneck", num_fusion_tokens=2)  # type: ignore[arg-type]
    batch = {"image": torch.rand(2, 1, 28, 28), "counts": torch.rand(2, 5), "counts_lengths": torch.tensor([5, 3])}
    tokens = adapter(batch)
    assert adapter.segment_names == ["image", "counts", "fusion"]
    assert tokens.x.shape == (2, 56, D) and tokens.mask.lengths.tolist() == [[49, 5, 2], [49, 3, 2]]


def test_projection_and_modality_embedding() -> None:
    adapter = _adapter("late")
    assert isinstance(adapter.proj["audio"], nn.Linear) and isinstance(adapter.proj["image"], nn.Identity)
    batch = _batch()
    tokens = adapter(batch)
    image = adapter.adapters["image"](batch).x
    o = tokens.mask.offsets
    assert torch.allclose(tokens.x[:, o[1] : o[2]], image + adapter.modality_embedding[1])
    tokens.x.sum().backward()
    assert adapter.modality_embedding.grad is not None and adapter.proj["audio"].weight.grad is not None


def test_links_of_each_pattern() -> None:
    assert _adapter("late").links() == "none" and _adapter("joint").links() == "full"
    assert _adapter("cross").links() == [[True, True], [False, True]]
    assert _adapter("cross", cross_queries=["image"]).links() == [[True, False], [True, True]]
    assert _adapter("bottleneck").links() == [[True, False, True], [False, True, True], [True, True, True]]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"fusion": "early"}, ValueError, "fusion must be one of"),
        ({"fusion": "cross", "cross_queries": ["video"]}, ValueError, r"unknown modalities \['video'\]"),
        ({"adapters": {}}, ValueError, "non-empty dict"),
        ({"adapters": {"fusion": ImageAdapter()}}, ValueError, "names the bottleneck's segment"),
        ({"adapters": {"image": nn.Linear(2, 2)}}, TypeError, r"adapters\['image'\] must be an Adapter"),
        ({"modalities": ["video"]}, ValueError, r"modalities must name distinct adapters.*\['audio', 'image'\]"),
        ({"modalities": []}, ValueError, "at least one"),
        ({"modalities": ["audio", "audio"]}, ValueError, "distinct"),
    ],
)
def test_bad_arguments_are_named(kwargs: dict, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        MultimodalAdapter(**{"d_model": D, **kwargs})


def test_modalities_leave_the_others_out() -> None:
    """``modalities`` keeps the named adapters in its order: the single-modality model of a multimodal
    config, whose parameters and tokens are those of an adapter given that modality alone."""
    audio, image = SpeechAdapter(d_model=D, mask=Window(4, 1)), ImageAdapter(d_model=D, mask=Grid(7, 7, kernel=3))
    only = MultimodalAdapter({"audio": audio, "image": image}, d_model=D, fusion="joint", modalities=["image"])
    alone = MultimodalAdapter({"image": image}, d_model=D, fusion="joint")
    assert only.names == ["image"] and not any(n.startswith("adapters.audio") for n, _ in only.named_parameters())
    alone.load_state_dict(only.state_dict())
    batch = MultimodalAdapter.example_batch(2)
    assert torch.equal(only.eval()(batch).x, alone.eval()(batch).x)
    both = MultimodalAdapter({"audio": audio, "image": image}, d_model=D, modalities=["image", "audio"])
    assert both.segment_names == ["image", "audio"]


def test_head_pools_each_segment_over_its_real_tokens() -> None:
    torch.manual_seed(0)
    h = torch.randn(2, 7, 4)
    mask = Segments([4, 3], lengths=[[2, 3], [0, 1]])
    tokens = Tokens(h, mask)
    shared = SegmentPoolingClassifier(4, 5)
    p0 = (h[0, :2].mean(0) + h[0, 4:7].mean(0)) / 2
    p1 = h[1, 4:5].mean(0)  # item 1 lacks segment 0
    assert torch.allclose(shared(h, tokens), shared.linears[0](torch.stack([p0, p1])), atol=1e-6)
    late = SegmentPoolingClassifier(4, 5, num_segments=2)
    lin0, lin1 = late.linears
    expected = torch.stack([(lin0(h[0, :2].mean(0)) + lin1(h[0, 4:7].mean(0))) / 2, lin1(h[1, 4:5].mean(0))])
    assert torch.allclose(late(h, tokens), expected, atol=1e-6)
    with pytest.raises(ValueError, match="num_segments=3 classifiers but the tokens have 2 segments"):
        SegmentPoolingClassifier(4, 5, num_segments=3)(h, tokens)


def test_head_without_segments_pools_the_real_tokens() -> None:
    h = torch.randn(2, 5, 4)
    head = SegmentPoolingClassifier(4, 3)
    expected = head.linears[0](torch.stack([h[0].mean(0), h[1, :2].mean(0)]))
    assert torch.allclose(head(h, Tokens(h, lengths=torch.tensor([5, 2]))), expected, atol=1e-6)


def test_gate_weights_the_present_segments_predictions() -> None:
    torch.manual_seed(0)
    h = torch.randn(3, 7, 4)
    tokens = Tokens(h, Segments([4, 3], lengths=[[2, 3], [0, 1], [4, 0]]))
    gated = SegmentPoolingClassifier(4, 5, num_segments=2, gate=True)
    late = SegmentPoolingClassifier(4, 5, num_segments=2)
    late.load_state_dict({k: v for k, v in gated.state_dict().items() if not k.startswith("gate")})
    torch.testing.assert_close(gated(h, tokens), late(h, tokens))  # the gate starts as the plain average
    with torch.no_grad():
        gated.gate.weight.normal_()
        gated.gate.bias.copy_(torch.tensor([0.3, -0.2]))
    pooled = torch.stack([torch.stack([h[0, :2].mean(0), h[0, 4:7].mean(0)]),
                          torch.stack([torch.zeros(4), h[1, 4:5].mean(0)]),
                          torch.stack([h[2, :4].mean(0), torch.zeros(4)])])  # (B, K, D)
    present = torch.tensor([[True, True], [False, True], [True, False]])
    z = torch.stack([gated.linears[k](pooled[:, k]) for k in range(2)], 1)  # (B, K, C)
    score = torch.stack([pooled[:, k] @ gated.gate.weight[k] + gated.gate.bias[k] for k in range(2)], 1)
    alpha = torch.softmax(score.masked_fill(~present, float("-inf")), 1)
    torch.testing.assert_close(gated(h, tokens), (alpha.unsqueeze(-1) * z).sum(1))
    torch.testing.assert_close(gated.segment_weights(h, tokens), alpha)
    assert gated.segment_weights(h, tokens)[1].tolist() == [0.0, 1.0]  # a missing segment counts for nothing
    logits, seen = gated.segment_logits(h, tokens)
    torch.testing.assert_close(logits, z)
    assert seen.tolist() == present.tolist()
    gated(h, tokens).sum().backward()
    assert gated.gate.weight.grad is not None and gated.gate.weight.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="gate weights the segments' own predictions"):
        SegmentPoolingClassifier(4, 5, gate=True)


@pytest.mark.parametrize("combine", ["logits", "probabilities"])
def test_gate_only_items_train_the_gate_alone(combine: str) -> None:
    """A gate-only item's output equals the plain forward's, but its loss reaches only the gate: no gradient
    to the tokens or the classifiers; the other items' gradients are unchanged."""
    torch.manual_seed(0)
    h = torch.randn(4, 7, 4, requires_grad=True)
    tokens = Tokens(h, Segments([4, 3], lengths=[[2, 3], [4, 3], [1, 2], [3, 1]]))
    head = SegmentPoolingClassifier(4, 5, num_segments=2, gate=True, combine=combine)  # type: ignore[arg-type]
    with torch.no_grad():
        head.gate.weight.normal_()
    only = torch.tensor([False, True, False, True])
    out = head(h, tokens, gate_only=only)
    torch.testing.assert_close(out, head(h, tokens))  # the same values
    out[only].sum().backward()  # the gate-only items' loss
    assert h.grad is None or h.grad.abs().sum() == 0
    assert all(lin.weight.grad is None or lin.weight.grad.abs().sum() == 0 for lin in head.linears)
    assert head.gate.weight.grad is not None and head.gate.weight.grad.abs().sum() > 0
    head.zero_grad()
    h.grad = None
    head(h, tokens, gate_only=only)[~only].sum().backward()  # the other items: as without the flag
    grads = [h.grad.clone(), *(lin.weight.grad.clone() for lin in head.linears)]
    head.zero_grad()
    h.grad = None
    head(h, tokens)[~only].sum().backward()
    for got, want in zip(grads, [h.grad, *(lin.weight.grad for lin in head.linears)]):
        torch.testing.assert_close(got, want)
    torch.testing.assert_close(head(h, tokens, gate_only=torch.zeros(4, dtype=torch.bool)), head(h, tokens))
    for bad in (SegmentPoolingClassifier(4, 5, num_segments=2),
                SegmentPoolingClassifier(4, 5, num_segments=2, gate=True, combine="average")):
        with pytest.raises(ValueError, match="marks items gate_only"):
            bad(h, tokens, gate_only=only)


def test_segment_logits_with_one_shared_classifier() -> None:
    h = torch.randn(2, 7, 4)
    tokens = Tokens(h, Segments([4, 3], lengths=[[2, 3], [0, 1]]))
    shared = SegmentPoolingClassifier(4, 5)
    logits, present = shared.segment_logits(h, tokens)
    torch.testing.assert_close(logits[0, 1], shared.linears[0](h[0, 4:7].mean(0)))
    assert logits.shape == (2, 2, 5) and present.tolist() == [[True, True], [False, True]]


@pytest.mark.parametrize("combine", ["probabilities", "average"])
def test_combine_mixes_the_segments_probabilities(combine: str) -> None:
    """``combine`` averages the segments' probabilities, with the gate's weights or equal ones: a softmax
    of the output is the mixture; an absent segment counts for nothing; an item with no segment gets
    equal logits; gradients reach every classifier and (with the gate's weights) the gate."""
    torch.manual_seed(0)
    h = torch.randn(4, 7, 4)
    tokens = Tokens(h, Segments([4, 3], lengths=[[2, 3], [0, 1], [4, 0], [0, 0]]))
    head = SegmentPoolingClassifier(4, 5, num_segments=2, gate=True, combine=combine)  # type: ignore[arg-type]
    with torch.no_grad():
        head.gate.weight.normal_()
        head.gate.bias.copy_(torch.tensor([0.3, -0.2]))
    z, present = head.segment_logits(h, tokens)
    alpha = head.segment_weights(h, tokens)
    if combine == "average":
        torch.testing.assert_close(alpha, present.float() / present.sum(1, keepdim=True).clamp(min=1))
    out = head(h, tokens)
    mixture = (alpha.unsqueeze(-1) * torch.softmax(z, -1)).sum(1)
    torch.testing.assert_close(torch.softmax(out[:3], -1), mixture[:3])
    torch.testing.assert_close(torch.softmax(out[1], -1), torch.softmax(z[1, 1], -1))  # segment 0 absent
    assert out[3].tolist() == [0.0] * 5  # nothing present
    assert torch.isfinite(out).all()
    out.sum().backward()
    assert all(lin.weight.grad is not None and lin.weight.grad.abs().sum() > 0 for lin in head.linears)
    if combine == "probabilities":
        assert head.gate.weight.grad is not None and head.gate.weight.grad.abs().sum() > 0


def test_combine_is_checked() -> None:
    with pytest.raises(ValueError, match="combine must be one of 'logits', 'probabilities', 'average'"):
        SegmentPoolingClassifier(4, 5, num_segments=2, combine="votes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="without num_segments the segments share one classifier"):
        SegmentPoolingClassifier(4, 5, combine="average")
