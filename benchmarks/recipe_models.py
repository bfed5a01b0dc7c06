"""Recipe-level rows: a whole training step of a recipe's model, attnmm's encoder against the same
architecture written with ``torch.nn.TransformerEncoder`` and a dense bool mask.

Both sides share the adapter, the head, the data, the loss, AdamW and the threads; only the encoder
differs. The peer is what a user would write by hand: ``nn.TransformerEncoderLayer(norm_first=True,
activation="gelu", batch_first=True)`` stacked with a final LayerNorm, the padding as
``src_key_padding_mask`` and any other mask as the dense (L, L) bool ``mask`` (True = blocked),
built per batch. The check copies attnmm's weights into the peer and compares the two encoders'
outputs at the real positions. The table reports training throughput (items per second) of each.

- ``recipe_speech``: the speech recipe's model (log-mel adapter, 4 layers of width 96, 4 heads) on a
  batch of 32 FSDD-length clips (0.5-2.3 s at 8 kHz, at most 57 frames) under ``Padding`` alone
  (full attention): the target is at least the peer's throughput.
- ``recipe_strings``: the same model on 8 strings of 20 spoken digits (about 12 s, about 300 frames)
  under ``Padding & Chunk(8, 2)``: there the chunked mask is sparse, and the target is a higher
  throughput than the peer's.
- ``recipe_text``: the character language model's shape (width 192, 6 heads, 4 layers) on 32
  sequences of 256 tokens under ``Causal()``: the target is at least the peer's throughput.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnmm.adapters import SpeechAdapter, TextAdapter, Tokens
from attnmm.masks import Causal, Chunk, Mask
from attnmm.nn import Encoder, PoolingClassifier, TokenClassifier

Inputs = dict[str, Any]
Runner = Callable[[], object]


class TorchEncoder(nn.Module):
    """attnmm's pre-norm encoder written with ``nn.TransformerEncoder``, reading the adapter's mask as
    a user would pass it: padding as ``src_key_padding_mask``, the rest as a dense (L, L) bool mask."""

    def __init__(self, d_model: int, num_heads: int, num_layers: int, dim_feedforward: int, dropout: float) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(
            d_model, num_heads, dim_feedforward, dropout, activation="gelu", batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(
            layer, num_layers, norm=nn.LayerNorm(d_model), enable_nested_tensor=False
        )

    def forward(self, x: Tensor, mask: Mask | None, lengths: Tensor | None, rest: Mask | None) -> Tensor:
        L = x.size(1)
        real = None if lengths is None else torch.arange(L, device=x.device) < lengths.view(-1, 1)  # (B, L)
        if rest is None:  # padding alone: the key padding mask
            return self.encoder(x, src_key_padding_mask=None if real is None else ~real)
        if real is None:
            return self.encoder(x, mask=~rest.dense(L, L), is_causal=isinstance(rest, Causal))
        # a mask and padding: the per-item (B * H, L, L) mask, a padded query attending itself (a row
        # with nothing allowed would give NaN, which the padded keys would pass on to the real queries)
        allowed = rest.dense(L, L).unsqueeze(0) & real.unsqueeze(1)  # (B, L, L)
        allowed |= torch.eye(L, dtype=torch.bool, device=x.device) & ~real.unsqueeze(2)
        heads = self.encoder.layers[0].self_attn.num_heads
        return self.encoder(x, mask=~allowed.repeat_interleave(heads, dim=0))

    def copy_from(self, ours: Encoder) -> None:
        """Take attnmm's weights (same architecture), so the two encoders compute the same function."""
        for mine, theirs in zip(self.encoder.layers, ours.layers, strict=True):
            attn = theirs.attn
            with torch.no_grad():
                projections = (attn.q_proj, attn.k_proj, attn.v_proj)
                mine.self_attn.in_proj_weight.copy_(torch.cat([p.weight for p in projections]))
                mine.self_attn.in_proj_bias.copy_(torch.cat([p.bias for p in projections]))
                mine.self_attn.out_proj.load_state_dict(attn.out_proj.state_dict())
                mine.linear1.load_state_dict(theirs.ffn[0].state_dict())
                mine.linear2.load_state_dict(theirs.ffn[3].state_dict())
                mine.norm1.load_state_dict(theirs.norm1.state_dict())
                mine.norm2.load_state_dict(theirs.norm2.state_dict())
        assert self.encoder.norm is not None
        self.encoder.norm.load_state_dict(ours.norm.state_dict())


class Model(nn.Module):
    """adapter -> encoder (attnmm's or the torch one) -> head, with its loss."""

    def __init__(self, adapter: nn.Module, encoder: nn.Module, head: nn.Module, rest: Mask | None) -> None:
        super().__init__()
        self.adapter, self.encoder, self.head, self.rest = adapter, encoder, head, rest

    def encode(self, batch: dict[str, Tensor]) -> tuple[Tensor, Tokens]:
        tokens = self.adapter(batch)
        if isinstance(self.encoder, TorchEncoder):
            return self.encoder(tokens.x, tokens.mask, tokens.lengths, self.rest), tokens
        return self.encoder(tokens.x, tokens.mask, tokens=tokens), tokens

    def loss(self, batch: dict[str, Tensor]) -> Tensor:
        h, tokens = self.encode(batch)
        logits = self.head(h, tokens)
        target = batch["label"]
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), target.reshape(-1), ignore_index=-100)


def _speech_batch(count: int, seconds: tuple[float, float], seed: int) -> dict[str, Tensor]:
    g = torch.Generator().manual_seed(seed)
    rate = 8000
    lengths = (torch.rand(count, generator=g) * (seconds[1] - seconds[0]) + seconds[0]).mul(rate).long()
    wave = torch.randn(count, int(lengths.max()), generator=g) * 0.1
    wave = wave.masked_fill(torch.arange(wave.size(1)) >= lengths.view(-1, 1), 0.0)
    return {"waveform": wave, "lengths": lengths, "label": torch.randint(0, 10, (count,), generator=g)}


def _text_batch(count: int, length: int, seed: int) -> dict[str, Tensor]:
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(2, 65, (count, length + 1), generator=g)
    return {"tokens": tokens[:, :-1], "label": tokens[:, 1:]}


def _models(kind: str) -> tuple[Model, Model, dict[str, Tensor]]:
    """attnmm's model, the torch one with the same weights, and a batch."""
    torch.manual_seed(0)
    if kind == "text":
        d, heads, layers, ff, rest = 192, 6, 4, 768, Causal()
        adapter: nn.Module = TextAdapter(vocab_size=65, d_model=d, mask=rest, dropout=0.1)
        head: nn.Module = TokenClassifier(d, 65)
        batch = _text_batch(32, 256, seed=0)
    else:
        d, heads, layers, ff = 96, 4, 4, 192
        rest = Chunk(8, 2) if kind == "strings" else None
        adapter = SpeechAdapter(d_model=d, sample_rate=8000, n_mels=40, channels=32, mask=rest, dropout=0.1)
        head = PoolingClassifier(d, 10, dropout=0.1)
        batch = _speech_batch(32, (0.5, 2.3), seed=0) if kind == "speech" else _speech_batch(8, (11.0, 13.0), seed=0)
    ours = Encoder(d, heads, layers, ff, dropout=0.1)
    theirs = TorchEncoder(d, heads, layers, ff, dropout=0.1)
    theirs.copy_from(ours)
    import copy

    return Model(adapter, ours, head, rest), Model(copy.deepcopy(adapter), theirs, copy.deepcopy(head), rest), batch


def build(kind: str) -> Callable[[], Inputs]:
    def make() -> Inputs:
        ours, theirs, batch = _models(kind)
        return {"ours": ours, "theirs": theirs, "batch": batch}

    return make


def _step(model: Model, batch: dict[str, Tensor]) -> Runner:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model.train()

    def run() -> Tensor:
        optimizer.zero_grad(set_to_none=True)
        loss = model.loss(batch)
        loss.backward()
        optimizer.step()
        return loss.detach()

    return run


def ours(x: Inputs) -> Runner:
    return _step(x["ours"], x["batch"])


def peer(x: Inputs) -> Runner:
    return _step(x["theirs"], x["batch"])


def check(x: Inputs) -> str:
    """The two encoders (same weights, eval mode) agree at the real positions."""
    ours_model, theirs_model, batch = x["ours"], x["theirs"], x["batch"]
    ours_model.eval(), theirs_model.eval()
    with torch.no_grad():
        tokens = ours_model.adapter(batch)
        a = ours_model.encoder(tokens.x, tokens.mask, tokens=tokens)
        b = theirs_model.encoder(tokens.x, tokens.mask, tokens.lengths, theirs_model.rest)
    if tokens.lengths is not None:
        real = torch.arange(a.size(1)) < tokens.lengths.view(-1, 1)
        a, b = a[real], b[real]
    err = float((a - b).abs().max())
    if not err <= 1e-4:
        raise AssertionError(f"attnmm's encoder differs from nn.TransformerEncoder: max abs error {err:.2e}")
    ours_model.train(), theirs_model.train()
    return f"max |attnmm - nn.TransformerEncoder| = {err:.1e} (same weights, real positions); L = {tokens.x.size(1)}"


def throughput(items: int, target: float) -> Callable[[float, float, float, float], tuple[str, bool]]:
    """Items per second of each side and their ratio; met when attnmm's is at least ``target`` x the peer's."""

    def verdict(tp: float, to: float, mp: float, mo: float) -> tuple[str, bool]:
        ratio = tp / to
        return f"{items / to:.0f} vs {items / tp:.0f} items/s: {ratio:.2f}x", ratio >= target

    return verdict
