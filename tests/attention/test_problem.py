"""A Problem is a value: equal and hashable by what the call asks, holding no tensor."""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor

from attnmm import attend
from attnmm.attention import Plan, Problem
from attnmm.attention.planner import forms_of
from attnmm.masks import Window


def _made(seed: int, mask: Window | None, **options: object) -> Problem:
    q, k, v = (torch.randn(2, 3, 10, 4, generator=torch.Generator().manual_seed(seed + i)) for i in range(3))
    return Problem.of(q, k, v, mask, 0.5, **options)  # type: ignore[arg-type]


def test_a_problem_holds_no_tensor() -> None:
    problem = _made(0, Window(2, 1), bias=torch.zeros(3, 3))
    for field in dataclasses.fields(problem):
        value = getattr(problem, field.name)
        assert not isinstance(value, Tensor), field.name
        inner = vars(value) if hasattr(value, "__dict__") else {}
        assert not any(isinstance(v, Tensor) for v in inner.values() if field.name != "mask"), field.name
    assert not hasattr(problem, "__dict__")  # slots: nothing else can be attached


def test_equal_calls_give_equal_problems() -> None:
    mask = Window(2, 1)
    a, b = _made(0, mask), _made(7, mask)  # other values, the same sizes and options
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert _made(0, None) == _made(1, None)
    assert a != _made(0, mask, dropout_p=0.1) and a != _made(0, Window(2, 1))  # (another mask object)
    assert a != dataclasses.replace(a, L=11, S=11)
    with torch.no_grad():
        grad = torch.ones(2, 3, 10, 4, requires_grad=True)
        assert not Problem.of(grad, grad, grad, mask, 0.5).training
    try:
        a.L = 3  # type: ignore[misc]
    except dataclasses.FrozenInstanceError:
        pass
    else:
        raise AssertionError("a Problem is frozen")


def test_the_plan_keys_its_choices_by_the_problem() -> None:
    mask = Window(2, 1)
    plan = Plan(mask)
    q = torch.randn(2, 3, 10, 4)
    attend(q, q, q, plan)
    attend(torch.randn(2, 3, 10, 4), q, q, plan)  # other tensors, an equal problem: taken
    assert (plan.made, plan.reused) == (1, 1)
    problem = _made(0, mask)
    assert forms_of(problem).weight_pairs(problem.B).nnz == mask.nnz(10, 10) * 2


def test_a_backend_of_the_older_one_argument_form_still_runs() -> None:
    import pytest

    from attnmm.attention.backends import Backend, Supports, register_backend, unregister_backend
    from attnmm.masks import Full

    with pytest.warns(FutureWarning) as caught:

        class OldEinsum(Backend):
            name = "old_einsum"
            supports = Supports(structures=frozenset({"full"}), layouts=frozenset({"padded"}), bias=False, relu=False,
                                weights=False, dropout=False, empty=False)
            preference = 90

            def check(self, problem):  # type: ignore[no-untyped-def, override]
                return None if problem.structure.kind == "full" and problem.pairs().nnz > 0 else "no"

            def forward(self, problem):  # type: ignore[no-untyped-def, override]
                scores = torch.einsum("bhle,bhse->bhls", problem.q, problem.k) * problem.scale
                return torch.einsum("bhls,bhse->bhle", scores.softmax(-1), problem.v), None

    assert sorted(str(w.message).split(" is ")[0] for w in caught) == ["OldEinsum.check(problem)",
                                                                       "OldEinsum.forward(problem)"]
    register_backend(OldEinsum())
    try:
        q, k, v = torch.randn(3, 2, 4, 10, 8).unbind(0)
        out = attend(q, k, v, Full(), backend="old_einsum")
        torch.testing.assert_close(out, attend(q, k, v, backend="reference"))
    finally:
        unregister_backend("old_einsum")
