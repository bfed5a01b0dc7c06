"""EncodedAdapter: the adapter's tokens encoded under their own mask, as one adapter; a backbone loads into it;
inside a multimodal adapter it is one modality's tower."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from attnmm.adapters import EncodedAdapter, ImageAdapter, MultimodalAdapter, SpeechAdapter
from attnmm.lightning import ClassificationTask
from attnmm.lightning.pretrained import load_backbone
from attnmm.masks import Grid, Window
from attnmm.nn import Encoder, PoolingClassifier


def _speech() -> SpeechAdapter:
    return SpeechAdapter(d_model=24, mask=Window(4, 1), dropout=0.0, freq_mask=0, time_mask=0)


def test_encodes_the_adapters_tokens_under_their_mask() -> None:
    adapter, encoder = _speech(), Encoder(24, 4, 2, 48, dropout=0.0)
    tower = EncodedAdapter(adapter, encoder).eval()
    batch = SpeechAdapter.example_batch(3)
    tokens = adapter(batch)
    out = tower(batch)
    torch.testing.assert_close(out.x, encoder(tokens.x, tokens.mask, tokens=tokens))
    assert out.mask is tokens.mask or repr(out.mask) == repr(tokens.mask)
    assert torch.equal(out.lengths, tokens.lengths) and tower.out_dim == 24


def test_a_backbone_loads_into_the_tower(tmp_path: Path) -> None:
    trained = ClassificationTask(_speech(), Encoder(24, 4, 2, 48), PoolingClassifier(24, 12), 12)
    path = tmp_path / "speech.ckpt"
    torch.save({"state_dict": trained.state_dict()}, path)
    tower = EncodedAdapter(_speech(), Encoder(24, 4, 2, 48))
    names = load_backbone(tower, path)
    q = tower.encoder.layers[1].attn.q_proj.weight
    assert names and torch.equal(q, trained.encoder.layers[1].attn.q_proj.weight)
    assert torch.equal(tower.adapter.proj.weight, trained.adapter.proj.weight)


def test_a_tower_is_one_modality_of_a_multimodal_adapter() -> None:
    tower = EncodedAdapter(_speech(), Encoder(24, 4, 1, 48, dropout=0.0))
    fused = MultimodalAdapter({"audio": tower, "image": ImageAdapter(d_model=16, mask=Grid(7, 7, kernel=3))},
                              d_model=16, fusion="late").eval()
    batch = {**SpeechAdapter.example_batch(2), **ImageAdapter.example_batch(2),
             "audio_present": torch.tensor([True, False])}
    tokens = fused(batch)
    n = tower(batch).x.size(1)
    torch.testing.assert_close(tokens.x[:, :n], fused.proj["audio"](tower(batch).x) + fused.modality_embedding[0])
    assert tokens.mask.lengths[1, 0] == 0  # the missing audio: no token


class _FirstToken(torch.nn.Module):
    def forward(self, x: torch.Tensor, mask: object, tokens: object) -> torch.Tensor:
        return x[:, :1]


def test_the_encoder_must_keep_the_tokens() -> None:
    tower = EncodedAdapter(_speech(), _FirstToken())
    with pytest.raises(ValueError, match="keeps the tokens"):
        tower(SpeechAdapter.example_batch(2))
    with pytest.raises(TypeError, match="must be an Adapter"):
        EncodedAdapter(torch.nn.Linear(2, 2))  # type: ignore[arg-type]
