r"""A recurrent encoder (LSTM or GRU) that takes the attention encoder's place in a model."""

from __future__ import annotations

import contextlib
from typing import Any, Literal

import torch
from torch import Tensor, nn

from attnmm._checks import check_nonneg_int, refuse_encoder_options
from attnmm.masks import Mask, padding_lengths, without_padding
from attnmm.nn._inputs import check_dropout
from attnmm.nn.state import IncrementalState

_CELLS: dict[str, type[nn.LSTM] | type[nn.GRU]] = {"lstm": nn.LSTM, "gru": nn.GRU}


class RecurrentEncoder(nn.Module):
    r"""A stack of LSTM ("Long Short-Term Memory", Hochreiter and Schmidhuber, 1997) or GRU (Cho et
    al., 2014) layers with the call signature of :class:`~attnmm.nn.Encoder`, the recurrent
    baseline of the attention encoders.

    .. math::
        \mathbf{s}_t = \mathrm{cell}(\mathbf{x}_t, \mathbf{s}_{t-1}), \qquad
        \mathbf{h}_t = \mathrm{LN}\left(\mathbf{W} \big[\overrightarrow{\mathbf{s}}_t \,\|\,
        \overleftarrow{\mathbf{s}}_t\big]\right)

    A unidirectional encoder's output at position :math:`t` depends on :math:`\mathbf{x}_{\le t}`
    only (the allowed set of ``Causal()``), a bidirectional one's on the whole sequence (``Full()``).
    The difference from attention is how: step :math:`t` waits for step :math:`t - 1`, so the
    positions of a sequence are computed one after another, and everything the encoder knows of
    the past is the fixed-size state :math:`\mathbf{s}_t`. The projection :math:`\mathbf{W}` is
    left out when the concatenated states already have width D.

    The mask says which inputs an output may depend on, so the encoder accepts exactly the masks it
    honours: ``None``/``Full()``, ``Causal()`` (unidirectional only) and their intersection with
    ``Padding(lengths)``, whose padded positions are neither read nor written (output 0). Any other
    mask (a window, chunks, a graph) is refused with its name: a recurrence cannot forget the
    keys a window drops.

    With ``state`` (an :class:`~attnmm.nn.IncrementalState`), a unidirectional encoder reads
    its input a few tokens at a time, carrying its hidden state between calls: the outputs equal one
    call on the whole sequence, for a state of constant size.

    Args:
        d_model (int): input and output width D.
        num_layers (int, optional): stacked recurrent layers. (default: :obj:`1`)
        cell (str, optional): ``"lstm"`` or ``"gru"``. (default: :obj:`"lstm"`)
        bidirectional (bool, optional): also read the sequence backwards. (default: :obj:`False`)
        hidden_size (int, optional): state width per direction. (default: D, or D / 2 when
            bidirectional)
        dropout (float, optional): dropout between the layers and on the output (training only).
            (default: :obj:`0.0`)

    Shapes:
        - **input:** x (B, L, D), mask
        - **output:** (B, L, D)

    Examples:
        >>> import torch
        >>> from attnmm.masks import Causal, Padding
        >>> enc = RecurrentEncoder(32, num_layers=2)
        >>> enc(torch.randn(2, 10, 32), Causal() & Padding([10, 6])).shape  # (B, L, D)
        torch.Size([2, 10, 32])
        >>> RecurrentEncoder(32, bidirectional=True)(torch.randn(2, 10, 32)).shape
        torch.Size([2, 10, 32])
    """

    def __init__(
        self, d_model: int, num_layers: int = 1, *, cell: Literal["lstm", "gru"] = "lstm", bidirectional: bool = False,
        hidden_size: int | None = None, dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.d_model = check_nonneg_int("d_model", d_model, minimum=1)
        self.num_layers = check_nonneg_int("num_layers", num_layers, minimum=1)
        if cell not in _CELLS:
            raise ValueError(f"cell must be one of {sorted(_CELLS)}, got {cell!r}")
        check_dropout(dropout)
        self.cell, self.bidirectional = cell, bool(bidirectional)
        directions = 2 if self.bidirectional else 1
        default = self.d_model // directions
        self.hidden_size = check_nonneg_int("hidden_size", default if hidden_size is None else hidden_size, minimum=1)
        self.rnn = _CELLS[cell](
            self.d_model, self.hidden_size, num_layers=self.num_layers, batch_first=True,
            dropout=dropout if self.num_layers > 1 else 0.0, bidirectional=self.bidirectional,
        )
        width = directions * self.hidden_size
        self.proj: nn.Linear | None = nn.Linear(width, self.d_model) if width != self.d_model else None
        self.drop = nn.Dropout(dropout)
        self.norm = nn.LayerNorm(self.d_model)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.rnn.reset_parameters()
        if self.proj is not None:
            self.proj.reset_parameters()
        self.norm.reset_parameters()

    def forward(
        self, x: Tensor, mask: Mask | None = None, *, tokens: Any = None, state: IncrementalState | None = None,
        return_weights: bool = False,
    ) -> Tensor:
        refuse_encoder_options(self, return_weights=return_weights)
        if x.dim() != 3 or x.size(-1) != self.d_model:
            raise ValueError(
                f"RecurrentEncoder expects padded x of shape (B, L, D) with D={self.d_model}, got shape "
                f"{tuple(x.shape)}"
            )
        lengths = self._lengths(mask)
        if state is not None and (self.bidirectional or lengths is not None):
            raise ValueError(
                "state= reads a sequence incrementally, which needs a unidirectional encoder and a batch "
                f"without padding, got bidirectional={self.bidirectional} and mask {mask!r}"
            )
        n = lengths
        if n is not None and (n.numel() != x.size(0) or (n.numel() and int(n.max()) > x.size(1))):
            raise ValueError(f"the mask's Padding lengths {n.tolist()} do not fit x of shape {tuple(x.shape)}")
        # oneDNN computes no bfloat16 LSTM/GRU on every CPU ("unsupported datatype"): under CPU autocast
        # the recurrence runs in float32, the layers around it stay in the autocast dtype
        cpu_autocast = x.device.type == "cpu" and torch.is_autocast_enabled("cpu")
        with torch.autocast("cpu", enabled=False) if cpu_autocast else contextlib.nullcontext():
            h = x.float() if cpu_autocast else x
            if state is not None:
                out, carried = self.rnn(h, state.get(self))  # (B, L, dirs * hidden)
                state.set(self, carried)
            elif lengths is None:
                out, _ = self.rnn(h)
            else:
                out, _ = self.rnn(nn.utils.rnn.pack_padded_sequence(h, lengths.clamp(min=1).cpu(), True, False))
                out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=x.size(1))
        if self.proj is not None:
            out = self.proj(out)
        out = self.norm(self.drop(out))  # (B, L, D)
        if lengths is not None:
            real = torch.arange(x.size(1), device=x.device) < lengths.to(x.device).view(-1, 1)  # (B, L)
            out = out * real.unsqueeze(-1)
        return out

    def _lengths(self, mask: Mask | None) -> Tensor | None:
        """The Padding lengths in ``mask``, after checking that the recurrence honours the mask."""
        if mask is None:
            return None
        # the recurrence reads everything (bidirectional) or every earlier position: it honours a mask that
        # is, on the real tokens, full (or causal), and the batch's key padding as its lengths
        honoured = ("full",) if self.bidirectional else ("full", "causal")
        core = without_padding(mask)
        if core.batched or core.structure.kind not in honoured:
            reads = "the whole sequence" if self.bidirectional else "every earlier position"
            allowed = "None, Full()" if self.bidirectional else "None, Full(), Causal()"
            raise ValueError(
                f"a {'bidirectional ' if self.bidirectional else ''}recurrent encoder reads {reads}, so it "
                f"cannot honour the mask {mask!r}; use {allowed}, optionally & one Padding(lengths)"
            )
        return padding_lengths(mask)

    def extra_repr(self) -> str:
        return f"hidden_size={self.hidden_size}, cell={self.cell!r}, bidirectional={self.bidirectional}"


__all__ = ["RecurrentEncoder"]
