"""The masks' derived forms (pairs, CSR patterns, dense masks) are built once per plan and kept across plans
by a store keyed by content: equal masks built per batch share them, different ones never do."""

from __future__ import annotations

import pytest
import torch

from attnmm import attend
from attnmm.attention import Plan
from attnmm.attention import forms as _forms
from attnmm.attention.forms import FormStore
from attnmm.masks import Causal, Documents, Full, Graph, Grid, Padding, Segments, Window
from attnmm.masks._key import VALUE_KEY_ELEMENTS, content_key, keyed_by_value
from attnmm.nn import Encoder


def _counting(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Count the masks' own enumerations and materialisations."""
    from attnmm.masks.base import Mask

    counts = {"pairs": 0, "dense": 0}
    pairs, dense = Mask.pairs, Mask.dense

    def counted_pairs(self, *args, **kwargs):
        counts["pairs"] += 1
        return pairs(self, *args, **kwargs)

    def counted_dense(self, *args, **kwargs):
        counts["dense"] += 1
        return dense(self, *args, **kwargs)

    monkeypatch.setattr(Mask, "pairs", counted_pairs)
    monkeypatch.setattr(Mask, "dense", counted_dense)
    return counts


def test_content_keys() -> None:
    assert content_key(Padding([3, 4]) & Window(4, 1)) == content_key(Padding(torch.tensor([3, 4])) & Window(4, 1))
    assert content_key(Padding([3, 4]) & Window(4, 1)) != content_key(Padding([3, 5]) & Window(4, 1))
    # the same allowed set composed in another order is another key (a miss, never a wrong hit)
    assert content_key(Padding([3, 4]) & Window(4, 1)) != content_key(Window(4, 1) & Padding([3, 4]))
    assert content_key(Window(4, 1)) != content_key(Window(1, 4))
    assert content_key(Grid(7, 7, 3)) == content_key(Grid(7, 7, 3))
    edges = torch.tensor([[0, 1], [1, 0]])
    assert content_key(Graph(edges, 2)) == content_key(Graph(edges.clone(), 2))
    assert content_key(Graph(edges, 2)) != content_key(Graph(edges.flip(0)[:, :1], 2))
    big = torch.zeros(VALUE_KEY_ELEMENTS + 1)
    assert content_key(big) == content_key(big) and content_key(big) != content_key(big.clone())
    before = content_key(big)
    big.add_(1)  # in place: a new version
    assert content_key(big) != before


def test_content_keys_of_inference_tensors(monkeypatch: pytest.MonkeyPatch) -> None:
    # tensors made under inference_mode (Lightning's validation and test batches) have no version counter
    with torch.inference_mode():
        lengths = torch.tensor([3, 4])
        assert content_key(Padding(lengths)) == content_key(Padding([3, 4]))  # small: by value
        big = torch.zeros(VALUE_KEY_ELEMENTS + 1)
        assert content_key(big) == content_key(big) and content_key(big) != content_key(big.clone())
        assert not keyed_by_value(content_key(big))
        # a mask whose tensors are keyed by identity (as on an accelerator): attend runs and matches the reference
        monkeypatch.setattr("attnmm.masks._key.VALUE_KEY_ELEMENTS", 0)
        q = torch.randn(2, 1, 5, 4)
        mask = Padding(torch.tensor([5, 2])) & Window(1, 1)
        assert not keyed_by_value(content_key(mask))
        torch.testing.assert_close(attend(q, q, q, mask), attend(q, q, q, mask, backend="reference"))


@pytest.mark.parametrize("return_weights", [True, False])
def test_an_encoder_forward_builds_the_mask_once(monkeypatch: pytest.MonkeyPatch, return_weights: bool) -> None:
    # adapters build a new mask per batch: every layer of a forward, and a later forward over the same
    # lengths, must reuse one enumeration (the pairs) and one dense mask
    encoder = Encoder(d_model=16, num_heads=2, num_layers=4, dim_feedforward=32, dropout=0.0)
    x = torch.randn(3, 12, 16)  # (B, L, D)
    lengths = [12, 7, 3]
    counts = _counting(monkeypatch)
    encoder(x, Padding(torch.tensor(lengths)) & Window(4, 1), return_weights=return_weights)
    assert counts["pairs"] <= 1 and counts["dense"] <= 1, counts
    if return_weights:
        assert counts["pairs"] == 1
    first = dict(counts)
    encoder(x, Padding(torch.tensor(lengths)) & Window(4, 1), return_weights=return_weights)  # a fresh, equal mask
    assert counts == first
    encoder(x, Padding(torch.tensor([12, 6, 3])) & Window(4, 1), return_weights=return_weights)  # other lengths
    assert sum(counts.values()) > sum(first.values())


@pytest.mark.parametrize("backend", ["sparse", "sdpa_mask", "reference"])
def test_each_backend_builds_once_per_forward(monkeypatch: pytest.MonkeyPatch, backend: str) -> None:
    q = torch.randn(2, 2, 10, 4, requires_grad=True)
    counts = _counting(monkeypatch)
    plan = Plan()
    outs = [attend(q, q, q, Padding([10, 6]) & Window(2, 1), backend=backend, plan=plan) for _ in range(4)]  # 4 layers
    torch.stack(outs).sum().backward()
    assert counts["pairs"] + counts["dense"] == 1, counts
    assert sum(plan.built.values()) <= 2  # the pairs and, for sparse, their pattern


def test_cached_forms_give_the_reference_result() -> None:
    q, k, v = (torch.randn(2, 2, 9, 4, dtype=torch.float64) for _ in range(3))
    for lengths in ([9, 4], [9, 4], [5, 9]):
        mask = Padding(lengths) & Window(2, 2)
        ref = attend(q, k, v, mask, backend="reference")
        for backend in ("sparse", "sdpa_mask", "band"):
            torch.testing.assert_close(attend(q, k, v, mask, backend=backend), ref)
    assert attend(q, k, v, Full(), backend="sparse").shape == (2, 2, 9, 4)


def test_large_dense_masks_are_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_forms, "DENSE_ELEMENTS", 10)  # below this mask's 2 * 8 * 8 entries
    q = torch.randn(2, 2, 8, 4)
    store, built = FormStore(), 0
    for _ in range(3):
        plan = Plan(store=store)
        attend(q, q, q, Padding([8, 5]) & Window(1, 1), backend="sdpa_mask", plan=plan)
        built += plan.built["dense"]
    assert built == 3


def test_keys_by_value_and_by_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    from attnmm.masks import _key

    assert keyed_by_value(content_key(Padding([3, 4]) & Window(4, 1)))
    assert keyed_by_value(content_key(Graph(torch.tensor([[0, 1], [1, 0]]), 2)))
    monkeypatch.setattr(_key, "VALUE_KEY_ELEMENTS", 1)  # every tensor of more than one element by identity
    assert not keyed_by_value(content_key(Padding([3, 4]) & Window(4, 1)))
    assert keyed_by_value(content_key(Window(4, 1) & Grid(3, 3, 3)))  # no tensor at all


def _sparse_reference(q: torch.Tensor, mask: Padding, store: FormStore) -> None:
    out = attend(q, q, q, mask, backend="sparse", plan=Plan(store=store))
    torch.testing.assert_close(out, attend(q, q, q, mask, backend="reference", plan=Plan(store=store)))


def test_in_place_edits_never_reuse_a_stale_form(monkeypatch: pytest.MonkeyPatch) -> None:
    from attnmm.masks import _key

    q = torch.randn(2, 2, 8, 4, dtype=torch.float64)
    lengths = torch.tensor([8, 5])
    mask, store = Padding(lengths), FormStore()
    _sparse_reference(q, mask, store)
    lengths[1] = 2  # a small tensor: keyed by its values, so the edit is a new key
    _sparse_reference(q, mask, store)
    # a tensor keyed by identity (large, or on an accelerator) may be edited where its version counter does
    # not see it (through NumPy, .data or DLPack): its forms are never kept across calls
    monkeypatch.setattr(_key, "VALUE_KEY_ELEMENTS", 1)
    store.clear()
    lengths = torch.tensor([8, 5])
    mask = Padding(lengths)
    _sparse_reference(q, mask, store)
    version = lengths._version
    lengths.numpy()[1] = 3
    assert lengths._version == version
    _sparse_reference(q, mask, store)
    assert store.held_bytes() == 0


def test_the_budget_evicts_least_recently_used() -> None:
    q = torch.randn(1, 1, 64, 4)  # one block: nothing but the pattern kept
    masks = [Window(2, 2), Window(1, 3), Window(3, 1)]  # forms of about the same size
    sizes = []
    for mask in masks:
        store = FormStore()
        attend(q, q, q, mask, backend="sparse", plan=Plan(store=store))
        sizes.append(store.held_bytes())  # a pattern and the keys per query (no pairs: the pattern holds them)
    assert 0 < max(sizes) < 64 * 5 * 16
    store = FormStore(budget=2 * max(sizes) + min(sizes) // 2)  # room for two of them

    def built(mask: Window) -> int:
        plan = Plan(store=store)
        attend(q, q, q, mask, backend="sparse", plan=plan)
        return plan.built.get("pattern", 0)

    for mask in masks:
        built(mask)
    assert store.held_bytes() <= store.budget
    kept = [m for m in masks if any(key[0] == content_key(m) for key in store.keys())]
    assert kept == masks[1:]  # the least recently used went first
    assert built(masks[-1]) == 0  # kept: not built again
    store.set_budget(min(sizes) // 2)  # smaller than any entry: nothing is kept
    assert store.held_bytes() == 0
    assert built(masks[0]) + built(masks[0]) == 2 and store.held_bytes() == 0


@pytest.mark.parametrize("by_value", [True, False])
def test_a_form_is_built_once_per_forward_for_all_layers(monkeypatch: pytest.MonkeyPatch, by_value: bool) -> None:
    from attnmm.masks import _key

    if not by_value:  # the mask's tensors keyed by identity: its forms live for one forward
        monkeypatch.setattr(_key, "VALUE_KEY_ELEMENTS", 1)
    N = 400  # sparse enough for the sparse backend
    edges = torch.randint(0, N, (2, 1600), generator=torch.Generator().manual_seed(0))
    x = torch.randn(N, 2, 8, requires_grad=True)  # packed (N, H, E)

    store = FormStore()  # what an encoder keeps across its forwards
    built: dict[str, int] = {"pattern": 0, "pairs": 0}

    def forward() -> torch.Tensor:
        plan, h, mask = Plan(store=store), x, Graph(edges, N)  # a mask made for the forward
        for _ in range(4):  # four layers
            h = attend(h, h, h, mask, plan=plan, backend="auto")
        assert plan.made == 1 and plan.reused == 3
        for name in built:
            built[name] += plan.built.get(name, 0)
        return h

    forward().sum().backward()
    assert built["pattern"] == 1 and built["pairs"] == 1
    forward().sum().backward()  # the next forward, over an equal mask
    assert built["pattern"] == (1 if by_value else 2)


def test_the_pattern_is_shared_by_the_heads_and_the_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    from attnmm.attention.backends import _csr
    from attnmm.attention.backends.sparse import pattern as sparse_pattern

    monkeypatch.setattr(_csr, "FUSED_VALUES", 0)  # a large problem: its blocks one by one
    sizes = {}
    for B, H in ((1, 1), (3, 8)):
        q = torch.randn(B, H, 64, 4, requires_grad=True)
        mask = Grid(8, 8, 5)
        attend(q, q, q, mask, backend="sparse").sum().backward()
        plan = Plan()
        attend(q, q, q, mask, backend="sparse", plan=plan)
        forms = plan.forms(mask, 64, 64, None, q.device)
        pattern = sparse_pattern(forms)  # the one kept for the call
        sizes[B, H] = pattern.nbytes
        assert pattern.nbytes <= 3 * 4 * pattern.nnz + 2 * 4 * (64 + 1)  # three int32 per pair, two pointers
    assert sizes[1, 1] == sizes[3, 8]


@pytest.mark.parametrize(
    ("mask", "L"),
    [
        (Segments([5, 7, 3], within=[Window(1, 1), Grid(1, 7, kernel=3), None],
                  links=[[True, False, True], [False, True, True], [True, True, True]]), 15),
        (Segments([4, 6], within=[Causal(), Window(2, 0)], links=[[True, False], [Window(1, 1), True]],
                  lengths=[[4, 6], [2, 3]]), 10),
        (Documents([3, 5, 4]) & Causal(), 12),
        (Documents([6, 6]) & Window(1, 0) & Padding([12, 9]), 12),
        (Documents([6, 6]) & Grid(3, 4, kernel=3), 12),
    ],
    ids=repr,
)
def test_counts_of_a_mask_of_blocks_come_segment_by_segment(mask, L: int) -> None:
    # the keys per query of a mask made of blocks, from each query segment's own mask: equal to counting
    # the whole mask's pairs, which are never enumerated
    batch = 2 if mask.batched else None
    pairs = mask.pairs(L, L, batch)
    expected = torch.bincount(pairs.segment(), minlength=pairs.num_segments).view(-1, L)
    forms = _forms.Forms(mask, L, L, batch, torch.device("cpu"))
    assert forms.blocks is not None
    torch.testing.assert_close(forms.row_counts, expected)
    assert forms.get("pairs") is None


def test_plain_calls_with_an_equal_mask_reuse_what_the_backends_derived(monkeypatch: pytest.MonkeyPatch) -> None:
    # no plan and no store given: the backends keep their forms (the sparse pattern, a split's choices) by content
    from attnmm.attention import planner

    torch.manual_seed(0)
    q = torch.randn(1, 2, 40, 8, requires_grad=True)
    mask = lambda: Segments([16, 24], within=[Grid(4, 4, kernel=3), Window(3, 0)], links=[[True, True], [False, True]])  # noqa: E731
    expected = attend(q, q, q, mask(), backend="reference")
    attend(q, q, q, mask())  # the first call derives and keeps
    counts, asked = _counting(monkeypatch), []
    candidates = planner._candidates
    monkeypatch.setattr(planner, "_candidates", lambda *args: asked.append(1) or candidates(*args))
    for _ in range(2):  # new, equal masks: nothing enumerated, only the whole problem asked for its backend
        out = attend(q, q, q, mask())
        torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-5)
        (grad,) = torch.autograd.grad(out.square().sum(), q)
        (grad_ref,) = torch.autograd.grad(expected.square().sum(), q, retain_graph=True)
        torch.testing.assert_close(grad, grad_ref, rtol=1e-4, atol=1e-4)
    assert counts["pairs"] == 0 and len(asked) == 2
