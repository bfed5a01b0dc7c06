from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F

from attnmm.adapters import SpeechAdapter, Tokens
from attnmm.lightning import SequenceTask
from attnmm.masks import Chunk
from attnmm.nn import AttentionDecoder, CTCHead, Encoder
from attnmm.nn.ctc import ctc_greedy_decode, ctc_prefix_beam_search


def _collapse(path: tuple[int, ...]) -> tuple[int, ...]:
    out, prev = [], 0
    for k in path:
        if k != prev and k != 0:
            out.append(k - 1)
        prev = k
    return tuple(out)


def _brute_force(log_probs: torch.Tensor) -> dict[tuple[int, ...], float]:
    """log p(y | X) of every labelling y by summing over all frame paths (the oracle), one item (L, C + 1)."""
    totals: dict[tuple[int, ...], float] = {}
    L, V = log_probs.shape
    for path in itertools.product(range(V), repeat=L):
        p = math.exp(sum(float(log_probs[t, k]) for t, k in enumerate(path)))
        totals[_collapse(path)] = totals.get(_collapse(path), 0.0) + p
    return {y: math.log(p) for y, p in totals.items()}


def _edits(a: list[int], b: list[int]) -> int:
    """Levenshtein distance, the oracle of the digit error rate."""
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (x != y))
    return row[-1]


def test_greedy_decoding_on_hand_made_frames() -> None:
    # blank, 3, 3, blank, 3, 7, blank, blank | 1, 1, 1, 2 (only 3 real frames: 1 1 1)
    frames = torch.tensor([[0, 4, 4, 0, 4, 8, 0, 0], [2, 2, 2, 3, 3, 3, 3, 3]])
    logits = F.one_hot(frames, 11).float() * 4.0
    assert ctc_greedy_decode(logits) == [[3, 3, 7], [1, 2]]
    assert ctc_greedy_decode(logits, torch.tensor([8, 3])) == [[3, 3, 7], [1]]
    with pytest.raises(ValueError, match="frame counts of at most L = 8"):
        ctc_greedy_decode(logits, torch.tensor([9, 3]))


@pytest.mark.parametrize("seed", range(4))
def test_prefix_beam_search_equals_the_sum_over_paths(seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    log_probs = torch.randn(1, 5, 3, generator=g).log_softmax(-1)  # L = 5, two classes and the blank
    exact = _brute_force(log_probs[0])
    nbest = ctc_prefix_beam_search(log_probs, beam_width=len(exact))[0]  # no pruning: exact
    assert len(nbest) == len(exact)
    for labels, score in nbest:
        assert score == pytest.approx(exact[tuple(labels)], abs=1e-5)
    best = max(exact, key=exact.__getitem__)
    assert nbest[0][0] == list(best)
    assert [s for _, s in nbest] == sorted((s for _, s in nbest), reverse=True)


def test_beam_finds_the_labelling_greedy_misses() -> None:
    # every frame's best token is the blank (0.6), yet "0" beats "" (0.6^3 = 0.216):
    # p("0") = 1 - p("") - p("0 0"), where "0 0" is only the path 0, blank, 0 (0.4 * 0.6 * 0.4 = 0.096)
    log_probs = torch.tensor([[0.6, 0.4]]).log().expand(3, 2).unsqueeze(0)
    assert ctc_greedy_decode(log_probs) == [[]]
    (best, score), *_ = ctc_prefix_beam_search(log_probs, beam_width=4)[0]
    assert best == [0] and score == pytest.approx(math.log(0.688), abs=1e-6)


@pytest.mark.parametrize("seed", range(5))
def test_beam_width_one_is_greedy_on_peaked_frames(seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    path = torch.randint(0, 11, (3, 30), generator=g)
    logits = F.one_hot(path, 11).float() * 6.0 + 0.5 * torch.randn(3, 30, 11, generator=g)
    lengths = torch.tensor([30, 17, 1])
    beam = [hyps[0][0] for hyps in ctc_prefix_beam_search(logits.log_softmax(-1), lengths, beam_width=1)]
    assert beam == ctc_greedy_decode(logits, lengths)


def make_task(ctc_weight: float = 0.3, decoding: str = "greedy", decoder: bool = True) -> SequenceTask:
    torch.manual_seed(0)
    return SequenceTask(
        SpeechAdapter(d_model=16, channels=4, mask=Chunk(4, 1), freq_mask=0, time_mask=0, dropout=0.0),
        Encoder(16, 2, 1, 32, dropout=0.0),
        CTCHead(16, 10),
        AttentionDecoder(16, 10, num_heads=2, num_layers=1, dim_feedforward=32, dropout=0.0) if decoder else None,
        ctc_weight=ctc_weight,
        decoding=decoding,  # type: ignore[arg-type]
        beam_width=4,
    )


def _batch() -> dict[str, torch.Tensor]:
    return {
        **SpeechAdapter.example_batch(3),
        "targets": torch.tensor([[1, 2, 2], [9, -100, -100], [0, 5, -100]]),
        "target_lengths": torch.tensor([3, 1, 2]),
    }


def test_one_training_step_of_the_joint_loss() -> None:
    task, batch = make_task(ctc_weight=0.3), _batch()
    task.log = lambda *args, **kwargs: None  # type: ignore[method-assign]
    loss = task.training_step(batch, 0)
    h, tokens, _ = task.encode(batch)
    log_probs = task.ctc_head(h, tokens).log_softmax(-1).transpose(0, 1)  # (L, B, C + 1)
    labels = torch.tensor([[2, 3, 3], [10, 0, 0], [1, 6, 0]])  # digit d is index d + 1; blank 0
    ctc = F.ctc_loss(log_probs, labels, tokens.lengths, batch["target_lengths"])
    y_in = torch.tensor([[10, 1, 2, 2], [10, 9, 10, 10], [10, 0, 5, 10]])  # <sos> = 10
    y_out = torch.tensor([[1, 2, 2, 10], [9, 10, -100, -100], [0, 5, 10, -100]])  # <eos> = 10
    assert torch.equal(task.decoder.teacher_inputs(batch["targets"], batch["target_lengths"]), y_in)
    assert torch.equal(task.decoder.teacher_targets(batch["targets"], batch["target_lengths"]), y_out)
    att = F.cross_entropy(task.decoder(h, tokens, y_in).flatten(0, 1), y_out.flatten(), ignore_index=-100)
    torch.testing.assert_close(loss, 0.3 * ctc + 0.7 * att)
    loss.backward()
    for part in (task.adapter, task.encoder, task.ctc_head, task.decoder):
        assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in part.parameters())


def test_ctc_only_task_and_the_settings_it_refuses() -> None:
    task = make_task(ctc_weight=1.0, decoder=False)
    task.log = lambda *args, **kwargs: None  # type: ignore[method-assign]
    batch = _batch()
    h, tokens, _ = task.encode(batch)
    log_probs = task.ctc_head(h, tokens).log_softmax(-1).transpose(0, 1)  # (L, B, C + 1)
    labels = torch.tensor([[2, 3, 3], [10, 0, 0], [1, 6, 0]])  # digit d is index d + 1; blank 0
    expected = F.ctc_loss(log_probs, labels, tokens.lengths, batch["target_lengths"])
    torch.testing.assert_close(task.training_step(batch, 0), expected)
    with pytest.raises(ValueError, match="ctc_weight=0.3 weighs an attention decoder, but decoder is None"):
        make_task(ctc_weight=0.3, decoder=False)
    with pytest.raises(ValueError, match="decoding='rescore' needs the attention decoder"):
        make_task(ctc_weight=1.0, decoding="rescore", decoder=False)
    with pytest.raises(ValueError, match=r"ctc_weight must be in \[0, 1\], got 1.5"):
        make_task(ctc_weight=1.5)
    with pytest.raises(ValueError, match="the decoder has num_classes=5 but the CTC head has 10"):
        SequenceTask(SpeechAdapter(d_model=16), Encoder(16, 2, 1, 32), CTCHead(16, 10), AttentionDecoder(16, 5))


def test_bad_targets_are_named() -> None:
    task, batch = make_task(), _batch()
    task.log = lambda *args, **kwargs: None  # type: ignore[method-assign]
    with pytest.raises(ValueError, match=r"targets must be classes 0..9 \(num_classes=10\), got values from 0 to 10"):
        task.training_step({**batch, "targets": torch.tensor([[1, 2, 10], [9, -100, -100], [0, 5, -100]])}, 0)
    frames = int(task.encode(batch)[1].lengths[1])
    long = torch.full((3, frames + 1), 3)
    with pytest.raises(ValueError, match=rf"item 1 has {frames} frames for {frames + 1} labels.*max_digits"):
        task.training_step({**batch, "targets": long, "target_lengths": torch.tensor([1, frames + 1, 1])}, 0)
    repeats = torch.tensor([[1, 1] * (frames // 2 + 1)] * 3)  # fewer labels than frames, but repeated
    with pytest.raises(ValueError, match="plus one between repeated labels"):
        task.training_step({**batch, "targets": repeats, "target_lengths": torch.full((3,), repeats.size(1))}, 0)
    with pytest.raises(KeyError, match=r"CTC needs the targets \['targets', 'target_lengths'\]"):
        task.training_step(SpeechAdapter.example_batch(2), 0)


def test_digit_error_rate_and_string_accuracy_on_known_strings() -> None:
    task = make_task().eval()
    task.log = lambda *args, **kwargs: None  # type: ignore[method-assign]
    refs = [[1, 2, 2], [9], [0, 5]]
    hyps = [[1, 2], [9], [5, 0, 3]]  # a deletion; exact; an insertion (5) and a substitution (5 -> 3)
    task._decode = lambda *args: hyps  # type: ignore[method-assign]
    task.validation_step(_batch(), 0)
    errors = sum(_edits(h, r) for h, r in zip(hyps, refs, strict=True))
    assert errors == 3
    assert float(task.ctc.metrics["val_der"].compute()) == pytest.approx(errors / 6)
    assert float(task.ctc.metrics["val_string_acc"].compute()) == pytest.approx(1 / 3)


def test_decoders_agree_where_they_should() -> None:
    task, batch = make_task(ctc_weight=1.0).eval(), _batch()
    greedy, beam = task.transcribe(batch, "greedy"), task.transcribe(batch, "beam")
    assert task.transcribe(batch, "rescore") == beam  # ctc_weight 1: the attention scores weigh nothing
    assert len(greedy) == 3 and all(0 <= d <= 9 for y in greedy + beam for d in y)
    attention = task.transcribe(batch, "attention")
    assert len(attention) == 3 and all(0 <= d <= 9 for y in attention for d in y)


@torch.no_grad()
def test_attention_decoder_is_causal_and_scores_hypotheses() -> None:
    task = make_task().eval()
    h, tokens, _ = task.encode(_batch())
    dec = task.decoder
    y = torch.tensor([[10, 1, 2, 3], [10, 4, 4, 4], [10, 7, 0, 0]])
    changed = y.clone()
    changed[:, 3] = 9
    torch.testing.assert_close(dec(h, tokens, y)[:, :3], dec(h, tokens, changed)[:, :3])
    # scores are the teacher-forced log-probabilities of the labels and <eos>
    scores = dec.score(h, tokens, [[[1, 2]], [], [[7], []]])
    logp = dec(h, tokens, torch.tensor([[10, 1, 2]] * 3)).log_softmax(-1)
    assert scores[1] == []
    assert scores[0][0] == pytest.approx(float(logp[0, 0, 1] + logp[0, 1, 2] + logp[0, 2, 10]), abs=1e-5)
    empty = dec(h, tokens, torch.tensor([[10]] * 3)).log_softmax(-1)
    assert scores[2][1] == pytest.approx(float(empty[2, 0, 10]), abs=1e-5)
    # items keep their own frames (cross-attention is masked to each item's real frames)
    short = Tokens(h[:1, : int(tokens.lengths[0])], lengths=tokens.lengths[:1])
    torch.testing.assert_close(dec(h[:1], Tokens(h[:1], lengths=tokens.lengths[:1]), y[:1]),
                               dec(short.x, short, y[:1]), atol=1e-5, rtol=1e-5)
