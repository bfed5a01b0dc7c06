"""The segments backend: each query segment of a Segments mask on the backend its blocks call for."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from _compare import randn
from _oracle import grads, planned
from hypothesis import given
from hypothesis import strategies as st

from attnmm import attend
from attnmm.attention.backends import _calibration, get_backend, list_backends
from attnmm.attention.forms import Forms, FormStore
from attnmm.attention.planner import Plan, choose_backend, forms_of, split_problem
from attnmm.attention.problem import Inputs, Problem
from attnmm.masks import Causal, Chunk, Grid, Mask, Padding, Segments, Window, as_blocks


def problem(mask: Mask, B: int, L: int, plan: Plan | None = None, **kwargs: Any) -> tuple[Problem, Forms]:
    """A problem of zeros under ``mask`` and its mask's forms, planned (its split worked out) with ``plan``."""
    q = torch.zeros(B, 2, L, 8)
    options: dict[str, Any] = dict(scale=0.5, dropout_p=0.0, score="softmax", bias=None, return_weights=False)
    options.update(kwargs)
    made = Problem.of(q, q, q, mask, packed=False, **options)
    forms = forms_of(made) if plan is None else plan.forms(mask, L, L, made.batch_size, q.device)
    forms.splits[made] = split_problem(made, forms, plan)
    return made, forms


def split_of(made: tuple[Problem, Forms]) -> Any:
    """The split the planner worked out for a problem."""
    return made[1].splits[made[0]]


@pytest.fixture
def ran(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, int]]:
    """The (backend, L, S) of every backend forward run."""
    calls: list[tuple[str, int, int]] = []
    for name in list_backends():
        backend = get_backend(name)

        def spy(p: Problem, forms: Forms, inputs: Inputs, backend: Any = backend, forward: Any = backend.forward
                ) -> Any:
            calls.append((backend.name, p.L, p.S))
            return forward(p, forms, inputs)

        monkeypatch.setattr(backend, "forward", spy)
    return calls


def test_each_segment_runs_on_its_own_backend(monkeypatch: pytest.MonkeyPatch, ran: list) -> None:
    monkeypatch.setattr(_calibration, "COSTS", {})  # the declared preference, the same on every machine
    # an 8 x 8 image under a 3 x 3 neighbourhood, 300 audio frames under a window, 40 causal text tokens
    mask = Segments([64, 300, 40], within=[Grid(8, 8, kernel=3), Window(8, 2), Causal()])
    q, k, v = (randn(2, 2, 404, 8, dtype=torch.float32, seed=s) for s in range(3))
    assert choose_backend(*problem(mask, 2, 404)).name == "segments"
    out = attend(q, k, v, mask)
    assert ran == [("segments", 404, 404), ("sparse", 64, 64), ("band", 300, 300), ("sdpa", 40, 40)]
    torch.testing.assert_close(out, attend(q, k, v, mask, backend="reference"), atol=3e-5, rtol=1e-4)


def test_linked_segments_attend_their_keys_only(ran: list) -> None:
    # text (segment 2) attends the image and itself, not the audio: its keys are segments 0 and 2
    mask = Segments(
        [4, 6, 3], within=[None, Chunk(2, 0), Causal()], links=[[True, False, False], [False, True, False],
                                                                 [Window(1, 1), False, True]]
    )
    q, k, v = (randn(1, 2, 13, 4, seed=s) for s in range(3))
    attend(q, k, v, mask, backend="segments")
    assert ran[0] == ("segments", 13, 13)
    # the text's keys laid together (7), or all 13 in place when that is estimated as cheap (no copy)
    text = [(L, S) for _, L, S in ran[1:] if L == 3]
    assert sorted((L, S) for _, L, S in ran[1:] if L != 3) == [(4, 4), (6, 6)] and text in ([(3, 7)], [(3, 13)])
    over_all = mask.row_over_all(2)
    assert over_all is not None
    allowed = over_all.dense(3, 13)
    assert not allowed[:, 4:10].any() and allowed[:, :4].any() and allowed[:, 10:].any()


def test_a_row_of_several_links_takes_the_cheaper_form() -> None:
    # the audio frames attend their window and 2 shared tokens: pairs cost the same wherever the keys
    # lie, so the keys are used in place; a dense row over far fewer keys than L is laid together
    from attnmm.attention.backends._split import _keys, row_problem

    mask = Segments([64, 32, 2], within=[Window(2, 2), None, None], links=[[True, False, True], [False, True, True],
                                                                          [True, True, True]])
    q, k, v = (randn(1, 2, 98, 8, seed=s) for s in range(3))
    problem, forms = planned(q, k, v, mask, scale=8**-0.5)
    split = forms.splits[problem]
    assert split is not None
    ref = attend(q, k, v, mask, backend="reference")
    for a, row in enumerate(split.rows):
        assert row is not None
        rows = slice(mask.offsets[a], mask.offsets[a + 1])
        inputs = Inputs(q[:, :, rows], _keys(split, row, k), _keys(split, row, v))
        out, _ = row.backend.forward(row_problem(problem, split, row), row.forms, inputs)
        torch.testing.assert_close(out, ref[:, :, rows])
    assert split.rows[2] is not None and split.rows[2].keys == "all"  # the row linked to all: the inputs themselves
    for row in split.rows[:2]:  # pairs cost the same wherever the keys lie: the sparse kernel takes them in place
        assert row is not None and (row.backend.name != "sparse" or row.keys == "all")


def test_one_backward_for_every_segment() -> None:
    """The split runs as one autograd node: the inputs' gradients come from one backward that adds every
    segment's into one buffer, whatever each segment's backend and however its keys are read."""
    links = [[True, False, True], [True, True, False], [True, True, True]]
    mask = Segments([6, 5, 3], within=[Window(2, 1), Grid(1, 5, kernel=3), Causal()], links=links,
                    lengths=[[6, 4, 3], [5, 5, 2]])
    q, k, v = (randn(2, 2, 14, 4, seed=s).requires_grad_(True) for s in range(3))
    out = attend(q, k, v, mask, backend="segments")
    assert type(out.grad_fn).__name__ == "SplitAttentionBackward"
    ref = attend(q, k, v, mask, backend="reference")
    torch.testing.assert_close(out, ref)
    for a, b in zip(grads(out, [q, k, v]), grads(ref, [q, k, v])):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("score", ["softmax", "relu"])
@pytest.mark.parametrize(
    "mask",
    [
        Segments([4, 5, 3], within=[Grid(2, 2, kernel=3), Window(1, 0), Causal()], lengths=[[4, 0, 3], [2, 5, 0]]),
        Segments([4, 5, 3], within=[Grid(2, 2, kernel=3), Window(1, 0), Causal()], links="full",
                 lengths=[[4, 0, 3], [2, 5, 0]]),
        Segments([4, 5, 3], within=[None, Padding([3, 5]), None],
                 links=[[False, False, False], [True, True, False], [Window(0, 2), Causal(), True]]),
        Segments([0, 5, 2], within=[None, Causal(), None], links="full"),
    ],
    ids=repr,
)
def test_equals_the_reference(mask: Mask, score: str) -> None:
    q, k, v = (randn(2, 2, 12 if "4, 5" in repr(mask) else 7, 3, seed=s).requires_grad_(True) for s in range(3))
    ref = attend(q, k, v, mask, backend="reference", score=score)  # type: ignore[arg-type]
    out = attend(q, k, v, mask, backend="segments", score=score)  # type: ignore[arg-type]
    torch.testing.assert_close(out, ref)
    for a, b in zip(grads(out, [q, k, v]), grads(ref, [q, k, v])):
        torch.testing.assert_close(a, b)


def test_no_dense_mask_of_the_whole_sequence(monkeypatch: pytest.MonkeyPatch) -> None:
    # 6000 positions: the (L, L) mask would hold 36M bools; only blocks of one segment are ever dense
    dense_shapes: list[tuple[int, int]] = []
    build = Forms.dense
    monkeypatch.setattr(Forms, "dense", lambda f: dense_shapes.append((f.L, f.S)) or build(f))
    mask = Segments([1000, 4800, 200], within=[Grid(25, 40, kernel=3), Window(16, 4), Causal()],
                    lengths=[[1000, 3000, 150]])
    q, k, v = (randn(1, 2, 6000, 8, dtype=torch.float32, seed=s).requires_grad_(True) for s in range(3))
    out = attend(q, k, v, mask)
    out.sum().backward()
    assert all(shape != (6000, 6000) for shape in dense_shapes)
    assert torch.isfinite(q.grad).all()


def test_refuses_what_it_does_not_compute() -> None:
    backend = get_backend("segments")
    assert "is not made of blocks" in backend.unsupported(*problem(Window(2, 2), 1, 8))
    composed = Segments([4, 4], lengths=[[4, 2]]) & Padding([6])  # blocks, each seen with its padding
    assert backend.unsupported(*problem(composed, 1, 8)) is None
    q, k, v = (randn(1, 2, 8, 4, seed=s) for s in range(3))
    expected = attend(q, k, v, composed, backend="reference")
    torch.testing.assert_close(attend(q, k, v, composed, backend="segments"), expected)
    assert backend.unsupported(*problem(Segments([4, 4], within=[Causal(), None]), 1, 8, return_weights=True))
    assert backend.memory_bytes(*problem(Window(2, 2), 1, 8)) == 0


def test_dropout_runs_per_segment() -> None:
    # each segment's backend drops its own weights: the output changes, missing segments stay 0
    mask = Segments([4, 6, 3], within=[Grid(2, 2, kernel=3), Window(2, 0), None], links="full",
                    lengths=[[4, 0, 3], [2, 6, 3]])
    q, k, v = (randn(2, 2, 13, 4, seed=s).requires_grad_(True) for s in range(3))
    torch.manual_seed(0)
    out = attend(q, k, v, mask, backend="segments", dropout_p=0.5)
    assert not torch.allclose(out, attend(q, k, v, mask, backend="segments"))
    assert torch.all(out[0, :, 4:10] == 0) and torch.all(out[1, :, 2:4] == 0)
    for g in grads(out, [q, k, v]):
        assert torch.isfinite(g).all()


@given(st.data(), st.integers(1, 2), st.integers(1, 12))
def test_packed_documents_run_as_segments(data: st.DataObject, B: int, L: int) -> None:
    # Documents shared by the batch, alone or & any mask: one segment per document, each with the other
    # masks seen from the document's offset (a chunk or a padding does not read the same from there)
    from _oracle import loop_attend

    from attnmm.masks import Causal, Documents, Full, Window

    sizes = data.draw(st.lists(st.integers(0, 4), max_size=4))
    total = 0
    lengths = []
    for n in sizes:
        lengths.append(min(n, L - total))
        total += lengths[-1]
    padding = Padding(data.draw(st.lists(st.integers(0, L), min_size=B, max_size=B)))
    extra = data.draw(st.sampled_from([None, Causal(), Window(1, 0), Window(0, 2), Full(), Chunk(2, 1), padding]))
    mask = Documents(lengths) if extra is None else Documents(lengths) & extra
    assert as_blocks(mask, L, L) is not None
    q, k, v = (torch.randn(B, 2, L, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    out = attend(q, k, v, mask, scale=0.5, backend="segments")
    expected = loop_attend(q, k, v, mask, 0.5, "softmax", None)
    torch.testing.assert_close(out, expected)
    if not expected.requires_grad:  # no document: every output is 0, independent of the inputs
        assert not out.any()
        return
    grad = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v), grad, allow_unused=True, materialize_grads=True)
    want = torch.autograd.grad(expected, (q, k, v), grad, allow_unused=True, materialize_grads=True)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)


def test_other_band_masks_are_refused_by_name() -> None:
    from attnmm.masks import Documents

    q = torch.randn(2, 1, 6, 4)
    for mask in [Window(1, 1), Documents([[3, 3], [2, 4]]) & Causal(), Documents([[3, 3], [2, 4]]) & Chunk(2, 1)]:
        reason = get_backend("segments").unsupported(*planned(q, q, q, mask, 0.5))
        assert reason is not None and "is not made of blocks" in reason, mask


def test_dispatch_sends_many_packed_documents_to_segments() -> None:
    from attnmm.masks import Documents

    lengths = torch.tensor([700, 30, 1200, 500, 90, 1576])  # 4,096 tokens in 6 documents
    q = torch.randn(1, 1, 4096, 16)
    assert choose_backend(*planned(q, q, q, Documents(lengths) & Causal(), 0.25)).name == "segments"


@pytest.mark.parametrize("head_dim", [0, 3])
def test_a_fixed_shape_segments_mask_inside_the_blocks_of_another(head_dim: int) -> None:
    """Segments of fixed sizes intersected with a split whose blocks are smaller than them (one of them
    empty): the blocks' bounds are asked of a shifted view, which has none but 0 when empty."""
    mask = Segments([0, 1], links="full") & Segments([1]) & Padding([0])
    assert mask.shifted(0, 0).nnz_bound(1, 0) == 0 and mask.parts[1].shifted(0, 0).nnz_bound(1, 0) == 0
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, 1, head_dim, dtype=torch.float64, generator=g).requires_grad_(True) for _ in "qkv")
    out, ref = attend(q, k, v, mask), attend(q, k, v, mask, backend="reference")
    torch.testing.assert_close(out, ref)
    for a, b in zip(grads(out, [q, k, v]), grads(ref, [q, k, v])):
        torch.testing.assert_close(a, b)


def _segments_on_the_sparse_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every segment of a split on the sparse kernel (the other backends unavailable)."""
    for name in list_backends():
        if name not in ("segments", "sparse"):
            monkeypatch.setattr(get_backend(name), "available", lambda: "off in this test")


MEMORY_MASKS = [
    # rows reading one key segment, all keys in place, and several laid together; padded segments
    Segments([6, 5, 3], within=[Window(2, 1), Grid(1, 5, kernel=3), Causal()],
             links=[[True, False, True], [True, True, False], [True, True, True]], lengths=[[6, 4, 3], [5, 5, 2]]),
    Segments([9, 4, 2], within=[Window(1, 1), Grid(2, 2, kernel=3), None],
             links=[[True, False, True], [False, True, False], [True, True, True]]),
    # queries with nothing to attend: segment 0 reads only segment 1, all padding in the first item
    Segments([5, 3, 2], within=[None, Window(1, 1), None], links=[[False, True, False], [True, True, False],
                                                                 [True, True, True]], lengths=[[5, 0, 2], [4, 3, 2]]),
]


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("token_major", [False, True])
@pytest.mark.parametrize("mask", MEMORY_MASKS, ids=repr)
def test_head_by_head_into_shared_buffers(
    monkeypatch: pytest.MonkeyPatch, mask: Mask, token_major: bool, fused: bool
) -> None:
    """Every segment's backward with the sparse kernel run head by head (as on large problems; or all
    heads in one call), its gradients added straight into the shared buffers, its output's rows divided
    by their sums, weights recomputed: the reference's values and gradients, in the inputs' memory
    layout (so autograd hands them on without a copy)."""
    from attnmm.attention.backends import _csr

    L = mask.offsets[-1]
    base = [randn(2, L, 3, 4, seed=s) if token_major else randn(2, 3, L, 4, seed=s) for s in range(3)]
    leaves = [t.requires_grad_(True) for t in base]
    q, k, v = (t.transpose(1, 2) if token_major else t for t in leaves)  # (B, H, L, E) either way
    ref = attend(q, k, v, mask, backend="reference")
    theirs = torch.autograd.grad(ref, [q, k, v], torch.ones_like(ref) * 0.3 + ref.detach())
    if not fused:
        monkeypatch.setattr(_csr, "FUSED_VALUES", 0)  # no problem is small enough for one fused call
    _segments_on_the_sparse_kernel(monkeypatch)
    split = split_of(planned(q, k, v, mask, scale=0.5))
    assert split is not None and all(r is None or r.backend.name == "sparse" for r in split.rows)
    out = attend(q, k, v, mask, backend="segments")
    torch.testing.assert_close(out, ref)
    ours = torch.autograd.grad(out, [q, k, v], torch.ones_like(out) * 0.3 + out.detach())
    for a, b, x in zip(ours, theirs, (q, k, v)):
        torch.testing.assert_close(a, b)
        assert a.stride() == x.stride()  # laid out as the input is


def test_a_split_keeps_no_value_per_pair(monkeypatch: pytest.MonkeyPatch) -> None:
    """Between forward and backward a split problem keeps its inputs and a few numbers per query, never
    a value per allowed pair (the sparse kernel's weights are recomputed head by head in the backward)."""
    from attnmm.attention.backends import _csr

    mask = Segments([64, 64, 4], within=[Window(8, 8), Grid(8, 8, kernel=5), None],
                    links=[[True, False, True], [False, True, True], [True, True, True]])
    q, k, v = (randn(1, 2, 132, 4, seed=s).requires_grad_(True) for s in range(3))
    expected = grads(attend(q, k, v, mask, backend="reference"), [q, k, v])
    monkeypatch.setattr(_csr, "FUSED_VALUES", 0)
    _segments_on_the_sparse_kernel(monkeypatch)
    problem, forms = planned(q, k, v, mask, scale=0.5)
    pairs = forms.allowed_pairs(problem.B)
    saved: list[int] = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.numel()) or t, lambda t: t):
        out = attend(q, k, v, mask, backend="segments")
    assert max(saved) <= q.numel() < pairs // 2  # (the weights: 2 heads x the pairs)
    for a, b in zip(grads(out, [q, k, v]), expected):
        torch.testing.assert_close(a, b)


def test_an_equal_mask_takes_the_split_chosen_before(monkeypatch: pytest.MonkeyPatch) -> None:
    """What dispatch chose for each segment is kept for an equal mask of the same sizes (no backend is
    asked again), not across a change of the backends that can run, and not when it followed the memory
    free at the time."""
    import attnmm.attention.backends._memory as memory
    import attnmm.attention.planner as dispatch

    asked: list[int] = []
    candidates = dispatch._candidates
    monkeypatch.setattr(
        dispatch, "_candidates", lambda p, forms, reader=None: asked.append(p.L) or candidates(p, forms, reader)
    )
    store = FormStore()  # what the plans of an encoder share across forwards

    def make() -> Segments:  # a new mask object each time, equal by value
        return Segments([40, 30, 2], within=[Grid(5, 8, kernel=3), Window(4, 4), None],
                        links=[[True, False, True], [False, True, True], [True, True, True]])

    def segments_asked(mask: Segments, B: int = 1) -> int:
        asked.clear()
        split = split_of(problem(mask, B, 72, Plan(store=store)))
        assert split is not None
        return sum(1 for L in asked if L != 72)

    store.clear()
    assert segments_asked(make()) == 5  # two forms for each row linked to two segments, one for the last
    assert segments_asked(make()) == 0  # taken
    assert segments_asked(make(), B=2) == 5  # other sizes: chosen anew
    first = split_of(problem(make(), 1, 72, Plan(store=store)))
    assert first is not None
    monkeypatch.setattr(get_backend("reference"), "available", lambda: "off in this test")
    assert segments_asked(make()) == 5  # another set of backends that can run
    again = split_of(problem(make(), 1, 72, Plan(store=store)))
    assert again is not None and [r.backend.name for r in again.rows if r] != [r.backend.name for r in first.rows if r]

    store.clear()
    monkeypatch.setattr(memory, "SMALL_BYTES", 0)  # every problem asks for the memory free
    monkeypatch.setattr(dispatch, "SMALL_BYTES", 0)
    monkeypatch.setattr(dispatch, "available_bytes", lambda device, reader=None: 1)  # nothing fits
    assert segments_asked(make()) == 5
    assert segments_asked(make()) == 5  # a choice made under memory pressure is made again
