from __future__ import annotations

import pytest
import torch
from _oracle import grads, supporting_backends

from attnmm import attend
from attnmm.attention.backends import get_backend
from attnmm.masks import Causal, Documents, Padding, Window
from attnmm.masks.compose import Intersection


def doc_ids(lengths: list[int], total: int) -> list[int]:
    """The document of every position, -1 past the documents."""
    ids = [d for d, n in enumerate(lengths) for _ in range(n)]
    return ids + [-1] * (total - len(ids))


@pytest.mark.parametrize("lengths", [[3, 0, 2, 1], [0, 0], [], [5], [1, 1, 1]])
def test_attention_stays_within_each_document(lengths: list[int]) -> None:
    L = 7
    ids = doc_ids(lengths, L)
    dense = Documents(lengths).dense(L)
    for i in range(L):
        for j in range(L):
            assert bool(dense[i, j]) == (ids[i] == ids[j] != -1)
    assert Documents(lengths).nnz(L) == sum(n * n for n in lengths)


def test_one_packing_per_batch_item() -> None:
    m = Documents([[2, 3, 0], [4, 0, 0]])
    assert m.batched and m.structure.batch_size == 2
    dense = m.dense(6)
    assert torch.equal(dense[0], Documents([2, 3]).dense(6))
    assert torch.equal(dense[1], Documents([4]).dense(6))
    assert repr(m) == "Documents(lengths=[[2, 3, 0], [4, 0, 0]])"


def test_repr_and_offsets() -> None:
    assert repr(Documents([3, 0, 4])) == "Documents(lengths=[3, 0, 4])"
    assert repr(Documents(list(range(1, 9)))) == "Documents(lengths=[1, 2, 3, 4, 5, 6, ...])"
    m = Documents.from_cu_seqlens(torch.tensor([0, 3, 3, 7]))
    assert m.lengths.tolist() == [3, 0, 4]
    assert m.cu_seqlens.tolist() == [0, 3, 3, 7]
    with pytest.raises(ValueError, match="starting at 0"):
        Documents.from_cu_seqlens([1, 3])


def test_compositions_stay_banded() -> None:
    m = Documents([4, 2, 6])
    assert (m.structure.kind, m.structure.left, m.structure.right) == ("band", 5, 5)
    causal = m & Causal()
    assert isinstance(causal, Intersection)
    assert (causal.structure.kind, causal.structure.left, causal.structure.right) == ("band", 5, 0)
    window = m & Window(2, 0)
    assert (window.structure.kind, window.structure.left, window.structure.right) == ("band", 2, 0)
    padded = Documents([[2, 2], [3, 0]]) & Causal() & Padding([4, 2])
    assert padded.structure.kind == "band" and padded.structure.batched


def test_errors_say_what_to_do() -> None:
    with pytest.raises(ValueError, match="packs 7 tokens but the input has L=6"):
        Documents([3, 4]).dense(6)
    with pytest.raises(ValueError, match="lengths must be >= 0"):
        Documents([2, -1])
    with pytest.raises(TypeError, match="integer tensor"):
        Documents(torch.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match=r"shape \(D,\) or \(B, D\)"):
        Documents(torch.ones(1, 2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="built for a batch of 2 items"):
        Documents([[1], [2]]).dense(4, batch_size=3)


def test_pairs_cost_follows_nnz() -> None:
    # a million tokens in 100k documents: the dense form would hold 10**12 bools
    mask = Documents(torch.full((100_000,), 10)) & Causal()
    pairs = mask.pairs(10**6)
    assert pairs.nnz == 100_000 * 55
    assert Documents(torch.full((100_000,), 10)).nnz_bound(10**6) == 100_000 * 100


@pytest.mark.parametrize(
    "mask",
    [
        Documents([3, 0, 5, 1]) & Causal(),
        Documents([[4, 0, 4], [0, 0, 0]]) & Window(2, 0),
        Documents([0, 6, 2]),
        Documents([[2, 2, 2], [1, 6, 0]]) & Causal() & Padding([8, 5]),
    ],
    ids=repr,
)
def test_band_kernel_trains_on_packed_documents(mask) -> None:
    # forward and backward on CPU on the band kernel (nothing compiled), equal to the reference;
    # empty documents and padding past the documents give zero outputs and gradients
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 9, 4, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
    assert "band" in supporting_backends(q, k, v, mask)
    ref = attend(q, k, v, mask, backend="reference")
    ref_grads = grads(ref, [q, k, v])
    for name in supporting_backends(q, k, v, mask):
        out = attend(q, k, v, mask, backend=name)
        torch.testing.assert_close(out, ref)
        for a, b in zip(grads(out, [q, k, v]), ref_grads):
            torch.testing.assert_close(a, b)
    empty = mask.dense(9, 9, 2).view(-1, 9, 9).logical_not().all(-1)  # (B or 1, L)
    assert torch.all(ref.detach().permute(0, 2, 1, 3)[empty.expand(2, 9)] == 0)


def test_long_packing_runs_on_the_band_kernel() -> None:
    # 64 documents in 4096 tokens: the band is one document wide, not the whole sequence
    from attnmm.attention.planner import forms_of
    from attnmm.attention.problem import Problem

    lengths = torch.randint(1, 64, (64,), generator=torch.Generator().manual_seed(1))
    mask = Documents(lengths) & Causal()
    q = torch.randn(1, 2, 4096, 16)
    problem = Problem.of(q, q, q, mask, 0.25, 0.0, "softmax", None, False, False)
    forms = forms_of(problem)
    assert get_backend("band").unsupported(problem, forms) is None
    assert problem.structure.left == int(lengths.max()) - 1
    assert int(forms.row_counts.sum()) == mask.nnz(4096)


def test_lengths_that_are_not_whole_numbers_are_refused() -> None:
    with pytest.raises(TypeError, match=r"whole numbers \(ints\) of shape \(D,\) or \(B, D\), got float 1.5"):
        Documents([[2, 1.5], [3, 0]])  # type: ignore[list-item]
    assert Documents([[2, 1], [3, 0]]).lengths.tolist() == [[2, 1], [3, 0]]
