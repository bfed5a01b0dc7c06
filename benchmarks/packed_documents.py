"""The packed-documents cases: ``Documents(lengths) & Causal()`` against the ways a user would run it.

64 documents of random lengths packed into one sequence of 32,768 tokens, causal attention within each
document (the ``cu_seqlens`` layout of variable-length kernels). The lengths are a uniformly random
composition of 32,768 into 64 positive parts (63 distinct cut points drawn uniformly), so they spread
as real document lengths do, from a few tokens to several times the mean of 512. Peers:

- SDPA with the dense (L, L) block-diagonal causal bool mask (forward + backward);
- every document padded to the longest and run through SDPA with ``is_causal=True`` (forward +
  backward, the padding and unpadding gathers included);
- FlexAttention compiled on CPU (forward only: it has no CPU backward), its block mask built for each
  new set of lengths (compiled, ``_compile=True``), as a loop over packed batches must (compilation
  excluded);
- the peer a user writes by hand: a loop of ``is_causal`` SDPA calls, one per document (4 heads);
- ``torch.nested`` jagged tensors through SDPA (4 heads), for ``Documents`` alone: with
  ``is_causal=True`` a jagged SDPA call raises on the CPU (torch 2.14.1). It is checked against
  attnmm on small inputs (tests) but has no row: on the CPU its SDPA pads every document to the
  longest, and at the table's size (64 documents up to 4,177 tokens, 4 heads) the padded scores
  alone take 64 * 4 * 4177^2 * 4 B = 18 GB; the run was killed for memory on a 24 GiB machine.

One head of 64 channels (fp32) against the dense and padded peers: the dense peer at H = 4 would take
minutes per call on two cores (its cost is 4 * L^2 = 4.3e9 scores per call); the ratios do not depend
on H.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from attnmm import attend
from attnmm.masks import Causal, Documents, Mask
from benchmarks._measure import train_runner

Inputs = dict[str, Any]
Runner = Callable[[], object]

TOKENS, DOCUMENTS, HEADS, DIM = 32_768, 64, 1, 64


def random_lengths(total: int, parts: int, seed: int) -> Tensor:
    """A uniformly random composition of ``total`` into ``parts`` positive lengths, (parts,)."""
    g = torch.Generator().manual_seed(seed)
    cuts = torch.randperm(total - 1, generator=g)[: parts - 1].add(1).sort().values
    return torch.diff(torch.cat([torch.zeros(1, dtype=torch.long), cuts, torch.full((1,), total)]))


def mask_of(lengths: Tensor) -> Mask:
    return Documents(lengths) & Causal()


def build() -> Inputs:
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, HEADS, TOKENS, DIM, generator=g).requires_grad_(True) for _ in range(3))
    lengths = random_lengths(TOKENS, DOCUMENTS, seed=0)
    return {"q": q, "k": k, "v": v, "grad": torch.randn(1, HEADS, TOKENS, DIM, generator=g), "lengths": lengths}


def _grads(fn: Callable[[Tensor, Tensor, Tensor], Tensor], x: Inputs) -> list[Tensor]:
    out = fn(x["q"], x["k"], x["v"])
    return [out.detach(), *torch.autograd.grad(out, (x["q"], x["k"], x["v"]), x["grad"])]


def _agree(a: list[Tensor], b: list[Tensor], what: str, atol: float = 1e-4) -> str:
    err = max(float((x - y).abs().max()) for x, y in zip(a, b))
    if not err <= atol:
        raise AssertionError(f"attnmm differs from {what}: max abs error {err:.2e} > {atol:.0e}")
    return f"max |attnmm - {what}| = {err:.1e}"


# ------------------------------------------------------------------ attnmm


def ours(x: Inputs) -> Runner:
    mask = mask_of(x["lengths"])
    return train_runner(lambda q, k, v: attend(q, k, v, mask), x)


# ------------------------------------------------------------------ peers


def dense_peer(x: Inputs) -> Runner:
    """SDPA with the dense (L, L) bool mask, built once (1 GiB at L = 32,768)."""
    dense = mask_of(x["lengths"]).dense(TOKENS, TOKENS)
    return train_runner(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=dense), x)


def padded_attention(lengths: Tensor) -> Callable[[Tensor, Tensor, Tensor], Tensor]:
    """Causal SDPA over the documents padded to the longest: (1, H, L, E) in, (1, H, L, E) out."""
    longest = int(lengths.max())
    starts = lengths.cumsum(0) - lengths
    offset = torch.arange(longest)
    valid = offset.view(1, -1) < lengths.view(-1, 1)  # (D, longest)
    slot = valid.view(-1).nonzero().squeeze(1)  # padded slot of every token, in packed order
    assert torch.equal((starts.view(-1, 1) + offset)[valid], torch.arange(int(lengths.sum())))
    D = lengths.numel()

    def pad(t: Tensor) -> Tensor:
        tokens = t[0].transpose(0, 1)  # (L, H, E)
        padded = tokens.new_zeros(D * longest, *tokens.shape[1:]).index_copy(0, slot, tokens)
        return padded.view(D, longest, *tokens.shape[1:]).transpose(1, 2)  # (D, H, longest, E)

    def attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        out = F.scaled_dot_product_attention(pad(q), pad(k), pad(v), is_causal=True)  # (D, H, longest, E)
        out = out.transpose(1, 2).reshape(D * longest, *out.shape[1:2], out.size(-1))[slot]  # (L, H, E)
        return out.transpose(0, 1).unsqueeze(0)  # (1, H, L, E)

    return attention


def padded_peer(x: Inputs) -> Runner:
    return train_runner(padded_attention(x["lengths"]), x)


def loop_attention(lengths: Tensor) -> Callable[[Tensor, Tensor, Tensor], Tensor]:
    """The peer a user writes by hand: one ``is_causal`` SDPA call per document, outputs concatenated."""
    bounds = [0, *lengths.cumsum(0).tolist()]

    def attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        outs = [
            F.scaled_dot_product_attention(q[:, :, a:b], k[:, :, a:b], v[:, :, a:b], is_causal=True)
            for a, b in itertools.pairwise(bounds) if b > a
        ]
        return torch.cat(outs, dim=2)  # (1, H, L, E)

    return attention


def loop_peer(x: Inputs) -> Runner:
    return train_runner(loop_attention(x["lengths"]), x)


def build_heads(heads: int = 4) -> Callable[[], Inputs]:
    """:func:`build` with ``heads`` heads (the loop and nested peers afford more than the dense one)."""

    def make() -> Inputs:
        g = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(1, heads, TOKENS, DIM, generator=g).requires_grad_(True) for _ in range(3))
        lengths = random_lengths(TOKENS, DOCUMENTS, seed=0)
        return {"q": q, "k": k, "v": v, "grad": torch.randn(1, heads, TOKENS, DIM, generator=g), "lengths": lengths}

    return make


def nested_attention(lengths: Tensor) -> Callable[[Tensor, Tensor, Tensor], Tensor]:
    """``torch.nested`` jagged tensors through SDPA, full attention within each document: the documents
    as one nested batch (D, H, j, E). Causal attention is not among them: with ``is_causal=True`` a
    jagged SDPA call raises on the CPU (torch 2.14.1), so this peer computes ``Documents`` alone."""
    sizes = lengths.tolist()

    def attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        def nested(t: Tensor) -> Tensor:
            parts = t[0].transpose(0, 1).split(sizes)  # D tensors (j, H, E)
            return torch.nested.as_nested_tensor(list(parts), layout=torch.jagged).transpose(1, 2)  # (D, H, j, E)

        out = F.scaled_dot_product_attention(nested(q), nested(k), nested(v))  # (D, H, j, E)
        return out.transpose(1, 2).values().transpose(0, 1).unsqueeze(0)  # (1, H, L, E)

    return attention


def nested_peer(x: Inputs) -> Runner:
    return train_runner(nested_attention(x["lengths"]), x)


def ours_documents(x: Inputs) -> Runner:
    """``Documents(lengths)`` alone (full attention within each document)."""
    mask = Documents(x["lengths"])
    return train_runner(lambda q, k, v: attend(q, k, v, mask), x)


def nested_check(x: Inputs) -> str:
    """``Documents(lengths)`` against the nested peer, output and gradients."""
    mask = Documents(x["lengths"])
    return _agree(_grads(lambda q, k, v: attend(q, k, v, mask), x), _grads(nested_attention(x["lengths"]), x),
                  "nested jagged SDPA (output and gradients)")


def loop_check(x: Inputs) -> str:
    """attnmm against the loop of causal SDPA calls, output and gradients."""
    mask = mask_of(x["lengths"])
    return _agree(_grads(lambda q, k, v: attend(q, k, v, mask), x), _grads(loop_attention(x["lengths"]), x),
                  "a loop of is_causal SDPA calls (output and gradients)")


def check(x: Inputs) -> str:
    """attnmm against the padded SDPA peer (output and gradients, every token) and against dense
    attention on 256 sampled query rows (all 32,768 keys) of the dense peer's mask."""
    mask = mask_of(x["lengths"])
    line = _agree(_grads(lambda q, k, v: attend(q, k, v, mask), x), _grads(padded_attention(x["lengths"]), x),
                  "padded SDPA (output and gradients)")
    q, k, v = x["q"].detach(), x["k"].detach(), x["v"].detach()
    rows = torch.randperm(TOKENS, generator=torch.Generator().manual_seed(0))[:256]
    with torch.no_grad():
        out = attend(q, k, v, mask)[:, :, rows]
    b = torch.zeros(1, 1, dtype=torch.long)
    allowed = mask.mask_mod(b, None, rows.view(-1, 1), torch.arange(TOKENS).view(1, -1))  # type: ignore[arg-type]
    scores = q[:, :, rows] @ k.transpose(-1, -2) / math.sqrt(DIM)  # (1, H, 256, S)
    ref = torch.softmax(scores.masked_fill(~allowed, float("-inf")), -1) @ v
    return line + "; " + _agree([out], [ref], "dense masked rows (256 sampled queries)")


# ------------------------------------------------------------------ FlexAttention (CPU, forward)

#: How many sets of lengths the forward-only rows cycle through: each call sees a new one.
NEW_LENGTHS = 16


def _length_sets() -> list[Tensor]:
    return [random_lengths(TOKENS, DOCUMENTS, seed) for seed in range(1, NEW_LENGTHS + 1)]


def _flex_call() -> tuple[Callable[[Tensor], Any], Callable[..., Tensor]]:
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    from attnmm.attention.backends.flex import as_mask_mod

    def block_mask(lengths: Tensor) -> Any:
        # compiled, as FlexAttention advises for long sequences: uncompiled, it evaluates mask_mod on
        # all L^2 positions (15-30 s a mask here)
        mask_mod = as_mask_mod(mask_of(lengths))
        return create_block_mask(mask_mod, None, None, TOKENS, TOKENS, device="cpu", _compile=True)

    return block_mask, torch.compile(flex_attention)


def flex_peer(x: Inputs) -> Runner:
    """Each call: the block mask for the next set of lengths, then compiled flex_attention."""
    block_mask, flex = _flex_call()
    q, k, v = (x[n].detach() for n in "qkv")
    sets = itertools.cycle(_length_sets())

    def run() -> Tensor:
        with torch.no_grad():
            return flex(q, k, v, block_mask=block_mask(next(sets)))

    return run


def ours_forward(x: Inputs) -> Runner:
    """Each call: the mask for the next set of lengths, then attend, forward only."""
    q, k, v = (x[n].detach() for n in "qkv")
    sets = itertools.cycle(_length_sets())

    def run() -> Tensor:
        with torch.no_grad():
            return attend(q, k, v, mask_of(next(sets)))

    return run


def flex_check(x: Inputs) -> str:
    """Both forward outputs against the padded SDPA peer, on one set of lengths; and the split of
    flex's time between its block mask and its kernel."""
    block_mask, flex = _flex_call()
    q, k, v = (x[n].detach() for n in "qkv")
    lengths = _length_sets()[0]
    with torch.no_grad():
        ref = padded_attention(lengths)(q, k, v)
        got = attend(q, k, v, mask_of(lengths))
        flex(q, k, v, block_mask=block_mask(lengths))  # compile
        start = time.perf_counter()
        bm = block_mask(lengths)
        built = time.perf_counter() - start
        start = time.perf_counter()
        theirs = flex(q, k, v, block_mask=bm)
        called = time.perf_counter() - start
    line = _agree([got], [ref], "padded SDPA") + "; " + _agree([theirs], [ref], "padded SDPA").replace(
        "attnmm", "flex"
    )
    return line + f"; flex block mask {built:.2f} s + kernel {called:.2f} s (one call each)"


# ------------------------------------------------------------------ verdicts


def speedup(target: float) -> Callable[[float, float, float, float], tuple[str, bool]]:
    def verdict(tp: float, to: float, mp: float, mo: float) -> tuple[str, bool]:
        return f"{tp / to:.1f}x faster, {mp / max(mo, 1.0):.1f}x less memory", tp / to >= target

    return verdict
