r"""The attention core: :func:`attend`, one entry point for every mask and layout."""

from __future__ import annotations

import contextlib
import math
from typing import Literal, overload

import torch
from torch import Tensor

from attnmm.attention._layout import Layout, resolve_layout
from attnmm.attention.backends._memory import check_backend, check_pairs
from attnmm.attention.backends.base import BackendRefusedError
from attnmm.attention.forms import Forms
from attnmm.attention.planner import Plan, choose_backend, split_problem
from attnmm.attention.problem import Inputs, Problem
from attnmm.attention.weights import AttentionWeights
from attnmm.masks import Mask


@overload
def attend(
    q: Tensor, k: Tensor, v: Tensor, mask: Mask | Plan | None = ..., *, scale: float | None = ...,
    dropout_p: float = ..., score: Literal["softmax", "relu"] = ..., bias: Tensor | None = ...,
    return_weights: Literal[False] = ..., backend: str = ..., plan: Plan | None = ...,
    layout: Layout | None = ...,
) -> Tensor: ...


@overload
def attend(
    q: Tensor, k: Tensor, v: Tensor, mask: Mask | Plan | None = ..., *, scale: float | None = ...,
    dropout_p: float = ..., score: Literal["softmax", "relu"] = ..., bias: Tensor | None = ...,
    return_weights: Literal[True], backend: str = ..., plan: Plan | None = ...,
    layout: Layout | None = ...,
) -> tuple[Tensor, AttentionWeights]: ...


@overload
def attend(
    q: Tensor, k: Tensor, v: Tensor, mask: Mask | Plan | None = ..., *, scale: float | None = ...,
    dropout_p: float = ..., score: Literal["softmax", "relu"] = ..., bias: Tensor | None = ...,
    return_weights: bool, backend: str = ..., plan: Plan | None = ...,
    layout: Layout | None = ...,
) -> Tensor | tuple[Tensor, AttentionWeights]: ...


def attend(
    q: Tensor, k: Tensor, v: Tensor, mask: Mask | Plan | None = None, *, scale: float | None = None,
    dropout_p: float = 0.0, score: Literal["softmax", "relu"] = "softmax", bias: Tensor | None = None,
    return_weights: bool = False, backend: str = "auto", plan: Plan | None = None, layout: Layout | None = None,
) -> Tensor | tuple[Tensor, AttentionWeights]:
    r"""Masked attention, softmax over the allowed set :math:`A(i)` of a :class:`~attnmm.masks.Mask`.

    .. math::
        \mathbf{o}_i = \sum_{j \in A(i)} a_{ij} \mathbf{v}_j, \qquad
        a_{ij} = \operatorname{softmax}_{j \in A(i)}\left(\mathbf{q}_i^\top \mathbf{k}_j
        \cdot \mathrm{scale} + b_{ij}\right)

    With ``score="relu"``, :math:`a_{ij} = \mathrm{relu}(s_{ij}) / |A(i)|`. A query whose allowed set
    is empty gets output 0 and gradient 0 (never NaN). The backend is the cheapest of those that
    support the call, by each backend's calibrated cost estimate for the mask and sizes: fused SDPA
    for full and causal masks, the band kernel for windows and chunks that are narrow against the
    length, the sparse (CSR) kernel for sparse graphs, grids and other compositions, masked dense
    SDPA where the mask is dense or short, FlexAttention on CUDA; see :mod:`attnmm.attention.planner`.

    **The layout is stated, never guessed.** A 4-D q is the padded layout (B, H, L, E). A 3-D q is
    the packed node layout of PyG (N, H, E) only when the mask is a packed-layout mask
    (``mask.layout == "packed"``: :class:`~attnmm.masks.Graph`, :class:`~attnmm.masks.SameGraph`
    and their compositions) or ``layout="packed"`` says so. Any other 3-D call, e.g. a batch-first
    (B, L, D) sequence under ``Causal()`` or no mask, is refused with both readings and the fix
    (split the heads: ``x.unflatten(-1, (H, E)).transpose(1, 2)``).

    Args:
        q (Tensor): queries, (B, H, L, E) padded or (N, H, E) packed.
        k (Tensor): keys, (B, H, S, E) or (S, H, E).
        v (Tensor): values, (B, H, S, Ev) or (S, H, Ev).
        mask (Mask or Plan, optional): the allowed set; ``None`` is full attention; a
            :class:`~attnmm.attention.Plan` stands for its mask and holds what is derived from it.
            (default: :obj:`None`)
        scale (float, optional): score scale. (default: :math:`1/\sqrt{E}`)
        dropout_p (float, optional): dropout on the weights; pass ``0.0`` at eval time.
            (default: :obj:`0.0`)
        score (str, optional): ``"softmax"`` or ``"relu"``. (default: :obj:`"softmax"`)
        bias (Tensor, optional): additive score bias per allowed pair, (P,) or (P, H), in the order
            of ``mask.pairs(L, S, B)`` (B only for batched masks). (default: :obj:`None`)
        return_weights (bool, optional): also return the weights as :class:`AttentionWeights`.
            (default: :obj:`False`)
        backend (str, optional): ``"auto"`` or a registered backend name, for tests and
            benchmarks. (default: :obj:`"auto"`)
        plan (Plan, optional): the plan of the forward this call is part of, beside its ``mask``: a
            call equal to an earlier one of the plan (same mask, sizes, dtype, ...) takes its backend and
            the mask's derived forms instead of dispatching again (:class:`~attnmm.attention.Plan`).
            (default: :obj:`None`, a plan of this call alone)
        layout (str, optional): ``"padded"`` (inputs (B, H, L, E)) or ``"packed"`` (inputs
            (N, H, E) of graph nodes, under any mask that is not a padded-layout one, or none).
            (default: :obj:`None`: 4-D inputs are padded, 3-D ones packed only under a packed-layout
            mask)

    Raises:
        ValueError: a 3-D q whose layout is not stated (by ``layout`` or a packed-layout mask), or
            inputs of the other layout than ``layout`` or the mask states (the error, a
            ``LayoutError``, is also a ``TypeError``).
        AttentionMemoryError: the mask's sparse form or the chosen backend's working memory would
            not fit in the memory available on the inputs' device (checked before allocating; the
            message gives the estimate and what to change).

    Shapes:
        - **input:** q (B, H, L, E), k (B, H, S, E), v (B, H, S, Ev); or packed q (N, H, E),
          k (S, H, E), v (S, H, Ev)
        - **output:** (B, H, L, Ev), or (N, H, Ev) packed; with weights values (P, H)

    Examples:
        >>> import torch
        >>> from attnmm import attend
        >>> from attnmm.masks import Window
        >>> q = k = v = torch.randn(2, 4, 10, 8)  # (B, H, L, E)
        >>> attend(q, k, v, Window(2, 0)).shape
        torch.Size([2, 4, 10, 8])
        >>> nodes = torch.randn(5, 4, 8)  # (N, H, E): graph nodes, said so by layout
        >>> attend(nodes, nodes, nodes, layout="packed").shape
        torch.Size([5, 4, 8])
    """
    if isinstance(mask, Plan):
        if plan is not None and plan is not mask:
            raise TypeError("give the plan once: as the mask argument or as plan=, not both")
        plan, mask = mask, mask.mask
    _check_qkv(q, k, v)
    if mask is not None and not isinstance(mask, Mask):
        raise TypeError(
            f"mask must be an attnmm.masks.Mask or None, got {type(mask).__name__} (a Plan goes there too); "
            "wrap a boolean pattern in a Mask (e.g. Graph for index pairs)"
        )
    packed = resolve_layout(q, mask, layout)  # stated by ``layout`` or by the mask, never guessed
    autocast = torch.is_autocast_enabled(q.device.type)
    if autocast:
        # mixed precision (bf16-mixed): compute in the autocast dtype, as autocast runs SDPA, with
        # autocast off inside the backends so that each kernel sees one dtype
        low = torch.get_autocast_dtype(q.device.type)
        q, k, v = (t.to(low) for t in (q, k, v))
        if isinstance(bias, Tensor) and bias.is_floating_point():
            bias = bias.to(low)
    if score not in ("softmax", "relu"):
        raise ValueError(f"score must be 'softmax' or 'relu', got {score!r}")
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p must be in [0, 1), got {dropout_p}")
    if packed:
        q, k, v = (t.transpose(0, 1).unsqueeze(0) for t in (q, k, v))  # (1, H, N, E)
    if mask is not None:
        mask.check(q.size(2), k.size(2), q.size(0))
    as_packed = packed
    if packed and mask is not None and bias is None and not return_weights:
        padded = mask.structure.padded  # the same allowed set over one padded item, which more backends take
        if padded is not None:
            mask, as_packed = padded, False
    plan = Plan() if plan is None else plan
    batched = mask is not None and mask.batched
    forms = plan.forms(mask, q.size(2), k.size(2), q.size(0) if batched else None, q.device, as_packed)
    scale = (1.0 / math.sqrt(q.size(-1)) if q.size(-1) else 1.0) if scale is None else float(scale)
    options = (float(dropout_p), score, bias, return_weights, as_packed, forms.structure)
    problem = Problem.of(q, k, v, mask, scale, *options)
    check_pairs(problem, with_bias=bias is not None, reader=plan.reader)  # before anything enumerates the pairs
    if bias is not None:
        bias = _check_bias(bias, problem, forms)
    if problem.B == 0 or problem.H == 0:
        backend = "reference"  # an empty batch: nothing to compute, whichever backend was named
    chosen = plan.take(problem, forms) if backend == "auto" else None
    if chosen is None:
        forms.splits[problem] = split_problem(problem, forms, plan)  # first, each query segment planned
        chosen = choose_backend(problem, forms, backend, plan.reader)
        check_backend(problem, forms, chosen, plan.reader)
        if backend == "auto":
            plan.keep(problem, forms, chosen)
    with torch.autocast(q.device.type, enabled=False) if autocast else contextlib.nullcontext():
        try:
            out, values = chosen.forward(problem, forms, Inputs(q, k, v, bias))
        except BackendRefusedError:
            if backend != "auto":
                raise
            chosen = choose_backend(problem, forms, backend, plan.reader)  # the refusing backend's check now says no
            check_backend(problem, forms, chosen, plan.reader)
            plan.keep(problem, forms, chosen)
            out, values = chosen.forward(problem, forms, Inputs(q, k, v, bias))
    if packed:
        out = out.squeeze(0).transpose(0, 1)  # (N, H, Ev)
    if not return_weights:
        return out
    assert values is not None
    wp = forms.weight_pairs(problem.B)
    return out, AttentionWeights(wp.batch, wp.row, wp.col, values)


def _check_qkv(q: Tensor, k: Tensor, v: Tensor) -> None:
    """Validate q, k, v (in either layout: the heads are dim 1, the keys dim 0 when packed, else 2)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a Tensor, got {type(t).__name__}")
        if not t.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor, got dtype {t.dtype}; cast it with .float()")
    if not q.dtype == k.dtype == v.dtype:
        raise TypeError(f"q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not q.device == k.device == v.device:
        raise ValueError(f"q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")
    if q.dim() not in (3, 4):
        raise ValueError(f"q must be (B, H, L, E) (padded) or (N, H, E) (packed), got shape {tuple(q.shape)}")
    if k.dim() != q.dim() or v.dim() != q.dim():
        raise ValueError(
            f"q, k, v must have the same rank, got shapes {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    packed = q.dim() == 3
    if not packed and not q.size(0) == k.size(0) == v.size(0):
        raise ValueError(f"q, k, v must share the batch size B, got {q.size(0)}, {k.size(0)}, {v.size(0)}")
    if not q.size(1) == k.size(1) == v.size(1):
        raise ValueError(f"q, k, v must share the number of heads H, got {q.size(1)}, {k.size(1)}, {v.size(1)}")
    if q.size(-1) != k.size(-1):
        raise ValueError(f"q and k must share the head dim E, got q E={q.size(-1)} and k E={k.size(-1)}")
    s_dim = 0 if packed else 2
    if k.size(s_dim) != v.size(s_dim):
        raise ValueError(f"k and v must have the same number of keys S, got {k.size(s_dim)} and {v.size(s_dim)}")


def _check_bias(bias: Tensor, problem: Problem, forms: Forms) -> Tensor:
    """Validate a per-pair bias and return it as (P, H)."""
    if not isinstance(bias, Tensor) or not bias.is_floating_point():
        raise TypeError(f"bias must be a floating-point Tensor of shape (P,) or (P, H), got {bias!r:.60}")
    p = forms.pairs().nnz
    if bias.dim() == 1:
        bias = bias.unsqueeze(1)
    if bias.dim() != 2 or bias.size(0) != p or bias.size(1) not in (1, problem.H):
        raise ValueError(
            f"bias must have shape (P,) or (P, H) = ({p}, {problem.H}), one row per allowed pair of "
            f"the mask in mask.pairs() order, got shape {tuple(bias.shape)}"
        )
    return bias.expand(p, problem.H)


__all__ = ["attend"]
