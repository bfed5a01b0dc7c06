"""One attention plan per forward: the layers of an encoder dispatch once, and a plan changes no number."""

from __future__ import annotations

import pytest
import torch

import attnmm.attention._dispatch as dispatch
from attnmm import attend
from attnmm.attention import AttentionPlan, Encoder
from attnmm.masks import Causal, Documents, Grid, Padding, Segments, Window


@pytest.fixture
def dispatched(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times dispatch ranked the backends (once per problem it decided)."""
    calls: list[int] = []
    ranked = dispatch.candidates

    def counting(problem):  # type: ignore[no-untyped-def]
        calls.append(problem.L)
        return ranked(problem)

    monkeypatch.setattr(dispatch, "candidates", counting)
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
