r"""The sequence-recognition task: hybrid CTC/attention training, CTC and attention decoding, error rates."""

from __future__ import annotations

import math
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnmm._checks import check_nonneg_int
from attnmm.adapters.base import Adapter, Tokens
from attnmm.lightning.objectives import CTC
from attnmm.lightning.schedule import Optimization
from attnmm.lightning.task import IGNORE_INDEX, EncoderTask, Stage
from attnmm.nn.ctc import CTCHead, ctc_greedy_decode, ctc_prefix_beam_search, nbest_labels
from attnmm.nn.decoder import AttentionDecoder

__all__ = ["SequenceTask"]

Decoding = Literal["greedy", "beam", "rescore", "attention"]


class SequenceTask(EncoderTask):
    r"""Label-sequence recognition (e.g. connected digits) with a masked-attention encoder and a hybrid
    CTC/attention objective ("Hybrid CTC/Attention Architecture for End-to-End Speech Recognition",
    Watanabe et al., 2017):

    .. math::
        \mathcal{L} = \lambda\, \mathcal{L}_{\mathrm{CTC}}(\mathbf{y} \mid \mathbf{H})
        + (1 - \lambda)\, \mathcal{L}_{\mathrm{att}}(\mathbf{y} \mid \mathbf{H}),
        \qquad \mathbf{H} = \mathrm{encoder}(\mathrm{adapter}(\text{batch}))

    with :math:`\lambda` = ``ctc_weight``, :math:`\mathcal{L}_{\mathrm{CTC}}` the objective
    :class:`~attnmm.lightning.CTC` (the task's ``ctc``) of the :class:`~attnmm.nn.ctc.CTCHead`'s logits and
    :math:`\mathcal{L}_{\mathrm{att}}` the cross-entropy of the :class:`~attnmm.nn.AttentionDecoder` under
    teacher forcing (omitted, and :math:`\lambda = 1`, without a decoder). Targets are
    ``batch[target_key]`` (B, U), classes 0..C-1 padded with ``-100``, and ``batch[length_key]`` (B,).

    Validation and test decode every item (``decoding``): ``"greedy"`` (CTC best path),
    ``"beam"`` (CTC prefix beam search), ``"rescore"`` (the CTC beam's hypotheses rescored by
    :math:`\lambda \log p_{\mathrm{CTC}} + (1 - \lambda) \log p_{\mathrm{att}}`) or ``"attention"``
    (the decoder alone, greedily). Logged: ``{stage}_loss``, ``train_ctc_loss``, ``train_att_loss``,
    and for validation and test the label error rate ``{stage}_der`` (edit distance over reference
    labels, summed over the epoch, as :class:`~attnmm.lightning.CTC` logs it) and ``{stage}_string_acc``
    (share of items decoded exactly). Optimiser and schedule: :class:`~attnmm.lightning.EncoderTask`'s.

    Args:
        adapter (Adapter): raw batch -> :class:`~attnmm.adapters.Tokens`.
        encoder (nn.Module): ``encoder(x, mask) -> h`` (B, L, D).
        ctc_head (CTCHead): per-frame logits (B, L, C + 1), blank at index 0; C is the task's class count.
        decoder (AttentionDecoder, optional): attention decoder over the same C classes.
            (default: :obj:`None`)
        ctc_weight (float, optional): :math:`\lambda` in [0, 1]; must be 1 without a decoder.
            (default: :obj:`0.3`)
        decoding (str, optional): ``"greedy"``, ``"beam"``, ``"rescore"`` or ``"attention"``.
            (default: :obj:`"greedy"`)
        beam_width (int, optional): prefixes kept by the beam search. (default: :obj:`8`)
        lr (float, optional): peak learning rate. (default: :obj:`1e-3`)
        optimizer (Optimization, optional): weight decay, warm-up, final rate, Adam or AdamW.
            (default: :obj:`None`, ``Optimization()``)
        label_smoothing (float, optional): label smoothing of the decoder's cross-entropy.
            (default: :obj:`0.0`)
        target_key (str, optional): batch key of the targets. (default: :obj:`"targets"`)
        length_key (str, optional): batch key of the target lengths. (default: :obj:`"target_lengths"`)

    Examples:
        >>> import torch
        >>> from attnmm.adapters import SpeechAdapter
        >>> from attnmm.nn import Encoder
        >>> from attnmm.lightning import SequenceTask
        >>> from attnmm.nn import AttentionDecoder
        >>> from attnmm.nn.ctc import CTCHead
        >>> task = SequenceTask(SpeechAdapter(d_model=32), Encoder(32, 4, 1, 64), CTCHead(32, 10),
        ...                     AttentionDecoder(32, 10, num_layers=1), ctc_weight=0.3)
        >>> batch = {**SpeechAdapter.example_batch(2), "targets": torch.tensor([[1, 2], [3, -100]]),
        ...          "target_lengths": torch.tensor([2, 1])}
        >>> task(batch).shape  # CTC logits (B, L, C + 1)
        torch.Size([2, 23, 11])
        >>> len(task.transcribe(batch))
        2
    """

    def __init__(
        self,
        adapter: Adapter,
        encoder: nn.Module,
        ctc_head: CTCHead,
        decoder: AttentionDecoder | None = None,
        ctc_weight: float = 0.3,
        decoding: Decoding = "greedy",
        beam_width: int = 8,
        lr: float = 1e-3,
        optimizer: Optimization | None = None,
        label_smoothing: float = 0.0,
        target_key: str = "targets",
        length_key: str = "target_lengths",
    ) -> None:
        super().__init__(lr, optimizer)
        self._save_config()
        self.adapter, self.encoder, self.ctc_head, self.decoder = adapter, encoder, ctc_head, decoder
        if not isinstance(ctc_head, CTCHead):
            raise TypeError(f"ctc_head must be an attnmm.nn.ctc.CTCHead, got {type(ctc_head).__name__}")
        self.num_classes = ctc_head.num_classes
        if decoder is not None and decoder.num_classes != self.num_classes:
            raise ValueError(
                f"the decoder has num_classes={decoder.num_classes} but the CTC head has {self.num_classes}: "
                "give both the number of classes in the data"
            )
        if not (0.0 <= ctc_weight <= 1.0 and math.isfinite(ctc_weight)):
            raise ValueError(f"ctc_weight must be in [0, 1], got {ctc_weight}")
        if decoder is None and ctc_weight != 1.0:
            raise ValueError(f"ctc_weight={ctc_weight} weighs an attention decoder, but decoder is None: "
                             "pass a decoder or set ctc_weight=1.0")
        if decoding not in ("greedy", "beam", "rescore", "attention"):
            raise ValueError(f"decoding must be 'greedy', 'beam', 'rescore' or 'attention', got {decoding!r}")
        if decoder is None and decoding in ("rescore", "attention"):
            raise ValueError(f"decoding={decoding!r} needs the attention decoder; pass decoder= or use 'greedy'/'beam'")
        self.ctc_weight, self.decoding = float(ctc_weight), decoding
        self.beam_width = check_nonneg_int("beam_width", beam_width, minimum=1)
        self.label_smoothing, self.target_key, self.length_key = label_smoothing, target_key, length_key
        self.ctc = CTC(target_key, length_key)
        self.ctc.setup(self.num_classes, ctc_head)

    def forward(self, batch: Any) -> Tensor:
        """The CTC logits (B, L, C + 1), blank at index 0."""
        h, tokens, _ = self.encode(batch)
        return self.ctc_head(h, tokens)

    @torch.no_grad()
    def transcribe(self, batch: Any, decoding: Decoding | None = None) -> list[list[int]]:
        """The decoded classes of every item, by ``decoding`` (default: the task's)."""
        h, tokens, _ = self.encode(batch)
        return self._decode(h, tokens, self.ctc_head(h, tokens), decoding or self.decoding)

    def _decode(self, h: Tensor, tokens: Tokens, logits: Tensor, decoding: Decoding) -> list[list[int]]:
        lengths = self.ctc.frame_lengths(h, tokens)
        if decoding == "greedy":
            return ctc_greedy_decode(logits, lengths)
        if decoding in ("rescore", "attention") and self.decoder is None:
            raise ValueError(f"decoding={decoding!r} needs the attention decoder; this task has none")
        if decoding == "attention":
            assert self.decoder is not None
            return self.decoder.greedy(h, tokens, max_labels=int(lengths.max()) if lengths.numel() else 0)
        nbest = ctc_prefix_beam_search(logits.float().log_softmax(-1), lengths, self.beam_width)
        if decoding == "beam":
            return nbest_labels(nbest)
        assert self.decoder is not None
        att = self.decoder.score(h, tokens, [[hyp for hyp, _ in hyps] for hyps in nbest])
        w = self.ctc_weight
        best = []
        for hyps, att_scores in zip(nbest, att, strict=True):
            joint = [w * ctc + (1 - w) * a for (_, ctc), a in zip(hyps, att_scores, strict=True)]
            best.append(hyps[max(range(len(hyps)), key=joint.__getitem__)][0] if hyps else [])
        return best

    def _shared_step(self, batch: Any, stage: Stage) -> Tensor:
        h, tokens, _ = self.encode(batch)
        logits = self.ctc_head(h, tokens)  # (B, L, C + 1)
        ctc, scored_logits, scored_targets = self.ctc.loss(logits, batch, stage, tokens)
        loss = ctc
        targets, target_lengths = batch[self.target_key], batch[self.length_key]
        B = targets.size(0)
        if self.decoder is not None:
            labels_in = self.decoder.teacher_inputs(targets, target_lengths)  # (B, U + 1)
            gold = self.decoder.teacher_targets(targets, target_lengths)  # (B, U + 1)
            att_logits = self.decoder(h, tokens, labels_in)  # (B, U + 1, C + 1)
            att = F.cross_entropy(
                att_logits.flatten(0, 1).float(), gold.flatten(), ignore_index=IGNORE_INDEX,
                label_smoothing=self.label_smoothing,
            )
            loss = self.ctc_weight * ctc + (1 - self.ctc_weight) * att
            if stage == "train":
                self.log("train_att_loss", att, on_step=False, on_epoch=True, batch_size=B, sync_dist=True)
        if stage == "train":
            self.log("train_ctc_loss", ctc, on_step=False, on_epoch=True, batch_size=B, sync_dist=True)
        hyps = None if stage == "train" else self._decode(h, tokens, logits.detach(), self.decoding)
        self.ctc.log(self, loss, scored_logits, scored_targets, stage, hyps)
        return loss

    def predict_step(self, batch: Any, batch_idx: int) -> list[list[int]]:
        return self.transcribe(batch)

