"""One attention plan per forward: the layers of an encoder dispatch once, and a plan changes no number."""

from __future__ import annotations

import pytest
import torch

import attnmm.attention.planner as dispatch
from attnmm import attend
from attnmm.attention import AttentionPlan
from attnmm.masks import Causal, Documents, Grid, Padding, Segments, Window
from attnmm.nn import Encoder


@pytest.fixture
def dispatched(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times dispatch ranked the backends (once per problem it decided)."""
    calls: list[int] = []
    ranked = dispatch._candidates

    def counting(problem, forms, reader=None):  # type: ignore[no-untyped-def]
        calls.append(problem.L)
        return ranked(problem, forms, reader)

    monkeypatch.setattr(dispatch, "_candidates", counting)
    return calls


@pytest.mark.parametrize("mask", [Window(3, 1) & Padding([10, 7]), Grid(2, 5, kernel=3), None], ids=repr)
def test_an_encoder_dispatches_once_per_forward(mask, dispatched: list[int]) -> None:
    torch.manual_seed(0)
    enc = Encoder(16, 2, 6, 32, dropout=0.0)
    x = torch.randn(2, 10, 16, requires_grad=True)
    out = enc(x, mask)
    assert len(dispatched) == 1  # six layers, one decision
    expected = x
    for layer in enc.layers:  # the same layers without a plan: each dispatches, the numbers are equal
        expected = layer(expected, mask)
    torch.testing.assert_close(out, enc.norm(expected))
    assert len(dispatched) == 1 + 6
    out.sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()


def test_a_plan_keys_on_everything_dispatch_reads() -> None:
    plan = AttentionPlan()
    q = torch.randn(1, 2, 12, 4)
    mask = Causal()
    attend(q, q, q, mask, plan=plan)
    attend(q, q, q, mask, plan=plan)  # the same problem: reused
    attend(q[:, :, :8], q[:, :, :8], q[:, :, :8], mask, plan=plan)  # other sizes
    attend(q, q, q, Causal(), plan=plan)  # another mask object
    attend(q.double(), q.double(), q.double(), mask, plan=plan)  # another dtype
    attend(q.requires_grad_(), q, q, mask, plan=plan)  # a gradient flows
    attend(q, q, q, mask, plan=plan, dropout_p=0.1)  # dropout
    assert (plan.made, plan.reused) == (6, 1)


def test_a_plan_shares_the_split_of_a_mask_of_blocks(dispatched: list[int]) -> None:
    mask = Segments([6, 4], within=[Window(1, 1), Causal()], links=[[True, False], [True, True]])
    plan = AttentionPlan()
    q = torch.randn(1, 2, 10, 4)
    first = attend(q, q, q, mask, plan=plan)
    decided = len(dispatched)  # the whole and each query segment
    second = attend(q, q, q, mask, plan=plan)
    assert len(dispatched) == decided and plan.reused == 1
    torch.testing.assert_close(first, second)
    torch.testing.assert_close(first, attend(q, q, q, mask, backend="reference"))


def test_packed_documents_in_an_encoder() -> None:
    torch.manual_seed(1)
    enc = Encoder(16, 2, 3, 32, dropout=0.0)
    x = torch.randn(2, 12, 16)
    mask = Documents([5, 4, 3]) & Causal()
    out = enc(x, mask)
    expected = x
    for layer in enc.layers:
        expected = layer(expected, mask)
    torch.testing.assert_close(out, enc.norm(expected))


@pytest.mark.parametrize(
    "mask",
    [Window(3, 1) & Padding([12, 7]), Grid(3, 4, kernel=3), Causal(), None,
     Segments([6, 6], within=[Window(1, 1), Causal()], links=[[True, False], [True, True]])],
    ids=repr,
)
def test_a_plan_stands_for_its_mask(mask, dispatched: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    # attend(q, k, v, plan) equals attend(q, k, v, mask), values and gradients, and the work (dispatch,
    # the mask's pairs and dense form) happens once however many calls take the plan
    from attnmm.attention import Plan
    from attnmm.masks.base import Mask

    enumerated: list[int] = []
    pairs = Mask.pairs
    monkeypatch.setattr(Mask, "pairs", lambda self, *a, **kw: enumerated.append(1) or pairs(self, *a, **kw))
    q, k, v = (torch.randn(2, 2, 12, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    expected = attend(q, k, v, mask)
    want = torch.autograd.grad(expected.sum(), (q, k, v))
    plan = Plan(mask)
    for call in range(3):
        out = attend(q, k, v, plan)
        torch.testing.assert_close(out, expected)
        for a, b in zip(torch.autograd.grad(out.sum(), (q, k, v)), want):
            torch.testing.assert_close(a, b)
        if call == 0:
            worked = (len(dispatched), len(enumerated))
    assert (len(dispatched), len(enumerated)) == worked  # the later calls took everything from the plan
    assert (plan.made, plan.reused) == (1, 2)
    with pytest.raises(TypeError, match="give the plan once"):
        attend(q, k, v, plan, plan=Plan(mask))


def test_a_plan_holds_at_most_its_budget() -> None:
    from attnmm.attention import Plan

    plan = Plan(budget=1)  # smaller than any mask's forms: only the latest mask's are held
    q = torch.randn(1, 1, 32, 4)
    for left in range(1, 5):
        attend(q, q, q, Grid(4, 8, kernel=2 * left + 1), plan=plan, backend="sparse")
        assert len(plan._forms) == 1 and plan.nbytes > 0
    assert plan.made == 0  # a named backend is not dispatched, so nothing is planned
