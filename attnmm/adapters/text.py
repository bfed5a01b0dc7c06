r"""The text adapter: token ids -> embeddings (+ character features) + positions, under a mask."""

from __future__ import annotations

import math
from typing import Any, Literal

import torch
from torch import Tensor, nn

from attnmm._checks import check_nonneg_int
from attnmm.adapters._registry import register_adapter
from attnmm.adapters.base import Adapter, Tokens
from attnmm.common.vocab import PAD, UNK
from attnmm.masks import Mask, Padding
from attnmm.nn.positional import LearnedPE, SinusoidalPE

Positional = Literal["sinusoidal", "learned", "rotary", "none"]


class CharFeatures(nn.Module):
    r"""Character-level word features of a character CNN ("End-to-end Sequence Labeling via
    Bi-directional LSTM-CNNs-CRF", Ma and Hovy, 2016): embed the characters of a word between
    learned begin and end markers, convolve, and max-pool over the word.

    .. math::
        \mathbf{c}_w = \max_{t} \mathrm{ReLU}\left(\mathrm{Conv1d}(\mathbf{E}[\langle w],
        \mathbf{E}[w_1], \dots, \mathbf{E}[w_{|w|}], \mathbf{E}[w\rangle])_t\right)

    The markers let the filters tell prefixes and suffixes ("-ly", "-ing") from the same letters
    inside a word.

    Args:
        num_chars (int): size of the character vocabulary (id 0 pads).
        char_dim (int, optional): character embedding width. (default: :obj:`32`)
        channels (int, optional): convolution channels, the width of the feature.
            (default: :obj:`64`)
        kernel (int, optional): odd convolution width in characters. (default: :obj:`3`)
        encoder (str, optional): ``"cnn"``, the convolution above, or ``"lstm"``: a bidirectional
            LSTM over the marked characters whose two final states (``channels // 2`` each) are the
            feature, reading a whole prefix or suffix rather than ``kernel``-character pieces
            (Lample et al., 2016). (default: :obj:`"cnn"`)

    Shapes:
        - **input:** chars (B, L, C), character ids of each word, 0 after its end
        - **output:** (B, L, channels), zero for words without characters

    Examples:
        >>> import torch
        >>> feats = CharFeatures(num_chars=30, channels=16)
        >>> feats(torch.randint(0, 30, (2, 5, 7))).shape
        torch.Size([2, 5, 16])
    """

    def __init__(
        self, num_chars: int, char_dim: int = 32, channels: int = 64, kernel: int = 3,
        encoder: Literal["cnn", "lstm"] = "cnn",
    ) -> None:
        super().__init__()
        if encoder not in ("cnn", "lstm"):
            raise ValueError(f"encoder must be 'cnn' or 'lstm', got {encoder!r}")
        if encoder == "lstm" and channels % 2:
            raise ValueError(f"channels must be even for the bidirectional LSTM (half per direction), got {channels}")
        self.encoder = encoder
        self.num_chars = check_nonneg_int("num_chars", num_chars, minimum=2)
        kernel = check_nonneg_int("kernel", kernel, minimum=1)
        if kernel % 2 == 0:
            raise ValueError(f"kernel must be odd (a centred window), got {kernel}")
        self.out_dim = check_nonneg_int("channels", channels, minimum=1)
        # rows num_chars and num_chars + 1 are the begin and end markers
        char_dim = check_nonneg_int("char_dim", char_dim, minimum=1)
        self.embed = nn.Embedding(self.num_chars + 2, char_dim, padding_idx=PAD)
        self.conv: nn.Conv1d | None = None
        self.lstm: nn.LSTM | None = None
        if encoder == "cnn":
            self.conv = nn.Conv1d(char_dim, channels, kernel, padding=kernel // 2)
        else:
            self.lstm = nn.LSTM(char_dim, channels // 2, batch_first=True, bidirectional=True)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.embed.reset_parameters()
        for part in (self.conv, self.lstm):
            if part is not None:
                part.reset_parameters()

    def forward(self, chars: Tensor) -> Tensor:
        if chars.dim() != 3:
            raise ValueError(f"chars must be (B, L, C) character ids, got shape {tuple(chars.shape)}")
        B, L, C = chars.shape
        flat = chars.reshape(B * L, C)  # (B*L, C)
        n = (flat != PAD).sum(-1, keepdim=True)  # (B*L, 1) characters per word
        marked = torch.cat([flat.new_full((B * L, 1), self.num_chars), flat, flat.new_zeros(B * L, 1)], 1)
        marked = marked.scatter(1, n + 1, torch.full_like(n, self.num_chars + 1))  # (B*L, C + 2)
        marked = marked.masked_fill(n == 0, PAD)  # no word, no markers
        if self.lstm is not None:
            return self._lstm(marked, n.squeeze(1)).view(B, L, self.out_dim)
        assert self.conv is not None
        h = self.conv(self.embed(marked).transpose(1, 2)).relu()  # (B*L, channels, C + 2)
        real = (marked != PAD).unsqueeze(1)  # (B*L, 1, C + 2)
        h = h.masked_fill(~real, 0.0).amax(-1)  # (B*L, channels); ReLU >= 0, so 0 stands for "no word"
        return h.view(B, L, self.out_dim)

    def _lstm(self, marked: Tensor, n: Tensor) -> Tensor:
        """Final states of the BiLSTM over each real word's marked characters; zeros for no word."""
        assert self.lstm is not None
        out = marked.new_zeros(marked.shape[0], self.out_dim, dtype=self.embed.weight.dtype)
        words = (n > 0).nonzero().squeeze(1)
        if words.numel() == 0:
            return out
        packed = nn.utils.rnn.pack_padded_sequence(
            self.embed(marked[words]), (n[words] + 2).cpu(), batch_first=True, enforce_sorted=False
        )
        _, (h, _) = self.lstm(packed)  # h: (2, words, channels // 2), forward then backward
        return out.index_copy(0, words, torch.cat([h[0], h[1]], -1).to(out.dtype))


@register_adapter("text")
class TextAdapter(Adapter):
    r"""Text front end: token embeddings, optional character features, positions and a mask
    ("Attention Is All You Need", Vaswani et al., 2017).

    .. math::
        \mathbf{X}_i = \mathbf{W}\big[\mathbf{E}[w_i] \,\|\, \mathbf{c}_{w_i}\big] + \mathrm{PE}(i),
        \qquad A = \mathrm{Padding}(\text{lengths}) \cap A_{\text{mask}}

    Without character features the projection :math:`\mathbf{W}` is left out,
    :math:`\mathbf{X}_i = \sqrt{D}\,\mathbf{E}[w_i] + \mathrm{PE}(i)`. Token ids come from a
    :class:`~attnmm.data.Vocabulary` built on the training split: 0 pads, 1 is the unknown token.
    In training, ``word_dropout`` replaces real tokens by the unknown token, so the model learns to
    tag words it has never seen from their characters and context.

    ``positional`` is a module called as ``pos(x, positions)`` (``positions`` (L,) or ``None`` for
    0..L-1) or a shorthand: ``"sinusoidal"`` (:class:`~attnmm.nn.SinusoidalPE`), ``"learned"``
    (:class:`~attnmm.nn.LearnedPE`), ``"rotary"`` (nothing added here: give the encoder
    ``rotary=RotaryPE(D // H)``) or ``"none"``; ``char_encoder`` likewise a module (chars (B, L, C) ->
    (B, L, ``out_dim``)) or a shorthand for :class:`CharFeatures`.

    Args:
        vocab_size (int, optional): rows of the token embedding (at least the vocabulary's size).
            (default: :obj:`256`)
        d_model (int, optional): token width D. (default: :obj:`128`)
        positional (nn.Module or str, optional): a positional encoding module, or ``"sinusoidal"``,
            ``"learned"``, ``"rotary"`` or ``"none"``. (default: :obj:`"sinusoidal"`)
        max_len (int, optional): longest sequence of the learned encoding. (default: :obj:`512`)
        mask (Mask, optional): the tokens' attention pattern, e.g. ``Causal()``,
            ``Window(8, 8)`` or ``Window(64, 0)`` (causal window), composed with the batch's
            :class:`~attnmm.masks.Padding` when it has ``lengths``; ``None`` is full attention.
            (default: :obj:`None`)
        char_vocab_size (int, optional): characters of the built-in character features; 0 turns
            them off (unless ``char_encoder`` is a module). (default: :obj:`0`)
        char_dim (int, optional): character embedding width. (default: :obj:`32`)
        char_channels (int, optional): width of the character features. (default: :obj:`64`)
        char_kernel (int, optional): character convolution width. (default: :obj:`3`)
        char_encoder (nn.Module or str, optional): a character encoder module with an ``out_dim``
            attribute (then ``char_vocab_size``, ``char_dim``, ``char_channels`` and ``char_kernel``
            are unused), or ``"cnn"`` or ``"lstm"``, see :class:`CharFeatures`. (default: :obj:`"cnn"`)
        word_dropout (float, optional): share of tokens replaced by the unknown token in training.
            (default: :obj:`0.0`)
        dropout (float, optional): dropout on the tokens. (default: :obj:`0.1`)

    Shapes:
        - **input:** a batch with ``tokens`` (B, L); optionally ``lengths`` (B,), ``chars``
          (B, L, C) and ``offset`` (int, the position of the first token when a sequence is read a
          few tokens at a time; default 0)
        - **output:** :class:`Tokens` with x (B, L, D), mask, lengths (B,) or :obj:`None`

    Examples:
        >>> import torch
        >>> from attnmm.masks import Causal
        >>> adapter = TextAdapter(vocab_size=100, d_model=32, mask=Causal())
        >>> tokens = adapter({"tokens": torch.randint(2, 100, (2, 6)), "lengths": torch.tensor([6, 4])})
        >>> tokens.x.shape
        torch.Size([2, 6, 32])
        >>> tokens.mask
        Padding(lengths=[6, 4]) & Causal()
    """

    def __init__(
        self, vocab_size: int = 256, d_model: int = 128, positional: nn.Module | Positional = "sinusoidal",
        max_len: int = 512, mask: Mask | None = None, char_vocab_size: int = 0, char_dim: int = 32,
        char_channels: int = 64, char_kernel: int = 3, char_encoder: nn.Module | Literal["cnn", "lstm"] = "cnn",
        word_dropout: float = 0.0, dropout: float = 0.1,
    ) -> None:
        super().__init__()
        self.vocab_size = check_nonneg_int("vocab_size", vocab_size, minimum=2)
        self.out_dim = check_nonneg_int("d_model", d_model, minimum=1)
        if not isinstance(positional, nn.Module) and positional not in ("sinusoidal", "learned", "rotary", "none"):
            raise ValueError(
                f"positional must be a module or 'sinusoidal', 'learned', 'rotary' or 'none', got {positional!r}"
            )
        self.positional = type(positional).__name__ if isinstance(positional, nn.Module) else positional
        if mask is not None and not isinstance(mask, Mask):
            raise TypeError(f"mask must be an attnmm Mask or None, got {type(mask).__name__}")
        self.mask = mask
        if not 0.0 <= word_dropout < 1.0:
            raise ValueError(f"word_dropout must be in [0, 1), got {word_dropout}")
        self.word_dropout = float(word_dropout)
        self.embed = nn.Embedding(self.vocab_size, self.out_dim, padding_idx=PAD)
        self.chars: nn.Module | None = None
        self.proj: nn.Linear | None = None
        width: object = None
        if isinstance(char_encoder, nn.Module):
            width = getattr(char_encoder, "out_dim", None)
            if not isinstance(width, int) or width < 1:
                raise ValueError(
                    f"a char_encoder module needs an int attribute out_dim (its feature width), got {width!r} "
                    f"on {type(char_encoder).__name__}"
                )
            self.chars = char_encoder
        elif check_nonneg_int("char_vocab_size", char_vocab_size):
            self.chars = chars = CharFeatures(char_vocab_size, char_dim, char_channels, char_kernel, char_encoder)
            width = chars.out_dim
        if self.chars is not None:
            assert isinstance(width, int)  # (checked above)
            self.proj = nn.Linear(self.out_dim + width, self.out_dim)
        self.pos: nn.Module | None = positional if isinstance(positional, nn.Module) else None
        if positional == "sinusoidal":
            self.pos = SinusoidalPE(self.out_dim)
        elif positional == "learned":
            self.pos = LearnedPE(max_len, self.out_dim)
        self.drop = nn.Dropout(dropout)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.embed.weight, std=self.out_dim**-0.5)
        with torch.no_grad():
            self.embed.weight[PAD].zero_()
        for part in (self.chars, self.proj, self.pos):
            reset = getattr(part, "reset_parameters", None)
            if callable(reset):
                reset()

    def embed_tokens(self, ids: Tensor, chars: Tensor | None = None) -> Tensor:
        """Token features (B, L, D) before the positional encoding."""
        if ids.dim() != 2:
            raise ValueError(f"tokens must be (B, L) ids, got shape {tuple(ids.shape)}")
        if ids.numel() and int(ids.max()) >= self.vocab_size:
            raise ValueError(
                f"token id {int(ids.max())} is outside the embedding of vocab_size={self.vocab_size}; "
                "build the adapter with vocab_size >= the vocabulary's size"
            )
        if self.training and self.word_dropout > 0.0:
            drop = (torch.rand(ids.shape, device=ids.device) < self.word_dropout) & (ids != PAD)
            ids = ids.masked_fill(drop, UNK)
        x = self.embed(ids) * math.sqrt(self.out_dim)  # (B, L, D)
        if self.chars is not None and self.proj is not None:
            if chars is None:
                raise ValueError(
                    "this TextAdapter has character features (char_vocab_size > 0 or a char_encoder module): "
                    "the batch needs 'chars'"
                )
            if chars.shape[:2] != ids.shape:
                raise ValueError(
                    f"chars must be (B, L, C) with (B, L) = {tuple(ids.shape)} like tokens, got {tuple(chars.shape)}"
                )
            x = self.proj(torch.cat([x, self.chars(chars)], dim=-1))  # (B, L, D)
        return x

    def forward(self, batch: dict[str, Any]) -> Tokens:
        if "tokens" not in batch:
            raise KeyError(
                f"TextAdapter needs a batch with 'tokens' (B, L) (token ids; 'lengths' (B,) optional), got keys "
                f"{sorted(batch)}: the text DataModules' collate functions add it"
            )
        ids = batch["tokens"]
        x = self.embed_tokens(ids, batch.get("chars"))
        if self.pos is not None:
            offset = int(batch.get("offset", 0))  # position of the first token (incremental reading)
            positions = torch.arange(offset, offset + ids.size(1), device=x.device) if offset else None
            x = self.pos(x, positions)  # (B, L, D)
        x = self.drop(x)
        lengths = batch.get("lengths")
        mask = self.mask
        if lengths is not None:
            lengths = lengths.to(x.device)
            mask = Padding(lengths) if mask is None else Padding(lengths) & mask
        return Tokens(x, mask, lengths=lengths)

    @classmethod
    def example_batch(cls, batch_size: int = 2) -> dict[str, Tensor]:
        generator = torch.Generator().manual_seed(0)
        L = 12
        lengths = torch.linspace(L // 2, L, batch_size).long()
        real = torch.arange(L) < lengths.view(-1, 1)  # (B, L)
        tokens = torch.randint(2, 256, (batch_size, L), generator=generator).masked_fill(~real, PAD)
        tags = torch.randint(0, 17, (batch_size, L), generator=generator).masked_fill(~real, -100)
        return {"tokens": tokens, "lengths": lengths, "tags": tags}
